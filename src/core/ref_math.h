// The f32 element-wise exp/sin/cos that the reference's PyTorch CPU runs used, for the few places where the
// reference rounds to f32 even in its f64 run (the sinusoidal timestep embedding).
//
// PyTorch's CPU `exp`/`sin`/`cos` on contiguous float tensors call Intel oneMKL's vector math (VML) in its
// high-accuracy mode (`vmsCos(n, in, out, VML_HA | VML_FTZDAZ_OFF | VML_ERRMODE_IGNORE)`, aten/src/ATen/cpu/vml.h).
// VML's HA results are within 1 ulp but not always correctly rounded, and its algorithm is not published, so the
// only way to reproduce those bits is to call VML itself. Intel MKL is proprietary (Debian non-free), so it is
// loaded at run time when present and never linked: without it, these functions round the libm double result to
// f32 (correctly rounded in practice), and the f64 DiT then differs from the reference by ~1e-8 (docs/notes.md).
//
// Library search order: the mkl_rt knob (H3_MKL_RT / --mkl-rt: a path, or "off"), the libmkl_rt found by CMake at
// configure time (scripts/setup-mkl.sh unpacks Debian's libmkl-* packages into /opt/h3-deps/mkl), then the loader's
// default libmkl_rt.so.
#pragma once
#include <cstdint>
#include <string>

namespace h3::ref_math {

struct Backend {
  bool vml = false;     // true: Intel MKL VML (HA); false: libm rounded to f32
  std::string library;  // the libmkl_rt that was loaded, empty for libm
  std::string why;      // for libm: why VML was not used
};

// Which implementation the functions below use (decided once per process, logged once).
const Backend& backend();

void exp_f32(const float* in, float* out, int64_t n);
void sin_f32(const float* in, float* out, int64_t n);
void cos_f32(const float* in, float* out, int64_t n);

// The libm path regardless of the backend, for tests.
void exp_f32_libm(const float* in, float* out, int64_t n);
void sin_f32_libm(const float* in, float* out, int64_t n);
void cos_f32_libm(const float* in, float* out, int64_t n);

}  // namespace h3::ref_math
