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
