// Every entry of the op table (ops/backend_ops.h: H3_BACKEND_OPS) on every backend present, after llama.cpp's
// test-backend-ops: random data of odd sizes (not multiples of 8, not square; plus the widths that take a GPU
// kernel's fast path), one case per op.
//   CPU:  f32 against the same op in f64 (inputs exact in both), rel-L2 within the case's f32 bound.
//   CUDA: f32 against the CPU's f32, and bf16 (the bf16 recipe's rounded steps) against the CPU's f32 with the same
//         steps, the reference rounded to bf16 where the GPU's output is bf16. Without a GPU the CUDA tests report
//         themselves SKIPPED, loudly.
// An op the table lists without a case here fails its test; an entry a backend leaves null must be one the case
// says it lacks, and the front door must refuse it there with an h3::Error.
//
// Bounds: 0 means bitwise (layouts, quantizers on exact inputs). f32 against f64: 1e-6 for element-wise and row ops
// (a few f32 roundings), 2e-6 for sums over ~100-300 terms (GEMMs, convolutions, attention). GPU f32: the same as
// the CPU's own f32 error, 1e-6 (transcendentals within an ulp or two). GPU bf16: 4e-3 for element-wise ops (one
// bf16 step, 2^-8, where an f32 ulp tips a rounding, on a few elements), 6e-3 for GEMMs and 8e-3 for attention (P
// rounded to bf16 inside), 1e-2 for the VAE's normalisations and convolutions. FP8 outputs (e4m3, 3 mantissa bits:
// steps of 6-12 %) are compared dequantized: bitwise where both backends quantize the same values with the same
// power-of-two scales, else 2-6e-2 (one e4m3 step on a fraction of the elements; the CPU's f64 path quantizes
// values its f32 path first rounds to bf16, which flips 1.3-1.7e-2 worth of steps: 3e-2).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "io/procedural.h"
#include "ops/backend_ops.h"

#include "support/gpu_test.h"

namespace h3 {
namespace {

// Where and how a case runs: the device, the dtype of its float tensors, whether the ops round their steps through
// bf16 (the bf16 recipe), and the backend whose results are under test (a reference run computes what that
// backend's run computes, so the two list the same outputs).
struct Env {
  Device device = Device::cpu;
  DType dtype = DType::f32;
  bool bf16_steps = false;
  Device target = Device::cpu;
  // A host f32 tensor of bf16-exact values in this env's dtype and device (the same numbers in every env).
  Tensor in(const Tensor& t) const { return t.to(dtype).to_device(device); }
  bool for_gpu() const { return target != Device::cpu; }
};

// One output of a case, labelled; `tol` overrides the case's bound for this output (-1: the case's).
struct Out {
  std::string label;
  Tensor t;
  double tol = -1;
};
using Outs = std::vector<Out>;

// rel-L2 bounds; -1: not compared (Case::why says why).
struct Tol {
  double cpu = 1e-6;       // CPU f32 against CPU f64
  double gpu_f32 = 1e-6;   // GPU f32 against CPU f32
  double gpu_bf16 = 4e-3;  // GPU bf16 against CPU f32 with bf16 steps
};

struct Case {
  std::function<Outs(const Env&)> run = nullptr;
  Tol tol = {};
  // The reference's outputs, for ops the reference backend lacks or cannot evaluate as the op itself (null: run()
  // in the reference env).
  std::function<Outs(const Env&)> reference = nullptr;
  std::set<std::string> lacks = {};  // backends that leave this entry null ("cpu", "cuda")
  std::string why = "";              // why a comparison is left out (a bound of -1)
};

// ---- inputs ----

// Normal values times `scale`, rounded to bf16 (exact in bf16, f32 and f64), from a per-case stream.
Tensor rnd(Shape s, uint64_t stream, double scale = 1.0) {
  return test::bf16_exact_normal(std::move(s), 20261201, stream, scale);
}
// Positive values in [lo, lo + 1) (bf16-exact), e.g. for norms' weights.
Tensor pos(Shape s, uint64_t stream, double lo = 0.5) {
  Tensor t = rnd(std::move(s), stream, 0.3);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = round_bf16(static_cast<float>(lo + std::fabs(p[i])));
  return t;
}
// n indices in [0, rows) with repeats, host i32.
Tensor idx(int64_t n, int64_t rows, uint64_t seed) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7 + seed * 3 + i / 3) % rows);
  return Tensor::from(v, {n});
}
// A permutation-free scatter target: n distinct rows of `rows`.
Tensor distinct(int64_t n, int64_t rows) {
  std::vector<int32_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(static_cast<int32_t>((i * 5 + 2) % rows));
  return Tensor::from(v, {n});
}

// ---- outputs ----

// Host f64 values of any float output; fp8 dequantized with its per-tensor ([1]) or per-row ([rows]) scales.
Tensor values(const Tensor& t) {
  Tensor h = t.cpu();
  if (h.dtype() != DType::fp8_e4m3) return h.to(DType::f64);
  EXPECT_NE(h.scale(), nullptr) << "an fp8 output without its scale";
  Tensor v = h.to(DType::f64);
  if (!h.scale()) return v;
  const Tensor s = h.scale()->cpu().to(DType::f64);
  const int64_t rows = h.ndim() ? h.dim(0) : 1, per = rows ? h.numel() / rows : 0;
  double* p = v.data<double>();
  for (int64_t i = 0; i < v.numel(); ++i) p[i] *= s.data<double>()[s.numel() == 1 ? 0 : i / per];
  return v;
}

