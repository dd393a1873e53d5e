// Quantized DiT checkpoints (io/quant.h): every format written from procedural weights, loaded back, checked
// per element against the format's own rounding bound and end to end against the f32 model.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <tuple>

#include "core/error.h"
#include "io/quant.h"
#include "io/safetensors.h"
#include "model/dit/checkpoint.h"
#include "model/dit/dit.h"
#include "model/dit/export.h"
#include "model/dit/lora.h"
#include "pipeline/noise.h"
#include "pipeline/synthetic.h"
#include "support/scratch_dir.h"

using namespace h3;
namespace fs = std::filesystem;

namespace {

using h3::test::ScratchDir;

std::string write_quant(const DitCheckpoint& ck, QuantFormat q, ExportLayout layout, const std::string& path) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::map<std::string, std::string> meta;
  export_dit(ck, DType::f32, layout, q, tensors, meta);
  write_safetensors(path, tensors, meta);
  return path;
}

double rel_l2(const Tensor& a, const Tensor& b) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double d = a.get(i) - b.get(i);
    num += d * d;
    den += b.get(i) * b.get(i);
  }
  return std::sqrt(num / den);
}

bool is_gemm(const std::string& k) {
  return k.starts_with("transformer_blocks.") &&
         (k.find("attn.to_") != std::string::npos || k.find("ff.net.") != std::string::npos);
}

// A checkpoint whose block weights have rows of very different magnitude (a rank-1 LoRA with B[i] growing
// with i), so a per-row scale that lands on the wrong row breaks the per-row bound.
DitCheckpoint uneven_rows(const ScratchDir& dir) {
  const DitConfig c = *DitConfig::named("mini");
  std::vector<std::pair<std::string, Tensor>> w;
  for (int n = 0; n < c.num_layers; ++n) {
    const std::string p = "blocks." + std::to_string(n) + ".";
    for (auto [m, out, in] : {std::tuple{"attn.qkv_proj", 3 * c.inner_dim(), int64_t{c.hidden_size}},
                              {"mlp.fc1", 2 * int64_t{c.ffn_dim}, int64_t{c.hidden_size}}}) {
      Tensor A(DType::f32, {1, in}), B(DType::f32, {out, 1});
      for (int64_t j = 0; j < in; ++j) A.data<float>()[j] = (j % 3) - 1.0f;
      for (int64_t i = 0; i < out; ++i) B.data<float>()[i] = static_cast<float>((i * 37) % 101) * 0.2f;
      w.emplace_back(p + m + ".lora_A.weight", A);
      w.emplace_back(p + m + ".lora_B.weight", B);
    }
  }
  write_safetensors(dir / "uneven.safetensors", w);
  DitCheckpoint ck = DitCheckpoint::open("procedural:mini");
  ck.add_lora(dir / "uneven.safetensors", 1.0);
  return ck;
}

}  // namespace

TEST(Quant, HadamardIsOrthonormalAndItsOwnInverse) {
  for (int g : {1, 2, 8, 32, 256}) {
    SCOPED_TRACE(g);
    Tensor e(DType::f32, {1, g});
    e.data<float>()[0] = 1;
    hadamard_columns_(e, g);
    for (int k = 0; k < g; ++k) ASSERT_NEAR(e.data<float>()[k], 1.0 / std::sqrt(g), 1e-7);  // first column of H
    Tensor x = seeded_normal({3, 2 * g}, 4, 0), y = x.clone();
    hadamard_columns_(y, g);
    double nx = 0, ny = 0;
    for (int64_t i = 0; i < x.numel(); ++i) nx += x.get(i) * x.get(i), ny += y.get(i) * y.get(i);
    EXPECT_NEAR(nx, ny, 1e-4 * nx);
    hadamard_columns_(y, g);
    EXPECT_LT(rel_l2(y, x), 1e-6);
  }
  EXPECT_EQ(convrot_group_for(5376), 256);
  EXPECT_EQ(convrot_group_for(96), 32);
  EXPECT_EQ(convrot_group_for(448), 64);
}

