#include "verify/layouts.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/json_limits.h"
#include "model/dit/layout.h"
#include "pipeline/geometry.h"
#include "pipeline/schedule.h"

namespace h3 {
namespace {

// Key names and metadata notes are read by hand, never by a regular expression: both are as long as the file makes
// them, and a backtracking expression recursed off the stack on a long one.

// The end of the run of digits at `at` (at itself when there is none).
size_t digits_end(std::string_view s, size_t at) {
  while (at < s.size() && s[at] >= '0' && s[at] <= '9') ++at;
  return at;
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// The shift a note names for the Euler step: "schedule.step ... shift S" with no ';' between, S digits and dots.
std::string note_shift(std::string_view note) {
  for (size_t at = note.find("schedule.step"); at != std::string_view::npos;) {
    const size_t stop = std::min(note.find(';', at), note.size());
    for (size_t w = note.find("shift", at + 13); w != std::string_view::npos && w < stop;
         w = note.find("shift", w + 1)) {
      size_t v = w + 5;
      while (v < note.size() && is_space(note[v])) ++v;
      size_t e = v;
      while (e < note.size() && ((note[e] >= '0' && note[e] <= '9') || note[e] == '.')) ++e;
      if (e > v) return std::string(note.substr(v, e - v));
    }
    // A later "schedule.step" before the same ';' sees a part of this stretch only: none can match there.
    at = stop < note.size() ? note.find("schedule.step", stop) : std::string_view::npos;
  }
  return "";
}

// The grid points a note names: "N grid points" (white space allowed before "grid"), N at most 9 digits.
std::string note_grid_points(std::string_view note) {
  for (size_t at = 0; at < note.size();) {
    if (note[at] < '0' || note[at] > '9') {
      ++at;
      continue;
    }
    const size_t end = digits_end(note, at);
    size_t g = end;
    while (g < note.size() && is_space(note[g])) ++g;
    if (note.compare(g, 11, "grid points") == 0 && end - at <= 9) return std::string(note.substr(at, end - at));
    at = end;
  }
  return "";
}

using nlohmann::json;

// The row-timestep plans in the golden files are steps of the released 50-point schedules (golden README:
// "steps 0, 1, 25, 48 of a 50-point schedule"); the metadata does not repeat this, so it is the default
// unless a geometry carries `num_inference_steps`.
constexpr int64_t kPlanGridPoints = 50;

class Report {
 public:
  explicit Report(std::FILE* out) : out_(out) {}
  void item(const std::string& name, bool ok, const std::string& detail) {
    ++items_;
    if (!ok) ++failed_;
    fmt::print(out_, "{:<44} {} {}\n", name, ok ? "ok  " : "FAIL", detail);
  }
  int finish() {
    if (items_ == 0) {
      fmt::print(out_, "FAIL: nothing to compare\n");
      return 1;
    }
    if (failed_ == 0) {
      fmt::print(out_, "PASS: {} items match\n", items_);
      return 0;
    }
    fmt::print(out_, "FAIL: {} of {} items differ\n", failed_, items_);
    return 1;
  }

 private:
  std::FILE* out_;
  int items_ = 0, failed_ = 0;
};

// Looks a tensor up and checks its dtype and shape; reports and returns nullopt when it does not fit.
std::optional<Tensor> fetch(const SafeTensors& f, Report& r, const std::string& key, DType dt, const Shape& shape) {
  if (!f.has(key)) {
    r.item(key, false, "missing from the file");
    return std::nullopt;
  }
  Tensor t = f.get(key);
  if (t.dtype() != dt || t.shape() != shape) {
    r.item(key, false, fmt::format("is {}, expected {}{}", t.describe(), dtype_name(dt), shape_str(shape)));
    return std::nullopt;
  }
  return t;
}

template <typename T>
void compare_exact(const SafeTensors& f, Report& r, const std::string& key, const std::vector<T>& got,
                   const Shape& shape, const char* how) {
  auto want = fetch(f, r, key, dtype_of<T>::value, shape);
  if (!want) return;
  const T* w = want->template data<T>();
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&w[i], &got[i], sizeof(T)) != 0) {
      if (first < 0) first = static_cast<int64_t>(i);
      ++bad;
    }
  }
  if (bad == 0) {
    r.item(key, true, fmt::format("{} values {}", got.size(), how));
  } else {
    r.item(key, false,
           fmt::format("{} of {} differ; first at flat index {}: got {}, want {}", bad, got.size(), first, got[first],
                       w[first]));
  }
}

