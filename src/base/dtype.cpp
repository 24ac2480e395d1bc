// Scalar conversions for the narrow float formats (f16, fp8 e4m3, fp8 e5m2).
//
// One generic encoder handles all three: find the binade, round the
// significand to nearest-even on that binade's quantum (or the subnormal
// quantum), then saturate (fp8) or overflow to infinity (f16).
#include "base/dtype.hpp"

#include <cmath>

#include "base/error.hpp"

namespace ftrain {
namespace {

struct MiniFloatFormat {
  int exponent_bits;
  int mantissa_bits;
  int bias;
  float max_finite;
  bool has_infinity;  // IEEE-like (f16, e5m2) vs E4M3FN (no inf, one NaN pattern)
  bool saturate;      // clamp overflow to max_finite instead of inf
  std::uint32_t nan_code;
};

constexpr MiniFloatFormat kF16{5, 10, 15, 65504.0f, true, false, 0x7e00u};
constexpr MiniFloatFormat kE4m3{4, 3, 7, 448.0f, false, true, 0x7fu};
constexpr MiniFloatFormat kE5m2{5, 2, 15, 57344.0f, true, true, 0x7eu};

std::uint32_t encode(float f, const MiniFloatFormat& fmt) {
  const int total_bits = 1 + fmt.exponent_bits + fmt.mantissa_bits;
  const std::uint32_t sign = std::signbit(f) ? (1u << (total_bits - 1)) : 0u;
  if (std::isnan(f)) return sign | fmt.nan_code;
  float a = std::fabs(f);
  const std::uint32_t exp_all_ones = (1u << fmt.exponent_bits) - 1u;
  auto overflow_code = [&]() -> std::uint32_t {
    if (fmt.saturate || !fmt.has_infinity) {
      // max finite: for E4M3FN the all-ones exponent holds finite values.
      float m;
      int e;
      m = std::frexp(fmt.max_finite, &e);
      (void)m;
      const int exponent_field = (e - 1) + fmt.bias;
      const float significand = fmt.max_finite / std::ldexp(1.0f, e - 1) - 1.0f;
      const auto mant = static_cast<std::uint32_t>(std::lround(std::ldexp(significand, fmt.mantissa_bits)));
      return sign | (static_cast<std::uint32_t>(exponent_field) << fmt.mantissa_bits) | mant;
    }
    return sign | (exp_all_ones << fmt.mantissa_bits);
  };
  if (std::isinf(a)) return overflow_code();
  if (a == 0.0f) return sign;

  const int min_normal_exp = 1 - fmt.bias;
  int e2;
  std::frexp(a, &e2);
  int e = e2 - 1;  // a in [2^e, 2^(e+1))
  if (e < min_normal_exp) e = min_normal_exp;
  const float quantum = std::ldexp(1.0f, e - fmt.mantissa_bits);
  const float r = std::nearbyint(a / quantum) * quantum;  // RNE under the default rounding mode
  if (r > fmt.max_finite) return overflow_code();
  if (r == 0.0f) return sign;

  std::frexp(r, &e2);
  int er = e2 - 1;
  if (er < min_normal_exp) {
    const auto mant = static_cast<std::uint32_t>(r / std::ldexp(1.0f, min_normal_exp - fmt.mantissa_bits));
    return sign | mant;
  }
  const auto exponent_field = static_cast<std::uint32_t>(er + fmt.bias);
  const auto mant = static_cast<std::uint32_t>((r / std::ldexp(1.0f, er) - 1.0f) * std::ldexp(1.0f, fmt.mantissa_bits));
  return sign | (exponent_field << fmt.mantissa_bits) | mant;
}

float decode(std::uint32_t code, const MiniFloatFormat& fmt) {
  const int total_bits = 1 + fmt.exponent_bits + fmt.mantissa_bits;
  const bool negative = (code >> (total_bits - 1)) & 1u;
  const std::uint32_t exp_all_ones = (1u << fmt.exponent_bits) - 1u;
  const std::uint32_t exponent_field = (code >> fmt.mantissa_bits) & exp_all_ones;
  const std::uint32_t mant = code & ((1u << fmt.mantissa_bits) - 1u);
  float v;
  if (fmt.has_infinity && exponent_field == exp_all_ones) {
    v = mant == 0 ? INFINITY : NAN;
  } else if (!fmt.has_infinity && exponent_field == exp_all_ones && mant == ((1u << fmt.mantissa_bits) - 1u)) {
    v = NAN;
  } else if (exponent_field == 0) {
    v = std::ldexp(static_cast<float>(mant), 1 - fmt.bias - fmt.mantissa_bits);
  } else {
    v = std::ldexp(1.0f + std::ldexp(static_cast<float>(mant), -fmt.mantissa_bits),
                   static_cast<int>(exponent_field) - fmt.bias);
  }
  return negative ? -v : v;
}

}  // namespace

float to_float(f16 v) { return decode(v.bits, kF16); }
f16 to_f16(float f) { return f16{static_cast<std::uint16_t>(encode(f, kF16))}; }
float to_float(fp8_e4m3 v) { return decode(v.bits, kE4m3); }
float to_float(fp8_e5m2 v) { return decode(v.bits, kE5m2); }
fp8_e4m3 to_fp8_e4m3(float f) { return fp8_e4m3{static_cast<std::uint8_t>(encode(f, kE4m3))}; }
fp8_e5m2 to_fp8_e5m2(float f) { return fp8_e5m2{static_cast<std::uint8_t>(encode(f, kE5m2))}; }

bool parse_dtype(std::string_view text, DType& out) {
  struct Name {
    std::string_view text;
    DType type;
  };
  static constexpr Name kNames[] = {
      {"f32", DType::f32},           {"fp32", DType::f32},           {"float32", DType::f32},
      {"bf16", DType::bf16},         {"bfloat16", DType::bf16},      {"f16", DType::f16},
      {"fp16", DType::f16},          {"float16", DType::f16},        {"fp8_e4m3", DType::fp8_e4m3},
      {"e4m3", DType::fp8_e4m3},     {"fp8_e5m2", DType::fp8_e5m2},  {"e5m2", DType::fp8_e5m2},
      {"i32", DType::i32},           {"int32", DType::i32},          {"i64", DType::i64},
      {"int64", DType::i64},         {"f64", DType::f64},            {"float64", DType::f64},
  };
  for (const auto& n : kNames) {
    if (n.text == text) {
      out = n.type;
      return true;
    }
  }
  return false;
}

float load_as_float(const void* data, DType t, std::int64_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(data)[i];
    case DType::bf16: return to_float(static_cast<const bf16*>(data)[i]);
    case DType::f16: return to_float(static_cast<const f16*>(data)[i]);
    case DType::fp8_e4m3: return to_float(static_cast<const fp8_e4m3*>(data)[i]);
    case DType::fp8_e5m2: return to_float(static_cast<const fp8_e5m2*>(data)[i]);
    case DType::i32: return static_cast<float>(static_cast<const std::int32_t*>(data)[i]);
    case DType::i64: return static_cast<float>(static_cast<const std::int64_t*>(data)[i]);
    case DType::f64: return static_cast<float>(static_cast<const double*>(data)[i]);
  }
  FT_THROW() << "unknown dtype";
}

void store_from_float(void* data, DType t, std::int64_t i, float v) {
  switch (t) {
    case DType::f32: static_cast<float*>(data)[i] = v; return;
    case DType::bf16: static_cast<bf16*>(data)[i] = to_bf16(v); return;
    case DType::f16: static_cast<f16*>(data)[i] = to_f16(v); return;
    case DType::fp8_e4m3: static_cast<fp8_e4m3*>(data)[i] = to_fp8_e4m3(v); return;
    case DType::fp8_e5m2: static_cast<fp8_e5m2*>(data)[i] = to_fp8_e5m2(v); return;
    case DType::i32: static_cast<std::int32_t*>(data)[i] = static_cast<std::int32_t>(v); return;
    case DType::i64: static_cast<std::int64_t*>(data)[i] = static_cast<std::int64_t>(v); return;
    case DType::f64: static_cast<double*>(data)[i] = v; return;
  }
  FT_THROW() << "unknown dtype";
}

}  // namespace ftrain
