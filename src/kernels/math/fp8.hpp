// FP8 arithmetic written once for both backends: the cast of
// an f32 to E4M3 / E5M2, the amax, the index of the transposed copy and the
// delayed-scaling update of one amax-history column. kernels/host/fp8.cpp
// and kernels/cuda/fp8.cu both call these, so the host suite (every FP8
// golden curve) tests the exact bits the GPU kernels produce.
//
// The cast works on the f32's bit pattern only (integer adds and shifts), so
// it needs no rounding mode, no libm and no intrinsic, and g++ and nvcc's
// device pass give the same byte for every input:
//   * round to nearest, ties to even, on the target's quantum (its subnormal
//     quantum below the smallest normal);
//   * saturating: anything above the largest finite value, +-inf included,
//     becomes +-max (448 for E4M3, 57344 for E5M2), never inf;
//   * NaN stays NaN with its sign: E4M3 0x7f (E4M3FN's only NaN, sign bit
//     kept: 0xff), E5M2 0x7e / 0xfe;
//   * zero and everything that rounds to zero keeps the input's sign.
// (The encoding of a given f32 is the same on both sides; a NaN's sign may
// not be: CUDA's x * scale returns its canonical NaN (0x7fffffff) where the
// host keeps the operand's NaN. Either way the code is a NaN.)
// tests/unit/kernels/test_fp8_math.cpp checks every bf16 pattern times a
// sweep of scales against a grid-search reference and base/dtype.cpp's
// frexp-based encoder (the emulation this replaced), bit for bit.
//
// Amax: max |x| as the integer max of (bits & 0x7fffffff): for non-negative
// floats the bit order is the numeric order and every NaN pattern lies above
// +inf's, so one integer max (an atomicMax on the GPU, a reduction on the
// host: both order-independent) yields the exact maximum, or NaN when a NaN
// was seen.
#pragma once

#include <cstdint>

#include "base/hd.hpp"

