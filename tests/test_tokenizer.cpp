// The byte-level BPE tokenizer against the golden cases (produced by Hugging Face tokenizers), plus the
// edges: both merges syntaxes, special tokens, empty input, invalid UTF-8 and malformed files.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "golden.h"
#include "model/qwen3vl/tokenizer.h"
#include "verify/qwen3vl_text.h"

using namespace h3;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A tiny hand-written tokenizer.json: bytes of "a", "b", "c", " " and the merges a+b, ab+c, " "+ab.
std::string tiny_tokenizer(bool string_merges) {
  nlohmann::json vocab = {{"a", 0},
                          {"b", 1},
                          {"c", 2},
                          {"\xC4\xA0", 3},
                          {"ab", 4},
                          {"abc", 5},
                          {"\xC4\xA0"
                           "ab",
                           6}};
  nlohmann::json merges = string_merges ? nlohmann::json::array({"a b", "ab c", "\xC4\xA0 ab"})
                                        : nlohmann::json::array({{"a", "b"}, {"ab", "c"}, {"\xC4\xA0", "ab"}});
  nlohmann::json j = {
      {"version", "1.0"},
      {"added_tokens", {{{"id", 7}, {"content", "<|x|>"}, {"special", true}, {"normalized", false}}}},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", " ?[a-z]+|\\s+"}}}, {"behavior", "Isolated"}, {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
  return j.dump();
}

}  // namespace

TEST(Tokenizer, EveryGoldenCaseGivesExactlyTheExpectedIds) {
  const auto tok_path = test::golden("tokenizer-mini.json");
  const auto cases_path = test::golden("tokenizer-mini-cases.json");
  H3_REQUIRE_GOLDEN(tok_path);
  H3_REQUIRE_GOLDEN(cases_path);
  const Tokenizer tok = Tokenizer::from_file(tok_path);
  const auto j = nlohmann::json::parse(slurp(cases_path));
  ASSERT_EQ(j["cases"].size(), 14u);
  for (const auto& c : j["cases"]) {
    const std::string text = c["text"].get<std::string>();
    const auto ids = tok.encode(text);
    EXPECT_EQ(ids, c["ids"].get<std::vector<int32_t>>()) << "text: " << text;
    // Every case is already NFC, so byte-level BPE must give the text back.
    EXPECT_EQ(tok.decode(ids), text);
  }
}

TEST(Tokenizer, VerifyReportHasOneExactLinePerCase) {
  const auto tok_path = test::golden("tokenizer-mini.json");
  const auto cases_path = test::golden("tokenizer-mini-cases.json");
  H3_REQUIRE_GOLDEN(tok_path);
  H3_REQUIRE_GOLDEN(cases_path);
  VerifyReport r = verify_tokenizer_cases(cases_path, tok_path);
  r.print(stdout);
  EXPECT_EQ(r.lines.size(), 14u);
  EXPECT_TRUE(r.pass());
}

TEST(Tokenizer, SpecialTokensAreMatchedBeforeSplitting) {
  const auto tok_path = test::golden("tokenizer-mini.json");
  H3_REQUIRE_GOLDEN(tok_path);
  const Tokenizer tok = Tokenizer::from_file(tok_path);
  EXPECT_EQ(tok.token_to_id("<|image_pad|>"), 3);
  EXPECT_EQ(tok.encode("<|image_pad|><|image_pad|>"), (std::vector<int32_t>{3, 3}));
  EXPECT_EQ(tok.encode("<|vision_start|><|image_pad|><|vision_end|>"), (std::vector<int32_t>{1, 3, 2}));
  // A near miss is ordinary text, not the special token.
  const auto near = tok.encode("<|image_pad|");
  EXPECT_EQ(std::count(near.begin(), near.end(), 3), 0);
  EXPECT_EQ(tok.decode({5, 6}), "<d></d>");
}

