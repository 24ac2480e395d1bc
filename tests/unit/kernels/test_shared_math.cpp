// Shared __host__ __device__ arithmetic (kernels/math/) that the CUDA kernels
// added for issue 18 call, checked on the host against what the host did
// before it was shared:
//  * f16 (math/f16.hpp) against base/dtype.cpp's generic mini-float codec,
//    which stays the reference: all 2^16 codes decoded bit for bit, and every
//    sign/exponent/10-bit mantissa pattern of an f32 with its 13 rounding
//    bits at 0, 1, just below half, half, just above half and all ones
//    encoded bit for bit (ties to even, overflow to infinity, subnormals,
//    NaN with its sign);
//  * the clip_coefficient pieces (math/pointwise.hpp): the finite test and the
//    sticky diverged step, against std::isfinite over the edge values;
//  * adamw_update_chunks_guarded's skip rule;
//  * the vocabulary-parallel slices' index rules (math/embedding.hpp,
//    math/cross_entropy.hpp) that the host and CUDA kernels both apply.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "base/dtype.hpp"
#include "kernels/math/adamw.hpp"
#include "kernels/math/cross_entropy.hpp"
#include "kernels/math/embedding.hpp"
#include "kernels/math/f16.hpp"
#include "kernels/math/pointwise.hpp"

using namespace ftrain;

namespace {

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

}  // namespace

TEST(SharedF16, EveryCodeDecodesLikeTheHostCodec) {
  for (std::uint32_t code = 0; code < 0x10000u; ++code) {
    const float want = to_float(f16{static_cast<std::uint16_t>(code)});
    const float got = math::f16_bits_to_float(static_cast<std::uint16_t>(code));
    ASSERT_EQ(bits(got), bits(want)) << "f16 code 0x" << std::hex << code;
  }
}

TEST(SharedF16, EveryRoundingNeighbourhoodEncodesLikeTheHostCodec) {
  const std::uint32_t low_bits[] = {0x0000u, 0x0001u, 0x0fffu, 0x1000u, 0x1001u, 0x1fffu};
  std::int64_t checked = 0;
  for (std::uint32_t high = 0; high < (1u << 19); ++high) {
    for (std::uint32_t low : low_bits) {
      const float f = from_bits(high << 13 | low);
      const std::uint16_t want = to_f16(f).bits;
      const std::uint16_t got = math::float_to_f16_bits(f);
      ASSERT_EQ(got, want) << "f32 bits 0x" << std::hex << bits(f) << " (" << f << ")";
      ++checked;
    }
  }
  EXPECT_EQ(checked, std::int64_t{6} << 19);
}

TEST(SharedF16, KnownValues) {
  EXPECT_EQ(math::float_to_f16_bits(1.0f), 0x3c00u);
  EXPECT_EQ(math::float_to_f16_bits(65504.0f), 0x7bffu);
  EXPECT_EQ(math::float_to_f16_bits(65520.0f), 0x7c00u) << "ties to even past the largest finite: infinity";
  EXPECT_EQ(math::float_to_f16_bits(-std::numeric_limits<float>::infinity()), 0xfc00u);
  EXPECT_EQ(math::float_to_f16_bits(std::ldexp(1.0f, -24)), 0x0001u) << "smallest subnormal";
  EXPECT_EQ(math::float_to_f16_bits(std::ldexp(1.0f, -25)), 0x0000u) << "half of it: ties to even (zero)";
  EXPECT_EQ(math::float_to_f16_bits(-0.0f), 0x8000u);
  EXPECT_EQ(math::float_to_f16_bits(-std::nanf("")), 0xfe00u);
  EXPECT_EQ(math::f16_bits_to_float(0x3555u), to_float(f16{0x3555u}));
}

TEST(SharedClipMath, FiniteTestAndStickyDivergedStep) {
  const double edges[] = {0.0, -0.0, 1.0, std::numeric_limits<double>::max(), -std::numeric_limits<double>::max(),
                          std::numeric_limits<double>::denorm_min(), std::numeric_limits<double>::infinity(),
                          -std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()};
  for (double x : edges) EXPECT_EQ(math::finite_f64(x), std::isfinite(x)) << x;
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(math::diverged_step_after(0, 3.0, 7), 0) << "finite norm, clear flag: stays clear";
  EXPECT_EQ(math::diverged_step_after(0, inf, 7), 7) << "first non-finite norm sets the step";
  EXPECT_EQ(math::diverged_step_after(0, std::nan(""), 8), 8);
  EXPECT_EQ(math::diverged_step_after(7, std::nan(""), 9), 7) << "sticky: the first diverged step stays";
  EXPECT_EQ(math::diverged_step_after(7, 1.0, 10), 7) << "sticky even when a later norm is finite";
  EXPECT_EQ(math::norm_from_sum_squares(16.0), 4.0);
  EXPECT_FALSE(math::adamw_step_skipped(0));
  EXPECT_TRUE(math::adamw_step_skipped(3));
}

// A slice of rows [100, 150) of a 200-row table: the token's row in the
// slice at its edges, -1 for another slice's token or no token; the whole
// table (first_row 0, rows = vocab) is embedding_token_valid's rule.
TEST(SharedVocabSliceMath, EmbeddingSliceRowAtTheEdges) {
  EXPECT_EQ(math::embedding_slice_row(100, 100, 50), 0);
  EXPECT_EQ(math::embedding_slice_row(149, 100, 50), 49);
  EXPECT_EQ(math::embedding_slice_row(99, 100, 50), -1);
  EXPECT_EQ(math::embedding_slice_row(150, 100, 50), -1);
  EXPECT_EQ(math::embedding_slice_row(-1, 100, 50), -1);
  EXPECT_EQ(math::embedding_slice_row(std::numeric_limits<std::int32_t>::max(), 100, 50), -1);
  for (const std::int32_t token : {-100, -1, 0, 1, 199, 200, 70000})
    EXPECT_EQ(math::embedding_slice_row(token, 0, 200) >= 0, math::embedding_token_valid(token, 200)) << token;
}

// A target's column in a slice: moved by the slice's first row; the ignore
// index is -1 (never a column), also for a slice whose first row would move
// -100 onto a column.
TEST(SharedVocabSliceMath, CrossEntropyLocalTarget) {
  EXPECT_EQ(math::cross_entropy_local_target(0, 0), 0);
  EXPECT_EQ(math::cross_entropy_local_target(130, 100), 30);
  EXPECT_EQ(math::cross_entropy_local_target(99, 100), -1);
  EXPECT_EQ(math::cross_entropy_local_target(math::kCrossEntropyIgnoreIndex, 0), -1);
  EXPECT_EQ(math::cross_entropy_local_target(math::kCrossEntropyIgnoreIndex, -120), -1);
}

// exp(local_lse - row_max): 1 for the slice holding the max, the slices'
// shares summing to the whole row's sum (log_sum_exp of the group).
TEST(SharedVocabSliceMath, SliceSumExpCombinesToTheWholeLogSumExp) {
  const float a = 2.5f, b = 1.0f;  // two slices' lse
  EXPECT_EQ(math::cross_entropy_slice_sum_exp(a, a), 1.0f);
  const float sum = math::cross_entropy_slice_sum_exp(a, a) + math::cross_entropy_slice_sum_exp(b, a);
  EXPECT_NEAR(math::log_sum_exp(a, sum), std::log(std::exp(2.5) + std::exp(1.0)), 1e-6);
}
