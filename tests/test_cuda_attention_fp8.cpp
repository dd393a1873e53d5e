// The FP8 attention graph (src/backend/cuda/attention/cudnn_fp8.cpp) without a GPU: cuDNN finalizes every operation
// and the operation graph of each variant on the host, checking dims, strides, types and connections, so a wrong
// graph fails here, on the CPU CI, before it reaches the H200. Whether an engine runs it (and how fast, how close to
// bf16) is CudaOps.Fp8AttentionMatchesCpu and bench/attention_fp8_check, on the GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <tuple>

#if H3_HAVE_CUDA
#include "backend/cuda/attention/attention.h"
#endif

namespace h3 {
namespace {

TEST(CudaAttentionFp8, GraphFinalizesWithoutGpu) {
#if H3_HAVE_CUDA
  // The DiT's packed lengths with all heads and one rank's 7, and odd small sizes.
  for (auto [nq, nk, heads] :
       {std::tuple<int64_t, int64_t, int64_t>{14908, 14908, 56}, {37830, 37830, 7}, {77, 131, 3}, {1, 1, 1}}) {
    const std::string err = cuda::attention_fp8_graph_check(nq, nk, heads, 128);
    if (err == "built without cuDNN") GTEST_SKIP() << "SKIPPED LOUDLY: built without cuDNN";
    EXPECT_EQ(err, "") << nq << " x " << nk << ", " << heads << " heads";
  }
#else
  GTEST_SKIP() << "SKIPPED LOUDLY: built without CUDA";
#endif
}

}  // namespace
}  // namespace h3