double rel_l2(const Tensor& a, const Tensor& r) {
  double err = 0, norm = 0;
  for (int64_t i = 0; i < r.numel(); ++i) {
    const double d = a.data<double>()[i] - r.data<double>()[i];
    err += d * d;
    norm += r.data<double>()[i] * r.data<double>()[i];
  }
  return norm > 0 ? std::sqrt(err / norm) : std::sqrt(err);
}

void compare_outs(const Outs& got, const Outs& want, double tol, bool round_ref_to_got, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what << ": output counts differ";
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(testing::Message() << what << ", output '" << got[i].label << "'");
    ASSERT_EQ(got[i].label, want[i].label);
    const Tensor& g = got[i].t;
    ASSERT_EQ(g.shape(), want[i].t.shape()) << g.describe() << " vs " << want[i].t.describe();
    Tensor a = values(g), r = values(want[i].t);
    if (round_ref_to_got && g.dtype() == DType::bf16) r = r.to(DType::bf16).to(DType::f64);
    for (int64_t e = 0; e < a.numel(); ++e) ASSERT_TRUE(std::isfinite(a.data<double>()[e])) << "element " << e;
    const double bound = got[i].tol >= 0 ? got[i].tol : tol;
    const double err = rel_l2(a, r);
    if (bound == 0) {
      int64_t first = -1;
      for (int64_t e = 0; e < a.numel() && first < 0; ++e)
        if (a.data<double>()[e] != r.data<double>()[e]) first = e;
      EXPECT_EQ(first, -1) << "not bitwise: element " << first << " (rel-L2 " << err << ")";
    } else {
      EXPECT_LE(err, bound);
    }
    std::printf("  %-40s %-22s rel-L2 %.2e (bound %.0e)\n", what, got[i].label.c_str(), err, bound);
  }
}

// ---- the cases, one per entry of H3_BACKEND_OPS ----

using Cases = std::map<std::string, Case>;
const Tol elem{1e-6, 1e-6, 4e-3};
const Tol exact{0, 0, 0};

void add_gemm_cases(Cases& c) {
  c["linear"] = {[](const Env& e) {
                   Tensor b = e.in(rnd({77}, 3, 0.1));
                   return Outs{
                       {"53x129 -> 77, bias", ops::linear(e.in(rnd({53, 129}, 1)), e.in(rnd({77, 129}, 2, 0.1)), &b)},
                       {"1x7 -> 3", ops::linear(e.in(rnd({1, 7}, 4)), e.in(rnd({3, 7}, 5)))},
                       {"0 rows", ops::linear(e.in(rnd({0, 9}, 6)), e.in(rnd({5, 9}, 7)))}};
                 },
                 {2e-6, 1e-6, 6e-3}};
  // f32 sums kept for bf16 operands (the exact products of bf16-exact inputs, summed in f32 as the CPU's f32 GEMM).
  c["linear_acc"] = {
      [](const Env& e) {
        return Outs{
            {"53x129 -> 77", ops::linear(e.in(rnd({53, 129}, 1)), e.in(rnd({77, 129}, 2)), nullptr, ops::Sums::kept)},
            {"29x150 -> 83", ops::linear(e.in(rnd({29, 150}, 3)), e.in(rnd({83, 150}, 4)), nullptr, ops::Sums::kept)},
            {"1x7 -> 3", ops::linear(e.in(rnd({1, 7}, 5)), e.in(rnd({3, 7}, 6)), nullptr, ops::Sums::kept)}};
      },
      {2e-6, 1e-6, 2e-6}};
}

void add_norm_cases(Cases& c) {
  c["rms_norm"] = {[](const Env& e) {
                     Tensor x = e.in(rnd({37, 270}, 1)), w = e.in(pos({270}, 2)), wd = e.in(pos({45}, 3));
                     return Outs{{"rows", ops::rms_norm(x, &w, 270, 1e-6)},
                                 {"heads of 45", ops::rms_norm(x, &wd, 45, 1e-6)},
                                 {"no weight", ops::rms_norm(x, nullptr, 270, 1e-6)},
                                 {"3-D", ops::rms_norm(e.in(rnd({5, 3, 14}, 4)), nullptr, 7, 1e-6)}};
                   },
                   elem};
  c["norm_modulate"] = {
      [](const Env& e) {
        Outs o;
        for (auto [n, w] : {std::pair<int64_t, int64_t>{37, 270}, {9, 256}})
          o.push_back({std::to_string(n) + "x" + std::to_string(w),
                       ops::norm_modulate(e.in(rnd({n, w}, 1)), e.in(pos({w}, 2)), 1e-6, e.in(rnd({5, w}, 3, 0.3)),
                                          e.in(rnd({5, w}, 4, 0.3)), idx(n, 5, 3), e.bf16_steps)});
        return o;
      },
      elem};
  // Gated and not, each FP8 mode; widths of the GPU's row kernel (1000, 96) and an odd one (45: the separate ops).
  c["residual_norm_modulate"] = {
      [](const Env& e) {
        Outs o;
        for (auto [n, w] : {std::pair<int64_t, int64_t>{37, 1000}, {3, 96}, {5, 45}}) {
          Tensor x = e.in(rnd({n, w}, 1)), y = e.in(rnd({n, w}, 2)), g = e.in(rnd({7, w}, 3, 0.3)),
                 sh = e.in(rnd({7, w}, 4, 0.3)), sc = e.in(rnd({7, w}, 5, 0.3)), wt = e.in(pos({w}, 6));
          Tensor i = idx(n, 7, 2);
          const std::string s = std::to_string(n) + "x" + std::to_string(w);
          ops::ResidualNorm r = ops::residual_norm_modulate(x, g, i, y, wt, 1e-6, sh, sc, e.bf16_steps);
          o.push_back({s + " x", r.x});
          o.push_back({s + " h", r.h});
          ops::ResidualNorm u = ops::residual_norm_modulate(x, Tensor(), i, Tensor(), wt, 1e-6, sh, sc, e.bf16_steps);
          o.push_back({s + " h, no gate", u.h});
          const bool fp8_ok = !e.for_gpu() || (e.bf16_steps && w % 8 == 0);  // the GPU's bounded FP8 out
          if (!e.for_gpu() || w % 8 == 0)  // the GPU's per-row FP8 (quantize_fp8_rows)
            o.push_back({s + " fp8 rows",
                         ops::residual_norm_modulate(x, g, i, y, wt, 1e-6, sh, sc, e.bf16_steps, ops::Fp8Out::rows).h,
                         e.for_gpu() ? 2e-2 : 3e-2});
          if (fp8_ok)
            o.push_back({s + " fp8 bound",
                         ops::residual_norm_modulate(x, g, i, y, wt, 1e-6, sh, sc, e.bf16_steps, ops::Fp8Out::bound).h,
                         e.for_gpu() ? 2e-2 : 3e-2});
        }
        return o;
      },
      elem};
  c["add_scaled_rms_norm"] = {
      [](const Env& e) {
        Outs o;
        for (auto [n, w, g] : {std::tuple<int64_t, int64_t, int64_t>{9, 2048, 2048}, {5, 45, 45}, {3, 96, 32}}) {
          Tensor wt = e.in(pos({g}, 4));
          auto [sum, normed] = ops::add_scaled_rms_norm(e.in(rnd({n, w}, 1)), e.in(rnd({n, w}, 2)),
                                                        e.in(rnd({w}, 3, 0.1)), &wt, g, 1e-6, DType::bf16);
          const std::string s = std::to_string(n) + "x" + std::to_string(w);
          o.push_back({s + " sum", sum, e.bf16_steps ? -1 : 1e-6});
          o.push_back({s + " normed", normed});
        }
        return o;
      },
      {4e-3, 4e-3, 1e-2}};
}

