#include "backend/cuda/gemm_algo_cache.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/json_limits.h"
#include "core/log.h"

namespace h3::cuda {

namespace {

constexpr size_t kWords = sizeof(cublasLtMatmulAlgo_t) / sizeof(uint64_t);
static_assert(sizeof(cublasLtMatmulAlgo_t) % sizeof(uint64_t) == 0, "cublasLtMatmulAlgo_t is a block of words");

std::string words_of(const cublasLtMatmulAlgo_t& a) {
  const auto* w = reinterpret_cast<const uint64_t*>(&a);
  std::string s;
  for (size_t i = 0; i < kWords; ++i) s += fmt::format("{}{:016x}", i ? " " : "", w[i]);
  return s;
}

std::optional<cublasLtMatmulAlgo_t> algo_of(const std::string& s) {
  cublasLtMatmulAlgo_t a{};
  auto* w = reinterpret_cast<uint64_t*>(&a);
  size_t pos = 0;
  for (size_t i = 0; i < kWords; ++i) {
    if (pos + 16 > s.size()) return std::nullopt;
    w[i] = std::strtoull(s.substr(pos, 16).c_str(), nullptr, 16);
    pos += 17;
  }
  return a;
}

}  // namespace

void GemmAlgoCache::open(const std::string& path, const std::string& device) {
  path_ = path;
  header_ = fmt::format("{}, cuBLASLt {}", device, cublasLtGetVersion());
  algos_.clear();
  if (path_.empty() || !std::filesystem::exists(path_)) return;
  try {
    std::ifstream in(path_);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const nlohmann::json j = parse_json_bounded(text, path_);
    if (j.value("made_with", "") != header_) {
      spdlog::warn("--gemm-algos {}: made with {}, this run is {}: ignored (it will be rewritten)", path_,
                   j.value("made_with", "?"), header_);
      return;
    }
    for (const auto& [key, v] : j.at("algorithms").items())
      if (auto a = algo_of(v.get<std::string>())) algos_[key] = *a;
    spdlog::info("GEMM algorithms: {} shapes from {}", algos_.size(), path_);
  } catch (const std::exception& e) {
    spdlog::warn("--gemm-algos {}: unreadable ({}); ignored (it will be rewritten)", path_, e.what());
    algos_.clear();
  }
}

std::optional<cublasLtMatmulAlgo_t> GemmAlgoCache::find(const std::string& key) const {
  auto it = algos_.find(key);
  if (it == algos_.end()) return std::nullopt;
  return it->second;
}

void GemmAlgoCache::remember(const std::string& key, const cublasLtMatmulAlgo_t& algo) {
  if (path_.empty()) return;
  algos_[key] = algo;
  if (!writable_) return;
  nlohmann::json j = {{"made_with", header_}, {"algorithms", nlohmann::json::object()}};
  for (const auto& [k, a] : algos_) j["algorithms"][k] = words_of(a);
  // A temporary file of this process's own: ranks on one host share the default file, and two writers of one
  // temporary file could rename each other's half-written bytes into place.
  const std::string tmp = path_ + ".partial." + std::to_string(::getpid());
  {
    std::ofstream out(tmp);
    out << j.dump(1) << "\n";
    if (!out) {  // said once: this run keeps its choices in memory only
      spdlog::warn("--gemm-algos {}: cannot write it; the choices of this run are not kept", path_);
      writable_ = false;
      return;
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path_, ec);
  if (ec) {
    spdlog::warn("--gemm-algos {}: cannot replace it ({}); the choices of this run are not kept", path_, ec.message());
    std::filesystem::remove(tmp, ec);
    writable_ = false;
  }
}

}  // namespace h3::cuda
