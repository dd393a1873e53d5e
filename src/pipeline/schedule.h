// The two rectified-flow schedules (video shift 12, audio shift 3) and the Euler update, reproduced to the
// bit.
//
// sigma grid:  base = linspace(1, 0, N) in f32 (N counts the terminal 0, so N-1 model calls)
//              sigma = s*base / (1 + (s-1)*base) in f32, consecutive duplicates collapsed
// timesteps:   t[i] = 1 - sigma[i] for every sigma but the last (t = 1 is clean)
// Euler step:  x0 = x + (1 - t)*v      (velocity points towards the data)
//              r  = sigma[i+1] / sigma[i]
//              x' = r*x + (1 - r)*x0
// Every operation is one f32 rounding, in this order: the reference takes the sigma of x0 from the timestep
// and the ratio from the grid, and the two differ in the last bit below sigma = 0.5.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace h3 {

inline constexpr double kVideoShift = 12.0;
inline constexpr double kAudioShift = 3.0;

struct FlowSchedule {
  double shift = 1.0;
  std::vector<float> sigmas;     // decreasing, ends at 0
  std::vector<float> timesteps;  // one per model call: 1 - sigmas[i]
  int64_t num_steps() const { return static_cast<int64_t>(timesteps.size()); }
};

// torch.linspace(start, end, n, dtype=float32) as the released CPU build computes it.
std::vector<float> linspace_f32(float start, float end, int64_t n);

// The shifted schedule on an N-point grid (N >= 2, shift > 0).
FlowSchedule make_flow_schedule(int64_t num_points, double shift);

// One Euler step in place on x (x.size() == v.size()).
void euler_step(std::span<float> x, std::span<const float> v, float t, float sigma, float sigma_next);
// The same with t, sigma and sigma_next taken from step `step` of a schedule.
void euler_step(const FlowSchedule& s, int64_t step, std::span<float> x, std::span<const float> v);
// The same step out of place, bitwise euler_step's values: out = the stepped x, written in one pass over x and v,
// which are only read (the loop steps into fresh rows without copying the old ones first). out may be x itself,
// but must not partly overlap x or v.
void euler_step_into(std::span<float> out, std::span<const float> x, std::span<const float> v, float t, float sigma,
                     float sigma_next);
void euler_step_into(const FlowSchedule& s, int64_t step, std::span<float> out, std::span<const float> x,
                     std::span<const float> v);

}  // namespace h3
