// The HTTP front's request rules (serve/http_policy.h), one case per rule and per way around it.
#include <gtest/gtest.h>

#include <limits>

#include "serve/http_policy.h"

using namespace h3::serve;

TEST(ServePolicy, HostAllowsLiteralsAndLocalhostOnly) {
  const std::vector<std::string> none;
  for (const char* ok : {"127.0.0.1:8190", "127.0.0.1", "localhost:8190", "LOCALHOST", "localhost.:80", "[::1]:8190",
                         "[::1]", "10.1.2.3:80", "", "  127.0.0.1:1  "})
    EXPECT_TRUE(host_allowed(ok, none)) << ok;
  // DNS rebinding carries the attacker's name; malformed values are refused too.
  for (const char* bad : {"evil.example:8190", "evil.example", "localhost.evil.example", "127.0.0.1.nip.io:8190",
                          "127.1:8190", "[::1", "[::1]x", "[zz]:80", "localhost:80a", ":8190", "gpubox:8190"})
    EXPECT_FALSE(host_allowed(bad, none)) << bad;
  EXPECT_TRUE(host_allowed("gpubox:8190", {"GPUBOX"}));
  EXPECT_TRUE(host_allowed("GpuBox.", {"gpubox"}));
  EXPECT_FALSE(host_allowed("other:8190", {"gpubox"}));
  EXPECT_TRUE(host_allowed("anything.example:1", {"*"}));
}

TEST(ServePolicy, CrossSiteStateChangesAreRefused) {
  EXPECT_TRUE(same_origin_or_absent("", "", "127.0.0.1:8190"));  // curl, SDKs
  EXPECT_TRUE(same_origin_or_absent("http://127.0.0.1:8190", "same-origin", "127.0.0.1:8190"));
  EXPECT_TRUE(same_origin_or_absent("HTTP://LOCALHOST:8190", "", "localhost:8190"));
  EXPECT_TRUE(same_origin_or_absent("", "none", "127.0.0.1:8190"));  // typed into the address bar
  EXPECT_FALSE(same_origin_or_absent("https://evil.example", "", "127.0.0.1:8190"));
  EXPECT_FALSE(same_origin_or_absent("http://127.0.0.1:9999", "", "127.0.0.1:8190"));  // another local port
  EXPECT_FALSE(same_origin_or_absent("null", "", "127.0.0.1:8190"));
  EXPECT_FALSE(same_origin_or_absent("http://127.0.0.1:8190/x", "", "127.0.0.1:8190"));
  EXPECT_FALSE(same_origin_or_absent("", "cross-site", "127.0.0.1:8190"));
  EXPECT_FALSE(same_origin_or_absent("", "same-site", "127.0.0.1:8190"));
}

TEST(ServePolicy, MediaType) {
  EXPECT_EQ(media_type("application/json"), "application/json");
  EXPECT_EQ(media_type(" Application/JSON ; charset=utf-8"), "application/json");
  EXPECT_EQ(media_type("multipart/form-data; boundary=x"), "multipart/form-data");
  EXPECT_EQ(media_type(""), "");
}

TEST(ServePolicy, RangesFollowRfc9110) {
  using K = RangeAnswer::Kind;
  auto is = [](RangeAnswer a, K k, uint64_t f = 0, uint64_t l = 0) {
    return a.kind == k && (k != K::partial || (a.first == f && a.last == l));
  };
  EXPECT_TRUE(is(parse_range("bytes=4-7", 100), K::partial, 4, 7));
  EXPECT_TRUE(is(parse_range("bytes=90-", 100), K::partial, 90, 99));
  EXPECT_TRUE(is(parse_range("bytes=90-1000", 100), K::partial, 90, 99));  // last clamped
  EXPECT_TRUE(is(parse_range("bytes=-10", 100), K::partial, 90, 99));      // suffix
  EXPECT_TRUE(is(parse_range("bytes=-1000", 100), K::partial, 0, 99));
  EXPECT_TRUE(is(parse_range("BYTES= 0-0 ", 100), K::partial, 0, 0));
  EXPECT_TRUE(is(parse_range("bytes=100-", 100), K::unsatisfiable));
  EXPECT_TRUE(is(parse_range("bytes=-0", 100), K::unsatisfiable));
  EXPECT_TRUE(is(parse_range("bytes=0-", 0), K::unsatisfiable));
  EXPECT_TRUE(is(parse_range("bytes=200-300,400-", 100), K::unsatisfiable));
  // Numbers past 64 bits saturate: beyond the end, never wrapped to a small offset.
  EXPECT_TRUE(is(parse_range("bytes=18446744073709551617-", 100), K::unsatisfiable));
  EXPECT_TRUE(is(parse_range("bytes=0-18446744073709551617", 100), K::partial, 0, 99));
  EXPECT_TRUE(is(parse_range("bytes=-99999999999999999999999", 100), K::partial, 0, 99));
  // Ignored (the whole file, 200): several ranges, other units, syntax errors, last < first.
  for (const char* h : {"bytes=0-1,5-6", "bytes=0-1,200-", "items=0-1", "bytes=5-2", "bytes=a-b", "bytes=1",
                        "bytes=", "bytes=,", "bytes=--1", "bytes=1-2-3", "", "bytes=0x10-"})
    EXPECT_TRUE(is(parse_range(h, 100), K::full)) << h;
}

TEST(ServePolicy, KeyComparison) {
  EXPECT_TRUE(key_matches("s3cret", "s3cret"));
  EXPECT_FALSE(key_matches("s3cre", "s3cret"));
  EXPECT_FALSE(key_matches("s3crett", "s3cret"));
  EXPECT_FALSE(key_matches("", "s3cret"));
  EXPECT_FALSE(key_matches("", ""));  // no key configured never matches
}
