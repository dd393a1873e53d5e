// `h3 plan`: what fits where, from headers only (procedural:full, no GPU, no weights generated).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "support/cli_run.h"

namespace {

using h3::test::run_h3;

size_t count_of(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST(CmdPlan, TableOverTheCardsForBothSizesAndPrecisions) {
  const auto r = run_h3("plan");
  ASSERT_EQ(r.status, 0) << r.out;
  // 480p and 768p, bf16 and FP8: four tables of six cards.
  EXPECT_EQ(count_of(r.out, "| 12 GiB |"), 4u) << r.out;
  EXPECT_EQ(count_of(r.out, "| 80 GiB |"), 4u) << r.out;
  EXPECT_EQ(count_of(r.out, "A rank needs at least"), 4u) << r.out;
  // 80 GiB holds every layer of the bf16 DiT at 768p: nothing streams.
  EXPECT_NE(r.out.find("| 80 GiB | 79.5 | yes | all 50 | 0.0 | all 50 | 0.0 |"), std::string::npos) << r.out;
}

TEST(CmdPlan, JsonPerRankInTensorMode) {
  const auto r = run_h3("--ranks 2 plan --mode tensor --size 768p --precision fp8 --budget 16G --json -");
  ASSERT_EQ(r.status, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out.substr(r.out.find('[')));
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0].at("ranks"), 2);
  EXPECT_EQ(j[0].at("mode"), "tensor");
  const nlohmann::json& plan = j[0].at("plan");
  EXPECT_EQ(plan.at("budget_bytes").get<int64_t>(), int64_t{16} << 30);
  EXPECT_TRUE(plan.at("fits").get<bool>());
  // A rank holds half of each block's GEMMs: more blocks resident than on one rank with the same budget.
  const auto one = run_h3("plan --size 768p --precision fp8 --budget 16G --json -");
  ASSERT_EQ(one.status, 0) << one.out;
  const nlohmann::json j1 = nlohmann::json::parse(one.out.substr(one.out.find('[')));
  EXPECT_GT(plan.at("dit").at("resident").get<int>(), j1[0].at("plan").at("dit").at("resident").get<int>());
}

TEST(CmdPlan, ABudgetBelowTheMinimumSaysWhatItNeeds) {
  const auto r = run_h3("plan --size 768p --precision bf16 --budget 8G");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("| budget 8.00 GiB | 8.0 | no: needs 11.7 GiB |"), std::string::npos) << r.out;
}

TEST(CmdPlan, BadSizeAndBudgetAreUsageErrors) {
  const auto size = run_h3("plan --size 720q");
  EXPECT_EQ(size.status, 2) << size.out;
  EXPECT_NE(size.out.find("--size 720q: expected 480p"), std::string::npos) << size.out;
  const auto budget = run_h3("plan --budget lots");
  EXPECT_EQ(budget.status, 2) << budget.out;
  EXPECT_NE(budget.out.find("--budget"), std::string::npos) << budget.out;
}
