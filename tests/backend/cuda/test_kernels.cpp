// What the table-driven comparison of every GPU op with the CPU (tests/ops/test_backend_ops.cpp) does not check: fused
// kernels bitwise equal to the separate ops, FP8 paths (per-row GEMMs, our FP8 attention and its bf16 fallback), our
// bf16 attention kernel against cuDNN's, and the deterministic-mode invariances (a GEMM row and an attention head never
// depend on how many rows or heads are computed with them). Without a GPU every test here reports itself SKIPPED,
// loudly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "core/compare.h"
#include "core/dtype.h"
#include "ops/fp8_bound.h"
#include "ops/ops.h"

#include "support/gpu_test.h"

#if H3_HAVE_CUDA
#include "backend/cuda/attention/attention.h"
#endif

namespace h3 {
namespace {

using test::gpu_ready;

// Random f32 values with bf16-exact magnitudes, so both backends start from identical inputs.
Tensor rnd(Shape s, uint64_t seed, double scale = 1.0) {
  return test::bf16_exact_normal(s, seed, 7, scale);
}
Tensor gpu(const Tensor& t, DType dt) {
  return t.to_device(Device::cuda).to(dt);
}
Tensor host_f32(const Tensor& t) {
  return t.cpu().to(DType::f32);
}
Tensor rounded(Tensor t) {
  ops::round_bf16_(t);
  return t;
}
// An fp8 tensor's values times its per-tensor scale, on the host in f32.
Tensor dequant(const Tensor& t8) {
  Tensor f = t8.cpu().to(DType::f32);
  const float s = t8.scale()->cpu().to(DType::f32).data<float>()[0];
  for (int64_t i = 0; i < f.numel(); ++i) f.data<float>()[i] *= s;
  return f;
}
Tensor idx_of(int64_t n, int64_t rows, uint64_t seed) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>((i * 7 + seed) % rows);
  return Tensor::from(v, {n});
}
// Element-wise results: bf16 may differ by one bf16 step where a transcendental differs by an f32 ulp.
void expect_close(const Tensor& got, const Tensor& want, double rel_l2, const char* what) {
  Diff d = compare(host_f32(got), want);
  EXPECT_TRUE(d.shape_ok) << what;
  EXPECT_LE(d.rel_l2, rel_l2) << what << ": max abs " << d.max_abs;
}

// The fused row kernels (residual + norm + modulation, per-row FP8, SwiGLU) on widths the DiT uses and odd ones:
// the fusion is bitwise the separate GPU ops, and the results match the CPU backend.
TEST(CudaOps, FusedRowKernels) {
  H3_REQUIRE_GPU();
  for (auto [n, c] : {std::pair{37, 1000}, std::pair{5, 5376}, std::pair{3, 96}, std::pair{2, 2056}}) {
    Tensor x = rnd({n, c}, 51), y = rnd({n, c}, 52), g = rnd({7, c}, 53, 0.3), sh = rnd({7, c}, 54, 0.3),
           sc = rnd({7, c}, 55, 0.3), w = rnd({c}, 56);
    Tensor idx = idx_of(n, 7, 2);
    const DType bf = DType::bf16;
    Tensor gx = gpu(x, bf), gy = gpu(y, bf), gg = gpu(g, bf), gsh = gpu(sh, bf), gsc = gpu(sc, bf), gw = gpu(w, bf);
    for (bool steps : {true, false}) {
      ops::ResidualNorm fused = ops::residual_norm_modulate(gx, gg, idx, gy, gw, 1e-6, gsh, gsc, steps);
      Tensor sep_x = ops::gate_residual(gx, gg, idx, gy, steps);
      Tensor sep_h = ops::norm_modulate(sep_x, gw, 1e-6, gsh, gsc, idx, steps);
      EXPECT_TRUE(compare(host_f32(fused.x), host_f32(sep_x)).bitwise) << "residual " << n << "x" << c;
      EXPECT_TRUE(compare(host_f32(fused.h), host_f32(sep_h)).bitwise) << "norm_modulate " << n << "x" << c;
      if (steps) {
        ops::ResidualNorm cpu = ops::residual_norm_modulate(x, g, idx, y, w, 1e-6, sh, sc, true);
        expect_close(fused.x, cpu.x, 4e-3, "residual vs CPU");
        expect_close(fused.h, cpu.h, 4e-3, "norm_modulate vs CPU");
      }
      // Per-row FP8: the fused output is the per-row quantization of the bf16 h, bit for bit.
      ops::ResidualNorm q =
          ops::residual_norm_modulate(gx, Tensor(), idx, Tensor(), gw, 1e-6, gsh, gsc, steps, ops::Fp8Out::rows);
      Tensor h_only = ops::norm_modulate(gx, gw, 1e-6, gsh, gsc, idx, steps);
      Tensor q_sep = ops::quantize_fp8_rows(h_only);
      ASSERT_TRUE(q.h.dtype() == DType::fp8_e4m3 && q.h.scale() && q.h.scale()->numel() == n);
      EXPECT_TRUE(compare(q.h.cpu().to(DType::f32), q_sep.cpu().to(DType::f32)).bitwise) << "fp8 rows " << c;
      EXPECT_TRUE(compare(q.h.scale()->cpu(), q_sep.scale()->cpu()).bitwise) << "fp8 row scales " << c;
      // The bounded per-tensor scale: the CPU's bits (the same f32 formula), every |h| within it.
      ops::ResidualNorm b = ops::residual_norm_modulate(gx, gg, idx, gy, gw, 1e-6, gsh, gsc, steps, ops::Fp8Out::bound);
      ops::ResidualNorm bc =
          ops::residual_norm_modulate(rounded(x), g, idx, y, w, 1e-6, sh, sc, steps, ops::Fp8Out::bound);
      ASSERT_TRUE(b.h.dtype() == DType::fp8_e4m3 && b.h.scale() && b.h.scale()->numel() == 1);
      EXPECT_TRUE(compare(b.h.scale()->cpu(), *bc.h.scale()).bitwise) << "bound scale " << c;
      Tensor hb = host_f32(sep_h);
      const float bs = bc.h.scale()->data<float>()[0];
      for (int64_t e = 0; e < hb.numel(); ++e) ASSERT_LE(std::fabs(hb.data<float>()[e]), 448.0f * bs) << e;
      expect_close(b.h.cpu().to(DType::f32), bc.h.to(DType::f32), 2e-2, "bounded fp8 h vs CPU");
    }
    // quantize_fp8_rows on the GPU is the CPU's, bit for bit (the same power-of-two scales, round-to-nearest-even).
    Tensor xr = rounded(rnd({n, c}, 57, 3.0));
    Tensor qg = ops::quantize_fp8_rows(gpu(xr, bf)), qc = ops::quantize_fp8_rows(xr);
    EXPECT_TRUE(compare(qg.cpu().to(DType::f32), qc.to(DType::f32)).bitwise) << "quantize_fp8_rows " << c;
    EXPECT_TRUE(compare(qg.scale()->cpu(), *qc.scale()).bitwise) << "quantize_fp8_rows scales " << c;
    // SwiGLU: per-row FP8 out of one pass vs the CPU's swiglu + quantization (fast exp: tolerance).
    Tensor u = rnd({n, 2 * c}, 58);
    Tensor sg = ops::swiglu_fp8_rows(gpu(u, bf), true), sc_ = ops::swiglu_fp8_rows(u, true);
    Tensor deq_g = sg.cpu().to(DType::f32), deq_c = sc_.to(DType::f32);
    for (int64_t r = 0; r < n; ++r) {
      const float a = sg.scale()->cpu().data<float>()[r], b = sc_.scale()->data<float>()[r];
      for (int64_t j = 0; j < c; ++j) {
        deq_g.data<float>()[r * c + j] *= a;
        deq_c.data<float>()[r * c + j] *= b;
      }
    }
    expect_close(deq_g, deq_c, 4e-2, "swiglu_fp8_rows vs CPU");
  }
}

// q/k norm + RoPE into fp8 with a fixed scale (the FP8 attention's q and k): bitwise the GPU's bf16 result divided
// by the scale and rounded to e4m3, with a power-of-two scale (the model's bounds: a multiply by the inverse) and
// with any other (a division), with bf16 and f32 steps, for a row's heads in whole groups of the kernel's four (56:
// cos / sin loaded once a group) and not (3); and close to the CPU backend's.
TEST(CudaOps, QkNormRopeFp8) {
  H3_REQUIRE_GPU();
  const DType bf = DType::bf16;
  for (int64_t heads : {56, 3}) {
    const int64_t n = 37, d = 128;
    Tensor x = rnd({n, heads * d}, 81), w = rnd({d}, 82), cs = rnd({n, d}, 83), sn = rnd({n, d}, 84);
    // |v| <= |n| (|cos| + |sin|) <= sqrt(128) max|w| * 2 * max(|cos|, |sin|): a scale that keeps v / s within 448.
    float mw = 0, mt = 0;
    for (int64_t i = 0; i < d; ++i) mw = std::max(mw, std::fabs(w.data<float>()[i]));
    for (const Tensor* t : {&cs, &sn})
      for (int64_t i = 0; i < t->numel(); ++i) mt = std::max(mt, std::fabs(t->data<float>()[i]));
    const float bound = std::sqrt(128.0f) * mw * 2 * mt * 1.05f / 448.0f;
    for (float s : {std::exp2(std::ceil(std::log2(bound))), bound * 1.37f}) {
      for (bool steps : {true, false}) {
        SCOPED_TRACE(testing::Message() << heads << " heads, scale " << s << ", bf16 steps " << steps);
        Tensor scale = Tensor::from(std::vector<float>{s}, {1});
        Tensor gx = gpu(x, bf), gw = gpu(w, bf), gc = gpu(cs, bf), gs = gpu(sn, bf);
        Tensor fused = ops::qk_norm_rope_fp8(gx, gw, d, 1e-6, gc, gs, steps, scale);
        ASSERT_EQ(fused.dtype(), DType::fp8_e4m3);
        Tensor want = host_f32(ops::qk_norm_rope(gx, gw, d, 1e-6, gc, gs, steps));
        for (int64_t i = 0; i < want.numel(); ++i) want.data<float>()[i] /= s;
        EXPECT_TRUE(compare(fused.cpu().to(DType::f32), want.to(DType::fp8_e4m3).to(DType::f32)).bitwise);
        Tensor cpu = ops::qk_norm_rope_fp8(x, w, d, 1e-6, cs, sn, steps, scale);
        expect_close(fused.cpu().to(DType::f32), cpu.to(DType::f32), 3e-2, "qk_norm_rope_fp8 vs CPU");
      }
    }
  }
}

TEST(CudaOps, Fp8LinearWithRowScales) {
  H3_REQUIRE_GPU();
  const int64_t n = 61, m = 96, k = 272;
  Tensor x = rnd({n, k}, 61), w = rnd({m, k}, 62, 0.1), b = rnd({m}, 63, 0.1);
  // Rows of very different magnitude: a per-tensor activation scale would flush the small rows.
  for (int64_t r = 0; r < n; r += 3)
    for (int64_t j = 0; j < k; ++j) x.data<float>()[r * k + j] *= 1e-3f;
  Tensor want = ops::linear(x, w, &b);
  Tensor qw = ops::quantize_fp8(gpu(w, DType::bf16)), gb = gpu(b, DType::bf16);
  Tensor qx = ops::quantize_fp8_rows(gpu(x, DType::bf16));
  Tensor got = ops::linear(qx, qw, &gb);
  expect_close(got, want, 6e-2, "fp8 linear, per-row activations");
  // Row r of the result depends on row r alone (per-row scales + a pinned algorithm would make it bitwise; here:
  // the small rows are as accurate as the large ones).
  Tensor small = host_f32(got), ref = want;
  double err = 0, norm = 0;
  for (int64_t r = 0; r < n; r += 3)
    for (int64_t j = 0; j < m; ++j) {
      const double d = small.data<float>()[r * m + j] - ref.data<float>()[r * m + j];
      err += d * d;
      norm += double(ref.data<float>()[r * m + j]) * ref.data<float>()[r * m + j];
    }
  EXPECT_LE(std::sqrt(err / norm), 6e-2) << "small-magnitude rows";
}

// FP8 GEMMs (per-tensor weight and activation scales) against the CPU's f32 GEMM; dimensions that are not
// multiples of 16 are refused.
TEST(CudaOps, Fp8LinearMatchesCpu) {
  H3_REQUIRE_GPU();
  Tensor x = rnd({53, 129}, 21), w = rnd({77, 129}, 22, 0.1);
  Tensor x8 = rnd({53, 128}, 24), w8 = rnd({80, 128}, 25, 0.1), b8 = rnd({80}, 26, 0.1), gb8 = gpu(b8, DType::bf16);
  Tensor q = ops::quantize_fp8(gpu(w8, DType::bf16));
  ASSERT_NE(q.scale(), nullptr);
  expect_close(ops::linear(gpu(x8, DType::bf16), q, &gb8), ops::linear(x8, w8, &b8), 6e-2, "fp8 linear");
  EXPECT_THROW(ops::linear(gpu(x, DType::bf16), ops::quantize_fp8(gpu(w, DType::bf16))), Error);
}

// Our wgmma attention kernel (backend/cuda/attention/wgmma_bf16.cu, the bf16 path on sm_90a) against the CPU on
// odd shapes: lengths not multiples of its 128-row query tiles or 192-key tiles, one row, more keys than queries and
// fewer; a head computed alone is the same bits as that head inside a call of several (deterministic mode and
// ulysses ranks with other head counts rely on it); and against cuDNN's SDPA on the same bf16 inputs. Skipped,
// loudly, where the kernel does not run (a GPU other than sm_90, a build without sm_90a code).
TEST(CudaOps, WgmmaAttentionMatchesCpuAndCudnn) {
  H3_REQUIRE_GPU();
#if H3_HAVE_CUDA
  if (cuda::attention_impl(128, 128, 1, 128) != "h3-wgmma")
    GTEST_SKIP() << "SKIPPED LOUDLY: our wgmma attention kernel does not run on this GPU or build";
  const int64_t d = 128;
  const std::tuple<int, int, int> shapes[] = {{77, 131, 3},   {1, 1, 1},     {130, 130, 2}, {300, 777, 2},
                                              {4100, 129, 1}, {257, 257, 6}, {200, 193, 2}, {129, 385, 1}};
  for (auto [nq, nk, heads] : shapes) {
    SCOPED_TRACE(testing::Message() << nq << " x " << nk << ", " << heads << " heads");
    Tensor q = rnd({nq, heads * d}, 61, 1.5), k = rnd({nk, heads * d}, 62, 1.5), v = rnd({nk, heads * d}, 63);
    Tensor want = ops::attention(q, k, v, d);
    Tensor gq = gpu(q, DType::bf16), gk = gpu(k, DType::bf16), gv = gpu(v, DType::bf16);
    ASSERT_EQ(cuda::attention_impl(nq, nk, heads, d), "h3-wgmma");
    Tensor ours = host_f32(ops::attention(gq, gk, gv, d));
    Tensor theirs_dev = Tensor::empty(DType::bf16, gq.shape(), Device::cuda);
    if (!cuda::attention_cudnn(gq.raw(), gk.raw(), gv.raw(), theirs_dev.raw(), nq, nk, heads, d)) {
      std::printf("SKIPPED LOUDLY: cuDNN's SDPA does not run %d x %d here (no cuDNN in this build?)\n", nq, nk);
      continue;
    }
    Tensor theirs = host_f32(theirs_dev);
    Diff vs_cpu = compare(ours, want), vs_cudnn = compare(ours, theirs);
    std::printf("wgmma attention %d x %d, %d heads: rel-L2 %.3g vs CPU, %.3g vs cuDNN\n", nq, nk, heads, vs_cpu.rel_l2,
                vs_cudnn.rel_l2);
    EXPECT_LE(vs_cpu.rel_l2, 8e-3) << "max abs " << vs_cpu.max_abs;
    EXPECT_LE(vs_cudnn.rel_l2, 8e-3) << "max abs " << vs_cudnn.max_abs;
    if (heads > 1) {
      auto last_head = [&](const Tensor& t) {  // columns [(heads - 1) d, heads d) of a host f32 [n, heads d]
        const int64_t n = t.dim(0);
        std::vector<float> col(static_cast<size_t>(n * d));
        for (int64_t r = 0; r < n; ++r)
          for (int64_t c = 0; c < d; ++c) col[r * d + c] = t.data<float>()[r * heads * d + (heads - 1) * d + c];
        return Tensor::from(col, {n, d});
      };
      Tensor alone = host_f32(ops::attention(gpu(last_head(q), DType::bf16), gpu(last_head(k), DType::bf16),
                                             gpu(last_head(v), DType::bf16), d));
      EXPECT_TRUE(compare(alone, last_head(ours)).bitwise) << "the last head alone differs from it among " << heads;
    }
  }
#endif
}

// FP8 attention against the CPU on the same dequantized values: our FP8 kernel (P in e4m3 with 3 mantissa bits,
// and O too for attention_fp8_out: ~1-3e-2 rel-L2, hence the bounds), required (Numerics::fp8_attention require, so
// a silent bf16 fallback cannot pass for FP8), and the bf16 fallback itself (off) at the bf16 bound.
TEST(CudaOps, Fp8AttentionMatchesCpu) {
  H3_REQUIRE_GPU();
  const Numerics started = gpu_numerics();
  const int64_t d = 128;
  for (auto [nq, nk, heads] :
       {std::tuple{77, 131, 3}, std::tuple{300, 300, 2}, std::tuple{1000, 1000, 4}, std::tuple{150, 225, 2}}) {
    SCOPED_TRACE(testing::Message() << nq << " x " << nk << ", " << heads << " heads");
    Tensor q8 = ops::quantize_fp8(gpu(rnd({nq, heads * d}, 51), DType::bf16));
    Tensor k8 = ops::quantize_fp8(gpu(rnd({nk, heads * d}, 52), DType::bf16));
    Tensor vb = gpu(rnd({nk, heads * d}, 53, 0.5), DType::bf16), v8 = ops::quantize_fp8(vb);
    Tensor want = ops::attention(dequant(q8), dequant(k8), dequant(v8), d);
    for (auto [mode, fp8_out, tol] :
         {std::tuple{Fp8Attention::off, false, 8e-3}, std::tuple{Fp8Attention::require, false, 5e-2},
          std::tuple{Fp8Attention::require, true, 6e-2}}) {
      SCOPED_TRACE(testing::Message() << "fp8 attention " << fp8_attention_name(mode) << (fp8_out ? ", fp8 O" : ""));
#if H3_HAVE_CUDA
      if (mode == Fp8Attention::require && cuda::attention_fp8_ours_impl(nq, nk, heads, d).empty()) {
        std::printf("SKIPPED LOUDLY: our FP8 attention kernel does not run on this GPU or build\n");
        continue;
      }
#endif
      Numerics n = started;
      n.fp8_attention = mode;
      set_gpu_numerics(n);
      Tensor got;
      try {
        got = fp8_out ? ops::attention_fp8_out(q8, k8, v8, d) : ops::attention(q8, k8, v8, d);
      } catch (const Error& e) {
        ADD_FAILURE() << e.what();
        continue;
      }
      Tensor got_f32;
      if (got.dtype() == DType::fp8_e4m3) {
        ASSERT_NE(got.scale(), nullptr);
        got_f32 = dequant(got);
      } else {
        EXPECT_EQ(got.dtype(), DType::bf16);
        got_f32 = host_f32(got);
      }
      Diff diff = compare(got_f32, want);
      std::printf("fp8 attention %lld x %lld, %lld heads, %s%s: rel-L2 %.3g\n", static_cast<long long>(nq),
                  static_cast<long long>(nk), static_cast<long long>(heads), fp8_attention_name(mode).data(),
                  fp8_out ? " (fp8 O)" : "", diff.rel_l2);
      EXPECT_LE(diff.rel_l2, tol) << "max abs " << diff.max_abs;
      if (fp8_out) {  // v handed over in bf16 (quantized inside, fused into V's transpose): the same bits
        Tensor from_bf16 = ops::attention_fp8_out(q8, k8, vb, d);
        ASSERT_EQ(from_bf16.dtype(), got.dtype());
        EXPECT_TRUE(compare(from_bf16.cpu().to(DType::f32), got.cpu().to(DType::f32)).bitwise) << "bf16 v";
        if (got.scale()) {
          EXPECT_TRUE(compare(from_bf16.scale()->cpu(), got.scale()->cpu()).bitwise) << "bf16 v scale";
        }
      }
    }
  }
  set_gpu_numerics(started);
}

// FP8 attention with f16 scores: q and k tagged with a bound on their heads' norms (as the DiT's fixed-scale q and k
// are) whose product is within the kernel's f16 bound take the three-warpgroup kernel where it pays at the shape
// (19,200 query rows of one head do on 114 or 132 SMs, the small shapes do not), which rounds the scores otherwise
// than the f32 one (so the output differs from the untagged call's) and stays within the FP8 bounds of the CPU's
// attention; elsewhere, and for a product past the bound, the f32 kernel (the untagged call's bits).
TEST(CudaOps, Fp8AttentionF16ScoresWhereHeadNormsAreBounded) {
  H3_REQUIRE_GPU();
#if H3_HAVE_CUDA
  const int64_t d = 128;
  if (cuda::attention_fp8_ours_impl(1, 1, 1, d).empty()) GTEST_SKIP() << "our FP8 attention kernel does not run here";
  // e4m3 values of x / s with |x / s| <= 12 (|q8 . k8| <= 128 x 144 = 18,432 at most), their exact scale s, and the
  // largest norm of a head of stored values, measured.
  auto quantize = [&](const Tensor& x) {
    float amax = 0;
    for (int64_t i = 0; i < x.numel(); ++i) amax = std::max(amax, std::fabs(x.data<float>()[i]));
    const float s = ops::round_up_pow2(amax / 12.0f);
    Tensor y = x.clone();
    for (int64_t i = 0; i < y.numel(); ++i) y.data<float>()[i] /= s;
    Tensor y8 = y.to(DType::fp8_e4m3), back = y8.to(DType::f32);
    double worst = 0;
    for (int64_t r = 0; r < back.dim(0); ++r)
      for (int64_t h = 0; h < back.dim(1) / d; ++h) {
        double n2 = 0;
        for (int64_t c = 0; c < d; ++c) n2 += std::pow(back.data<float>()[r * back.dim(1) + h * d + c], 2);
        worst = std::max(worst, std::sqrt(n2));
      }
    struct Q {
      Tensor t8;
      float norm;
    };
    return Q{y8.with_scale(Tensor::from(std::vector<float>{s}, {1})).to_device(Device::cuda),
             static_cast<float>(worst)};
  };
  const Numerics started = gpu_numerics();
  Numerics n = started;
  n.fp8_attention = Fp8Attention::require;
  set_gpu_numerics(n);
  int took = 0;
  for (auto [nq, nk, heads] : {std::tuple{1, 1, 1}, std::tuple{77, 131, 3}, std::tuple{300, 700, 2},
                               std::tuple{1000, 1000, 4}, std::tuple{19200, 129, 1}}) {
    SCOPED_TRACE(testing::Message() << nq << " x " << nk << ", " << heads << " heads");
    auto q = quantize(rnd({nq, heads * d}, 61)), k = quantize(rnd({nk, heads * d}, 62));
    Tensor v8 = ops::quantize_fp8(gpu(rnd({nk, heads * d}, 63, 0.5), DType::bf16));
    ASSERT_LE(double(q.norm) * k.norm, cuda::fp8_f16_score_bound());
    Tensor want = ops::attention(dequant(q.t8), dequant(k.t8), dequant(v8), d);
    const Tensor qb = q.t8.with_head_norm_bound(q.norm), kb = k.t8.with_head_norm_bound(k.norm);
    const bool f16 = cuda::attention_fp8_takes_f16_scores(double(q.norm) * k.norm, nq, heads);
    took += f16 ? 1 : 0;
    for (bool fp8_out : {false, true}) {
      auto run = [&](const Tensor& qq, const Tensor& kk) {
        Tensor o = fp8_out ? ops::attention_fp8_out(qq, kk, v8, d) : ops::attention(qq, kk, v8, d);
        return o.dtype() == DType::fp8_e4m3 ? dequant(o) : host_f32(o);
      };
      const Tensor got = run(qb, kb), f32 = run(q.t8, k.t8);
      const Tensor past = run(qb, k.t8.with_head_norm_bound(cuda::fp8_f16_score_bound() / q.norm * 1.01f));
      const Diff diff = compare(got, want);
      std::printf(
          "fp8 attention with bounded q, k %lld x %lld, %lld heads%s (%s scores): rel-L2 %.3g (untagged %.3g)\n",
          static_cast<long long>(nq), static_cast<long long>(nk), static_cast<long long>(heads),
          fp8_out ? " (fp8 O)" : "", f16 ? "f16" : "f32", diff.rel_l2, compare(f32, want).rel_l2);
      EXPECT_LE(diff.rel_l2, fp8_out ? 6e-2 : 5e-2) << "max abs " << diff.max_abs;
      if (nk > 1) {
        EXPECT_EQ(!compare(got, f32).bitwise, f16) << "f16 scores " << (f16 ? "chosen" : "not chosen");
      }
      EXPECT_TRUE(compare(past, f32).bitwise) << "a product past the bound took the f16 kernel";
    }
  }
  set_gpu_numerics(started);
  EXPECT_GE(took, 1) << "no shape took the f16-score kernel on this GPU";
#endif
}

// Deterministic mode (started above): a row's GEMM result and a head's attention result are the same bits however
// many rows or heads are computed together — what makes ulysses bitwise across world sizes.
TEST(CudaOps, DeterministicRowsAndHeads) {
  H3_REQUIRE_GPU();
  const int64_t n = 300, k = 640, m = 384;
  Tensor x = gpu(rnd({n, k}, 41), DType::bf16), w = gpu(rnd({m, k}, 42, 0.05), DType::bf16);
  Tensor full = host_f32(ops::linear(x, w));
  for (auto [a, b] : {std::pair{0, 1}, std::pair{17, 150}, std::pair{101, 300}}) {
    Tensor part = host_f32(ops::linear(x.rows(a, b), w));
    EXPECT_TRUE(compare(part, full.rows(a, b).clone()).bitwise) << "GEMM rows " << a << ".." << b;
  }
  const int64_t S = 257, H = 6, D = 128;
  Tensor q = gpu(rnd({S, H * D}, 43), DType::bf16), kk = gpu(rnd({S, H * D}, 44), DType::bf16),
         v = gpu(rnd({S, H * D}, 45), DType::bf16);
  Tensor all = host_f32(ops::attention(q, kk, v, D));
  for (auto [h0, h1] : {std::pair{0, 1}, std::pair{2, 5}}) {
    Tensor part = host_f32(ops::attention(ops::columns(q, h0 * D, h1 * D), ops::columns(kk, h0 * D, h1 * D),
                                          ops::columns(v, h0 * D, h1 * D), D));
    EXPECT_TRUE(compare(part, ops::columns(all, h0 * D, h1 * D)).bitwise) << "heads " << h0 << ".." << h1;
  }
}

}  // namespace
}  // namespace h3