// The rms_norm forms of the other recipes (NormRound::twice, another output dtype, the f32-in-f64 reference),
// LayerNorm, GroupNorm and weight normalisation.
void add_norm_form_cases(Cases& c) {
  // transformers' Qwen3 RMSNorm: rms_norm itself in f32 and f64; in bf16 two roundings (the normalised value, then
  // its product with w), emulated on the CPU's f32 norm for the reference (1e-3: the sums may differ by an f32 ulp,
  // which tips a bf16 rounding on a few elements).
  auto norm_rounded = [](const Env& e, bool emulate) {
    Outs o;
    const Tensor x = rnd({37, 270}, 1);
    for (int64_t group : {int64_t{45}, int64_t{270}}) {
      const Tensor w = pos({group}, group == 45 ? 2 : 3);
      const std::string label = "group " + std::to_string(group);
      if (!emulate) {
        const Tensor we = e.in(w);
        o.push_back({label, ops::rms_norm(e.in(x), &we, group, 1e-6, ops::NormRound::twice)});
        continue;
      }
      Tensor v = ops::rms_norm(x, nullptr, group, 1e-6);
      float* p = v.data<float>();
      for (int64_t i = 0; i < v.numel(); ++i) p[i] = round_bf16(p[i]) * w.data<float>()[i % group];
      o.push_back({label, v});
    }
    return o;
  };
  c["rms_norm_rounded"] = {[norm_rounded](const Env& e) { return norm_rounded(e, false); },
                           {1e-6, 1e-6, 1e-3},
                           [norm_rounded](const Env& e) { return norm_rounded(e, e.bf16_steps); }};
  c["group_norm_frames"] = {
      [](const Env& e) {
        Tensor w = e.in(pos({6}, 2)), b = e.in(rnd({6}, 3, 0.1));
        return Outs{{"6x5x(3x7), 3 groups", ops::group_norm_frames(e.in(rnd({6, 5, 3, 7}, 1)), 3, &w, &b, 1e-6)}};
      },
      elem,
      {},
      {"cuda"}};
  c["layer_norm"] = {[](const Env& e) {
                       Tensor x = e.in(rnd({37, 203}, 1, 2.0)), w = e.in(rnd({203}, 2)), b = e.in(rnd({203}, 3));
                       return Outs{{"affine", ops::layer_norm(x, &w, &b, 1e-5)},
                                   {"no affine", ops::layer_norm(x, nullptr, nullptr, 1e-5)}};
                     },
                     {1e-6, 1e-6, 1e-2}};
  c["weight_norm"] = {[](const Env& e) {
                        return Outs{{"7x5x3", ops::weight_norm(e.in(pos({7}, 1)), e.in(rnd({7, 5, 3}, 2)))}};
                      },
                      elem,
                      {},
                      {"cuda"}};
  // The reference's f32 norm inside an f64 run: f64 in, f64 out. Against the plain f64 norm: f32 roundings only.
  c["rms_norm_via_f32"] = {
      [](const Env& e) {
        Tensor x = rnd({7, 96}, 1).to(DType::f64).to_device(e.device),
               w = pos({48}, 2).to(DType::f64).to_device(e.device);
        return Outs{{"groups of 48", ops::rms_norm(x, &w, 48, 1e-6, ops::NormRound::f32_in_f64)},
                    {"transformers' weight", ops::rms_norm(x, &w, 48, 1e-6, ops::NormRound::f32_in_f64_weight_f64)}};
      },
      {1e-6, -1, -1},
      [](const Env&) {
        Tensor x = rnd({7, 96}, 1).to(DType::f64), w = pos({48}, 2).to(DType::f64);
        Tensor r = ops::rms_norm(x, &w, 48, 1e-6);
        return Outs{{"groups of 48", r}, {"transformers' weight", r}};
      },
      {"cuda"}};
  c["rms_norm_to"] = {
      [](const Env& e) {
        Tensor x = e.in(rnd({9, 2048}, 1)), w = e.in(pos({64}, 2));
        return Outs{{"to bf16, heads of 64", ops::rms_norm(x, &w, 64, 1e-6, ops::NormRound::once, DType::bf16)},
                    {"to own dtype, rows", ops::rms_norm(x, nullptr, 2048, 1e-6, ops::NormRound::once, e.dtype)}};
      },
      {4e-3, 4e-3, 1e-2}};
}

