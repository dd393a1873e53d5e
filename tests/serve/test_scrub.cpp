// Server paths out of client-visible text (serve/scrub.h): known folders by name, other absolute paths by their
// last component, and linear in the text (error messages echo client fields of any length; a regular expression
// recursed off the stack on a 26 KB one and killed the server).
#include <gtest/gtest.h>

#include <string>

#include "serve/scrub.h"
#include "support/linear_time.h"

using h3::serve::scrub_paths;

namespace {

// "/" + n x "a" + "/b" (built in place: GCC 12 warns falsely about the concatenation at -O3)
std::string long_path(size_t n) {
  std::string p(n + 3, 'a');
  p[0] = '/';
  p[n + 1] = '/';
  p[n + 2] = 'b';
  return p;
}

}  // namespace

TEST(ServeScrub, KnownFoldersAreNamed) {
  const std::vector<std::pair<std::string, std::string>> known = {{"/srv/store/uploads", "<uploads>"},
                                                                  {"/srv/store", "<store>"}};
  EXPECT_EQ(scrub_paths("cannot read /srv/store/jobs.db", known), "cannot read <store>/jobs.db");
  EXPECT_EQ(scrub_paths("/srv/store/uploads/x/0.png: bad", known), "<uploads>/x/0.png: bad");
  EXPECT_EQ(scrub_paths("/srv/store and /srv/store", known), "<store> and <store>");
}

TEST(ServeScrub, OtherAbsolutePathsKeepTheirLastPart) {
  const std::vector<std::pair<std::string, std::string>> none;
  EXPECT_EQ(scrub_paths("/srv/x/y/model.safetensors: bad", none), ".../model.safetensors: bad");
  EXPECT_EQ(scrub_paths("path=/a/b/c, 'x'", none), "path=.../c, 'x'");
  EXPECT_EQ(scrub_paths("see (/tmp/q/r) and [/u/v]", none), "see (.../r) and [.../v]");
  // Not a path of the server: one component, relative, or after a ':' (a ratio like 16:9/x).
  EXPECT_EQ(scrub_paths("/b only", none), "/b only");
  EXPECT_EQ(scrub_paths("a/b/c not abs", none), "a/b/c not abs");
  EXPECT_EQ(scrub_paths("x:/a/b", none), "x:/a/b");
}

TEST(ServeScrub, LongFieldsAreLinear) {
  // The reproducer of the crash: an aspect of "/" + 30,000 x "a" + "/b" echoed by its error message; then a
  // million characters, and the growing-size property over one long path and over many short ones.
  const std::string echo = "aspect \"" + long_path(30000) + "\" is not an aspect ratio";
  EXPECT_EQ(scrub_paths(echo, {}), "aspect \".../b\" is not an aspect ratio");
  const std::string huge = long_path(1000000);
  EXPECT_EQ(scrub_paths(huge, {{"/srv", "<store>"}}), ".../b");
  h3::test::expect_linear([](size_t n) { scrub_paths(long_path(n), {}); }, 200000, "one path");
  std::string many;
  h3::test::expect_linear(
      [&](size_t n) {
        many.clear();
        for (size_t i = 0; i < n; ++i) many += " /a/b";
        scrub_paths(many, {{"/a", "<a>"}, {"/q/r", "<q>"}});
      },
      20000, "many paths");
}
