// Optional fields of JSON configs (nlohmann::json): one reading rule for every config file the engine opens.
#pragma once
#include <nlohmann/json.hpp>

namespace h3 {

// Reads j[key] into `out` when the key is present and not null (Hugging Face configs write null for "not set");
// otherwise `out` keeps its default. A value of another type throws nlohmann::json::exception, which the caller
// turns into an error naming its file.
template <typename T>
void read_if(const nlohmann::json& j, const char* key, T& out) {
  if (j.contains(key) && !j[key].is_null()) out = j[key].get<T>();
}

}  // namespace h3