// Per element: fp8 e4m3 keeps 3 mantissa bits (relative error <= 2^-4 above the subnormal range, absolute
// <= scale * 2^-10 below it); int8 per row: |err| <= s_i / 2 with s_i = amax_i / 127; convrot: the same bound
// holds for the rotated row, so the row's L2 error is <= sqrt(in) * s_i / 2.
TEST(Quant, EveryFormatRoundTripsWithinItsBound) {
  ScratchDir dir;
  DitCheckpoint ref = uneven_rows(dir);
  struct Case {
    QuantFormat q;
    ExportLayout layout;
  };
  for (auto [q, layout] :
       {Case{QuantFormat::fp8, ExportLayout::comfy}, Case{QuantFormat::scaled_fp8, ExportLayout::diffusers},
        Case{QuantFormat::int8, ExportLayout::official}, Case{QuantFormat::int8, ExportLayout::comfy},
        Case{QuantFormat::int8_convrot, ExportLayout::official}, Case{QuantFormat::nvfp4, ExportLayout::official},
        Case{QuantFormat::nvfp4, ExportLayout::comfy}, Case{QuantFormat::mxfp8, ExportLayout::official}}) {
    SCOPED_TRACE(std::string(quant_format_name(q)) + " " + std::to_string(static_cast<int>(layout)));
    const std::string p = write_quant(ref, q, layout, dir / "q.safetensors");
    DitCheckpoint ck = DitCheckpoint::open(p);
    int quantized = 0;
    for (const auto& [key, shape] : ref.config().parameters()) {
      Tensor want = ref.get(key), got = ck.get(key);
      ASSERT_EQ(got.shape(), want.shape()) << key;
      if (!is_gemm(key)) {
        ASSERT_EQ(0, std::memcmp(got.raw(), want.raw(), want.nbytes())) << key << " is not quantized";
        continue;
      }
      ++quantized;
      const int64_t rows = want.dim(0), cols = want.dim(1);
      if (q == QuantFormat::fp8 || q == QuantFormat::scaled_fp8) {
        double amax = 0;
        for (int64_t i = 0; i < want.numel(); ++i) amax = std::max(amax, std::fabs(want.get(i)));
        for (int64_t i = 0; i < want.numel(); ++i)
          ASSERT_LE(std::fabs(got.get(i) - want.get(i)),
                    std::max(std::fabs(want.get(i)) * 0.0625, amax / 448 * std::ldexp(1.0, -10)) * (1 + 1e-5))
              << key << " element " << i;
        continue;
      }
      if (q == QuantFormat::mxfp8) {
        // Per 32-column block with scale 2^e in [amax_blk / 448, 2 amax_blk / 448): e4m3 keeps 3 mantissa bits,
        // |err| <= |v| 2^-4 above the subnormal range and <= scale 2^-10 below it.
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t b = 0; b < cols / 32; ++b) {
            double bmax = 0;
            for (int64_t j = 32 * b; j < 32 * b + 32; ++j) bmax = std::max(bmax, std::fabs(want.get(i * cols + j)));
            for (int64_t j = 32 * b; j < 32 * b + 32; ++j) {
              const double v = want.get(i * cols + j);
              ASSERT_LE(std::fabs(got.get(i * cols + j) - v),
                        std::max(std::fabs(v) * 0.0625, 2 * bmax / 448 * std::ldexp(1.0, -10)) * (1 + 1e-5) + 1e-12)
                  << key << " row " << i << " column " << j;
            }
          }
        continue;
      }
      if (q == QuantFormat::nvfp4) {
        // Per 16-column block with total scale t = scale_2 * e4m3(amax_blk / 6 / scale_2) (<= amax_blk / 6 *
        // (1 + 2^-4) + scale_2 * 2^-10, the e4m3 rounding): the e2m1 grid gives |err| <= max(|v|, t) / 4.
        double amax = 0;
        for (int64_t i = 0; i < want.numel(); ++i) amax = std::max(amax, std::fabs(want.get(i)));
        const double s2 = amax / 2688;
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t b = 0; b < cols / 16; ++b) {
            double bmax = 0;
            for (int64_t j = 16 * b; j < 16 * b + 16; ++j) bmax = std::max(bmax, std::fabs(want.get(i * cols + j)));
            const double t = bmax / 6 * 1.0625 + s2 * std::ldexp(1.0, -10);
            for (int64_t j = 16 * b; j < 16 * b + 16; ++j) {
              const double v = want.get(i * cols + j);
              ASSERT_LE(std::fabs(got.get(i * cols + j) - v), std::max(std::fabs(v), t) / 4 * (1 + 1e-5) + 1e-9)
                  << key << " row " << i << " column " << j;
            }
          }
        continue;
      }
      for (int64_t i = 0; i < rows; ++i) {
        // int8: |err| <= amax / 254 per element. convrot: the step is set by the rotated row's amax, which is
        // at most the row's L2 norm (H is orthonormal), and the rotation keeps the error's L2 norm.
        double amax = 0, err2 = 0, maxerr = 0, l2 = 0;
        for (int64_t j = 0; j < cols; ++j) {
          const double v = want.get(i * cols + j), d = got.get(i * cols + j) - v;
          amax = std::max(amax, std::fabs(v));
          l2 += v * v;
          err2 += d * d;
          maxerr = std::max(maxerr, std::fabs(d));
        }
        if (q == QuantFormat::int8)
          ASSERT_LE(maxerr, amax / 254 * (1 + 1e-5) + 1e-7) << key << " row " << i;
        else
          ASSERT_LE(std::sqrt(err2), std::sqrt(static_cast<double>(cols)) * std::sqrt(l2) / 254 + 1e-6)
              << key << " row " << i;
      }
    }
    EXPECT_EQ(quantized, 6 * ref.config().num_layers);
  }
}

