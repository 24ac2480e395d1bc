// The one macro and the few primitives that let a function be compiled for
// both backends: the host compiler (g++) and nvcc's device pass.
//
// Why: every elementwise or per-row op keeps its arithmetic in one
// FTRAIN_HD function (kernels/math/*.hpp) that the host loops
// (kernels/host/*.cpp) and the CUDA kernels (kernels/cuda/*.cu) both call,
// so the host suite tests the exact formula the GPU runs (PyTorch's
// cpu_kernel / gpu_kernel sharing one lambda; Kokkos' functors). It lives in
// base/, below every other folder, because core/rng.hpp's counter-based
// generator is FTRAIN_HD too and core must not reach up into kernels/.
//
// Rules for code in kernels/math/:
//  * only +, -, *, / and the functions below: they give the same bits on
//    both sides (IEEE-correct sqrt and division are nvcc's defaults, and
//    the CUDA library is built with --fmad=false so no multiply-add is fused
//    behind the formula's back);
//  * no exceptions, no allocation, no std:: containers: plain values in,
//    plain values out; checks stay in the backend's launcher.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define FTRAIN_HD __host__ __device__ __forceinline__
#else
#define FTRAIN_HD inline
#endif

namespace ftrain::math {

FTRAIN_HD std::uint32_t bits_of(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

FTRAIN_HD float float_of(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

// Correctly rounded on both sides.
FTRAIN_HD float sqrt_f32(float x) {
#if defined(__CUDA_ARCH__)
  return ::sqrtf(x);
#else
  return std::sqrt(x);
#endif
}

FTRAIN_HD double sqrt_f64(double x) {
#if defined(__CUDA_ARCH__)
  return ::sqrt(x);
#else
  return std::sqrt(x);
#endif
}

FTRAIN_HD float abs_f32(float x) { return float_of(bits_of(x) & 0x7fffffffu); }
FTRAIN_HD float copysign_f32(float magnitude, float sign) {
  return float_of((bits_of(magnitude) & 0x7fffffffu) | (bits_of(sign) & 0x80000000u));
}

// libm's exp / log: NOT bit-identical between host libm and CUDA's (both
// within 2 ulp). Used only where a kernel's tolerance says so (cross
// entropy's lse); prefer fast_math::exp where the same bits matter.
FTRAIN_HD float libm_exp(float x) {
#if defined(__CUDA_ARCH__)
  return ::expf(x);
#else
  return std::exp(x);
#endif
}
FTRAIN_HD float libm_log(float x) {
#if defined(__CUDA_ARCH__)
  return ::logf(x);
#else
  return std::log(x);
#endif
}

// bf16 storage (round to nearest even, quiet NaN), bit for bit what
// base/dtype.hpp's to_bf16 / to_float do on the host.
FTRAIN_HD float bf16_bits_to_float(std::uint16_t bits) { return float_of(static_cast<std::uint32_t>(bits) << 16); }
FTRAIN_HD std::uint16_t float_to_bf16_bits(float f) {
  const std::uint32_t u = bits_of(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  const std::uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>((u + rounding_bias) >> 16);
}

}  // namespace ftrain::math