int64_t ulp_distance(float a, float b) {
  auto key = [](float x) {
    auto u = static_cast<int64_t>(std::bit_cast<int32_t>(x));
    return u < 0 ? std::numeric_limits<int32_t>::min() - u : u;  // monotone integer order of floats
  };
  int64_t d = key(a) - key(b);
  return d < 0 ? -d : d;
}

// ---- geometry descriptions
// ----------------------------------------------------------------------------------

struct CaseSpec {
  std::vector<int64_t> text_tags;
  TargetGrid target;
  bool ref2va = false;
  std::vector<KeyframeAnchor> keyframes;
  std::vector<Reference> references;
  int64_t plan_grid_points = kPlanGridPoints;
};

int64_t get_int(const json& j, const char* key, const std::string& where) {
  H3_CHECK(j.contains(key) && j[key].is_number_integer(), "{}: geometry lacks integer '{}'", where, key);
  return j[key].get<int64_t>();
}

// Vision rows are listed either as single row indices or as [begin, end) pairs.
std::vector<std::pair<int64_t, int64_t>> vision_ranges(const json& j, const std::string& where) {
  std::vector<std::pair<int64_t, int64_t>> out;
  if (!j.contains("vision_rows")) return out;
  for (const json& v : j["vision_rows"]) {
    if (v.is_number_integer()) {
      out.emplace_back(v.get<int64_t>(), v.get<int64_t>() + 1);
    } else {
      H3_CHECK(v.is_array() && v.size() == 2, "{}: vision_rows entry {} is neither a row nor a [begin, end) pair",
               where, v.dump());
      out.emplace_back(v[0].get<int64_t>(), v[1].get<int64_t>());
    }
  }
  return out;
}

CaseSpec parse_case(const std::string& name, const json& j, Report& r) {
  CaseSpec c;
  const int64_t L = j.contains("num_text") ? get_int(j, "num_text", name) : get_int(j, "L", name);
  c.text_tags = text_tags_with_vision(L, vision_ranges(j, name));

  // The target length is rebuilt from the requested frame count by our geometry rules; the metadata's own
  // derived values (aligned frames, T, A) are then compared, which checks the rules themselves.
  const int64_t requested = j.contains("num_frames") ? get_int(j, "num_frames", name) : get_int(j, "frames", name);
  const int64_t frames = align_num_frames(requested);
  c.target.latent_frames = video_latent_frames(frames);
  c.target.audio_latents = audio_latents_per_channel(frames);
  c.target.latent_h = get_int(j, "latent_h", name);
  c.target.latent_w = get_int(j, "latent_w", name);
  for (auto [key, ours] : {std::pair<const char*, int64_t>{"frames", frames},
                           {"T", c.target.latent_frames},
                           {"A", c.target.audio_latents}}) {
    if (!j.contains(key)) continue;
    int64_t theirs = get_int(j, key, name);
    r.item(fmt::format("{}.geometry.{}", name, key), theirs == ours,
           fmt::format("ours {} (from {} requested frames), metadata {}", ours, requested, theirs));
  }
  if (j.contains("num_inference_steps")) c.plan_grid_points = get_int(j, "num_inference_steps", name);

  if (j.contains("references")) {
    c.ref2va = true;
    for (const json& ref : j["references"]) {
      Reference x;
      const std::string kind = ref.at("kind").get<std::string>();
      if (kind == "image")
        x.kind = Reference::Kind::image;
      else if (kind == "audio")
        x.kind = Reference::Kind::audio;
      else if (kind == "video")
        x.kind = Reference::Kind::video;
      else
        fail("{}: reference kind '{}' is not one of image, audio, video", name, kind);
      if (ref.contains("latent_shape") && ref["latent_shape"].is_array()) {
        const json& s = ref["latent_shape"];
        H3_CHECK(s.size() == 3, "{}: reference latent_shape {} is not [frames, h, w]", name, s.dump());
        x.latent_frames = s[0].get<int64_t>();
        x.latent_h = s[1].get<int64_t>();
        x.latent_w = s[2].get<int64_t>();
      }
      x.audio_latents = ref.value("audio_latents_per_channel", int64_t{0});
      c.references.push_back(x);
    }
  } else if (j.contains("keyframes")) {
    for (const json& k : j["keyframes"]) {
      const std::string a = k.get<std::string>();
      if (a == "first")
        c.keyframes.push_back(KeyframeAnchor::first);
      else if (a == "last")
        c.keyframes.push_back(KeyframeAnchor::last);
      else
        fail("{}: keyframe anchor '{}' is not 'first' or 'last'", name, a);
    }
  }
  return c;
}

