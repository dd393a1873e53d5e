// Bounded JSON parsing (core/json_limits.h): deep nesting and duplicate keys are refused without recursion.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/json_limits.h"
#include "support/error_of.h"
#include "support/linear_time.h"

TEST(JsonLimits, DepthIsMeasuredOutsideStrings) {
  EXPECT_EQ(h3::json_nesting_depth("{}"), 1);
  EXPECT_EQ(h3::json_nesting_depth(R"({"a": [1, {"b": []}]})"), 4);
  EXPECT_EQ(h3::json_nesting_depth(R"({"a": "[[[[{{{{\"[["})"), 1);
  EXPECT_EQ(h3::json_nesting_depth(std::string(100000, '['), 10), 10);  // stops early
}

TEST(JsonLimits, BombsAreRefusedNotRecursed) {
  // A million levels: far past any stack a recursive parser or destructor could take.
  for (const std::string& bomb : {std::string(1000000, '['), std::string(1000000, '[') + std::string(1000000, ']'),
                                  std::string(500000, '{') + "\"a\":1"}) {
    try {
      h3::parse_json_bounded(bomb, "bomb.json");
      FAIL() << "accepted a bomb";
    } catch (const h3::Error& e) {
      EXPECT_NE(std::string(e.what()).find("bomb.json: JSON nested deeper than 64 levels"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_NO_THROW(h3::parse_json_bounded(std::string(64, '[') + std::string(64, ']'), "ok"));
  EXPECT_THROW(h3::parse_json_bounded(std::string(65, '[') + std::string(65, ']'), "deep"), h3::Error);
}

TEST(JsonLimits, DuplicateKeysAndGarbageAreRefused) {
  EXPECT_THROW(h3::parse_json_bounded(R"({"a": 1, "a": 2})", "dup"), h3::Error);
  EXPECT_THROW(h3::parse_json_bounded(R"({"x": {"a": 1, "b": [{"a": 1, "a": 1}]}})", "dup"), h3::Error);
  EXPECT_NO_THROW(h3::parse_json_bounded(R"({"a": {"a": 1}, "b": [{"a": 1}, {"a": 2}]})", "same key, other objects"));
  EXPECT_NO_THROW(h3::parse_json_bounded(R"({"a": 1, "a": 2})", "allowed", 64, false));
  for (const char* bad : {"", "{", "[1,]", "{\"a\" 1}", "nul", "\xff"})
    EXPECT_THROW(h3::parse_json_bounded(bad, "bad"), h3::Error);
  EXPECT_EQ(h3::parse_json_bounded(R"({"a": [1, 2]})", "ok")["a"][1], 2);
}

// Parsing is linear in the text (the growing-size property, tests/support/linear_time.h): nlohmann's callback
// parser rescanned the enclosing container at each closing brace, so 350k `{}` in an array (1 MB) took 29 s and a
// safetensors header of 40k zero-size tensors 35 s.
TEST(JsonLimits, ParsingIsLinear) {
  auto array_of_empties = [](size_t n) {
    std::string s = "[";
    for (size_t i = 0; i < n; ++i) s += i ? ",{}" : "{}";
    return s + "]";
  };
  auto object_of_empties = [](size_t n) {
    std::string s = "{";
    for (size_t i = 0; i < n; ++i) s += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":{}";
    return s + "}";
  };
  auto tensor_header = [](size_t n) {
    std::string s = "{";
    for (size_t i = 0; i < n; ++i)
      s += (i ? ",\"t" : "\"t") + std::to_string(i) + R"(":{"dtype":"F32","shape":[0],"data_offsets":[0,0]})";
    return s + "}";
  };
  for (const auto& [what, make] :
       std::vector<std::pair<std::string, std::function<std::string(size_t)>>>{{"[{},{},...]", array_of_empties},
                                                                               {"{\"kN\":{},...}", object_of_empties},
                                                                               {"tensor header", tensor_header}}) {
    h3::test::expect_linear(
        [&, make = make](size_t n) {
          const std::string text = make(n);
          EXPECT_EQ(h3::parse_json_bounded(text, "x", 64, true).size(), n);
        },
        4000, what);
  }
  // The issue's sizes, each well under a second (they took 29 s and 35 s).
  const auto t0 = std::chrono::steady_clock::now();
  h3::parse_json_bounded(array_of_empties(350000), "1 MB of {}");
  h3::parse_json_bounded(tensor_header(40000), "40k tensors");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
}

TEST(JsonLimits, ValueCountIsBounded) {
  EXPECT_NO_THROW(h3::parse_json_bounded("[1,2,3]", "x", 64, true, 4));
  const std::string e = h3::test::error_of([] { h3::parse_json_bounded("[1,2,3,4]", "body", 64, true, 4); });
  EXPECT_NE(e.find("body: more than 4 JSON values"), std::string::npos) << e;
  // A duplicate key deep inside is still found, and the last value of a key is what a reader sees.
  EXPECT_THROW(h3::parse_json_bounded(R"([{"a":{"b":1,"b":2}}])", "dup"), h3::Error);
  EXPECT_EQ(h3::parse_json_bounded(R"({"a":[{"b":[1,{"c":2}]}],"d":3})", "x")["a"][0]["b"][1]["c"], 2);
}

// A token refused only after it is read whole (a string with one bad byte at its end, one never closed, a huge
// number): the refusal names the byte in a short message and costs a pass over the text. nlohmann's own message
// quoted the token read so far: a 64 MiB body came back as a 64 MiB error after ~1 s of copies.
TEST(JsonLimits, LongTokenRefusalsAreShort) {
  for (const size_t n : {size_t{1} << 16, size_t{8} << 20}) {
    const std::string a(n, 'a');
    for (const auto& [what, text] : std::vector<std::pair<std::string, std::string>>{
             {"bad UTF-8 at the end", "{\"p\":\"" + a + "\xff\"}"},
             {"a surrogate half at the end", "{\"p\":\"" + a + "\\ud800\"}"},
             {"a low surrogate alone", "{\"p\":\"" + a + "\\udc00\"}"},
             {"a bad escape at the end", "{\"p\":\"" + a + "\\x\"}"},
             {"a short \\u at the end", "{\"p\":\"" + a + "\\u12\"}"},
             {"a control byte at the end", "{\"p\":\"" + a + "\n\"}"},
             {"no closing quote", "{\"p\":\"" + a},
             {"a long number", "{\"p\":" + std::string(n, '7') + "}"},
             {"a long exponent", "{\"p\":1e" + std::string(n, '7') + "}"},
             {"a long key, bad at the end", "{\"" + a + "\xc0\x80\":1}"}}) {
      const std::string e = h3::test::error_of([&] { h3::parse_json_bounded(text, "the body"); });
      EXPECT_FALSE(e.empty()) << what;
      EXPECT_LT(e.size(), 400u) << what << " (" << n << " bytes): " << e.substr(0, 200);
    }
  }
}

// The pre-check refuses exactly what nlohmann refuses in strings (RFC 8259 escapes, RFC 3629 UTF-8), on every
// string of up to three units drawn from the troublesome ones: escapes, surrogates, lead and continuation bytes at
// the edges of their ranges, control bytes.
TEST(JsonLimits, StringChecksAgreeWithNlohmann) {
  const std::vector<std::string> units = {"a",
                                          "\\\"",
                                          "\\\\",
                                          "\\/",
                                          "\\b",
                                          "\\n",
                                          "\\t",
                                          "\\x",
                                          "\\u0041",
                                          "\\u00e9",
                                          "\\uD83D",
                                          "\\uDE00",
                                          "\\uDBFF\\uDFFF",
                                          "\\uD800\\u0041",
                                          "\\u12",
                                          "\\uzzzz",
                                          "\\",
                                          "\x01",
                                          "\x1f",
                                          "\x7f",
                                          "\xc2\x80",
                                          "\xc1\xbf",
                                          "\xdf\xbf",
                                          "\xe0\xa0\x80",
                                          "\xe0\x9f\xbf",
                                          "\xed\x9f\xbf",
                                          "\xed\xa0\x80",
                                          "\xef\xbf\xbf",
                                          "\xf0\x90\x80\x80",
                                          "\xf0\x8f\xbf\xbf",
                                          "\xf4\x8f\xbf\xbf",
                                          "\xf4\x90\x80\x80",
                                          "\xf5\x80\x80\x80",
                                          "\x80",
                                          "\xbf",
                                          "\xe1\x80",
                                          "\xf1\x80\x80"};
  size_t tried = 0, refused = 0;
  auto agree = [&](const std::string& body) {
    const std::string text = "[\"" + body + "\"]";
    const bool ours = h3::test::error_of([&] { h3::parse_json_bounded(text, "x"); }).empty();
    EXPECT_EQ(ours, nlohmann::json::accept(text)) << "the string body '" << body << "'";
    ++tried;
    refused += ours ? 0 : 1;
  };
  for (const auto& u : units) {
    agree(u);
    for (const auto& v : units) {
      agree(u + v);
      for (const auto& w : units) agree(u + v + w);
    }
  }
  EXPECT_GT(refused, tried / 4);
  EXPECT_LT(refused, tried);
}