namespace ftrain::math {

struct Fp8Format {
  int mantissa_bits;
  int bias;
  std::uint32_t max_code;  // largest finite magnitude's code
  std::uint32_t nan_code;
};

inline constexpr Fp8Format kFp8E4m3{3, 7, 0x7eu, 0x7fu};
inline constexpr Fp8Format kFp8E5m2{2, 15, 0x7bu, 0x7eu};
inline constexpr float kFp8E4m3MaxValue = 448.0f;
inline constexpr float kFp8E5m2MaxValue = 57344.0f;

FTRAIN_HD bool is_nan_f32(float x) { return (bits_of(x) & 0x7fffffffu) > 0x7f800000u; }
FTRAIN_HD bool is_finite_f32(float x) { return (bits_of(x) & 0x7f800000u) != 0x7f800000u; }

// The FP8 code of f (see the header comment).
FTRAIN_HD std::uint8_t fp8_encode(float f, Fp8Format fmt) {
  const std::uint32_t u = bits_of(f);
  const std::uint32_t sign = (u >> 24) & 0x80u;
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<std::uint8_t>(sign | fmt.nan_code);
  if (a == 0x7f800000u) return static_cast<std::uint8_t>(sign | fmt.max_code);
  const std::uint32_t exponent = a >> 23;  // biased f32 exponent
  const std::uint32_t min_normal_exponent = static_cast<std::uint32_t>(127 + 1 - fmt.bias);
  if (exponent >= min_normal_exponent) {
    // Round the f32 significand to M bits (ties to even); a carry moves into
    // the exponent, which is the right next binade.
    const int shift = 23 - fmt.mantissa_bits;
    const std::uint32_t rounded = (a + (1u << (shift - 1)) - 1u + ((a >> shift) & 1u)) >> shift;
    const std::uint32_t code = rounded - (static_cast<std::uint32_t>(127 - fmt.bias) << fmt.mantissa_bits);
    return static_cast<std::uint8_t>(sign | (code > fmt.max_code ? fmt.max_code : code));
  }
  if (exponent == 0) return static_cast<std::uint8_t>(sign);  // f32 zero or subnormal: far below half a quantum
  // Target subnormal: code = round(|f| / 2^(1 - bias - M)); |f| = sig * 2^(exponent - 150).
  const std::uint32_t significand = (a & 0x7fffffu) | 0x800000u;
  const int s = 150 + (1 - fmt.bias) - fmt.mantissa_bits - static_cast<int>(exponent);
  if (s > 24) return static_cast<std::uint8_t>(sign);  // below half the smallest subnormal
  std::uint32_t q = significand >> s;
  const std::uint32_t rest = significand & ((1u << s) - 1u), half = 1u << (s - 1);
  if (rest > half || (rest == half && (q & 1u) != 0u)) ++q;  // q == 2^M is the smallest normal: same code
  return static_cast<std::uint8_t>(sign | q);
}

FTRAIN_HD std::uint8_t fp8_e4m3_bits(float f) { return fp8_encode(f, kFp8E4m3); }
FTRAIN_HD std::uint8_t fp8_e5m2_bits(float f) { return fp8_encode(f, kFp8E5m2); }

// What cast_to_fp8 stores for element x: fp8(x * scale), the product
// rounded to f32 first (one multiply: no contraction to fuse).
FTRAIN_HD std::uint8_t fp8_cast(float x, float scale, bool e4m3) {
  const float scaled = x * scale;
  return e4m3 ? fp8_e4m3_bits(scaled) : fp8_e5m2_bits(scaled);
}

// The f32 an FP8 code encodes (exact).
FTRAIN_HD float fp8_decode(std::uint8_t code, Fp8Format fmt) {
  const std::uint32_t c = code;
  const std::uint32_t sign = (c & 0x80u) << 24;
  const std::uint32_t magnitude = c & 0x7fu;
  const bool e5m2 = fmt.mantissa_bits == 2;
  if ((e5m2 && magnitude > 0x7cu) || (!e5m2 && magnitude == 0x7fu)) return float_of(sign | 0x7fc00000u);
  if (e5m2 && magnitude == 0x7cu) return float_of(sign | 0x7f800000u);
  const std::uint32_t exponent = magnitude >> fmt.mantissa_bits, mantissa = magnitude & ((1u << fmt.mantissa_bits) - 1u);
  if (exponent == 0) {
    // mantissa * 2^(1 - bias - M): an exact small integer times a power of two.
    const float unit = float_of(static_cast<std::uint32_t>(127 + 1 - fmt.bias - fmt.mantissa_bits) << 23);
    return float_of(sign | bits_of(static_cast<float>(mantissa) * unit));
  }
  return float_of(sign | ((exponent + static_cast<std::uint32_t>(127 - fmt.bias)) << 23) |
                  (mantissa << (23 - fmt.mantissa_bits)));
}

// ---- dequantisation ----------------------------------------------------------
//
// An FP8 GEMM multiplies the codes exactly, accumulates in f32 and then
// multiplies the f32 result by its operands' DEquantisation factors
// scale_inv = 1 / scale: cuBLASLt's D = (scale_A scale_B) (A . B) with its
// A/B_SCALE_POINTERs at the operands' scale_inv (kernels/cuda/cublaslt_plan.hpp).
// The host GEMMs apply the same factor from the same scale_inv tensors, so a
// scale_inv that does not match its scale shows on the host too.

// The dequantisation factor every cast and every scale update writes beside
// a scale (one f32 division).
FTRAIN_HD float fp8_scale_inv(float scale) { return 1.0f / scale; }

// The factor an FP8 GEMM's f32 accumulator is multiplied by: the product of
// its two operands' scale_inv, rounded to f32 once.
FTRAIN_HD float fp8_dequantisation_factor(float a_scale_inv, float b_scale_inv) { return a_scale_inv * b_scale_inv; }

// ---- amax ----------------------------------------------------------------------

// The key whose integer max over a tensor is its amax (see the header).
FTRAIN_HD std::uint32_t amax_key(float x) { return bits_of(x) & 0x7fffffffu; }
// The amax a max key stands for: NaN when a NaN was seen.
FTRAIN_HD float amax_of_key(std::uint32_t key) { return key > 0x7f800000u ? float_of(0x7fc00000u) : float_of(key); }

// max(a, b) for amaxes that lets a NaN through (fmax would hide it): once a
// NaN is recorded it stays, and the scale update sees a non-finite amax.
FTRAIN_HD float amax_combine(float a, float b) { return (is_nan_f32(b) || b > a) ? b : a; }

// ---- transposed copies -----------------------------------------------------------

// Element (row, col) of a row-major [rows, cols] tensor sits at
// row * cols + col; in its transposed copy [cols, rows] at this index. The
// dgrad and wgrad GEMMs read these copies (cuBLASLt's FP8 GEMMs take only
// the TN layout: kernels/cuda/cublaslt_plan.hpp).
FTRAIN_HD std::int64_t transposed_index(std::int64_t row, std::int64_t col, std::int64_t rows) {
  return col * rows + row;
}

// ---- delayed scaling --------------------------------------------------------------

// Transformer Engine's scale rule (_default_sf_compute):
//   scale = (fp8_max / amax) / 2^margin          (in double, rounded to f32 once)
// kept at `previous` when amax is 0, negative, infinite or NaN, or when the
// quotient is not a finite positive f32 (a denormal amax).
FTRAIN_HD float fp8_next_scale(float amax, float previous, float max_value, int margin) {
  if (!(amax > 0.0f) || !is_finite_f32(amax)) return previous;
  double headroom = 1.0;
  for (int i = 0; i < margin; ++i) headroom *= 2.0;  // exact: 2^margin, margin <= 64
  const double scale = (static_cast<double>(max_value) / static_cast<double>(amax)) / headroom;
  if (!is_finite_f32(static_cast<float>(scale)) || scale <= 0.0) return previous;
  return static_cast<float>(scale);
}

// One column of a layer's amax history [len, columns] (row 0 = the iteration
// just finished): the amax (the max over the history, NaN-propagating, or row
// 0 alone when most_recent), the column's new scale and its scale_inv (written
// whether the scale changed or not: on a rank of the FP8 all-gather that
// casts no piece of a weight nothing else writes it), then TE's roll
// (torch.roll(h, -1, 0); h[0] = 0): row 0 moves to row len-1, rows 2.. move
// up one, the oldest (row 1) is dropped, row 0 becomes 0. Columns are
// independent: the host loops over them, the GPU gives each a thread.
FTRAIN_HD void fp8_update_history_column(float* history, std::int64_t len, int columns, int column, float* scale,
                                         float* scale_inv, float max_value, int margin, bool most_recent) {
  float amax = history[column];
  if (!most_recent)
    for (std::int64_t i = 0; i < len; ++i) amax = amax_combine(amax, history[i * columns + column]);
  scale[column] = fp8_next_scale(amax, scale[column], max_value, margin);
  scale_inv[column] = fp8_scale_inv(scale[column]);
  const float first = history[column];
  for (std::int64_t i = 0; i + 1 < len; ++i) history[i * columns + column] = history[(i + 1) * columns + column];
  history[(len - 1) * columns + column] = first;
  history[column] = 0.0f;
}

}  // namespace ftrain::math
