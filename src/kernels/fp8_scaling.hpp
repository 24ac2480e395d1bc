// The scalar arithmetic of FP8 delayed scaling, written once for every
// backend (DESIGN.md §3: one source for the arithmetic). The host kernels
// (kernels/host/fp8.cpp) call these; a CUDA kernel includes the same header
// (FTRAIN_HOST_DEVICE becomes __host__ __device__ under nvcc).
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define FTRAIN_HOST_DEVICE __host__ __device__
#else
#define FTRAIN_HOST_DEVICE
#endif

namespace ftrain::fp8_scaling {

inline constexpr float kE4m3Max = 448.0f;    // largest finite E4M3 value
inline constexpr float kE5m2Max = 57344.0f;  // largest finite E5M2 value

// max(a, b) for amaxes that lets a NaN through (fmax would hide it): once a
// NaN is recorded it stays, and the scale update sees a non-finite amax.
FTRAIN_HOST_DEVICE inline float amax_combine(float a, float b) { return (std::isnan(b) || b > a) ? b : a; }

// Transformer Engine's scale rule (_default_sf_compute):
//   scale = (fp8_max / amax) / 2^margin
// kept at `previous` when amax is 0, negative, infinite or NaN, or when the
// quotient is not a finite positive f32 (a denormal amax).
FTRAIN_HOST_DEVICE inline float next_scale(float amax, float previous, float max_value, int margin) {
  if (!(amax > 0.0f) || !std::isfinite(amax)) return previous;
  const double scale = (static_cast<double>(max_value) / amax) / std::ldexp(1.0, margin);
  if (!std::isfinite(static_cast<float>(scale)) || scale <= 0.0) return previous;
  return static_cast<float>(scale);
}

}  // namespace ftrain::fp8_scaling
