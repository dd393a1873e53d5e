// Memory sizes as written on the command line (core/byte_size.h): each spelling against its byte count written out
// here, and the refusals.
#include <gtest/gtest.h>

#include "core/byte_size.h"
#include "core/error.h"

namespace h3 {
namespace {

TEST(ByteSize, ParsesBinaryDecimalAndPlainSpellings) {
  EXPECT_EQ(parse_byte_size("1073741824"), 1073741824);
  EXPECT_EQ(parse_byte_size("24G"), int64_t{24} * 1024 * 1024 * 1024);
  EXPECT_EQ(parse_byte_size("24gib"), int64_t{24} * 1024 * 1024 * 1024);
  EXPECT_EQ(parse_byte_size("24GB"), int64_t{24} * 1000 * 1000 * 1000);
  EXPECT_EQ(parse_byte_size("16000M"), int64_t{16000} * 1024 * 1024);
  EXPECT_EQ(parse_byte_size("1.5K"), 1536);
  EXPECT_EQ(parse_byte_size("2T"), int64_t{2} * 1024 * 1024 * 1024 * 1024);
  EXPECT_EQ(parse_byte_size("512b"), 512);
}

TEST(ByteSize, RefusesWhatIsNotASize) {
  for (const char* bad : {"", "G", "-1G", "1..5G", ".", "12X", "12GiBs", "1e3", "9999999999T", " 24G", "24 G"})
    EXPECT_FALSE(parse_byte_size(bad).has_value()) << "'" << bad << "'";
  try {
    parse_byte_size_or_fail("lots", "--max-device-memory");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--max-device-memory=lots"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("24G"), std::string::npos) << e.what();
  }
}

TEST(ByteSize, FormatsWithTheLargestBinaryUnit) {
  EXPECT_EQ(format_byte_size(17), "17 B");
  EXPECT_EQ(format_byte_size(4096), "4.00 KiB");
  EXPECT_EQ(format_byte_size(int64_t{24} * 1024 * 1024 * 1024 + int64_t{512} * 1024 * 1024), "24.50 GiB");
  EXPECT_EQ(format_byte_size(int64_t{140} * 1024 * 1024 * 1024), "140.0 GiB");
}

}  // namespace
}  // namespace h3