// The quantized model against the f32 model: output rel-L2 within the stated tolerance (docs/notes.md).
TEST(Quant, ForwardWithinToleranceOfF32) {
  ScratchDir dir;
  DitCheckpoint ref = DitCheckpoint::open("procedural:mini");
  DitInputs in = make_synthetic_inputs(ref.config(), SyntheticRequest{});
  DitOutputs want = DitModel(ref, Precision::f32).forward(in);
  const std::map<QuantFormat, double> tol = {{QuantFormat::fp8, 5e-2},   {QuantFormat::scaled_fp8, 5e-2},
                                             {QuantFormat::int8, 1e-2},  {QuantFormat::int8_convrot, 1e-2},
                                             {QuantFormat::nvfp4, 1e-1}, {QuantFormat::mxfp8, 5e-2}};
  for (auto [q, t] : tol) {
    const std::string p = write_quant(ref, q, q == QuantFormat::int8 ? ExportLayout::comfy : ExportLayout::official,
                                      dir / "f.safetensors");
    DitOutputs got = DitModel(DitCheckpoint::open(p), Precision::f32).forward(in);
    const double ev = rel_l2(got.video, want.video), ea = rel_l2(got.audio, want.audio);
    std::printf("quant %-13s video rel_l2 %.3e, audio rel_l2 %.3e (tolerance %.0e)\n",
                std::string(quant_format_name(q)).c_str(), ev, ea, t);
    EXPECT_LE(ev, t) << quant_format_name(q);
    EXPECT_LE(ea, t) << quant_format_name(q);
    EXPECT_GT(ev, 0) << "nothing was quantized";
  }
}

TEST(Quant, UnsupportedFormatsAreNamed) {
  ScratchDir dir;
  DitCheckpoint ref = DitCheckpoint::open("procedural:mini");
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::map<std::string, std::string> meta;
  export_dit(ref, DType::f32, ExportLayout::comfy, QuantFormat::fp8, tensors, meta);
  for (auto& [k, t] : tensors)
    if (k == "model.diffusion_model.blocks.1.mlp.fc2.comfy_quant") {
      const std::string j = R"({"format": "convrot_w4a4"})";
      t = Tensor(DType::u8, {static_cast<int64_t>(j.size())});
      std::memcpy(t.raw(), j.data(), j.size());
    }
  const std::string p = dir / "w4a4.safetensors";
  write_safetensors(p, tensors, meta);
  try {
    DitCheckpoint::open(p);
    ADD_FAILURE() << "convrot_w4a4 accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(p), std::string::npos) << m;
    EXPECT_NE(m.find("blocks.1.mlp.fc2.comfy_quant"), std::string::npos) << m;
    EXPECT_NE(m.find("convrot_w4a4"), std::string::npos) << m;
  }
}

