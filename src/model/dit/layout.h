// The packed sequence the DiT runs over: every modality in one list of rows, each with a (t, h, w) rotary
// position, a modality tag and, per denoising step, a timestep. Patch (1, 2, 2): one row per 2x2 latent
// pixels of one frame.
//
// t2va / fl2va (K keyframes, F = (Hl/2)(Wl/2) rows per latent frame, A audio latents per channel, T frames):
//   rows [0, L)                      text row i                 pos (i, 0, 0)
//   rows [L, L+K*F)                  keyframe k, cell (y, x)    row L + k*F + y*(Wl/2) + x
//                                                               pos (anchor_k, gh[y], gw[x])
//   rows [L+K*F, L+K*F+2A)           audio channel c, latent a  row L + K*F + c*A + a
//                                                               pos (L + a, 0, c == 0 ? gw[0] : gw[last])
//   rows [L+K*F+2A, S)               frame f, cell (y, x)       row L + K*F + 2A + f*F + y*(Wl/2) + x
//                                                               pos (L + clock(f), gh[y], gw[x])
//   S = L + K*F + 2A + T*F
//   anchor = L for "first", L + pairwise_sum(span(0..T-1)) - 5/3 for "last"
//
// ref2va: [text | one block per reference, in request order | target audio | target video]. A clock c starts
// at L:
//   image ref (1 frame, own grid):   F_r rows at (c, gh_r[y], gw_r[x]);                          c += 1
//   audio ref (A_r latents):         2A_r rows like target audio, origin c, target width grid;   c += A_r
//   video ref (T_r frames, own grid, optional soundtrack of A_r latents): the soundtrack's 2A_r rows first
//                                    (origin c, the video's own width grid), then T_r*F_r rows at
//                                    (c + clock(f), gh_r[y], gw_r[x]);  c += max(A_r,
//                                    sequential_sum(span(0..T_r-1)))
//   then target audio and target video as above with origin c instead of L.
//
// Spatial axis of a d-cell latent side (d/2 rows), sa = sqrt(Hl*Wl):  ratio = d/sa, left = (1 - ratio)/2,
//   step = ((left + ratio) - left)/(d/2), g[k] = (k*step + left)*32       (numpy linspace, endpoint excluded)
// Temporal clock: span(k) = (5/3)*(1,4,4,4,4)[k mod 5]; clock(0) = 0, clock(f) = clock(f-1) + span(f-1).
// All position arithmetic is f64 in exactly the reference's operation order: positions are compared bitwise
// (so model/dit/layout.cpp, like schedule.cpp, must not be built with FP contraction into FMA).
//
// Tags: text 1; vision-block rows inside the text 0; every video row 0; every audio row 2.
// video_indices = condition/reference video rows, then target video rows; audio_indices = reference audio
// rows, then target audio rows.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace h3 {

inline constexpr int64_t kTagVideo = 0;
inline constexpr int64_t kTagText = 1;
inline constexpr int64_t kTagAudio = 2;
inline constexpr int64_t kPatch = 2;  // spatial patch; the temporal patch is 1
inline constexpr int64_t kAudioChannels = 2;
// Condition video rows run at max(t_video, 0.999): keyframes and reference frames are noised to that level
// once.
inline constexpr double kConditionNoiseAug = 0.999;

// What a row is, for the timestep plan. Text and vision-in-text rows both follow the video timestep.
enum class RowKind : uint8_t { text, text_vision, cond_video, ref_audio, target_audio, target_video };

enum class KeyframeAnchor : uint8_t { first, last };

struct TargetGrid {
  int64_t latent_frames = 0;  // T
  int64_t latent_h = 0;       // Hl (canvas / 16), even
  int64_t latent_w = 0;       // Wl, even
  int64_t audio_latents = 0;  // A per channel
};

struct Reference {
  enum class Kind : uint8_t { image, audio, video };
  Kind kind = Kind::image;
  int64_t latent_frames = 0;  // image: 1; video: T_r; audio: unused
  int64_t latent_h = 0, latent_w = 0;
  int64_t audio_latents = 0;  // audio: A_r; video: soundtrack latents per channel (0 = silent); image: 0
};

struct PackedLayout {
  int64_t seq_len = 0;
  int64_t num_text = 0;
  std::vector<double> position_ids;  // [S, 3] row-major (t, h, w)
  std::vector<int64_t> token_tags;   // [S]
  std::vector<int64_t> video_indices;
  std::vector<int64_t> audio_indices;
  std::vector<int64_t> text_indices;
  int64_t num_condition_video_rows = 0;  // leading entries of video_indices that are conditions/references
  int64_t num_condition_audio_rows = 0;  // leading entries of audio_indices that are references
  std::vector<RowKind> row_kind;         // [S]
  TargetGrid target;

  Tensor position_tensor() const;  // f64 [S, 3]
};

// Text tags for L rows where [begin, end) ranges are rows of vision blocks (tag 0); all others are text (tag
// 1).
std::vector<int64_t> text_tags_with_vision(int64_t num_text,
                                           const std::vector<std::pair<int64_t, int64_t>>& vision_ranges);

// [text | keyframe rows | target audio | target video]; no keyframes gives the t2va layout.
PackedLayout build_fl2va_layout(const std::vector<int64_t>& text_tags, const TargetGrid& target,
                                const std::vector<KeyframeAnchor>& keyframes);
// [text | reference blocks | target audio | target video].
PackedLayout build_ref2va_layout(const std::vector<int64_t>& text_tags, const TargetGrid& target,
                                 const std::vector<Reference>& references);

// Timesteps of one denoising step: `timestep` holds the distinct row timesteps sorted ascending (at most 4),
// `timestep_indices[row]` the index of that row's value in it.
struct RowTimesteps {
  std::vector<float> timestep;
  std::vector<int64_t> timestep_indices;
};
// Text, vision-in-text and target video rows: t_video; target audio: t_audio; condition video rows:
// max(t_video, 0.999); reference audio rows: 1 (clean).
RowTimesteps plan_row_timesteps(const PackedLayout& layout, float t_video, float t_audio);

// Video latents [C, T, H, W] (or [1, C, T, H, W]) <-> rows [T*(H/2)*(W/2), C*4]:
//   row = f*(H/2)*(W/2) + y*(W/2) + x, feature = c*4 + py*2 + px  <->  latent [c, f, 2y+py, 2x+px]
Tensor patchify_video(const Tensor& latents);
Tensor unpatchify_video(const Tensor& rows, int64_t channels, int64_t frames, int64_t height, int64_t width);
// Audio latents [2, C, A] <-> rows [2A, C]:  row = ch*A + a, feature c  <->  latent [ch, c, a]
Tensor pack_audio(const Tensor& latents);
Tensor unpack_audio(const Tensor& rows, int64_t audio_latents);

}  // namespace h3
