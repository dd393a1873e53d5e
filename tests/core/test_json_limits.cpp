// Bounded JSON parsing (core/json_limits.h): deep nesting and duplicate keys are refused without recursion.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "core/json_limits.h"

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