void add_rope_cases(Cases& c) {
  // Head widths 45 (generic kernel), 128 (rotary 96 and 128: the DiT's kernel) and 64 (rotary 48 and 64: the video
  // VAE's), the last two also with f32 steps on bf16 tensors (the VAE decoder's mode).
  c["qk_norm_rope"] = {
      [](const Env& e) {
        Outs o;
        struct H {
          int64_t n, heads, d, rot;
        };
        for (H h : {H{37, 6, 45, 30}, H{9, 2, 128, 96}, H{9, 2, 128, 128}, H{9, 4, 64, 48}, H{9, 4, 64, 64}}) {
          std::vector<bool> modes{e.bf16_steps};
          if (e.bf16_steps && h.d != 45) modes.push_back(false);
          for (bool steps : modes)
            o.push_back({"d " + std::to_string(h.d) + " rot " + std::to_string(h.rot) + (steps ? " bf16 steps" : ""),
                         ops::qk_norm_rope(e.in(rnd({h.n, h.heads * h.d}, 1)), e.in(pos({h.d}, 2)), h.d, 1e-6,
                                           e.in(rnd({h.n, h.rot}, 3)), e.in(rnd({h.n, h.rot}, 4)), steps)});
        }
        return o;
      },
      elem};
  c["rope"] = {[](const Env& e) {
                 return Outs{{"d 45 rot 30", ops::rope(e.in(rnd({37, 270}, 1)), e.in(rnd({37, 30}, 2)),
                                                       e.in(rnd({37, 30}, 3)), 45, e.bf16_steps)},
                             {"d 16 rot 16", ops::rope(e.in(rnd({5, 48}, 4)), e.in(rnd({5, 16}, 5)),
                                                       e.in(rnd({5, 16}, 6)), 16, e.bf16_steps)}};
               },
               elem};
  c["qk_norm_rope_fp8"] = {
      [](const Env& e) {
        Outs o;
        for (auto [heads, d, rot] : {std::tuple<int64_t, int64_t, int64_t>{3, 128, 128}, {5, 45, 30}}) {
          Tensor scale = Tensor::from(std::vector<float>{1.0f / 64}, {1});
          o.push_back({std::to_string(heads) + " heads of " + std::to_string(d),
                       ops::qk_norm_rope_fp8(e.in(rnd({37, heads * d}, 1)), e.in(pos({d}, 2)), d, 1e-6,
                                             e.in(rnd({37, rot}, 3)), e.in(rnd({37, rot}, 4)), e.bf16_steps, scale)});
        }
        return o;
      },
      {3e-2, 3e-2, 3e-2}};
}

void add_attention_cases(Cases& c) {
  // Odd lengths against the 128-row query and 192-key tiles of the GPU kernel, more keys than queries and fewer,
  // head_dim 128 (our kernel), 64 (cuDNN) and 7 (the plain kernel / the CPU only).
  c["attention"] = {
      [](const Env& e) {
        Outs o;
        struct A {
          int64_t nq, nk, heads, d;
        };
        for (A a : {A{77, 131, 3, 128}, A{130, 130, 2, 128}, A{9, 300, 5, 64}, A{13, 29, 3, 7}}) {
          if (e.for_gpu() && a.d == 7) continue;  // the GPU's kernels take head dims of 8 x n
          o.push_back({std::to_string(a.nq) + "x" + std::to_string(a.nk) + " d " + std::to_string(a.d),
                       ops::attention(e.in(rnd({a.nq, a.heads * a.d}, 1)), e.in(rnd({a.nk, a.heads * a.d}, 2)),
                                      e.in(rnd({a.nk, a.heads * a.d}, 3)), a.d)});
        }
        return o;
      },
      {2e-6, 1e-6, 8e-3}};
  // FP8 attention (GPU): q, k quantized per tensor, v fp8 or bf16 (quantized inside); against the CPU's attention
  // of the same dequantized values. P (and O) in e4m3: 5-6e-2 (CudaOps.Fp8AttentionMatchesCpu's bounds).
  c["attention_fp8_out"] = {
      [](const Env& e) {
        Outs o;
        for (auto [nq, nk, heads] : {std::tuple{77, 131, 3}, std::tuple{150, 225, 2}}) {
          const int64_t d = 128;
          Tensor q8 = ops::quantize_fp8(e.in(rnd({nq, heads * d}, 1))),
                 k8 = ops::quantize_fp8(e.in(rnd({nk, heads * d}, 2)));
          Tensor vb = e.in(rnd({nk, heads * d}, 3, 0.5));
          const std::string s = std::to_string(nq) + "x" + std::to_string(nk);
          o.push_back({s + " fp8 v", ops::attention_fp8_out(q8, k8, ops::quantize_fp8(vb), d)});
          o.push_back({s + " bf16 v", ops::attention_fp8_out(q8, k8, vb, d)});
        }
        return o;
      },
      {-1, -1, 6e-2},
      [](const Env& e) {  // the CPU's attention of the dequantized values (quantize_fp8 is bitwise the GPU's)
        Outs o;
        for (auto [nq, nk, heads] : {std::tuple{77, 131, 3}, std::tuple{150, 225, 2}}) {
          const int64_t d = 128;
          auto deq = [](const Tensor& t) { return values(ops::quantize_fp8(t)).to(DType::f32); };
          Tensor q = deq(rnd({nq, heads * d}, 1)), k = deq(rnd({nk, heads * d}, 2)),
                 v = deq(rnd({nk, heads * d}, 3, 0.5));
          const std::string s = std::to_string(nq) + "x" + std::to_string(nk);
          Tensor a = ops::attention(q, k, v, d);
          o.push_back({s + " fp8 v", a});
          o.push_back({s + " bf16 v", a});
        }
        return o;
      },
      {"cpu"},
      "fp8 in, fp8 or bf16 out: compared once, from bf16 inputs"};
  c["attention_causal"] = {
      [](const Env& e) {
        struct A {
          int64_t n, heads, kv_heads, d;
        };
        Outs o;
        for (A a : {A{1, 3, 1, 7}, A{23, 6, 2, 5}, A{37, 5, 5, 33}, A{70, 8, 1, 128}, A{19, 4, 2, 200}})
          o.push_back({"n " + std::to_string(a.n) + " heads " + std::to_string(a.heads) + "/" +
                           std::to_string(a.kv_heads) + " d " + std::to_string(a.d),
                       ops::attention_causal(e.in(rnd({a.n, a.heads * a.d}, 1)), e.in(rnd({a.n, a.kv_heads * a.d}, 2)),
                                             e.in(rnd({a.n, a.kv_heads * a.d}, 3)), a.d)});
        return o;
      },
      {2e-6, 1e-6, 5e-3}};
  c["attention_blocks"] = {
      [](const Env& e) {
        return Outs{{"3 blocks of 17, d 64", ops::attention_blocks(e.in(rnd({51, 128}, 1)), e.in(rnd({51, 128}, 2)),
                                                                   e.in(rnd({51, 128}, 3)), 64, 3)},
                    {"1 block", ops::attention_blocks(e.in(rnd({19, 128}, 4)), e.in(rnd({19, 128}, 5)),
                                                      e.in(rnd({19, 128}, 6)), 64, 1)}};
      },
      {2e-6, 1e-6, 8e-3}};
}

