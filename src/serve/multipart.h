// multipart/form-data bodies (RFC 7578), the encoding the official OpenAI SDKs use for `POST /v1/videos`, and
// their translation into the JSON request the API takes (docs/api.md "multipart/form-data"):
//   - a text part is a field; bracketed names nest as the SDKs write them: `a[b]` an object member, `a[]` an
//     array element, `a[][b]` a member of an array element: the k-th `a[][b]` belongs to element k when every
//     member appears equally often (the JavaScript SDK writes elements one after the other, the Python SDK
//     groups parts by name), else a new element starts where a member repeats (one after the other only);
//   - numbers arrive as text, so the engine's numeric fields (steps, seed, width, ...) are converted back;
//   - a file part becomes {"data": BASE64, "filename": NAME} at its place (`first_image`, `input_reference`,
//     `references[][data]` merged into its element, a bare `references[]` file gets its kind from its type).
// Limits: at most kMaxParts parts and kMaxPartHeader bytes of headers per part; malformed bodies throw ApiError
// (400) naming what is wrong.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace h3::serve {

inline constexpr size_t kMaxParts = 256;
inline constexpr size_t kMaxPartHeader = 8192;

struct FormPart {
  std::string name;          // the field name as sent ("references[][kind]")
  std::string filename;      // set for file parts (may be empty when the client sent filename="")
  bool is_file = false;      // the part had a filename parameter
  std::string content_type;  // the part's Content-Type ("" when absent)
  std::string_view data;     // the part's bytes (a view into the body)
};

// The boundary parameter of a multipart/form-data Content-Type value; throws ApiError (400) when missing.
std::string multipart_boundary(const std::string& content_type);

// Splits `body` into its parts (views into `body`, which must outlive them).
std::vector<FormPart> parse_multipart(std::string_view body, const std::string& boundary);

// The JSON request of POST /v1/videos that the parts stand for (see above).
nlohmann::json form_to_request(const std::vector<FormPart>& parts);

}  // namespace h3::serve
