// Element types and the scalar conversions between them.
//
// Storage types bf16, f16, fp8 e4m3 and fp8 e5m2 are plain bit patterns; all
// host arithmetic happens in f32. Conversions round to nearest, ties to even.
// FP8 follows the OCP FP8 spec as used by NVIDIA Hopper:
//   e4m3 (E4M3FN): bias 7, no infinities, max finite 448, NaN = S.1111.111;
//   e5m2: bias 15, IEEE-like with inf/NaN, max finite 57344.
// Float-to-FP8 conversion saturates to the max finite value (what cuBLASLt
// and Transformer Engine do with scaled tensors); NaN stays NaN.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace ftrain {

// f64 is an accumulator type, not a storage type of model tensors: device
// scalars that must carry the host's double arithmetic bit for bit (the
// gradient norm's sum of squares, execution-model.md). The kernels' float
// math does not take it (dtype_is_float is false for it).
enum class DType : std::uint8_t { f32, bf16, f16, fp8_e4m3, fp8_e5m2, i32, i64, f64 };

inline constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::fp8_e4m3: return 1;
    case DType::fp8_e5m2: return 1;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::f64: return 8;
  }
  return 0;
}

inline constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::fp8_e4m3: return "fp8_e4m3";
    case DType::fp8_e5m2: return "fp8_e5m2";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::f64: return "f64";
  }
  return "?";
}

// A float storage type the kernels compute on (in f32); not f64 (above).
inline constexpr bool dtype_is_float(DType t) { return t != DType::i32 && t != DType::i64 && t != DType::f64; }

// Parses "f32", "fp32", "float32", "bf16", ... ; returns false if unknown.
bool parse_dtype(std::string_view text, DType& out);

// ---- scalar storage types ---------------------------------------------------

struct bf16 {
  std::uint16_t bits = 0;
};
struct f16 {
  std::uint16_t bits = 0;
};
struct fp8_e4m3 {
  std::uint8_t bits = 0;
};
struct fp8_e5m2 {
  std::uint8_t bits = 0;
};

inline std::uint32_t float_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float to_float(bf16 v) { return bits_float(static_cast<std::uint32_t>(v.bits) << 16); }

inline bf16 to_bf16(float f) {
  std::uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<std::uint16_t>((u >> 16) | 0x40u)};  // quiet NaN
  std::uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);
  return bf16{static_cast<std::uint16_t>((u + rounding_bias) >> 16)};
}

// Rounds a float to the nearest bf16 value and returns it as float.
inline float round_to_bf16(float f) { return to_float(to_bf16(f)); }

float to_float(f16 v);
f16 to_f16(float f);
float to_float(fp8_e4m3 v);
float to_float(fp8_e5m2 v);
fp8_e4m3 to_fp8_e4m3(float f);  // saturating, RNE
fp8_e5m2 to_fp8_e5m2(float f);  // saturating, RNE

inline constexpr float kFp8E4m3Max = 448.0f;
inline constexpr float kFp8E5m2Max = 57344.0f;

// Loads element i of a float-typed buffer as f32 / stores f32 with rounding.
// For generic (non hot-path) code: kernels use the typed overloads above.
float load_as_float(const void* data, DType t, std::int64_t i);
void store_from_float(void* data, DType t, std::int64_t i, float v);

}  // namespace ftrain