void add_activation_cases(Cases& c) {
  c["silu"] = {[](const Env& e) { return Outs{{"37x270", ops::silu(e.in(rnd({37, 270}, 1, 3.0)))}}; }, elem};
  c["swiglu"] = {[](const Env& e) {
                   return Outs{{"37x(2x270)", ops::swiglu(e.in(rnd({37, 540}, 1, 2.0)), e.bf16_steps)},
                               {"9x(2x128)", ops::swiglu(e.in(rnd({9, 256}, 2, 2.0)), e.bf16_steps)}};
                 },
                 elem};
  c["swiglu_fp8_rows"] = {[](const Env& e) {
                            Outs o{{"37x(2x1000)", ops::swiglu_fp8_rows(e.in(rnd({37, 2000}, 1, 1.5)), e.bf16_steps)}};
                            if (!e.for_gpu())  // 45 per row: the GPU's per-row FP8 takes multiples of 8
                              o.push_back({"5x(2x45)", ops::swiglu_fp8_rows(e.in(rnd({5, 90}, 2, 1.5)), e.bf16_steps)});
                            return o;
                          },
                          {3e-2, 4e-2, 4e-2}};
  c["gelu_tanh"] = {[](const Env& e) { return Outs{{"37x45", ops::gelu_tanh(e.in(rnd({37, 45}, 1, 3.0)))}}; }, elem};
  c["gelu_erf"] = {[](const Env& e) { return Outs{{"37x45", ops::gelu_erf(e.in(rnd({37, 45}, 1, 3.0)))}}; }, elem};
  c["snake_beta"] = {[](const Env& e) {
                       return Outs{{"2x13x57", ops::snake_beta(e.in(rnd({2, 13, 57}, 1)), e.in(rnd({13}, 2, 0.3)),
                                                               e.in(rnd({13}, 3, 0.3)), 2.0)}};
                     },
                     {1e-6, 1e-6, 1e-2}};
}

