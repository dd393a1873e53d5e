#include "io/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>

#include "core/error.h"
#include "core/names.h"
#include "core/parallel.h"

namespace h3 {

namespace {
constexpr std::array<Named<QuantFormat>, 7> kQuantNames{{{QuantFormat::none, "none"},
                                                         {QuantFormat::fp8, "fp8"},
                                                         {QuantFormat::scaled_fp8, "scaled_fp8"},
                                                         {QuantFormat::int8, "int8"},
                                                         {QuantFormat::int8_convrot, "int8-convrot"},
                                                         {QuantFormat::nvfp4, "nvfp4"},
                                                         {QuantFormat::mxfp8, "mxfp8"}}};
}  // namespace

QuantFormat quant_format_from_name(const std::string& s) {
  return value_in(kQuantNames, s.empty() ? std::string("none") : s, "quantization",
                  "fp8, scaled_fp8, int8, int8-convrot, nvfp4, mxfp8");
}

std::string_view quant_format_name(QuantFormat f) {
  return name_in(kQuantNames, f);
}

int convrot_group_for(int64_t in) {
  int g = 256;
  while (g > 1 && in % g != 0) g /= 2;
  return g;
}

void hadamard_columns_(Tensor& t, int g) {
  H3_ASSERT(t.dtype() == DType::f32 && t.ndim() == 2 && g >= 1 && (g & (g - 1)) == 0 && t.dim(1) % g == 0,
            "hadamard_columns_: {} with group {}", t.describe(), g);
  const int64_t rows = t.dim(0), cols = t.dim(1);
  const double norm = 1.0 / std::sqrt(static_cast<double>(g));
  float* p = t.data<float>();
  parallel_for(rows, [&](int64_t r0, int64_t r1) {  // rows are independent
    std::vector<double> buf(static_cast<size_t>(g));
    for (int64_t i = r0; i < r1; ++i)
      for (int64_t c0 = 0; c0 < cols; c0 += g) {
        float* v = p + i * cols + c0;
        for (int k = 0; k < g; ++k) buf[k] = v[k];
        // Fast Walsh-Hadamard transform (Sylvester order), then the 1/sqrt(g) normalisation.
        for (int len = 1; len < g; len <<= 1)
          for (int s = 0; s < g; s += 2 * len)
            for (int k = s; k < s + len; ++k) {
              const double a = buf[k], b = buf[k + len];
              buf[k] = a + b;
              buf[k + len] = a - b;
            }
        for (int k = 0; k < g; ++k) v[k] = static_cast<float>(buf[k] * norm);
      }
  });
}

namespace {

constexpr int64_t kNvfp4Block = 16;
constexpr int64_t kMxfp8Block = 32;
constexpr float kE2M1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                             -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

int64_t round_up(int64_t v, int64_t m) {
  return (v + m - 1) / m * m;
}

// Nearest e2m1 code of v (already divided by its scale), ties to the even code, clamped to +-6.
uint8_t e2m1_code(float v) {
  const float a = std::min(std::fabs(v), 6.0f);
  uint8_t best = 0;
  for (uint8_t c = 1; c < 8; ++c) {
    const float d = std::fabs(a - kE2M1[c]), db = std::fabs(a - kE2M1[best]);
    if (d < db || (d == db && (c % 2) == 0)) best = c;
  }
  return static_cast<uint8_t>(best | (std::signbit(v) && best != 0 ? 8 : 0));
}

}  // namespace

int64_t nvfp4_scale_index(int64_t r, int64_t b, int64_t blocks) {
  const int64_t col_atoms = round_up(blocks, 4) / 4, mr = r % 128;
  return ((r / 128) * col_atoms + b / 4) * 512 + (mr % 32) * 16 + (mr / 32) * 4 + b % 4;
}

Shape quant_logical_shape(const QuantSpec& spec, const Shape& stored) {
  if (spec.kind == QuantSpec::nvfp4 && stored.size() == 2) return {stored[0], stored[1] * 2};
  return stored;
}

Tensor dequantize_nvfp4(const Tensor& packed, const Tensor& block_scales, float scale_2, const std::string& where) {
  if (packed.ndim() != 2 || packed.dtype() != DType::u8)
    fail("{}: nvfp4 weight is {}, expected U8 [rows, cols / 2] (two e2m1 codes per byte)", where, packed.describe());
  const int64_t R = packed.dim(0), C = packed.dim(1) * 2;
  if (C % kNvfp4Block != 0) fail("{}: nvfp4 weight has {} columns, not a multiple of the 16-column block", where, C);
  const int64_t B = C / kNvfp4Block;
  const int64_t want = round_up(R, 128) * round_up(B, 4);
  if (block_scales.dtype() != DType::fp8_e4m3 || block_scales.numel() != want)
    fail(
        "{}: nvfp4 block scales are {}, expected F8_E4M3 with {} = roundup({}, 128) x roundup({}, 4) "
        "elements "
        "(cuBLAS 128x4 tiling)",
        where, block_scales.describe(), want, R, B);
  if (!std::isfinite(scale_2)) fail("{}: nvfp4 per-tensor scale (weight_scale_2) is {}, not finite", where, scale_2);
  const auto* q = packed.data<uint8_t>();
  const auto* bs = static_cast<const uint8_t*>(block_scales.raw());
  Tensor w(DType::f32, {R, C});
  float* o = w.data<float>();
  parallel_for(R, [&](int64_t r0, int64_t r1) {  // rows are independent
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t b = 0; b < B; ++b) {
        const float s = scale_2 * fp8e4m3_to_f32(bs[nvfp4_scale_index(r, b, B)]);
        for (int64_t k = 0; k < kNvfp4Block / 2; ++k) {
          const uint8_t byte = q[r * (C / 2) + b * (kNvfp4Block / 2) + k];
          o[r * C + b * kNvfp4Block + 2 * k] = kE2M1[byte >> 4] * s;
          o[r * C + b * kNvfp4Block + 2 * k + 1] = kE2M1[byte & 0x0F] * s;
        }
      }
  });
  return w;
}

