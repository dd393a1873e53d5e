#include "pipeline/schedule.h"

#include <cmath>

#include "core/error.h"

namespace h3 {

std::vector<float> linspace_f32(float start, float end, int64_t n) {
  H3_CHECK(n >= 1, "linspace needs at least one point, got {}", n);
  std::vector<float> out(static_cast<size_t>(n));
  if (n == 1) {
    out[0] = start;
    return out;
  }
  // PyTorch fills the first half forwards from `start` and the second half backwards from `end`, with a step
  // rounded to f32. Its released x86 wheels run this kernel from the AVX2/AVX-512 build, where the compiler
  // fuses `start + step*i` into one multiply-add; std::fma reproduces that single rounding. (The unfused form
  // differs from the reference in the last bit for N = 50.)
  const float step = (end - start) / static_cast<float>(n - 1);
  const int64_t halfway = n / 2;
  for (int64_t i = 0; i < n; ++i) {
    if (i < halfway)
      out[i] = std::fma(step, static_cast<float>(i), start);
    else
      out[i] = std::fma(-step, static_cast<float>(n - 1 - i), end);
  }
  return out;
}

FlowSchedule make_flow_schedule(int64_t num_points, double shift) {
  H3_CHECK(num_points >= 2, "a flow schedule needs at least 2 grid points (the terminal 0 included), got {}",
           num_points);
  H3_CHECK(shift > 0 && std::isfinite(shift), "flow shift must be positive and finite, got {}", shift);
  FlowSchedule s;
  s.shift = shift;
  // The reference multiplies an f32 tensor by Python scalars, which PyTorch rounds to f32 first.
  const float s_f = static_cast<float>(shift);
  const float s_minus_1 = static_cast<float>(shift - 1.0);
  for (float b : linspace_f32(1.0f, 0.0f, num_points)) {
    float num = s_f * b;
    float den = 1.0f + s_minus_1 * b;
    float sigma = num / den;
    // The shift squeezes the grid near 1, where neighbours can collide in f32; keep one of each run.
    if (s.sigmas.empty() || s.sigmas.back() != sigma) s.sigmas.push_back(sigma);
  }
  s.timesteps.reserve(s.sigmas.size() - 1);
  for (size_t i = 0; i + 1 < s.sigmas.size(); ++i) s.timesteps.push_back(1.0f - s.sigmas[i]);
  return s;
}

void euler_step(std::span<float> x, std::span<const float> v, float t, float sigma, float sigma_next) {
  H3_CHECK(x.size() == v.size(), "euler_step: sample has {} values but velocity has {}", x.size(), v.size());
  H3_CHECK(sigma > 0.0f, "euler_step: sigma must be positive, got {}", sigma);
  // Each line is one PyTorch op with its own f32 rounding. Nothing may fuse them: the x86-64 baseline target has
  // no FMA, and a build that enables one (-march=...) must compile this file with -ffp-contract=off.
  const float sigma_t = 1.0f - t;
  const float ratio = sigma_next / sigma;
  const float keep_x0 = 1.0f - ratio;
  for (size_t i = 0; i < x.size(); ++i) {
    float scaled_v = sigma_t * v[i];
    float x0 = x[i] + scaled_v;
    float a = ratio * x[i];
    float b = keep_x0 * x0;
    x[i] = a + b;
  }
}

void euler_step(const FlowSchedule& s, int64_t step, std::span<float> x, std::span<const float> v) {
  H3_CHECK(step >= 0 && step < s.num_steps(), "euler_step: step {} is outside the schedule's {} steps", step,
           s.num_steps());
  euler_step(x, v, s.timesteps[step], s.sigmas[step], s.sigmas[step + 1]);
}

// euler_step's loop with the result stored apart: the same operations in the same order (keep the two in step; the
// tests compare them bitwise).
void euler_step_into(std::span<float> out, std::span<const float> x, std::span<const float> v, float t, float sigma,
                     float sigma_next) {
  H3_CHECK(x.size() == v.size() && out.size() == x.size(),
           "euler_step_into: sample has {} values, velocity {} and output {}", x.size(), v.size(), out.size());
  H3_CHECK(sigma > 0.0f, "euler_step_into: sigma must be positive, got {}", sigma);
  const float sigma_t = 1.0f - t;
  const float ratio = sigma_next / sigma;
  const float keep_x0 = 1.0f - ratio;
  for (size_t i = 0; i < x.size(); ++i) {
    const float xi = x[i];
    float scaled_v = sigma_t * v[i];
    float x0 = xi + scaled_v;
    float a = ratio * xi;
    float b = keep_x0 * x0;
    out[i] = a + b;
  }
}

void euler_step_into(const FlowSchedule& s, int64_t step, std::span<float> out, std::span<const float> x,
                     std::span<const float> v) {
  H3_CHECK(step >= 0 && step < s.num_steps(), "euler_step_into: step {} is outside the schedule's {} steps", step,
           s.num_steps());
  euler_step_into(out, x, v, s.timesteps[step], s.sigmas[step], s.sigmas[step + 1]);
}

}  // namespace h3
