#include "backend/gemm_algos_file.h"

#include <filesystem>
#include <system_error>

#include "core/log.h"

namespace h3 {

std::string gemm_algos_file(const std::string& file, const std::string& dir, const std::string& device_name) {
  if (!file.empty() || dir.empty()) return file;
  std::string name = "gemm-algos-";
  for (char ch : device_name) {
    const bool keep = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
    name += keep ? ch : '-';
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir)) {
    spdlog::warn(
        "cannot make {} ({}): cuBLASLt's GEMM choices are not kept, so every run tunes anew "
        "(--gemm-algos PATH keeps them elsewhere, --gemm-algos none says so quietly)",
        dir, ec ? ec.message() : "not a folder");
    return "";
  }
  return (std::filesystem::path(dir) / (name + ".json")).string();
}

}  // namespace h3
