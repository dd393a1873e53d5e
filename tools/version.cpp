// `h3 --version`: what this binary is and what was compiled into it (cli_habits.h).
#define OMPI_SKIP_MPICXX 1  // the C API only; no C++ bindings
#define MPICH_SKIP_MPICXX 1
#include <cblas.h>
#include <mpi.h>

#include <string>

#include "cli_habits.h"
#include "h3_git_revision.h"  // generated at every build (tools/git_revision.cmake)
#include "media/mp4_writer.h"

#if H3_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif
#if H3_HAVE_NCCL
#include <nccl.h>
#endif
#if H3_HAVE_CUDNN
#include <cudnn_version.h>
#endif
#if H3_HAVE_SERVE
#include <microhttpd.h>
#include <sqlite3.h>
#endif

namespace h3::cli {

namespace {

// The first line (up to its first comma) of a library's self-description.
std::string first_clause(std::string s) {
  const size_t end = s.find_first_of(",\n");
  if (end != std::string::npos) s.resize(end);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

}  // namespace

std::string version_text() {
  std::string s = "h3 " H3_VERSION " (git " H3_GIT_REVISION ")\n";
  s += "built: " H3_BUILD_TYPE ", " H3_COMPILER ", C++20\n";
  // OpenBLAS describes itself: version, the kernel set it picked for this CPU, its thread limit.
  s += "CPU: yes (BLAS: " + std::string(openblas_get_config()) + ")\n";
#if H3_HAVE_CUDA
  s += "CUDA: yes (toolkit " + std::to_string(CUDART_VERSION / 1000) + "." +
       std::to_string(CUDART_VERSION % 1000 / 10) + ", architectures " H3_CUDA_ARCHS ")\n";
#else
  s += "CUDA: no (built without a CUDA toolkit; --device cuda is refused)\n";
#endif
#if H3_HAVE_NCCL
  s += "NCCL: yes (" + std::to_string(NCCL_MAJOR) + "." + std::to_string(NCCL_MINOR) + "." +
       std::to_string(NCCL_PATCH) + ")\n";
#else
  s += "NCCL: no (GPU ranks exchange through MPI)\n";
#endif
#if H3_HAVE_CUDNN
  s += "cuDNN: yes (" + std::to_string(CUDNN_MAJOR) + "." + std::to_string(CUDNN_MINOR) + "." +
       std::to_string(CUDNN_PATCHLEVEL) + ")\n";
#else
  s += "cuDNN: no\n";
#endif
  const std::string av = media_library_versions();
  s += av.empty() ? "FFmpeg: no (built without FFmpeg's libraries: no MP4/PNG/WAV output, no keyframes)\n"
                  : "FFmpeg: yes (" + av + ")\n";
  char mpi[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0;
  MPI_Get_library_version(mpi, &len);  // may be called before MPI_Init
  s += "MPI: " + first_clause(std::string(mpi, static_cast<size_t>(len))) + "\n";
#if H3_HAVE_SERVE
  s += "serve: yes (libmicrohttpd " + std::string(MHD_get_version()) + ", SQLite " + sqlite3_libversion() + ")";
#else
  s += "serve: no (built without libmicrohttpd and SQLite)";
#endif
  return s;
}

}  // namespace h3::cli