Tensor dequantize_mxfp8(const Tensor& q, const Tensor& exponents, const std::string& where) {
  if (q.ndim() != 2 || q.dtype() != DType::fp8_e4m3)
    fail("{}: mxfp8 weight is {}, expected F8_E4M3 [rows, cols]", where, q.describe());
  const int64_t R = q.dim(0), C = q.dim(1);
  if (C % kMxfp8Block != 0) fail("{}: mxfp8 weight has {} columns, not a multiple of the 32-column block", where, C);
  const int64_t B = C / kMxfp8Block, want = round_up(R, 128) * round_up(B, 4);
  if (dtype_size(exponents.dtype()) != 1 || exponents.numel() != want)
    fail(
        "{}: mxfp8 block scales are {}, expected F8_E8M0 bytes with {} = roundup({}, 128) x roundup({}, 4) "
        "elements (cuBLAS 128x4 tiling)",
        where, exponents.describe(), want, R, B);
  const auto* d = static_cast<const uint8_t*>(q.raw());
  const auto* e = static_cast<const uint8_t*>(exponents.raw());
  for (int64_t i = 0; i < R; ++i)
    for (int64_t b = 0; b < B; ++b)
      if (e[nvfp4_scale_index(i, b, B)] == 255)
        fail("{}: mxfp8 block scale of row {}, block {} is the e8m0 NaN (255)", where, i, b);
  Tensor w(DType::f32, {R, C});
  float* o = w.data<float>();
  parallel_for(R, [&](int64_t r0, int64_t r1) {  // rows are independent
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t b = 0; b < B; ++b) {
        const float s = std::ldexp(1.0f, static_cast<int>(e[nvfp4_scale_index(r, b, B)]) - 127);
        for (int64_t k = b * kMxfp8Block; k < (b + 1) * kMxfp8Block; ++k)
          o[r * C + k] = fp8e4m3_to_f32(d[r * C + k]) * s;
      }
  });
  return w;
}

