// The OpenAI SDK's fields on H3's request (serve/openai_compat.h).
#include "serve/openai_compat.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "pipeline/geometry.h"
#include "serve/supervisor.h"

namespace h3::serve {

namespace {

ApiError bad(const std::string& message) {
  return {400, "invalid_request", message};
}

}  // namespace

const std::vector<std::string>& openai_sizes() {
  static const std::vector<std::string> sizes = {"720x1280", "1280x720", "1024x1792", "1792x1024"};
  return sizes;
}

std::pair<int64_t, int64_t> nearest_canvas(int64_t width, int64_t height, int64_t multiple, int64_t max_pixels) {
  auto round_to = [multiple](double v) {
    return std::max<int64_t>(multiple, static_cast<int64_t>(std::floor(v / multiple + 0.5)) * multiple);
  };
  int64_t w = round_to(static_cast<double>(width)), h = round_to(static_cast<double>(height));
  if (w * h > max_pixels) {
    const double s = std::sqrt(static_cast<double>(max_pixels) / (static_cast<double>(width) * height));
    w = std::max<int64_t>(multiple, static_cast<int64_t>(width * s) / multiple * multiple);
    h = std::max<int64_t>(multiple, static_cast<int64_t>(height * s) / multiple * multiple);
  }
  return {w, h};
}

void input_reference_to_keyframe(nlohmann::json& body) {
  if (!body.is_object() || !body.contains("input_reference")) return;
  if (body.contains("first_image") || body.contains("references"))
    throw bad(
        "'input_reference' is the first keyframe: give it or 'first_image', and not with 'references' (fl2va "
        "and ref2va do not mix)");
  nlohmann::json ref = body["input_reference"];
  body.erase("input_reference");
  if (ref.is_string()) ref = {{"image_url", ref}};
  if (!ref.is_object())
    throw bad("'input_reference' must be an uploaded image file (multipart/form-data) or {\"image_url\": DATA_URL}");
  if (ref.contains("file_id"))
    throw bad("'input_reference.file_id': this server has no Files API; upload the image itself (multipart/form-data)");
  if (ref.contains("data")) {  // an uploaded file (serve/multipart.h)
    body["first_image"] = ref;
    return;
  }
  if (!ref.contains("image_url") || !ref["image_url"].is_string())
    throw bad("'input_reference' must be an uploaded image file or {\"image_url\": \"data:image/png;base64,...\"}");
  const std::string url = ref["image_url"].get<std::string>();
  // data:image/png;base64,AAAA
  const size_t comma = url.find(',');
  if (!url.starts_with("data:") || comma == std::string::npos)
    throw bad(
        "'input_reference.image_url' must be a data: URL (\"data:image/png;base64,...\"); the server never fetches "
        "URLs: upload the image instead");
  const std::string head = url.substr(5, comma - 5);
  if (!head.ends_with(";base64")) throw bad("'input_reference.image_url' must be a base64 data: URL (\";base64,\")");
  const std::string type = head.substr(0, head.find(';'));
  std::string ext = type.starts_with("image/") ? type.substr(6) : "bin";
  if (ext.empty() || ext.size() > 5 || ext.find_first_not_of("abcdefghijklmnopqrstuvwxyz") != std::string::npos)
    ext = "bin";
  body["first_image"] = {{"data", url.substr(comma + 1)}, {"filename", "input_reference." + ext}};
}

std::vector<std::string> map_openai_geometry(const nlohmann::json& body, nlohmann::json& gen,
                                             const nlohmann::json& limits) {
  std::vector<std::string> notes;
  const int64_t multiple = limits.value("canvas_multiple", int64_t{32});
  const int64_t max_pixels = limits.value("max_canvas_pixels", int64_t{768 * 1344});
  const int64_t min_frames = limits.value("min_frames", int64_t{124});
  if (body.contains("size") && body["size"].is_string()) {
    const std::string size = body["size"].get<std::string>();
    const auto& sdk = openai_sizes();
    if (std::find(sdk.begin(), sdk.end(), size) != sdk.end() && gen.contains("width") && gen.contains("height")) {
      const auto [w, h] =
          nearest_canvas(gen["width"].get<int64_t>(), gen["height"].get<int64_t>(), multiple, max_pixels);
      notes.push_back(
          fmt::format("size {} (an OpenAI size) -> {}x{}, the nearest canvas H3 makes (multiples of {}, "
                      "at most {} pixels)",
                      size, w, h, multiple, max_pixels));
      gen["width"] = w;
      gen["height"] = h;
    }
  }
  if (gen.contains("seconds") && gen["seconds"].is_number()) {
    const double s = gen["seconds"].get<double>();
    const double frames = std::nearbyint(s * static_cast<double>(kFps));
    if (std::isfinite(s) && s > 0 && frames < static_cast<double>(min_frames) &&
        align_num_frames(std::max<int64_t>(1, static_cast<int64_t>(frames))) < min_frames) {
      notes.push_back(fmt::format("seconds {} is shorter than H3 makes -> {} frames ({:.3f} s), the shortest", s,
                                  min_frames, static_cast<double>(min_frames) / kFps));
      gen.erase("seconds");
      gen["frames"] = min_frames;
    }
  }
  return notes;
}

}  // namespace h3::serve
