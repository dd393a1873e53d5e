// Qwen3-VL as H3's conditioner sees it: a prompt whose vision blocks hold placeholder tokens, the preprocessed
// pixels of its images and videos, the vision tower, and the text decoder. The vision outputs replace the
// placeholder rows' embeddings, the DeepStack features are added after decoder layers 0..K-1 at those rows, and
// the decoder runs on Qwen3-VL's mRoPE positions (qwen3vl_rope_index).
#pragma once
#include <cstdint>
#include <vector>

#include "model/qwen3vl/preprocess.h"
#include "model/qwen3vl/text.h"
#include "model/qwen3vl/vision.h"

namespace h3 {

struct Qwen3VlInputs {
  std::vector<int32_t> ids;
  Tensor image_pixels;  // rows of every image, in prompt order (preprocess_frames, concatenated)
  std::vector<GridThw> image_grids;
  Tensor video_pixels;  // rows of every video, in prompt order
  std::vector<GridThw> video_grids;
};

// The extras are host tensors in the tower's dtype whatever device it ran on (they travel to the encoder ranks).
struct Qwen3VlPrepared {
  std::vector<int64_t> positions;     // [3 * N] mRoPE positions
  TextExtras extras;                  // rows = every image/video placeholder row in prompt order
  Qwen3VlVisionOutputs image, video;  // the tower's outputs (images and videos run as two calls, like transformers)
};

// Runs the vision tower and builds the text decoder's extra inputs. Throws when the placeholder counts and the
// grids disagree.
Qwen3VlPrepared prepare_qwen3vl(const Qwen3VlVisionModel& vision, const Qwen3VlInputs& in,
                                const VisionTokenIds& tok = {});

}  // namespace h3