void check_count(Report& r, const std::string& name, const json& j, std::initializer_list<const char*> keys,
                 int64_t ours) {
  for (const char* key : keys) {
    if (!j.contains(key)) continue;
    int64_t theirs = j[key].get<int64_t>();
    r.item(fmt::format("{}.geometry.{}", name, key), theirs == ours, fmt::format("ours {}, metadata {}", ours, theirs));
  }
}

void verify_case(const SafeTensors& f, Report& r, const std::string& name, const json& j) {
  CaseSpec c = parse_case(name, j, r);
  PackedLayout lay = c.ref2va ? build_ref2va_layout(c.text_tags, c.target, c.references)
                              : build_fl2va_layout(c.text_tags, c.target, c.keyframes);
  const int64_t S = lay.seq_len;
  check_count(r, name, j, {"S"}, S);
  check_count(r, name, j, {"ncv", "num_condition_video_rows"}, lay.num_condition_video_rows);
  check_count(r, name, j, {"nca", "num_condition_audio_rows"}, lay.num_condition_audio_rows);

  compare_exact(f, r, name + ".position_ids", lay.position_ids, {S, 3}, "bitwise (f64)");
  compare_exact(f, r, name + ".token_tags", lay.token_tags, {S}, "exact");
  compare_exact(f, r, name + ".video_indices", lay.video_indices, {static_cast<int64_t>(lay.video_indices.size())},
                "exact");
  compare_exact(f, r, name + ".audio_indices", lay.audio_indices, {static_cast<int64_t>(lay.audio_indices.size())},
                "exact");
  compare_exact(f, r, name + ".text_indices", lay.text_indices, {static_cast<int64_t>(lay.text_indices.size())},
                "exact");

  // Row-timestep plans for whichever steps the file holds.
  const FlowSchedule video = make_flow_schedule(c.plan_grid_points, kVideoShift);
  const FlowSchedule audio = make_flow_schedule(c.plan_grid_points, kAudioShift);
  // NAME.stepK.timestep
  std::set<int64_t> steps;
  const std::string head = name + ".step";
  for (const std::string& key : f.keys()) {
    if (!key.starts_with(head)) continue;
    const size_t end = digits_end(key, head.size());
    if (end > head.size() && end - head.size() <= 9 && key.compare(end, std::string::npos, ".timestep") == 0)
      steps.insert(std::stoll(key.substr(head.size(), end - head.size())));
  }
  for (int64_t k : steps) {
    const std::string base = fmt::format("{}.step{}", name, k);
    if (k >= video.num_steps() || k >= audio.num_steps()) {
      r.item(base, false, fmt::format("step {} is beyond the {}-point schedules", k, c.plan_grid_points));
      continue;
    }
    RowTimesteps plan = plan_row_timesteps(lay, video.timesteps[k], audio.timesteps[k]);
    compare_exact(f, r, base + ".timestep", plan.timestep, {static_cast<int64_t>(plan.timestep.size())},
                  "bitwise (f32)");
    compare_exact(f, r, base + ".timestep_indices", plan.timestep_indices, {S}, "exact");
  }
}

// ---- schedules and Euler steps
// ------------------------------------------------------------------------------

