// The single-source FP8 arithmetic (kernels/math/fp8.hpp), the functions
// both the host ops and the CUDA kernels (kernels/cuda/fp8.cu) run:
//  * the cast fp8(x * scale), over all 2^16 bf16 bit patterns x (every
//    sign, binade, subnormal, inf and NaN) times a sweep of scales (powers
//    of two from 2^-40 to 2^40, non-powers, tiny, huge, an f32 subnormal),
//    E4M3 and E5M2, bit for bit against (a) an independent reference: the
//    nearest value of the format's grid by binary search over the decoded
//    codes, ties to the even code, saturating at the largest finite value,
//    NaN kept with its sign, and (b) the frexp-based encoder of
//    base/dtype.cpp that the host emulation used before (its goldens);
//    plus every midpoint between adjacent grid values and its f32
//    neighbours, where rounding decides;
//  * a perturbed cast (ties away from zero, truncation) fails the same
//    comparison: the sweep can fail;
//  * the decode, the amax (the integer max of amax_key equals the exact
//    max; NaN when a NaN is present; +inf counts), the transposed copy the
//    host cast writes (transposed_index), the scale rule against its
//    previous std::ldexp form and the history update against a plain
//    re-statement of Transformer Engine's roll.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/dtype.hpp"
#include "base/error.hpp"
#include "core/tensor.hpp"
#include "kernels/math/fp8.hpp"
#include "kernels/ops.hpp"
#include "runtime/execution_context.hpp"

using namespace ftrain;

namespace {

struct Format {
  const char* name;
  bool e4m3;
  int exponent_bits, mantissa_bits, bias;
  int max_code, nan_code;
};
constexpr Format kE4m3{"E4M3", true, 4, 3, 7, 0x7e, 0x7f};
constexpr Format kE5m2{"E5M2", false, 5, 2, 15, 0x7b, 0x7e};

// Value of a non-negative finite code, from the textbook formula.
double grid_value(int code, const Format& f) {
  const int e = code >> f.mantissa_bits, m = code & ((1 << f.mantissa_bits) - 1);
  if (e == 0) return std::ldexp(static_cast<double>(m), 1 - f.bias - f.mantissa_bits);
  return std::ldexp(1.0 + std::ldexp(static_cast<double>(m), -f.mantissa_bits), e - f.bias);
}

// The reference cast: nearest grid value by binary search, ties to even.
std::uint8_t reference_cast(float v, const Format& f) {
  const int sign = std::signbit(v) ? 0x80 : 0;
  if (std::isnan(v)) return static_cast<std::uint8_t>(sign | f.nan_code);
  const double a = std::fabs(static_cast<double>(v));
  if (a >= grid_value(f.max_code, f)) return static_cast<std::uint8_t>(sign | f.max_code);
  int lo = 0, hi = f.max_code;  // grid_value(lo) <= a < grid_value(hi)
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    (grid_value(mid, f) <= a ? lo : hi) = mid;
  }
  const double below = a - grid_value(lo, f), above = grid_value(hi, f) - a;
  const int code = below < above ? lo : above < below ? hi : (lo % 2 == 0 ? lo : hi);
  return static_cast<std::uint8_t>(sign | code);
}

std::uint8_t previous_emulation(float v, const Format& f) { return f.e4m3 ? to_fp8_e4m3(v).bits : to_fp8_e5m2(v).bits; }

float bf16_value(std::uint32_t bits) { return to_float(bf16{static_cast<std::uint16_t>(bits)}); }

std::vector<float> scale_sweep() {
  std::vector<float> s;
  for (int k = -40; k <= 40; ++k) s.push_back(std::ldexp(1.0f, k));
  for (float v : {1.0f / 3.0f, 3.0f, 0.1f, 37.3f, 448.0f / 0.731f, 57344.0f / 1234.5f, 1.00000012f, 0.99999994f,
                  1e-30f, 1e30f, 3.0e38f, 1.5e-38f, 6.0e-39f /* f32 subnormal */, 612.73f, 0.0021f})
    s.push_back(v);
  return s;
}

using CastFn = std::function<std::uint8_t(float, float, const Format&)>;

std::uint8_t shared_cast(float x, float scale, const Format& f) { return math::fp8_cast(x, scale, f.e4m3); }