Tensor dequantize_weight(const Tensor& q, const Tensor& scale, const QuantSpec& spec, const std::string& where) {
  if (spec.kind == QuantSpec::mxfp8) return dequantize_mxfp8(q, scale, where);
  if (q.ndim() != 2) fail("{}: quantized weight {} must be 2-D", where, q.describe());
  const int64_t rows = q.dim(0), cols = q.dim(1);
  Tensor w = q.to(DType::f32);
  float* p = w.data<float>();
  if (spec.kind == QuantSpec::fp8) {
    if (q.dtype() != DType::fp8_e4m3) fail("{}: fp8 weight stored as {}, expected F8_E4M3", where, q.describe());
    if (scale.numel() != 1)
      fail("{}: fp8 scale '{}' is {}, expected one value", where, spec.scale_key, scale.describe());
    const float s = static_cast<float>(scale.get(0));
    if (!std::isfinite(s)) fail("{}: fp8 scale '{}' is {}, not a finite number", where, spec.scale_key, s);
    parallel_for(
        w.numel(),
        [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) p[i] *= s;
        },
        1 << 16);
    return w;
  }
  if (q.dtype() != DType::i8) fail("{}: int8 weight stored as {}, expected I8", where, q.describe());
  const bool per_row = scale.numel() == rows && (scale.ndim() == 1 || (scale.ndim() == 2 && scale.dim(1) == 1));
  if (!per_row && scale.numel() != 1)
    fail("{}: int8 scale '{}' is {}, expected [{}, 1] or one value", where, spec.scale_key, scale.describe(), rows);
  for (int64_t i = 0; i < (per_row ? rows : 1); ++i) {  // checked first: the workers below cannot throw
    const float s = static_cast<float>(scale.get(i));
    if (!std::isfinite(s))
      fail("{}: int8 scale '{}' of row {} is {}, not a finite number", where, spec.scale_key, i, s);
  }
  parallel_for(rows, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float s = static_cast<float>(scale.get(per_row ? i : 0));
      for (int64_t j = 0; j < cols; ++j) p[i * cols + j] *= s;
    }
  });
  if (spec.convrot_group > 0) {
    if (cols % spec.convrot_group != 0 || (spec.convrot_group & (spec.convrot_group - 1)) != 0)
      fail("{}: convrot group {} does not divide the input width {} (or is not a power of two)", where,
           spec.convrot_group, cols);
    hadamard_columns_(w, spec.convrot_group);
  }
  return w;
}

namespace {

Tensor scalar_f32(float v) {
  return Tensor::from(std::vector<float>{v}, {});
}

Tensor json_bytes(const std::string& s) {
  Tensor t(DType::u8, {static_cast<int64_t>(s.size())});
  std::memcpy(t.raw(), s.data(), s.size());
  return t;
}

// max |p[i]| (NaNs ignored, as std::max does), over the worker threads: the maximum does not depend on the order.
float amax_of(const float* p, int64_t n) {
  float amax = 0;
  std::mutex mu;
  parallel_for(
      n,
      [&](int64_t b, int64_t e) {
        float m = 0;
        for (int64_t i = b; i < e; ++i) m = std::max(m, std::fabs(p[i]));
        std::lock_guard lock(mu);
        amax = std::max(amax, m);
      },
      1 << 16);
  return amax;
}

// Calls f(r, b, x, bmax) for block b of row r of a [rows, cols] matrix: x is the block's first of `Block` values,
// bmax their largest magnitude. Rows run in parallel (they are independent).
template <int64_t Block, typename F>
void for_each_block(const float* p, int64_t rows, int64_t cols, F f) {
  parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t b = 0; b < cols / Block; ++b) {
        const float* x = p + r * cols + b * Block;
        float bmax = 0;
        for (int64_t k = 0; k < Block; ++k) bmax = std::max(bmax, std::fabs(x[k]));
        f(r, b, x, bmax);
      }
  });
}

// The comfy_quant marker of each format (the JSON text is part of the file).
std::string comfy_json(QuantFormat q, int64_t cols) {
  switch (q) {
    case QuantFormat::fp8:
      return R"({"format": "float8_e4m3fn"})";
    case QuantFormat::mxfp8:
      return R"({"format": "mxfp8"})";
    case QuantFormat::nvfp4:
      return R"({"format": "nvfp4"})";
    case QuantFormat::int8_convrot:
      return fmt::format(R"({{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": {}}})",
                         convrot_group_for(cols));
    default:
      return R"({"format": "int8_tensorwise"})";
  }
}

std::string layer_of(const std::string& name) {
  return name.substr(0, name.size() - std::strlen(".weight"));
}

}  // namespace

