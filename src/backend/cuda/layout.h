// The layout family (backend/cuda/layout.cu): row gathers and scatters by an index, the ViT decoder's unpatchify and
// the video decode's stitch.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/elem_type.h"

namespace h3::cuda {

// out[i] = x[idx[i]] (gather) or out[idx[i]] = x[i] (scatter), rows of row_bytes (a multiple of 2).
cudaError_t gather_rows(const void* x, const int32_t* idx, void* out, int64_t n, int64_t row_bytes, cudaStream_t s);
cudaError_t scatter_rows(const void* x, const int32_t* idx, void* out, int64_t n, int64_t row_bytes, cudaStream_t s);

// The ViT decoder's unpatchify (ops/layout.h has the index equation).
cudaError_t unpatchify3d(const void* y, void* out, ElemType t, int64_t tt, int64_t h, int64_t w, int64_t C, int64_t pt,
                         int64_t r, cudaStream_t s);

// The video decode's per-pixel stitch (ops/layout.h stitch_frames has the equations). Tiles are f32 [C, T, h_a, w_b],
// tile (a, b) at cur[a * cols + b] (prev: the previous chunk's, read only for frames with fade_e > 0). Output f32
// [C, n_frames, H, W]. Sizes are small (at most kStitchMaxAxis tiles per axis, kStitchMaxFrames frames per call), so
// everything travels by value in the kernel's parameters.
constexpr int kStitchMaxAxis = 16, kStitchMaxTiles = 64, kStitchMaxFrames = 24;
struct StitchArgs {
  const float* cur[kStitchMaxTiles];
  const float* prev[kStitchMaxTiles];
  int32_t rows = 0, cols = 0, channels = 0, cur_frames = 0, prev_frames = 0, height = 0, width = 0, n_frames = 0;
  int32_t row_size[kStitchMaxAxis], row_off[kStitchMaxAxis + 1], row_extent[kStitchMaxAxis];
  int32_t col_size[kStitchMaxAxis], col_off[kStitchMaxAxis + 1], col_extent[kStitchMaxAxis];
  int32_t frame[kStitchMaxFrames], prev_frame[kStitchMaxFrames], fade_p[kStitchMaxFrames], fade_e[kStitchMaxFrames];
};
cudaError_t stitch_frames(const StitchArgs& a, float* out, cudaStream_t s);

}  // namespace h3::cuda