TEST(Tokenizer, BothMergeSyntaxesGiveTheSameTokens) {
  const Tokenizer pairs = Tokenizer::from_json_text(tiny_tokenizer(false), "pairs.json");
  const Tokenizer strings = Tokenizer::from_json_text(tiny_tokenizer(true), "strings.json");
  // Pieces "abc", " ab", " c", <|x|>, "a", " ab": " c" has no merge, so " " and "c" stay apart.
  const std::string text = "abc ab c<|x|>a ab";
  const std::vector<int32_t> want{5, 6, 3, 2, 7, 0, 6};
  EXPECT_EQ(pairs.encode(text), want);
  EXPECT_EQ(strings.encode(text), want);
  EXPECT_EQ(pairs.decode(want), text);
}

TEST(Tokenizer, EmptyStringGivesNoIds) {
  const Tokenizer tok = Tokenizer::from_json_text(tiny_tokenizer(false), "tiny.json");
  EXPECT_TRUE(tok.encode("").empty());
  EXPECT_EQ(tok.decode({}), "");
}

TEST(Tokenizer, InvalidUtf8IsAnErrorNamingTheByte) {
  const Tokenizer tok = Tokenizer::from_json_text(tiny_tokenizer(false), "tiny.json");
  for (const std::string& bad : {std::string("ab\xFF"
                                             "c"),
                                 std::string("a\xC3"), std::string("\xED\xA0\x80"), std::string("\xC0\xAF")}) {
    try {
      (void)tok.encode(bad);
      ADD_FAILURE() << "no error for invalid UTF-8";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("not valid UTF-8"), std::string::npos) << e.what();
    }
  }
  try {
    (void)tok.encode("ab\xFF");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("byte 2"), std::string::npos) << e.what();
  }
}

TEST(Tokenizer, NfcComposesDecomposedInput) {
  EXPECT_EQ(utf8_nfc("e\xCC\x81", "t"), "\xC3\xA9");  // e + combining acute -> é
  const auto tok_path = test::golden("tokenizer-mini.json");
  H3_REQUIRE_GOLDEN(tok_path);
  const Tokenizer tok = Tokenizer::from_file(tok_path);
  EXPECT_EQ(tok.encode("caf"
                       "e\xCC\x81"),
            tok.encode("caf\xC3\xA9"));
}

TEST(Tokenizer, MalformedFilesAreErrorsNamingTheFile) {
  auto expect_error = [](const std::string& text, const std::string& needle) {
    try {
      (void)Tokenizer::from_json_text(text, "/some/dir/bad-tokenizer.json");
      ADD_FAILURE() << "no error for " << text.substr(0, 60);
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("/some/dir/bad-tokenizer.json"), std::string::npos) << what;
      EXPECT_NE(what.find(needle), std::string::npos) << what;
    }
  };
  expect_error("{ not json", "not valid JSON");
  expect_error("{}", "no \"model\"");
  expect_error(R"({"model": {"type": "WordPiece", "vocab": {}}})", "WordPiece");
  std::string j = tiny_tokenizer(false);
  expect_error(j.replace(j.find("\"merges\":["), 10, "\"merges\":[7,"), "merge 0");
  std::string k = tiny_tokenizer(true);
  expect_error(k.replace(k.find("\"a b\""), 5, "\"a z\""), "missing from the vocabulary");
  // The bounded parser (core/json_limits.h): nesting 100 000 deep is refused without recursing over it, and a
  // key given twice in one object (which one would the vocabulary keep?) is refused.
  expect_error(R"({"model": )" + std::string(100000, '[') + std::string(100000, ']') + "}", "nested deeper");
  std::string d = tiny_tokenizer(false);
  expect_error(d.replace(d.find("\"model\""), 0, R"("version": "1.0", "version": "2.0", )"), "appears twice");
  try {
    (void)Tokenizer::from_file("/nonexistent/tokenizer.json");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/tokenizer.json"), std::string::npos);
  }
}
