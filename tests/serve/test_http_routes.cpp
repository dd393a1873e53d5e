// Paths against the routes' patterns (serve/http_routes.h route_matches): one non-empty segment per "{}", nothing
// more, and linear in a path of any length (no regular expression).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "serve/http_routes.h"
#include "support/linear_time.h"

using h3::serve::route_matches;

TEST(ServeRoutes, SegmentsAreMatchedWhole) {
  std::vector<std::string> g;
  EXPECT_TRUE(route_matches("/v1/videos", "/v1/videos", g));
  EXPECT_TRUE(g.empty());
  EXPECT_FALSE(route_matches("/v1/videos", "/v1/videos/", g));
  EXPECT_TRUE(route_matches("/v1/videos/{}", "/v1/videos/video_1", g));
  EXPECT_EQ(g, std::vector<std::string>{"video_1"});
  EXPECT_FALSE(route_matches("/v1/videos/{}", "/v1/videos/", g));
  EXPECT_FALSE(route_matches("/v1/videos/{}", "/v1/videos/a/b", g));
  EXPECT_TRUE(route_matches("/v1/videos/{}/cancel", "/v1/videos/x/cancel", g));
  EXPECT_EQ(g, std::vector<std::string>{"x"});
  EXPECT_FALSE(route_matches("/v1/videos/{}/cancel", "/v1/videos/x/cancelled", g));
  EXPECT_FALSE(route_matches("/v1/videos/{}/cancel", "/v1/videos//cancel", g));
  EXPECT_FALSE(route_matches("/", "/x", g));
}

TEST(ServeRoutes, LongPathsAreLinear) {
  std::vector<std::string> g;
  EXPECT_FALSE(route_matches("/v1/videos/{}/cancel", "/v1/videos/" + std::string(1000000, 'a') + "/cance", g));
  h3::test::expect_linear(
      [&](size_t n) { route_matches("/v1/videos/{}/content", "/v1/videos/" + std::string(n, 'a') + "/content", g); },
      200000, "a long id");
}
