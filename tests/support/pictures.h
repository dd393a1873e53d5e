// Synthetic clips for the tests that write, read and condition on pictures: [3, frames, h, w] f32 tensors whose values
// follow a formula, so what an encoder or reader gives back has exact expectations.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/tensor.h"

namespace h3::test {

// A [3, frames, h, w] f32 clip whose element (c, t, y, x) is value(c, t, y, x).
template <typename Fn>
Tensor clip_of(int64_t frames, int64_t h, int64_t w, Fn&& value) {
  Tensor t(DType::f32, {3, frames, h, w});
  float* p = t.data<float>();
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t f = 0; f < frames; ++f)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x) p[((c * frames + f) * h + y) * w + x] = value(c, f, y, x);
  return t;
}

// A picture whose channels vary differently along x and y (the third over time, from `shift`), so scaling and
// cropping mistakes show.
inline Tensor gradient_picture(int64_t frames, int64_t h, int64_t w, float shift = 0.f) {
  return clip_of(frames, h, w, [&](int64_t c, int64_t f, int64_t y, int64_t x) {
    return static_cast<float>(c == 0   ? static_cast<double>(x) / static_cast<double>(w - 1)
                              : c == 1 ? static_cast<double>(y) / static_cast<double>(h - 1)
                                       : 0.5 + 0.4 * std::sin(0.3 * static_cast<double>(f) + shift));
  });
}

}  // namespace h3::test