// Elements where `cast` disagrees with the reference (and, with
// `check_previous`, the previous emulation), describing the first few.
std::int64_t count_mismatches(const CastFn& cast, const Format& f, bool check_previous, std::string& first,
                               const std::vector<float>& scales = scale_sweep()) {
  std::int64_t bad = 0;
  auto note = [&](float x, float scale, int got, int want, const char* against) {
    if (++bad <= 3) {
      char line[200];
      std::snprintf(line, sizeof line, "%s x=%a scale=%a: got 0x%02x, %s 0x%02x\n", f.name, x, scale, got, against,
                    want);
      first += line;
    }
  };
  for (float scale : scales) {
    for (std::uint32_t bits = 0; bits < 65536; ++bits) {
      const float x = bf16_value(bits);
      const std::uint8_t got = cast(x, scale, f);
      const float scaled = x * scale;
      const std::uint8_t want = reference_cast(scaled, f);
      if (got != want) note(x, scale, got, want, "reference");
      if (check_previous && got != previous_emulation(scaled, f)) note(x, scale, got, previous_emulation(scaled, f), "previous");
    }
  }
  // Midpoints between adjacent grid values (the ties) and their f32
  // neighbours, both signs, scale 1.
  for (int code = 0; code < f.max_code; ++code) {
    const float mid = static_cast<float>((grid_value(code, f) + grid_value(code + 1, f)) / 2);
    for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)})
      for (float sx : {x, -x}) {
        const std::uint8_t got = cast(sx, 1.0f, f);
        if (got != reference_cast(sx, f)) note(sx, 1.0f, got, reference_cast(sx, f), "reference");
        if (check_previous && got != previous_emulation(sx, f)) note(sx, 1.0f, got, previous_emulation(sx, f), "previous");
      }
  }
  return bad;
}

}  // namespace

TEST(Fp8Math, CastEqualsTheReferenceAndThePreviousEmulationOverAllBf16TimesScales) {
  for (const Format& f : {kE4m3, kE5m2}) {
    std::string first;
    EXPECT_EQ(count_mismatches(shared_cast, f, /*check_previous=*/true, first), 0) << first;
  }
}

TEST(Fp8Math, APerturbedRoundingFailsTheSweep) {
  // Ties away from zero instead of to even: only the ties differ.
  const CastFn ties_away = [](float x, float scale, const Format& f) {
    const float v = x * scale;
    std::uint8_t code = math::fp8_cast(x, scale, f.e4m3);
    const int magnitude = code & 0x7f;
    if (std::isfinite(v) && magnitude < f.max_code && std::fabs(v) > grid_value(magnitude, f) &&
        std::fabs(static_cast<double>(v)) - grid_value(magnitude, f) == grid_value(magnitude + 1, f) - std::fabs(static_cast<double>(v)))
      code = static_cast<std::uint8_t>(code + 1);
    return code;
  };
  // Truncation: the code just below when the exact value is above the grid point.
  const CastFn truncate = [](float x, float scale, const Format& f) {
    const float v = x * scale;
    std::uint8_t code = math::fp8_cast(x, scale, f.e4m3);
    const int magnitude = code & 0x7f;
    if (std::isfinite(v) && magnitude > 0 && magnitude <= f.max_code &&
        std::fabs(static_cast<double>(v)) < grid_value(magnitude, f))
      code = static_cast<std::uint8_t>(code - 1);
    return code;
  };
  const std::vector<float> few_scales = {1.0f, 37.3f, std::ldexp(1.0f, -12)};
  for (const Format& f : {kE4m3, kE5m2}) {
    std::string first;
    EXPECT_GT(count_mismatches(ties_away, f, false, first, few_scales), 0) << f.name << ": ties away from zero went unnoticed";
    EXPECT_GT(count_mismatches(truncate, f, false, first, few_scales), 0) << f.name << ": truncation went unnoticed";
  }
}

