// Vision tower -> text decoder hand-off for Qwen3-VL (see model/qwen3vl/qwen3vl.h).
#include "model/qwen3vl/qwen3vl.h"

#include <cstring>

#include "core/error.h"

namespace h3 {

namespace {

// Rows of `which` embeddings (host or device) placed into a host [rows, width] tensor at the positions in `slot`.
void place_rows(Tensor& dst, const Tensor& src, const std::vector<int64_t>& slot) {
  const Tensor h = src.on_device() ? src.cpu() : src;
  const Tensor s = h.dtype() == dst.dtype() ? h : h.to(dst.dtype());
  const size_t row_bytes = static_cast<size_t>(dst.dim(1)) * dtype_size(dst.dtype());
  for (size_t i = 0; i < slot.size(); ++i)
    std::memcpy(static_cast<std::byte*>(dst.raw()) + slot[i] * row_bytes,
                static_cast<const std::byte*>(s.raw()) + i * row_bytes, row_bytes);
}

}  // namespace

Qwen3VlPrepared prepare_qwen3vl(const Qwen3VlVisionModel& vision, const Qwen3VlInputs& in, const VisionTokenIds& tok) {
  const Qwen3VlVisionConfig& vc = vision.config();
  Qwen3VlPrepared out;
  out.positions = qwen3vl_rope_index(in.ids, in.image_grids, in.video_grids, vc.merge, tok);
  if (!in.image_grids.empty()) out.image = vision.forward(in.image_pixels, in.image_grids);
  if (!in.video_grids.empty()) out.video = vision.forward(in.video_pixels, in.video_grids);

  // Joint row order: all placeholder rows ascending; image rows take image outputs in order, video rows video.
  std::vector<int64_t> image_slot, video_slot;
  for (size_t i = 0; i < in.ids.size(); ++i) {
    if (in.ids[i] == tok.image) {
      image_slot.push_back(static_cast<int64_t>(out.extras.rows.size()));
      out.extras.rows.push_back(static_cast<int64_t>(i));
    } else if (in.ids[i] == tok.video) {
      video_slot.push_back(static_cast<int64_t>(out.extras.rows.size()));
      out.extras.rows.push_back(static_cast<int64_t>(i));
    }
  }
  // An absent modality's outputs are undefined tensors (numel() of a 0-d shape is 1, so test defined()).
  const int64_t n_image = out.image.embeds.defined() ? out.image.embeds.dim(0) : 0;
  const int64_t n_video = out.video.embeds.defined() ? out.video.embeds.dim(0) : 0;
  if (static_cast<int64_t>(image_slot.size()) != n_image || static_cast<int64_t>(video_slot.size()) != n_video)
    fail("Qwen3-VL: the prompt has {} image and {} video placeholder tokens, the vision tower gave {} and {}",
         image_slot.size(), video_slot.size(), n_image, n_video);
  const auto rows = static_cast<int64_t>(out.extras.rows.size());
  if (rows == 0) return out;
  auto joint = [&](const Tensor* image, const Tensor* video) {
    Tensor t(vision.dtype(), {rows, vc.out_hidden});
    if (image) place_rows(t, *image, image_slot);
    if (video) place_rows(t, *video, video_slot);
    return t;
  };
  out.extras.embeds = joint(n_image ? &out.image.embeds : nullptr, n_video ? &out.video.embeds : nullptr);
  for (size_t k = 0; k < vc.deepstack_indexes.size(); ++k)
    out.extras.deepstack.push_back(
        joint(n_image ? &out.image.deepstack[k] : nullptr, n_video ? &out.video.deepstack[k] : nullptr));
  return out;
}

}  // namespace h3
