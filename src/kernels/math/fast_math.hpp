// Vectorisable f32 exp / sigmoid / tanh / erf for the activation kernels
// (GELU, SwiGLU) of both backends (FTRAIN_HD, base/hd.hpp): the
// same bits on the host and on a GPU, since they use no libm.
//
// Why: libm's expf/erff/tanhf are scalar calls, which made GELU cost more
// than the GEMM that feeds it. These are branch-free inline functions built
// from +, *, / and integer bit operations only, so gcc/clang vectorise the
// element loops that call them (what PyTorch gets from Sleef).
// Accuracy (measured against double libm): exp within 1.4 ulp on
// [-87, 87] (Cephes expf polynomial; |x| is clamped to 87, so the result
// saturates at e^+-87 instead of overflowing to inf or flushing to 0); tanh
// and sigmoid, built on exp, within 2e-7 absolute; erf, Abramowitz & Stegun
// 7.1.26 evaluated in f32, within 5e-7 absolute. Far below bf16 resolution.
#pragma once

#include <cstdint>

#include "base/hd.hpp"

namespace ftrain::math::fast_math {

FTRAIN_HD float exp(float x) {
  // Clamp so that 2^n below stays a normal float exponent.
  // Clamp |x| <= 87 (e^87 and e^-87 are normal floats) as one integer min
  // on the magnitude bits. Why bits and one clamp: with gcc's default
  // -ftrapping-math a float select that feeds more float arithmetic is not
  // if-converted, and two chained selects get jump-threaded into branches;
  // either stops the loop from vectorising. A NaN argument maps to +-87;
  // every caller multiplies by x, so NaN still reaches its result.
  constexpr std::uint32_t kMagnitudeBound = 0x42ae0000u;  // 87.0f
  const std::uint32_t bits = bits_of(x);
  std::uint32_t magnitude = bits & 0x7fffffffu;
  magnitude = magnitude < kMagnitudeBound ? magnitude : kMagnitudeBound;
  x = float_of(magnitude | (bits & 0x80000000u));
  // n = round(x / ln 2) by the 1.5 * 2^23 trick (round-to-nearest in the add).
  constexpr float kRound = 12582912.0f;
  const float shifted = x * 1.44269504088896341f + kRound;
  const float n = shifted - kRound;
  const std::int32_t n_int = static_cast<std::int32_t>(bits_of(shifted)) - 0x4b400000;  // minus bits of kRound
  // r = x - n ln 2 in two parts (Cody-Waite) for an exact reduction.
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float er = p * r * r + r + 1.0f;
  return er * float_of(static_cast<std::uint32_t>(n_int + 127) << 23);
}

// exp that keeps a NaN argument NaN (exp maps it to e^+-87), for callers that
// sum the results instead of multiplying them by x: cross entropy's softmax
// terms, where a NaN logit must reach the loss. An integer select on the
// bits, so the loop still vectorises.
FTRAIN_HD float exp_keeping_nan(float x) {
  const float e = fast_math::exp(x);
  const std::uint32_t bits = bits_of(x);
  const bool is_nan = (bits & 0x7fffffffu) > 0x7f800000u;
  return float_of(is_nan ? bits : bits_of(e));
}

FTRAIN_HD float sigmoid(float x) { return 1.0f / (1.0f + fast_math::exp(-x)); }

// tanh(x) = 1 - 2 / (exp(2x) + 1): saturates cleanly to +-1.
FTRAIN_HD float tanh(float x) { return 1.0f - 2.0f / (fast_math::exp(2.0f * x) + 1.0f); }

FTRAIN_HD float erf(float x) {
  const float a = abs_f32(x);
  const float t = 1.0f / (1.0f + 0.3275911f * a);
  float p = 1.061405429f;
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  const float y = 1.0f - p * t * fast_math::exp(-a * a);
  return copysign_f32(y, x);
}

}  // namespace ftrain::math::fast_math