TEST(Fp8Math, SpecialValuesAreHandledPerFormat) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(math::fp8_e4m3_bits(nan), 0x7f);
  EXPECT_EQ(math::fp8_e4m3_bits(-nan), 0xff);
  EXPECT_EQ(math::fp8_e5m2_bits(nan), 0x7e);
  EXPECT_EQ(math::fp8_e4m3_bits(inf), 0x7e) << "saturates: E4M3FN has no inf";
  EXPECT_EQ(math::fp8_e5m2_bits(-inf), 0xfb) << "saturates to -57344, not -inf";
  EXPECT_EQ(math::fp8_e4m3_bits(464.0f), 0x7e) << "464 is the tie of 448 and (unrepresentable) 480";
  EXPECT_EQ(math::fp8_e4m3_bits(-0.0f), 0x80);
  EXPECT_EQ(math::fp8_e4m3_bits(std::ldexp(1.0f, -10)), 0x00) << "half the smallest subnormal ties to zero";
  EXPECT_EQ(math::fp8_e4m3_bits(std::ldexp(1.5f, -10)), 0x01);
  EXPECT_EQ(math::fp8_e5m2_bits(std::ldexp(1.0f, -16)), 0x01) << "E5M2's smallest subnormal";
}

TEST(Fp8Math, DecodeIsExactForAllCodes) {
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<std::uint8_t>(c);
    const float e4 = math::fp8_decode(code, math::kFp8E4m3), e5 = math::fp8_decode(code, math::kFp8E5m2);
    const float w4 = to_float(fp8_e4m3{code}), w5 = to_float(fp8_e5m2{code});
    EXPECT_TRUE(std::isnan(w4) ? std::isnan(e4) : e4 == w4 && std::signbit(e4) == std::signbit(w4)) << "E4M3 " << c;
    EXPECT_TRUE(std::isnan(w5) ? std::isnan(e5) : e5 == w5 && std::signbit(e5) == std::signbit(w5)) << "E5M2 " << c;
    if (!std::isnan(w4)) EXPECT_EQ(math::fp8_e4m3_bits(e4), code) << "E4M3 round trip " << c;
    if (!std::isnan(w5) && !std::isinf(w5)) EXPECT_EQ(math::fp8_e5m2_bits(e5), code) << "E5M2 round trip " << c;
  }
}

TEST(Fp8Math, AmaxIsTheExactMaximumAndNanWins) {
  // Over all bf16 patterns without NaN: the max key is +inf's (inf counts);
  // over the finite ones: the largest finite bf16.
  std::uint32_t all = 0, finite = 0, with_nan = 0;
  double exact_finite = 0;
  for (std::uint32_t bits = 0; bits < 65536; ++bits) {
    const float x = bf16_value(bits);
    with_nan = std::max(with_nan, math::amax_key(x));
    if (std::isnan(x)) continue;
    all = std::max(all, math::amax_key(x));
    if (std::isinf(x)) continue;
    finite = std::max(finite, math::amax_key(x));
    exact_finite = std::max(exact_finite, std::fabs(static_cast<double>(x)));
  }
  EXPECT_TRUE(std::isinf(math::amax_of_key(all)));
  EXPECT_EQ(static_cast<double>(math::amax_of_key(finite)), exact_finite);
  EXPECT_TRUE(std::isnan(math::amax_of_key(with_nan)));
  EXPECT_EQ(math::amax_of_key(0), 0.0f);
  // The host cast's amax (a parallel reduction of the same keys) on random
  // tensors with negatives, subnormals and a planted maximum.
  std::mt19937 gen(7);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  for (int trial = 0; trial < 4; ++trial) {
    const std::int64_t n = 5000 + 977 * trial;
    Tensor x = Tensor::empty({n}, DType::f32);
    float* p = x.data_as<float>();
    double exact = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      p[i] = i % 13 == 0 ? std::ldexp(dist(gen), -140) : dist(gen);
      if (i == n - 1 - trial) p[i] = -25.0f - static_cast<float>(trial);
      exact = std::max(exact, std::fabs(static_cast<double>(p[i])));
    }
    Fp8Tensor q{Tensor::zeros({n}, DType::fp8_e4m3), from_floats({1}, {1.0f}), from_floats({1}, {0.0f}),
                from_floats({1}, {0.0f})};
    ops::cast_to_fp8(host_context(), x, q);
    EXPECT_EQ(static_cast<double>(q.amax.data_as<float>()[0]), exact) << "trial " << trial;
    p[n / 2] = std::numeric_limits<float>::quiet_NaN();
    ops::cast_to_fp8(host_context(), x, q);
    EXPECT_TRUE(std::isnan(q.amax.data_as<float>()[0])) << "a NaN in x makes the amax NaN";
  }
}