std::vector<SafeTensorsEntry> quantized_entries(const std::string& name, const Shape& shape, QuantFormat q,
                                                bool input_scale) {
  H3_ASSERT(shape.size() == 2 && q != QuantFormat::none, "quantized_entries: {} {}", name, shape_str(shape));
  const std::string layer = layer_of(name);
  const int64_t rows = shape[0], cols = shape[1];
  auto marker = [&] {
    return SafeTensorsEntry{layer + ".comfy_quant", DType::u8, {static_cast<int64_t>(comfy_json(q, cols).size())}};
  };
  switch (q) {
    case QuantFormat::fp8: {
      std::vector<SafeTensorsEntry> e = {{name, DType::fp8_e4m3, shape}, {layer + ".weight_scale", DType::f32, {}}};
      if (input_scale) e.push_back({layer + ".input_scale", DType::f32, {}});
      e.push_back(marker());
      return e;
    }
    case QuantFormat::scaled_fp8:
      return {{name, DType::fp8_e4m3, shape}, {layer + ".scale_weight", DType::f32, {}}};
    case QuantFormat::mxfp8:
      return {{name, DType::fp8_e4m3, shape},
              {layer + ".weight_scale", DType::u8, {round_up(rows, 128), round_up(cols / kMxfp8Block, 4)}},
              marker()};
    case QuantFormat::nvfp4: {
      std::vector<SafeTensorsEntry> e = {
          {name, DType::u8, {rows, cols / 2}},
          {layer + ".weight_scale", DType::fp8_e4m3, {round_up(rows, 128), round_up(cols / kNvfp4Block, 4)}},
          {layer + ".weight_scale_2", DType::f32, {}}};
      if (input_scale) e.push_back({layer + ".input_scale", DType::f32, {}});
      e.push_back(marker());
      return e;
    }
    default:
      return {{name, DType::i8, shape}, {layer + ".weight_scale", DType::f32, {rows, 1}}, marker()};
  }
}

void append_fp8_weight(const std::string& name, Tensor data, float scale, QuantFormat q, bool input_scale,
                       std::vector<std::pair<std::string, Tensor>>& out) {
  H3_ASSERT(q == QuantFormat::fp8 || q == QuantFormat::scaled_fp8, "append_fp8_weight: format {}",
            quant_format_name(q));
  const std::string layer = layer_of(name);
  out.emplace_back(name, std::move(data));
  if (q == QuantFormat::fp8) {
    out.emplace_back(layer + ".weight_scale", scalar_f32(scale));
    if (input_scale) out.emplace_back(layer + ".input_scale", scalar_f32(1.0f));
    out.emplace_back(layer + ".comfy_quant", json_bytes(comfy_json(q, 0)));
  } else {
    out.emplace_back(layer + ".scale_weight", scalar_f32(scale));
  }
}

