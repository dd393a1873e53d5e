// Where cuBLASLt's choices are kept (backend/gemm_algos_file.h): a named file as given, else one file per GPU model in
// the cache folder, made when missing, and none when the folder cannot be made.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "backend/gemm_algos_file.h"
#include "support/scratch_dir.h"

namespace h3 {
namespace {

TEST(GemmAlgosFile, NamedFileElseOnePerGpuModelInTheCacheFolder) {
  test::ScratchDir dir;
  EXPECT_EQ(gemm_algos_file("/my/algos.json", (dir / "cache").string(), "NVIDIA H200"), "/my/algos.json");
  EXPECT_FALSE(std::filesystem::exists(dir / "cache")) << "a named file makes no folder";
  EXPECT_EQ(gemm_algos_file("", "", "NVIDIA H200"), "") << "no file, no folder: every run tunes";
  const std::string nested = (dir / "cache" / "h3").string();
  EXPECT_EQ(gemm_algos_file("", nested, "NVIDIA H100 80GB HBM3"), nested + "/gemm-algos-NVIDIA-H100-80GB-HBM3.json");
  EXPECT_TRUE(std::filesystem::is_directory(nested));
  EXPECT_EQ(gemm_algos_file("", nested, "GPU/with:odd*name"), nested + "/gemm-algos-GPU-with-odd-name.json");
  std::ofstream(dir / "plain") << "a file where the folder would go";
  EXPECT_EQ(gemm_algos_file("", (dir / "plain" / "h3").string(), "NVIDIA H200"), "") << "the folder cannot be made";
}

}  // namespace
}  // namespace h3