// A hand-made NVFP4 tensor with known nibbles and block scales in known swizzled slots (2 x 2 atoms of the
// 128x4 tiling: 130 rows, 5 blocks), decoded exactly: the even column is the high nibble, and
// index(r, b) = ((r / 128) * 2 + b / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + b % 4.
TEST(Quant, Nvfp4HandMadeTensorDecodesExactly) {
  const int64_t R = 130, C = 80;
  Tensor packed(DType::u8, {R, C / 2}), scales(DType::fp8_e4m3, {256, 8});
  std::memset(packed.raw(), 0, packed.nbytes());
  std::memset(scales.raw(), 0, scales.nbytes());
  auto* q = packed.data<uint8_t>();
  auto* sc = static_cast<uint8_t*>(scales.raw());
  EXPECT_EQ(nvfp4_scale_index(129, 4, 5), 3 * 512 + 16);
  EXPECT_EQ(nvfp4_scale_index(1, 1, 5), 17);
  EXPECT_EQ(nvfp4_scale_index(33, 2, 5), 16 + 4 + 2);
  EXPECT_EQ(nvfp4_scale_index(0, 4, 5), 512) << "the next atom along the blocks comes next (row-major atoms)";
  // Row 129, block 4 (columns 64..79): scale 2.0 (e4m3 0x40); byte 32 = columns 64, 65 = codes 7 (6.0), 0xA
  // (-1).
  sc[3 * 512 + 16] = 0x40;
  q[129 * 40 + 32] = 0x7A;
  // Row 1, block 1 (columns 16..31): scale 1.0 (0x38); columns 16, 17 = codes 2 (1.0), 1 (0.5).
  sc[17] = 0x38;
  q[1 * 40 + 8] = 0x21;
  // Row 33, block 2 (columns 32..47): scale 4.0 (0x48); columns 32, 33 = codes 0xF (-6), 3 (1.5).
  sc[22] = 0x48;
  q[33 * 40 + 16] = 0xF3;
  const Tensor w = dequantize_nvfp4(packed, scales, 0.5f, "hand-made");
  ASSERT_EQ(w.shape(), (Shape{R, C}));
  std::map<int64_t, float> want = {{129 * C + 64, 6.0f}, {129 * C + 65, -1.0f}, {1 * C + 16, 0.5f},
                                   {1 * C + 17, 0.25f},  {33 * C + 32, -12.0f}, {33 * C + 33, 3.0f}};
  for (int64_t i = 0; i < w.numel(); ++i) {
    const auto it = want.find(i);
    ASSERT_EQ(w.data<float>()[i], it == want.end() ? 0.0f : it->second) << "row " << i / C << " column " << i % C;
  }
  // Wrong scale sizes are refused with the expected tiling named.
  try {
    dequantize_nvfp4(packed, Tensor(DType::fp8_e4m3, {130, 5}), 0.5f, "f.safetensors: 'w'");
    ADD_FAILURE() << "an unswizzled [rows, blocks] scale tensor was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("128x4"), std::string::npos) << e.what();
  }
}

// MXFP8 by hand: exponent bytes in known swizzled slots (2 x 2 atoms: 130 rows, 5 blocks of 32 columns), known fp8
// values, decoded exactly; value = fp8 * 2^(e - 127).
TEST(Quant, Mxfp8HandMadeTensorDecodesExactly) {
  const int64_t R = 130, C = 160;
  Tensor q(DType::fp8_e4m3, {R, C}), e(DType::u8, {256, 8});
  std::memset(q.raw(), 0, q.nbytes());
  std::memset(e.raw(), 0, e.nbytes());
  auto* d = static_cast<uint8_t*>(q.raw());
  auto* x = e.data<uint8_t>();
  x[nvfp4_scale_index(129, 4, 5)] = 128;  // 2^1
  d[129 * C + 128] = 0x38;                // 1.0 -> 2.0
  x[nvfp4_scale_index(1, 1, 5)] = 125;    // 2^-2
  d[1 * C + 33] = 0xC0;                   // -2.0 -> -0.5
  const Tensor w = dequantize_mxfp8(q, e, "hand-made");
  for (int64_t i = 0; i < w.numel(); ++i) {
    const float want = i == 129 * C + 128 ? 2.0f : i == 1 * C + 33 ? -0.5f : 0.0f;
    ASSERT_EQ(w.data<float>()[i], want) << "row " << i / C << " column " << i % C;
  }
  x[0] = 255;
  try {
    dequantize_mxfp8(q, e, "hand-made");
    ADD_FAILURE() << "the e8m0 NaN was accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("NaN"), std::string::npos) << err.what();
  }
}
