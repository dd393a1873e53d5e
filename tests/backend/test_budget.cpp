// The device-memory budget's arithmetic (backend/budget.h) without a GPU: the default (free at start less the
// margin), explicit budgets and their refusals, the allocator's cap and when it gives cached blocks back or refuses.
#include <gtest/gtest.h>

#include <string>

#include "backend/budget.h"
#include "support/error_of.h"

using namespace h3;
using h3::test::error_of;

namespace {

constexpr int64_t GiB = int64_t{1} << 30, MiB = int64_t{1} << 20;
// An H200 as cudaMemGetInfo reports it: 139.8 GiB, ~0.6 GiB taken by the context at start.
constexpr int64_t kTotal = 150105964544, kFree = kTotal - 600 * MiB;

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST(GpuBudget, DefaultIsFreeAtStartLessTheMarginAndTheCapLeavesTheAllowance) {
  const GpuBudget b = plan_gpu_budget(0, kFree, kTotal);
  EXPECT_FALSE(b.explicit_budget);
  EXPECT_EQ(b.budget, kFree - 512 * MiB);
  EXPECT_EQ(b.cap, kFree - 512 * MiB - GiB);
  EXPECT_EQ(b.start_cap, b.cap);
  EXPECT_EQ(b.free_at_start, kFree);
  // The largest run today peaks at ~100 GB on an empty H200: the default never refuses it.
  EXPECT_GT(b.cap, int64_t{100} * 1000 * 1000 * 1000 + 30 * GiB);
  EXPECT_TRUE(has(b.origin, "free at start")) << b.origin;
}

TEST(GpuBudget, ExplicitBudgetsAndTheirRefusals) {
  const GpuBudget b = plan_gpu_budget(24 * GiB, kFree, kTotal);
  EXPECT_TRUE(b.explicit_budget);
  EXPECT_EQ(b.budget, 24 * GiB);
  EXPECT_EQ(b.cap, 23 * GiB);
  EXPECT_EQ(b.origin, "--max-device-memory 24.00 GiB");
  const std::string big = error_of([] { (void)plan_gpu_budget(200 * GiB, kFree, kTotal); });
  EXPECT_TRUE(has(big,
                  "--max-device-memory 200.0 GiB is more than this GPU's 139.8 GiB; ask for at most the 139.2 "
                  "GiB free on it at start"))
      << big;
  // More than is free: names what is free and what the others hold.
  const std::string busy = error_of([] { (void)plan_gpu_budget(100 * GiB, 80 * GiB, kTotal); });
  EXPECT_TRUE(has(busy, "more than the 80.00 GiB free on this GPU at start")) << busy;
  EXPECT_TRUE(has(busy, "the other 59.80 GiB are held by other processes")) << busy;
  EXPECT_TRUE(has(busy, "nvidia-smi")) << busy;
  // Exactly what is free is allowed; less than the allowance leaves the tensors nothing.
  EXPECT_EQ(plan_gpu_budget(80 * GiB, 80 * GiB, kTotal).cap, 79 * GiB);
  const std::string tiny = error_of([] { (void)plan_gpu_budget(GiB, kFree, kTotal); });
  EXPECT_TRUE(has(tiny, "leaves h3's tensors nothing")) << tiny;
  EXPECT_TRUE(has(tiny, "at least 1.25 GiB")) << tiny;
  EXPECT_EQ(plan_gpu_budget(GiB + 256 * MiB, kFree, kTotal).cap, 256 * MiB);
  EXPECT_TRUE(has(error_of([] { (void)plan_gpu_budget(-1, kFree, kTotal); }), "at least 0"));
  // A nearly full device refuses the default too, saying so.
  const std::string full = error_of([] { (void)plan_gpu_budget(0, GiB, kTotal); });
  EXPECT_TRUE(has(full, "only 1.00 GiB of this GPU's 139.8 GiB are free at start")) << full;
}

// The allocator's over-cap refusal (which requests it refuses is backend/block_pool.h's, tested there).
TEST(GpuBudget, TheOverCapRefusalNamesTheBudgetAndTheHint) {
  const GpuBudget b = plan_gpu_budget(11 * GiB, kFree, kTotal);  // cap 10 GiB
  ASSERT_EQ(b.cap, 10 * GiB);
  const std::string e = error_of([&] { fail_over_budget(b, 5 * GiB, 6 * GiB); });
  EXPECT_TRUE(has(e,
                  "GPU memory budget exceeded: asked for 5.00 GiB with 6.00 GiB in use of the 10.00 GiB budget "
                  "(--max-device-memory; here --max-device-memory 11.00 GiB, less 1.00 GiB for the CUDA context"))
      << e;
  EXPECT_TRUE(has(e, "give a larger --max-device-memory")) << e;
  // Fragmented: the cap would hold it, the free room lies in smaller pieces; the largest is named, the hint once.
  const std::string f = error_of([&] { fail_budget_fragmented(b, 3 * GiB, 6 * GiB, 2 * GiB); });
  EXPECT_TRUE(has(f,
                  "asked for 3.00 GiB with 6.00 GiB in use of the 10.00 GiB budget, the rest free only in pieces "
                  "of at most 2.00 GiB"))
      << f;
  EXPECT_EQ(f.find("give a larger --max-device-memory"), f.rfind("give a larger --max-device-memory")) << f;
  EXPECT_NE(f.find("give a larger --max-device-memory"), std::string::npos) << f;
}

TEST(GpuBudget, LoweringNeverRisesAboveTheStart) {
  const GpuBudget b = plan_gpu_budget(0, kFree, kTotal);
  const GpuBudget half = lower_gpu_budget(b, b.cap / 2, "2 ranks share this GPU");
  EXPECT_EQ(half.cap, b.cap / 2);
  EXPECT_EQ(half.start_cap, b.cap);
  EXPECT_EQ(half.origin, b.origin);
  EXPECT_TRUE(has(half.describe(), b.origin + ", lowered to ")) << half.describe();
  EXPECT_TRUE(has(half.describe(), "(2 ranks share this GPU)")) << half.describe();
  const std::string e = error_of([&] { fail_over_budget(half, GiB, half.cap); });
  EXPECT_TRUE(has(e, "2 ranks share this GPU")) << e;
  // Above the start: the start cap again.
  const GpuBudget back = lower_gpu_budget(half, b.cap * 2, "more");
  EXPECT_EQ(back.cap, b.cap);
  EXPECT_EQ(back.describe(), b.origin);
  EXPECT_TRUE(has(error_of([&] { (void)lower_gpu_budget(b, -5, "x"); }), "at least 0"));
}