void add_conv_cases(Cases& c) {
  c["conv3d"] = {
      [](const Env& e) {
        Tensor b = e.in(rnd({5}, 3, 0.1));
        return Outs{{"3x5x9x11 k 3x3x2 stride 1,2,1",
                     ops::conv3d(e.in(rnd({3, 5, 9, 11}, 1)), e.in(rnd({5, 3, 3, 3, 2}, 2, 0.3)), &b, {1, 2, 1})}};
      },
      {2e-6, -1, -1},
      {},
      {"cuda"},
      "CPU only"};
  c["pad3d"] = {[](const Env& e) {
                  Outs o;
                  for (auto m : {ops::PadMode::zeros, ops::PadMode::reflect, ops::PadMode::replicate})
                    o.push_back({"mode " + std::to_string(static_cast<int>(m)),
                                 ops::pad3d(e.in(rnd({3, 4, 5, 7}, 1)), 2, 1, 3, 2, 4, m)});
                  return o;
                },
                exact,
                {},
                {"cuda"}};
  // Dense (the GPU's im2col + GEMM), strided and dilated, 1x1, depthwise, grouped, one output channel (direct).
  c["conv1d"] = {
      [](const Env& e) {
        struct C {
          int64_t B, C, L, O, K, stride, pad, dil, groups;
          bool bias;
        };
        Outs o;
        for (C k : {C{2, 13, 71, 17, 5, 1, 2, 1, 1, true}, C{2, 11, 83, 19, 7, 2, 9, 3, 1, true},
                    C{3, 33, 29, 41, 1, 1, 0, 1, 1, true}, C{2, 13, 77, 13, 12, 2, 0, 1, 13, false},
                    C{1, 12, 45, 9, 3, 1, 1, 2, 3, true}, C{2, 7, 53, 1, 7, 1, 3, 1, 1, false}}) {
          Tensor b = e.in(rnd({k.O}, 3, 0.1));
          o.push_back({"C " + std::to_string(k.C) + " O " + std::to_string(k.O) + " K " + std::to_string(k.K) +
                           " groups " + std::to_string(k.groups),
                       ops::conv1d(e.in(rnd({k.B, k.C, k.L}, 1)), e.in(rnd({k.O, k.C / k.groups, k.K}, 2, 0.3)),
                                   k.bias ? &b : nullptr, k.stride, k.pad, k.dil, k.groups)});
        }
        return o;
      },
      {2e-6, 1e-6, 1e-2}};
  c["conv_transpose1d"] = {
      [](const Env& e) {
        struct C {
          int64_t B, C, L, opg, K, stride, pad, groups;
          bool bias;
        };
        Outs o;
        for (C k : {C{2, 19, 23, 11, 9, 5, 2, 1, true}, C{2, 21, 31, 5, 4, 2, 1, 1, true},
                    C{2, 13, 47, 1, 12, 2, 0, 13, false}, C{1, 12, 17, 3, 5, 3, 1, 4, true}}) {
          Tensor b = e.in(rnd({k.opg * k.groups}, 3, 0.1));
          o.push_back({"C " + std::to_string(k.C) + " stride " + std::to_string(k.stride) + " groups " +
                           std::to_string(k.groups),
                       ops::conv_transpose1d(e.in(rnd({k.B, k.C, k.L}, 1)), e.in(rnd({k.C, k.opg, k.K}, 2, 0.3)),
                                             k.bias ? &b : nullptr, k.stride, k.pad, k.groups)});
        }
        return o;
      },
      {2e-6, 1e-6, 1e-2}};
  c["pad1d"] = {
      [](const Env& e) {
        Outs o;
        for (auto m : {ops::PadMode::zeros, ops::PadMode::reflect, ops::PadMode::replicate})
          o.push_back({"mode " + std::to_string(static_cast<int>(m)), ops::pad1d(e.in(rnd({3, 5, 29}, 1)), 5, 7, m)});
        return o;
      },
      exact};
}

void add_elementwise_cases(Cases& c) {
  c["modulate"] = {[](const Env& e) {
                     Outs o;
                     for (auto [n, w] : {std::pair<int64_t, int64_t>{37, 270}, {9, 256}})
                       o.push_back({std::to_string(n) + "x" + std::to_string(w),
                                    ops::modulate(e.in(rnd({n, w}, 1)), e.in(rnd({5, w}, 2, 0.3)),
                                                  e.in(rnd({5, w}, 3, 0.3)), idx(n, 5, 1), e.bf16_steps)});
                     return o;
                   },
                   elem};
  c["gate_residual"] = {[](const Env& e) {
                          Outs o;
                          for (auto [n, w] : {std::pair<int64_t, int64_t>{37, 270}, {9, 256}})
                            o.push_back({std::to_string(n) + "x" + std::to_string(w),
                                         ops::gate_residual(e.in(rnd({n, w}, 1)), e.in(rnd({5, w}, 2, 0.3)),
                                                            idx(n, 5, 2), e.in(rnd({n, w}, 3)), e.bf16_steps)});
                          return o;
                        },
                        elem};
  c["add"] = {[](const Env& e) {
                return Outs{{"37x270", ops::add(e.in(rnd({37, 270}, 1)), e.in(rnd({37, 270}, 2)))},
                            {"9x256", ops::add(e.in(rnd({9, 256}, 3)), e.in(rnd({9, 256}, 4)))}};
              },
              elem};
  // An emulation step of the CPU: against core's own bf16 conversion of the same values.
  c["round_bf16_"] = {[](const Env& e) {
                        Tensor x = e.in(seeded_normal({37, 45}, 7, 1));
                        ops::round_bf16_(x);
                        return Outs{{"37x45", x.to(DType::f32)}};
                      },
                      exact,
                      [](const Env&) {
                        return Outs{{"37x45", seeded_normal({37, 45}, 7, 1).to(DType::bf16).to(DType::f32)}};
                      },
                      {"cuda"}};
  // Also the decoder's mix on the GPU: an f32 residual with a bf16 branch.
  c["add_scaled"] = {
      [](const Env& e) {
        Tensor x = e.in(rnd({41, 67}, 1)), y = rnd({41, 67}, 2), s = e.in(rnd({67}, 3, 0.1));
        Outs o{{"41x67", ops::add_scaled(x, e.in(y), s)}};
        if (!e.bf16_steps)  // f32 x, and on the GPU a bf16 y
          o.push_back(
              {"bf16 branch", ops::add_scaled(x, e.device == Device::cuda ? e.in(y).to(DType::bf16) : e.in(y), s)});
        return o;
      },
      {1e-6, 1e-7, 1e-2}};
  c["divide_clamp"] = {[](const Env& e) {
                         Tensor a = e.in(rnd({2, 13, 57}, 1));
                         return Outs{{"divide by 3", ops::divide_clamp(a, 3.0, -INFINITY, INFINITY)},
                                     {"clamp", ops::divide_clamp(a, 1.0, -1.0, 1.0), 0}};
                       },
                       {1e-7, 1e-7, 4e-3}};
}