void verify_schedules(const SafeTensors& f, Report& r) {
  // schedule.shiftS.nN.sigmas / .timesteps, S a decimal number ("12" or "12.5"), N an integer
  for (const std::string& key : f.keys()) {
    const std::string_view k = key;
    if (!k.starts_with("schedule.shift")) continue;
    size_t at = 14, end = digits_end(k, at);
    if (end == at) continue;
    if (end < k.size() && k[end] == '.' && digits_end(k, end + 1) > end + 1) end = digits_end(k, end + 1);
    const std::string shift(k.substr(at, end - at));
    if (k.compare(end, 2, ".n") != 0) continue;
    at = end + 2;
    end = digits_end(k, at);
    if (end == at || end - at > 9) continue;
    const std::string points(k.substr(at, end - at));
    const std::string_view what = k.substr(end);
    if (what != ".sigmas" && what != ".timesteps") continue;
    FlowSchedule s = make_flow_schedule(std::stoll(points), std::stod(shift));
    const std::vector<float>& got = what == ".sigmas" ? s.sigmas : s.timesteps;
    compare_exact(f, r, key, got, {static_cast<int64_t>(got.size())}, "bitwise (f32)");
  }
}

// The Euler cases are `schedule.step.x`, `.v` and `.x_after_K`: K chained steps from x with one fixed v, on
// the schedule the metadata note names ("shift S, N grid points").
void verify_euler(const SafeTensors& f, Report& r) {
  if (!f.has("schedule.step.x")) return;
  const std::string note = f.meta("note");
  const std::string shift = note_shift(note), points = note_grid_points(note);
  if (shift.empty() || points.empty()) {
    r.item("schedule.step", false, "the metadata note does not name the step's shift and grid points");
    return;
  }
  FlowSchedule s = make_flow_schedule(std::stoll(points), std::stod(shift));
  Tensor x0 = f.get("schedule.step.x");
  auto v = fetch(f, r, "schedule.step.v", DType::f32, x0.shape());
  if (!v || x0.dtype() != DType::f32) {
    if (v) r.item("schedule.step.x", false, fmt::format("is {}, expected f32", x0.describe()));
    return;
  }
  std::vector<float> x(x0.span<float>().begin(), x0.span<float>().end());
  for (int64_t k = 0; f.has(fmt::format("schedule.step.x_after_{}", k)); ++k) {
    const std::string key = fmt::format("schedule.step.x_after_{}", k);
    if (k >= s.num_steps()) {
      r.item(key, false, fmt::format("step {} is beyond the schedule's {} steps", k, s.num_steps()));
      break;
    }
    euler_step(s, k, x, v->span<float>());
    auto want = fetch(f, r, key, DType::f32, x0.shape());
    if (!want) break;
    int64_t worst = 0;
    for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, ulp_distance(x[i], want->data<float>()[i]));
    r.item(key, worst <= 1, fmt::format("{} values, max {} ulp (allowed 1)", x.size(), worst));
  }
}

}  // namespace

bool looks_like_layout_golden(const SafeTensors& file) {
  if (!file.meta("geometries").empty()) return true;
  for (const std::string& key : file.keys())
    if (key.rfind("schedule.shift", 0) == 0) return true;
  return false;
}

int verify_layouts(const SafeTensors& file, std::FILE* out) {
  Report r(out);
  fmt::print(out, "verifying layouts in {}\n", file.path());
  std::set<std::string> covered;
  const std::string geometries = file.meta("geometries");
  if (!geometries.empty()) {
    json all;
    try {
      all = parse_json_bounded(geometries, "geometries", kJsonMaxDepth, false);
    } catch (const std::exception& e) {
      r.item("__metadata__.geometries", false, fmt::format("is not valid JSON: {}", e.what()));
      return r.finish();
    }
    for (const auto& [name, j] : all.items()) {
      covered.insert(name);
      try {
        verify_case(file, r, name, j);
      } catch (const std::exception& e) {
        r.item(name, false, fmt::format("could not be rebuilt: {}", e.what()));
      }
    }
  }
  // A layout in the file without a geometry in the metadata would otherwise go unchecked.
  const std::string suffix = ".position_ids";
  for (const std::string& key : file.keys()) {
    if (key.size() <= suffix.size() || key.compare(key.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    std::string name = key.substr(0, key.size() - suffix.size());
    if (!covered.count(name)) r.item(name, false, "has tensors but no geometry in __metadata__.geometries");
  }
  try {
    verify_schedules(file, r);
    verify_euler(file, r);
  } catch (const std::exception& e) {
    r.item("schedule", false, fmt::format("could not be rebuilt: {}", e.what()));
  }
  return r.finish();
}

}  // namespace h3
