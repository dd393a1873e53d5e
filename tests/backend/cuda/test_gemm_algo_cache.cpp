// The file of cuBLASLt choices per GEMM shape (backend/cuda/gemm_algo_cache.h): what one run writes another reads
// back word for word; a file made on another GPU or cuBLASLt version, or a damaged one, is ignored, never half-used.
// Needs the CUDA toolkit at build time only (no GPU: the cache is plain data).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "support/scratch_dir.h"

#if H3_HAVE_CUDA
#include "backend/cuda/gemm_algo_cache.h"

namespace h3::cuda {
namespace {

cublasLtMatmulAlgo_t algo_with(uint64_t seed) {
  cublasLtMatmulAlgo_t a{};
  auto* w = reinterpret_cast<uint64_t*>(&a);
  for (size_t i = 0; i < sizeof(a) / sizeof(uint64_t); ++i) w[i] = seed * 0x9e3779b97f4a7c15ull + i;
  return a;
}

bool same(const cublasLtMatmulAlgo_t& a, const cublasLtMatmulAlgo_t& b) {
  return std::memcmp(&a, &b, sizeof(a)) == 0;
}

TEST(GemmAlgoCache, WhatOneRunWritesTheNextReads) {
  const test::ScratchDir dir;
  const std::string path = (dir / "algos.json").string();
  {
    GemmAlgoCache c;
    c.open(path, "Test GPU");
    EXPECT_FALSE(c.find("a").has_value());
    c.remember("a", algo_with(1));
    c.remember("b", algo_with(2));
  }
  GemmAlgoCache again;
  again.open(path, "Test GPU");
  ASSERT_TRUE(again.find("a").has_value());
  EXPECT_TRUE(same(*again.find("a"), algo_with(1)));
  EXPECT_TRUE(same(*again.find("b"), algo_with(2)));
  EXPECT_FALSE(again.find("c").has_value());
  EXPECT_FALSE(std::filesystem::exists(path + ".partial"));

  GemmAlgoCache other_gpu;  // another device's choices are not this one's
  other_gpu.open(path, "Other GPU");
  EXPECT_FALSE(other_gpu.find("a").has_value());
}

TEST(GemmAlgoCache, DamagedFilesAreIgnored) {
  const test::ScratchDir dir;
  const std::string path = (dir / "algos.json").string();
  for (const char* text : {"", "{", "[1,2]", "{\"made_with\": 3}", "{\"algorithms\": {\"a\": \"00\"}}"}) {
    std::ofstream(path) << text;
    GemmAlgoCache c;
    c.open(path, "Test GPU");
    EXPECT_FALSE(c.find("a").has_value()) << text;
  }
  GemmAlgoCache none;
  none.open("", "Test GPU");
  EXPECT_FALSE(none.enabled());
  none.remember("a", algo_with(3));  // no file, no error
  EXPECT_FALSE(none.find("a").has_value());
}

}  // namespace
}  // namespace h3::cuda
#else
TEST(GemmAlgoCache, NeedsTheCudaToolkit) {
  GTEST_SKIP() << "SKIPPED LOUDLY: built without the CUDA toolkit (the cache reads cuBLASLt's algorithm type)";
}
#endif