void add_layout_cases(Cases& c) {
  c["scatter_rows"] = {[](const Env& e) {
                         Tensor out = e.in(rnd({41, 19}, 1));
                         ops::scatter_rows(out, e.in(rnd({23, 19}, 2)), distinct(23, 41));
                         Tensor none = e.in(rnd({4, 3}, 3));
                         ops::scatter_rows(none, e.in(rnd({0, 3}, 4)), distinct(0, 4));
                         return Outs{{"23 into 41", out}, {"no rows", none}};
                       },
                       exact};
  c["gather_rows"] = {[](const Env& e) {
                        return Outs{{"23 of 41", ops::gather_rows(e.in(rnd({41, 19}, 1)), idx(23, 41, 5))},
                                    {"3-D rows", ops::gather_rows(e.in(rnd({7, 3, 5}, 2)), idx(11, 7, 1))}};
                      },
                      exact};
  c["columns"] = {[](const Env& e) {
                    return Outs{{"3..17 of 19", ops::columns(e.in(rnd({41, 19}, 1)), 3, 17)},
                                {"empty", ops::columns(e.in(rnd({5, 4}, 2)), 2, 2)}};
                  },
                  exact};
  c["set_columns"] = {[](const Env& e) {
                        Tensor dst = e.in(rnd({13, 29}, 1));
                        ops::set_columns(dst, 5, e.in(rnd({13, 11}, 2)));
                        return Outs{{"11 at 5 of 29", dst}};
                      },
                      exact};
  c["unpatchify3d"] = {[](const Env& e) {
                         return Outs{{"3x5x7 tokens, C 3, pt 2, r 3",
                                      ops::unpatchify3d(e.in(rnd({3 * 5 * 7, 3 * 2 * 3 * 3}, 1)), 3, 5, 7, 3, 2, 3)}};
                       },
                       exact};
  c["slice_last"] = {[](const Env& e) {
                       return Outs{{"4..23 of 29", ops::slice_last(e.in(rnd({3, 5, 29}, 1)), 4, 23)}};
                     },
                     exact};
  // A 2 x 3 grid of uneven tiles with overlaps, cross-faded against a previous chunk.
  c["stitch_frames"] = {[](const Env& e) {
                          const std::vector<int64_t> hs{9, 7}, ws{8, 11, 6};
                          std::vector<Tensor> cur, prev;
                          for (int a = 0; a < 2; ++a)
                            for (int b = 0; b < 3; ++b) {
                              cur.push_back(e.in(rnd({2, 3, hs[a], ws[b]}, 10 + a * 3 + b)));
                              prev.push_back(e.in(rnd({2, 4, hs[a], ws[b]}, 20 + a * 3 + b)));
                            }
                          ops::StitchGrid g{2, 3, {3}, {2, 4}};
                          std::vector<ops::StitchFrame> frames{{0, 0, 0, 0}, {1, 3, 1, 3}, {2, 2, 2, 3}};
                          return Outs{{"2x3 tiles, 3 frames", ops::stitch_frames(cur, prev, g, frames)}};
                        },
                        {1e-6, 0, -1},
                        {},
                        {},
                        "the GPU stitch takes f32 tiles only"};
}

void add_quantize_cases(Cases& c) {
  // Quantizers on bf16-exact values: the same power-of-two scales and round-to-nearest-even on every backend. A
  // vector-width size (37x272) and odd ones; the amax in the middle, negative.
  auto quant_in = [](const Env& e, int64_t n, int64_t w) {
    Tensor x = rnd({n, w}, 1, 2.5);
    x.data<float>()[(n * w) / 2] = -37.5f;
    return e.in(x);
  };
  c["quantize_fp8"] = {
      [quant_in](const Env& e) {
        Outs o;
        for (auto [n, w] : {std::pair<int64_t, int64_t>{37, 272}, {29, 45}, {1, 8}, {300, 1432}})
          o.push_back({std::to_string(n) + "x" + std::to_string(w), ops::quantize_fp8(quant_in(e, n, w))});
        return o;
      },
      {0, 2e-2, 0}};
  // Per-row FP8 on the GPU takes rows of a multiple of 8 values (its kernel's 16-byte vectors; the DiT keeps other
  // layers in bf16): the odd width runs on the CPU only.
  c["quantize_fp8_rows"] = {
      [quant_in](const Env& e) {
        Outs o;
        for (auto [n, w] : {std::pair<int64_t, int64_t>{37, 1000}, {3, 96}, {5, 45}})
          if (!e.for_gpu() || w % 8 == 0)
            o.push_back({std::to_string(n) + "x" + std::to_string(w), ops::quantize_fp8_rows(quant_in(e, n, w))});
        return o;
      },
      {0, 2e-2, 0}};
  // Stored FP8 weights (a checkpoint's values and scale) to bf16: the same exact products rounded once everywhere.
  c["dequantize_fp8"] = {
      [quant_in](const Env& e) {
        Outs o;
        const Tensor x = quant_in({}, 29, 45), xr = quant_in({}, 37, 1000);
        for (const auto& [label, q] : {std::pair{std::string("29x45 per tensor"), ops::quantize_fp8(x)},
                                       std::pair{std::string("37x1000 per row"), ops::quantize_fp8_rows(xr)}})
          o.push_back({label, ops::dequantize_fp8(q.to_device(e.device).with_scale(q.scale()->to_device(e.device)))});
        return o;
      },
      exact};
}

