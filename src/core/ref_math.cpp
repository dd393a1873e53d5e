#include "core/ref_math.h"

#include <dlfcn.h>
#include <link.h>

#include <climits>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <vector>

#include "core/knobs.h"
#include "core/log.h"

namespace h3::ref_math {
namespace {

// oneMKL VML entry points: vms<Op>(MKL_INT n, const float* a, float* r, MKL_INT64 mode), LP64 (MKL_INT = int).
using VmsFn = void (*)(int, const float*, float*, long long);
using SetThreadingFn = int (*)(int);

// Mode bits from mkl_vml_defines.h: the ones PyTorch passes (VML_HA | VML_FTZDAZ_OFF | VML_ERRMODE_IGNORE).
constexpr long long kVmlHa = 0x2, kVmlFtzDazOff = 0x00140000, kVmlErrmodeIgnore = 0x100;
constexpr long long kTorchMode = kVmlHa | kVmlFtzDazOff | kVmlErrmodeIgnore;
constexpr int kMklThreadingSequential = 1;  // enum MKL_THREADING_{INTEL, SEQUENTIAL, PGI, GNU, TBB}

struct Vml {
  Backend info;
  VmsFn exp = nullptr, sin = nullptr, cos = nullptr;
};

#ifdef H3_MKL_RT_DEFAULT
constexpr const char* kConfiguredLibrary = H3_MKL_RT_DEFAULT;
#else
constexpr const char* kConfiguredLibrary = "";
#endif

// libmkl_rt picks its threading layer and kernels at the first call and exits the process (not an error code)
// when one of those libraries is missing. So only a libmkl_rt whose folder holds the sequential layer and the VML
// kernels (and the LP64 interface layer it loads by default) is used, and the sequential layer is chosen before
// anything else runs.
std::string missing_companions(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  for (const char* needed : {"libmkl_core.so", "libmkl_sequential.so", "libmkl_intel_lp64.so", "libmkl_vml_def.so"})
    if (!fs::exists(dir / needed)) return fmt::format("{} is not beside it in {}", needed, dir.string());
  return "";
}

bool try_load(const std::string& name, Vml& v, std::string& why) {
  // MKL picks its VML kernel by CPU family; the AVX2 one is the kernel checked against the reference's bits (the
  // AVX-512 one was never compared), so every machine uses it unless the user says otherwise.
  setenv("MKL_ENABLE_INSTRUCTIONS", "AVX2", 0);
  void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    why = fmt::format("{}: {}", name, dlerror());
    return false;
  }
  char origin[PATH_MAX] = {};
  if (dlinfo(h, RTLD_DI_ORIGIN, origin) != 0) {
    why = fmt::format("{}: cannot tell its folder", name);
    dlclose(h);
    return false;
  }
  if (std::string m = missing_companions(origin); !m.empty()) {
    why = fmt::format("{}: {}", name, m);
    dlclose(h);
    return false;
  }
  auto set_threading = reinterpret_cast<SetThreadingFn>(dlsym(h, "MKL_Set_Threading_Layer"));
  v.exp = reinterpret_cast<VmsFn>(dlsym(h, "vmsExp"));
  v.sin = reinterpret_cast<VmsFn>(dlsym(h, "vmsSin"));
  v.cos = reinterpret_cast<VmsFn>(dlsym(h, "vmsCos"));
  if (!set_threading || !v.exp || !v.sin || !v.cos) {
    why = fmt::format("{}: no MKL_Set_Threading_Layer/vmsExp/vmsSin/vmsCos in it", name);
    dlclose(h);
    return false;
  }
  set_threading(kMklThreadingSequential);
  v.info.vml = true;
  v.info.library = (std::filesystem::path(origin) / std::filesystem::path(name).filename()).string();
  return true;  // the handle stays open for the process's life
}

Vml load() {
  Vml v;
  const std::string& env = knobs().mkl_rt;
  std::vector<std::string> candidates;
  if (env == "off") {
    v.info.why = "H3_MKL_RT=off";
  } else if (!env.empty()) {
    candidates = {env};
  } else {
    if (*kConfiguredLibrary) candidates.push_back(kConfiguredLibrary);
    candidates.push_back("libmkl_rt.so");
  }
  std::string why;
  for (const auto& c : candidates) {
    std::string w;
    if (try_load(c, v, w)) break;
    why += (why.empty() ? "" : "; ") + w;
  }
  if (v.info.vml)
    spdlog::debug("f32 exp/sin/cos of the reference's f32 steps: Intel MKL VML (HA) from {}", v.info.library);
  else {
    if (v.info.why.empty()) v.info.why = why;
    spdlog::info(
        "f32 exp/sin/cos of the reference's f32 steps: libm (Intel MKL VML not loaded: {}); f64 DiT "
        "runs then differ from the reference by ~1e-8 (scripts/setup-mkl.sh installs it)",
        v.info.why);
  }
  return v;
}

const Vml& vml() {
  static const Vml v = load();
  return v;
}

void run(VmsFn f, const float* in, float* out, int64_t n) {
  for (int64_t done = 0; done < n;) {
    const int chunk = static_cast<int>(std::min<int64_t>(n - done, INT_MAX));
    f(chunk, in + done, out + done, kTorchMode);
    done += chunk;
  }
}

template <typename F>
void libm(F f, const float* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(f(static_cast<double>(in[i])));
}

}  // namespace

const Backend& backend() {
  return vml().info;
}

void exp_f32_libm(const float* in, float* out, int64_t n) {
  libm([](double x) { return std::exp(x); }, in, out, n);
}
void sin_f32_libm(const float* in, float* out, int64_t n) {
  libm([](double x) { return std::sin(x); }, in, out, n);
}
void cos_f32_libm(const float* in, float* out, int64_t n) {
  libm([](double x) { return std::cos(x); }, in, out, n);
}

void exp_f32(const float* in, float* out, int64_t n) {
  if (vml().info.vml)
    run(vml().exp, in, out, n);
  else
    exp_f32_libm(in, out, n);
}
void sin_f32(const float* in, float* out, int64_t n) {
  if (vml().info.vml)
    run(vml().sin, in, out, n);
  else
    sin_f32_libm(in, out, n);
}
void cos_f32(const float* in, float* out, int64_t n) {
  if (vml().info.vml)
    run(vml().cos, in, out, n);
  else
    cos_f32_libm(in, out, n);
}

}  // namespace h3::ref_math
