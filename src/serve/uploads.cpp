// Media uploads (serve/uploads.h).
#include "serve/uploads.h"

#include <fmt/format.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <random>

#include "serve/supervisor.h"

namespace h3::serve {

namespace fs = std::filesystem;

namespace {

ApiError bad(const std::string& message) {
  return {400, "invalid_request", message};
}

// Standard base64 (RFC 4648, '+' '/', '=' padding); whitespace is skipped; anything else is refused.
std::string decode_base64(const std::string& in, const std::string& field, size_t max_bytes) {
  static const std::array<int8_t, 256> table = [] {
    std::array<int8_t, 256> t{};
    t.fill(-1);
    const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i) t[static_cast<unsigned char>(a[i])] = static_cast<int8_t>(i);
    return t;
  }();
  if (in.size() / 4 * 3 > max_bytes + 3)
    throw bad(fmt::format("'{}' is larger than {} bytes once decoded", field, max_bytes));
  std::string out;
  out.reserve(in.size() / 4 * 3);
  uint32_t acc = 0;
  int bits = 0;
  size_t pad = 0;
  for (char ch : in) {
    if (ch == ' ' || ch == '\n' || ch == '\r' || ch == '\t') continue;
    if (ch == '=') {
      ++pad;
      continue;
    }
    const int v = table[static_cast<unsigned char>(ch)];
    if (v < 0 || pad > 0) throw bad(fmt::format("'{}' is not valid base64 (standard alphabet)", field));
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  if (pad > 2) throw bad(fmt::format("'{}' is not valid base64 (bad padding)", field));
  if (out.empty()) throw bad(fmt::format("'{}' is empty", field));
  if (out.size() > max_bytes) throw bad(fmt::format("'{}' is larger than {} bytes once decoded", field, max_bytes));
  return out;
}

std::string extension_of(const nlohmann::json& item, const std::string& field) {
  if (!item.contains("filename")) return "bin";
  if (!item["filename"].is_string()) throw bad(fmt::format("'{}.filename' must be a string", field));
  const std::string name = item["filename"].get<std::string>();
  const auto dot = name.rfind('.');
  std::string ext = dot == std::string::npos ? "" : name.substr(dot + 1);
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const bool ok = !ext.empty() && ext.size() <= 5 &&
                  ext.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789") == std::string::npos;
  return ok ? ext : "bin";
}

std::string random_name() {
  std::random_device rd;
  return fmt::format("{:08x}{:08x}", rd(), rd());
}

}  // namespace

bool is_media_field(const std::string& key) {
  return key == "first_image" || key == "last_image" || key == "references";
}

std::string store_uploads(const nlohmann::json& body, nlohmann::json& gen, nlohmann::json& accepted,
                          const std::string& store_dir, size_t max_file_bytes) {
  bool any = false;
  for (const char* k : {"first_image", "last_image", "references"}) any |= body.contains(k);
  if (!any) return "";
  const fs::path dir = fs::absolute(fs::path(store_dir) / "uploads" / random_name());
  int n = 0;
  // One media object -> a stored file; returns its absolute path and records a summary.
  auto store_one = [&](const nlohmann::json& item, const std::string& field, nlohmann::json& summary) {
    if (!item.is_object())
      throw bad(fmt::format("'{}' must be an object {{\"data\": BASE64, \"filename\": ...}}", field));
    if (item.contains("path"))
      throw bad(
          fmt::format("'{}.path': the server never reads files named by the client; send the file itself as "
                      "base64 in '{}.data'",
                      field, field));
    for (auto it = item.begin(); it != item.end(); ++it)
      if (it.key() != "data" && it.key() != "filename" && it.key() != "kind")
        throw bad(fmt::format("unknown field '{}.{}' (allowed: data, filename{})", field, it.key().substr(0, 100),
                              field.starts_with("references") ? ", kind" : ""));
    if (!item.contains("data") || !item["data"].is_string())
      throw bad(fmt::format("'{}.data' (the file as a base64 string) is required", field));
    const std::string bytes = decode_base64(item["data"].get<std::string>(), field + ".data", max_file_bytes);
    fs::create_directories(dir);
    const fs::path file = dir / fmt::format("{}.{}", n++, extension_of(item, field));
    {
      std::ofstream out(file, std::ios::binary);
      out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      if (!out.good()) throw ApiError{500, "server_error", "cannot store an upload in the store folder"};
    }
    summary = {{"bytes", bytes.size()}};
    if (item.contains("filename")) summary["filename"] = item["filename"].get<std::string>().substr(0, 200);
    return file.string();
  };
  try {
    for (const char* k : {"first_image", "last_image"}) {
      if (!body.contains(k)) continue;
      nlohmann::json summary;
      gen[k] = store_one(body[k], k, summary);
      accepted[k] = summary;
    }
    if (body.contains("references")) {
      const nlohmann::json& refs = body["references"];
      if (!refs.is_array()) throw bad("'references' must be a list of {\"kind\", \"data\", \"filename\"} objects");
      if (refs.size() > 16) throw bad(fmt::format("'references' has {} entries; at most 16 are read", refs.size()));
      gen["references"] = nlohmann::json::array();
      accepted["references"] = nlohmann::json::array();
      for (size_t i = 0; i < refs.size(); ++i) {
        const std::string field = fmt::format("references[{}]", i);
        const nlohmann::json& r = refs[i];
        if (!r.is_object() || !r.contains("kind") || !r["kind"].is_string())
          throw bad(fmt::format("'{}.kind' must be \"image\", \"video\" or \"audio\"", field));
        nlohmann::json summary;
        const std::string path = store_one(r, field, summary);
        summary["kind"] = r["kind"];
        gen["references"].push_back({{"kind", r["kind"]}, {"path", path}});
        accepted["references"].push_back(summary);
      }
    }
  } catch (...) {
    remove_uploads(dir.string());
    throw;
  }
  return dir.string();
}

void remove_uploads(const std::string& dir) {
  if (dir.empty()) return;
  std::error_code ec;
  fs::remove_all(dir, ec);
}

void remove_job_uploads(const nlohmann::json& resolved, const std::string& store_dir) {
  if (!resolved.is_object() || !resolved.contains("media") || !resolved["media"].is_array()) return;
  const fs::path root = fs::absolute(fs::path(store_dir) / "uploads").lexically_normal();
  for (const auto& m : resolved["media"]) {
    if (!m.is_object() || !m.contains("path") || !m["path"].is_string()) continue;
    const fs::path folder = fs::path(m["path"].get<std::string>()).lexically_normal().parent_path();
    if (folder.parent_path() == root) remove_uploads(folder.string());
  }
}

}  // namespace h3::serve