void add_device_cases(Cases& c) {
  c["procedural"] = {
      [](const Env& e) {
        Outs o;
        for (auto [name, shape] : {std::pair{std::string("transformer_blocks.0.attn.to_q.weight"), Shape{96, 131}},
                                   std::pair{std::string("transformer_blocks.3.norm1.weight"), Shape{1001}}}) {
          const ProceduralRule r = procedural_rule(name, shape, 20261129);
          o.push_back({name, ops::procedural(r.base, r.scale, r.offset, shape, e.device)});
        }
        return o;
      },
      {-1, 0, -1},
      [](const Env&) {
        Outs o;
        for (auto [name, shape] : {std::pair{std::string("transformer_blocks.0.attn.to_q.weight"), Shape{96, 131}},
                                   std::pair{std::string("transformer_blocks.3.norm1.weight"), Shape{1001}}})
          o.push_back({name, procedural_tensor(name, shape, 20261129)});
        return o;
      },
      {"cpu"},
      "f32 values whatever the env: compared once"};
}

std::map<std::string, Case> make_cases() {
  Cases c;
  add_gemm_cases(c);
  add_norm_cases(c);
  add_norm_form_cases(c);
  add_rope_cases(c);
  add_attention_cases(c);
  add_activation_cases(c);
  add_conv_cases(c);
  add_elementwise_cases(c);
  add_layout_cases(c);
  add_quantize_cases(c);
  add_device_cases(c);
  return c;
}

const std::map<std::string, Case>& cases() {
  static const std::map<std::string, Case> c = make_cases();
  return c;
}

std::vector<std::string> op_names() {
  return {std::begin(ops::kOpNames), std::end(ops::kOpNames)};
}
size_t op_index(const std::string& name) {
  for (size_t i = 0; i < ops::kOpCount; ++i)
    if (name == ops::kOpNames[i]) return i;
  return ops::kOpCount;
}

Outs reference_of(const Case& c, const Env& env) {
  return c.reference ? c.reference(env) : c.run(env);
}

// A backend's null entry must be one the case names, and the front door must refuse it with an Error.
void expect_refused(const Case& c, const ops::BackendOps& be, const std::string& op, const Env& env) {
  ASSERT_TRUE(c.lacks.count(be.name)) << "the " << be.name << " backend has no entry for " << op
                                      << ", but its case does not say it lacks one";
  EXPECT_THROW(c.run(env), Error) << op << " on the " << be.name << " backend must be refused";
}

// One test per op and backend: BackendOps.Cpu/<op> and CudaBackendOps.Cuda/<op> (matched by --gtest_filter='Cuda*').
class BackendOps : public testing::TestWithParam<std::string> {};
class CudaBackendOps : public testing::TestWithParam<std::string> {};

TEST_P(BackendOps, Cpu) {
  const std::string op = GetParam();
  auto it = cases().find(op);
  ASSERT_NE(it, cases().end()) << "no test case for op '" << op << "': add one to tests/ops/test_backend_ops.cpp";
  const Case& c = it->second;
  const ops::BackendOps& be = ops::cpu_backend();
  const Env f32{Device::cpu, DType::f32, false, Device::cpu}, f64{Device::cpu, DType::f64, false, Device::cpu};
  if (!ops::has_entry(be, op_index(op))) return expect_refused(c, be, op, f32);
  EXPECT_FALSE(c.lacks.count("cpu")) << "the case says the CPU lacks " << op << ", but its table has it";
  ASSERT_GE(c.tol.cpu, 0) << op << ": the CPU entry needs a bound";
  compare_outs(c.run(f32), reference_of(c, f64), c.tol.cpu, false, (op + " cpu f32 vs f64").c_str());
}

TEST_P(CudaBackendOps, Cuda) {
  H3_REQUIRE_GPU();
  const std::string op = GetParam();
  auto it = cases().find(op);
  ASSERT_NE(it, cases().end()) << "no test case for op '" << op << "': add one to tests/ops/test_backend_ops.cpp";
  const Case& c = it->second;
  const ops::BackendOps& be = ops::backend_for(Device::cuda, op.c_str());
  const Env f32{Device::cuda, DType::f32, false, Device::cuda}, bf16{Device::cuda, DType::bf16, true, Device::cuda};
  if (!ops::has_entry(be, op_index(op))) return expect_refused(c, be, op, f32);
  EXPECT_FALSE(c.lacks.count("cuda")) << "the case says CUDA lacks " << op << ", but its table has it";
  ASSERT_TRUE(c.tol.gpu_f32 >= 0 || c.tol.gpu_bf16 >= 0) << op << ": the CUDA entry needs a bound";
  if (c.tol.gpu_f32 >= 0)
    compare_outs(c.run(f32), reference_of(c, {Device::cpu, DType::f32, false, Device::cuda}), c.tol.gpu_f32, true,
                 (op + " cuda f32 vs cpu f32").c_str());
  else
    std::printf("  %s: f32 not compared (%s)\n", op.c_str(), c.why.c_str());
  if (c.tol.gpu_bf16 >= 0)
    compare_outs(c.run(bf16), reference_of(c, {Device::cpu, DType::f32, true, Device::cuda}), c.tol.gpu_bf16, true,
                 (op + " cuda bf16 vs cpu f32").c_str());
  else
    std::printf("  %s: bf16 not compared (%s)\n", op.c_str(), c.why.c_str());
}

std::string param_name(const testing::TestParamInfo<std::string>& p) {
  return p.param;
}
INSTANTIATE_TEST_SUITE_P(, BackendOps, testing::ValuesIn(op_names()), param_name);
INSTANTIATE_TEST_SUITE_P(, CudaBackendOps, testing::ValuesIn(op_names()), param_name);

// Every case names an op of the table (a case left behind by a removed op is an error too).
TEST(BackendOpsTable, EveryCaseIsAnEntry) {
  for (const auto& [name, c] : cases()) EXPECT_LT(op_index(name), ops::kOpCount) << "case for unknown op " << name;
}

}  // namespace
}  // namespace h3