TEST(Fp8Math, HostCastWritesTheTransposedCopy) {
  const std::int64_t rows = 37, cols = 23;
  Tensor x = Tensor::empty({rows, cols}, DType::bf16);
  std::mt19937 gen(3);
  std::normal_distribution<float> dist(0.0f, 10.0f);
  for (std::int64_t i = 0; i < x.numel(); ++i) x.data_as<bf16>()[i] = to_bf16(dist(gen));
  for (const DType format : {DType::fp8_e4m3, DType::fp8_e5m2}) {
    Fp8Tensor q{Tensor::zeros({rows, cols}, format), from_floats({1}, {3.7f}), from_floats({1}, {0.0f}), Tensor(),
                Tensor::zeros({cols, rows}, format)};
    ops::cast_to_fp8(host_context(), x, q);
    const auto* d = static_cast<const std::uint8_t*>(q.data.data());
    const auto* t = static_cast<const std::uint8_t*>(q.data_t.data());
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c) {
        ASSERT_EQ(t[c * rows + r], d[r * cols + c]) << dtype_name(format) << " (" << r << ", " << c << ")";
        ASSERT_EQ(d[r * cols + c], math::fp8_cast(to_float(x.data_as<bf16>()[r * cols + c]), 3.7f, format == DType::fp8_e4m3));
      }
    EXPECT_EQ(math::transposed_index(2, 5, rows), 5 * rows + 2);
  }
  // A copy of the wrong shape is refused, naming it.
  Fp8Tensor wrong{Tensor::zeros({rows, cols}, DType::fp8_e4m3), from_floats({1}, {1.0f}), from_floats({1}, {0.0f}),
                  Tensor(), Tensor::zeros({rows, cols}, DType::fp8_e4m3)};
  EXPECT_THROW(ops::cast_to_fp8(host_context(), x, wrong), Error);
}

TEST(Fp8Math, ScaleRuleMatchesItsLdexpFormAndTheHistoryRollsLikeTransformerEngine) {
  auto previous_rule = [](float amax, float previous, float max_value, int margin) {
    if (!(amax > 0.0f) || !std::isfinite(amax)) return previous;
    const double scale = (static_cast<double>(max_value) / amax) / std::ldexp(1.0, margin);
    if (!std::isfinite(static_cast<float>(scale)) || scale <= 0.0) return previous;
    return static_cast<float>(scale);
  };
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> exponent(-140.0f, 127.0f);
  for (int i = 0; i < 20000; ++i) {
    const float amax = i % 1000 == 0 ? std::numeric_limits<float>::quiet_NaN() : std::exp2(exponent(gen));
    for (int margin : {0, 1, 3, 64})
      for (float max_value : {448.0f, 57344.0f}) {
        const float got = math::fp8_next_scale(amax, 0.75f, max_value, margin);
        const float want = previous_rule(amax, 0.75f, max_value, margin);
        ASSERT_EQ(std::memcmp(&got, &want, 4), 0) << "amax " << amax << " margin " << margin;
      }
  }
  // History [4, 3]: TE's roll, restated with std::rotate.
  for (bool most_recent : {false, true}) {
    std::vector<float> h{2, 3, 100, 9, 1, 1, 4, 7, 1, 1, 1, 1};  // row-major [4, 3]
    std::vector<float> scale{1, 1, 1}, scale_inv{1, 1, 1};
    std::vector<float> want = h;
    for (int c = 0; c < 3; ++c) {
      float amax = h[c];
      if (!most_recent)
        for (int r = 0; r < 4; ++r) amax = std::max(amax, h[r * 3 + c]);
      const float s = 448.0f / amax;
      std::vector<float> col{h[c], h[3 + c], h[6 + c], h[9 + c]};
      std::rotate(col.begin(), col.begin() + 1, col.end());  // torch.roll(h, -1, 0)
      col[0] = 0.0f;
      for (int r = 0; r < 4; ++r) want[r * 3 + c] = col[r];
      math::fp8_update_history_column(h.data(), 4, 3, c, scale.data(), scale_inv.data(), 448.0f, 0, most_recent);
      EXPECT_EQ(scale[c], s) << "column " << c;
      EXPECT_EQ(scale_inv[c], 1.0f / s) << "column " << c << ": scale_inv follows the new scale";
    }
    EXPECT_EQ(h, want) << (most_recent ? "most_recent" : "max");
  }
}
