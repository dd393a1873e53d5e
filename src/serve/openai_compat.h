// What the official OpenAI SDKs send to `POST /v1/videos`, mapped onto H3's request (docs/api.md "OpenAI SDK"):
//   - `input_reference` (an uploaded image, or {"image_url": "data:..."}) is the first keyframe (fl2va): the
//     video starts on that picture, as the OpenAI API describes it;
//   - `size`: the SDK's four sizes (720x1280, 1280x720, 1024x1792, 1792x1024) become the nearest canvas H3
//     makes (each side rounded to the canvas multiple, then scaled down into the trained area); any other size
//     must already be one H3 makes;
//   - `seconds`: a duration shorter than H3's shortest (the SDK's "4") becomes the shortest (124 frames,
//     5.17 s); longer than the longest is refused.
// Every mapping adds a note to the job's `parameters.notes`; `size` and `seconds` of the job are the resolved
// values.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace h3::serve {

// The sizes the OpenAI SDK offers ("1280x720", ...).
const std::vector<std::string>& openai_sizes();

// The canvas nearest to width x height: sides rounded to `multiple` (halves up, at least one multiple), then,
// when the area exceeds `max_pixels`, scaled down keeping the aspect with sides rounded down.
std::pair<int64_t, int64_t> nearest_canvas(int64_t width, int64_t height, int64_t multiple, int64_t max_pixels);

// Moves `input_reference` of a request body to `first_image` ({"data", "filename"}); throws ApiError (400) for
// a file id, a URL that is not a data: URL, or a body that also has first_image / references.
void input_reference_to_keyframe(nlohmann::json& body);

// Applies the `size` and `seconds` rules above to `gen` (the GenerateRequest JSON; `body` is the client's)
// under `limits` (limits_to_json); returns the notes to add to the resolved request.
std::vector<std::string> map_openai_geometry(const nlohmann::json& body, nlohmann::json& gen,
                                             const nlohmann::json& limits);

}  // namespace h3::serve
