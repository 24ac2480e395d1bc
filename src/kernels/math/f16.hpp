// IEEE half precision (f16) storage for both backends: round to nearest
// even, overflow to infinity (not saturating: f16 is IEEE, unlike the fp8
// formats), NaN kept as a quiet NaN with its sign. Integer bit operations
// only, so the host and a GPU produce the same bits.
//
// Why here and not only base/dtype.cpp: the CUDA cast kernel needs the
// conversion on the device. base/dtype.cpp's generic mini-float encoder
// (frexp / nearbyint, shared with fp8) stays the host's reference; the host
// cast op calls these functions, and tests/unit/kernels/test_f16_codec.cpp
// proves them equal to it: every one of the 2^16 codes decoded, and every
// f16-representable neighbourhood (all 2^19 sign/exponent/10-bit patterns
// with the rounding bits below them at 0, 1, just below half, half, just
// above half and all ones) encoded.
#pragma once

#include <cstdint>

#include "base/hd.hpp"

namespace ftrain::math {

FTRAIN_HD std::uint16_t float_to_f16_bits(float f) {
  const std::uint32_t u = bits_of(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);  // NaN
  if (a >= 0x38800000u) {
    // Normal f16 range (|f| >= 2^-14): rebias the exponent, keep 10 mantissa
    // bits, round the 13 dropped bits to nearest even. A carry out of the
    // mantissa bumps the exponent, which is right; at or past 0x7c00 the
    // value rounded beyond 65504: infinity (f32 infinity lands there too).
    std::uint32_t code = ((a >> 23) - 112u) << 10 | ((a >> 13) & 0x3ffu);
    const std::uint32_t rest = a & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (code & 1u) != 0u)) ++code;
    if (code >= 0x7c00u) code = 0x7c00u;
    return static_cast<std::uint16_t>(sign | code);
  }
  // Subnormal f16 (or zero): the count of 2^-24 quanta, rounded to nearest
  // even. An f32 subnormal is far below half a quantum.
  const std::uint32_t exponent = a >> 23;
  if (exponent == 0u) return static_cast<std::uint16_t>(sign);
  const std::uint32_t significand = (a & 0x7fffffu) | 0x800000u;  // value = significand * 2^(exponent - 150)
  const std::uint32_t shift = 126u - exponent;                     // quanta = significand >> shift
  if (shift >= 25u) return static_cast<std::uint16_t>(sign);       // below half a quantum (or exactly half of 0)
  std::uint32_t code = significand >> shift;
  const std::uint32_t rest = significand & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  if (rest > half || (rest == half && (code & 1u) != 0u)) ++code;
  return static_cast<std::uint16_t>(sign | code);
}

FTRAIN_HD float f16_bits_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  if (exponent == 0x1fu) return float_of(sign | (mantissa == 0u ? 0x7f800000u : 0x7fc00000u));
  if (exponent == 0u) {
    // mantissa * 2^-24, exact in f32; the sign as a bit so -0 stays -0.
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return float_of(sign | bits_of(magnitude));
  }
  return float_of(sign | (exponent + 112u) << 23 | mantissa << 13);
}

}  // namespace ftrain::math