void quantize_weight(const std::string& name, const Tensor& w, QuantFormat q, bool input_scale,
                     std::vector<std::pair<std::string, Tensor>>& out) {
  const std::string layer = layer_of(name);
  const int64_t rows = w.dim(0), cols = w.dim(1);
  const float* p = w.data<float>();
  if (q == QuantFormat::fp8 || q == QuantFormat::scaled_fp8) {
    const float amax = amax_of(p, w.numel());
    const float s = amax > 0 ? amax / 448.0f : 1.0f;
    Tensor t(DType::fp8_e4m3, w.shape());
    auto* d = static_cast<uint8_t*>(t.raw());
    parallel_for(
        w.numel(),
        [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) d[i] = f32_to_fp8e4m3(p[i] / s);
        },
        1 << 16);
    append_fp8_weight(name, t, s, q, input_scale, out);
    return;
  }
  if (q == QuantFormat::mxfp8) {
    H3_CHECK(cols % kMxfp8Block == 0,
             "mxfp8: {} has {} columns; they must be a multiple of 32 (this writer does not pad)", name, cols);
    const int64_t B = cols / kMxfp8Block;
    Tensor t(DType::fp8_e4m3, w.shape()), scales(DType::u8, {round_up(rows, 128), round_up(B, 4)});
    std::memset(scales.raw(), 0, scales.nbytes());
    auto* d = static_cast<uint8_t*>(t.raw());
    auto* sc = scales.data<uint8_t>();
    for_each_block<kMxfp8Block>(p, rows, cols, [&](int64_t r, int64_t b, const float* x, float bmax) {
      const double need = std::max(static_cast<double>(bmax) / 448.0, std::ldexp(1.0, -127));
      const int e = bmax == 0 ? 0 : std::clamp(static_cast<int>(std::ceil(std::log2(need))) + 127, 0, 254);
      sc[nvfp4_scale_index(r, b, B)] = static_cast<uint8_t>(e);
      const float s = std::ldexp(1.0f, e - 127);
      for (int64_t k = 0; k < kMxfp8Block; ++k)
        d[r * cols + b * kMxfp8Block + k] = bmax == 0 ? uint8_t{0} : f32_to_fp8e4m3(x[k] / s);
    });
    out.emplace_back(name, t);
    out.emplace_back(layer + ".weight_scale", scales);
    out.emplace_back(layer + ".comfy_quant", json_bytes(comfy_json(q, cols)));
    return;
  }
  if (q == QuantFormat::nvfp4) {
    H3_CHECK(rows % 16 == 0 && cols % kNvfp4Block == 0,
             "nvfp4: {} is {}x{}; rows and columns must be multiples of 16 (this writer does not pad)", name, rows,
             cols);
    const float amax = amax_of(p, w.numel());
    const float s2 = amax / (448.0f * 6.0f);
    const int64_t B = cols / kNvfp4Block;
    Tensor packed(DType::u8, {rows, cols / 2}), scales(DType::fp8_e4m3, {round_up(rows, 128), round_up(B, 4)});
    std::memset(scales.raw(), 0, scales.nbytes());
    auto* d = packed.data<uint8_t>();
    auto* sc = static_cast<uint8_t*>(scales.raw());
    for_each_block<kNvfp4Block>(p, rows, cols, [&](int64_t r, int64_t b, const float* x, float bmax) {
      const uint8_t code = s2 > 0 ? f32_to_fp8e4m3(std::min(bmax / 6.0f / s2, 448.0f)) : uint8_t{0};
      sc[nvfp4_scale_index(r, b, B)] = code;
      const float total = s2 * fp8e4m3_to_f32(code);
      for (int64_t k = 0; k < kNvfp4Block; k += 2) {
        const uint8_t hi = total > 0 ? e2m1_code(x[k] / total) : uint8_t{0};
        const uint8_t lo = total > 0 ? e2m1_code(x[k + 1] / total) : uint8_t{0};
        d[r * (cols / 2) + (b * kNvfp4Block + k) / 2] = static_cast<uint8_t>(hi << 4 | lo);
      }
    });
    out.emplace_back(name, packed);
    out.emplace_back(layer + ".weight_scale", scales);
    out.emplace_back(layer + ".weight_scale_2", scalar_f32(s2 > 0 ? s2 : 1.0f));
    if (input_scale) out.emplace_back(layer + ".input_scale", scalar_f32(1.0f));
    out.emplace_back(layer + ".comfy_quant", json_bytes(comfy_json(q, cols)));
    return;
  }
  Tensor src = w.clone();
  const int g = q == QuantFormat::int8_convrot ? convrot_group_for(cols) : 0;
  if (g > 0) hadamard_columns_(src, g);  // H is its own inverse: (W H) H = W
  const float* r = src.data<float>();
  Tensor t(DType::i8, w.shape()), scale(DType::f32, {rows, 1});
  auto* d = t.data<int8_t>();
  parallel_for(rows, [&](int64_t i0, int64_t i1) {  // rows are independent
    for (int64_t i = i0; i < i1; ++i) {
      float amax = 0;
      for (int64_t j = 0; j < cols; ++j) amax = std::max(amax, std::fabs(r[i * cols + j]));
      const float s = amax > 0 ? amax / 127.0f : 1.0f;
      scale.data<float>()[i] = s;
      for (int64_t j = 0; j < cols; ++j)
        d[i * cols + j] = static_cast<int8_t>(std::clamp(std::nearbyint(r[i * cols + j] / s), -127.0f, 127.0f));
    }
  });
  out.emplace_back(name, t);
  out.emplace_back(layer + ".weight_scale", scale);
  out.emplace_back(layer + ".comfy_quant", json_bytes(comfy_json(q, cols)));
}

}  // namespace h3
