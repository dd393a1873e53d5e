// Previews with a GPU video VAE (pipeline/preview.h): the picture is the frame the same GPU VAE's full decode of the
// same latents gives, bitwise, in bf16 and f32 (the CPU side: test_preview.cpp). Without a GPU every test here
// reports itself SKIPPED, loudly. The end-to-end cost at 768p is scripts/device/preview_overhead.sh.
#include <gtest/gtest.h>

#include "core/compare.h"
#include "io/procedural.h"
#include "model/vae/procedural.h"
#include "model/vae/tiling.h"
#include "pipeline/preview.h"
#include "support/gpu_test.h"

namespace h3 {
namespace {

TEST(CudaPreview, PictureIsTheGpuDecodesFrameBitwise) {
  H3_REQUIRE_GPU();
  const auto file = procedural_video_vae_file(kDefaultProceduralSeed);
  const VideoVaeConfig cfg = procedural_video_vae_config();
  const Tensor z = test::bf16_exact_normal({cfg.latent_channels, 37, 4, 20}, 9, 0);  // 7 chunks, 2 tile columns
  const PreviewSpan span = preview_span(cfg, 37);
  for (Precision p : {Precision::bf16, Precision::f32}) {
    const VideoVae g(*file, "", cfg, p, Device::cuda);
    const Tensor full = VideoVae::to_pixels01(g.decode(g.denormalize(z.to(g.compute_dtype()))));
    const Tensor frame = vae::slice_dim(full, 1, span.frame, span.frame + 1).reshape({3, 64, 320}).to(DType::f32);
    const Tensor got = preview_picture(g, z, span, 1000);
    const Diff d = compare(got, frame);
    EXPECT_TRUE(d.shape_ok && d.bitwise) << precision_name(p) << ": rel_l2 " << d.rel_l2;
    std::printf("  GPU preview %-4s vs the full decode's frame %lld: %s\n", precision_name(p).data(),
                static_cast<long long>(span.frame), d.bitwise ? "bitwise" : "DIFFERENT");
  }
}

}  // namespace
}  // namespace h3
