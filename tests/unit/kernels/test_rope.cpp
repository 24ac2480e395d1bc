// host rope_forward / rope_backward against an explicit rotate_half
// reference, finite differences, in-place aliasing and orthogonality; and
// rope_inv_freq / rope_inv_freq_llama3 against Hugging Face's formulas.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "host_op_checks.hpp"
#include "kernels/ops.hpp"
#include "kernels/rope_frequencies.hpp"

using namespace ftrain;
using namespace ftrain::testing;

FTRAIN_BACKEND_TEST_SUITE(Rope);

namespace {

// HF apply_rotary_pos_emb: x * cos + rotate_half(x) * sin with
// rotate_half(x) = cat(-x[D/2:], x[:D/2]) and cos/sin = cat(freqs, freqs).
// Token (b, t) is at offset + t, or offset + positions[b * T + t] when given
// (HF's position_ids).
std::vector<double> rope_reference(const std::vector<double>& x, const Shape& shape,
                                   const std::vector<double>& inv_freq, std::int64_t offset,
                                   const std::vector<std::int32_t>& positions = {}) {
  const std::int64_t B = shape[0], T = shape[1], H = shape[2], D = shape[3], half = D / 2;
  std::vector<double> y(x.size());
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int64_t h = 0; h < H; ++h) {
        const std::int64_t base = ((b * T + t) * H + h) * D;
        std::vector<double> rotated(D), cosv(D), sinv(D);
        for (std::int64_t i = 0; i < D; ++i) {
          rotated[i] = i < half ? -x[base + i + half] : x[base + i - half];
          // The angle is the f32 product, as HF (and the kernel) compute it.
          const std::int64_t position = offset + (positions.empty() ? t : positions[static_cast<std::size_t>(b * T + t)]);
          const double angle = static_cast<float>(static_cast<float>(position) * static_cast<float>(inv_freq[i % half]));
          cosv[i] = std::cos(angle);
          sinv[i] = std::sin(angle);
        }
        for (std::int64_t i = 0; i < D; ++i) y[base + i] = x[base + i] * cosv[i] + rotated[i] * sinv[i];
      }
  return y;
}

}  // namespace

TEST_P(Rope, ForwardMatchesRotateHalfAndBackwardIsTheInverse) {
  for (const Shape& shape : {Shape{2, 5, 3, 8}, Shape{1, 7, 2, 6}, Shape{3, 1, 1, 2}}) {
    for (const std::int64_t offset : {std::int64_t{0}, std::int64_t{37}}) {
      SCOPED_TRACE("x " + shape_string(shape) + " offset " + std::to_string(offset));
      Tensor inv_freq = rope_inv_freq(shape[3], 10000.0);
      Tensor x = random_tensor(shape, 1, DType::f32, "q");
      Tensor y = named_zeros(shape, DType::f32, "q_rot");
      ops::rope_forward(backend_ctx(), x, inv_freq, offset, nullptr, y);
      auto f = [&](const Inputs& in) { return rope_reference(in[0], shape, to_doubles(inv_freq), offset); };
      const Inputs in{to_doubles(x)};
      EXPECT_LT(relative_error(to_doubles(y), f(in)), 1e-6);

      Tensor dy = random_tensor(shape, 2, DType::f32, "dy");
      Tensor dx = named_zeros(shape, DType::f32, "dx");
      ops::rope_backward(backend_ctx(), dy, inv_freq, offset, nullptr, dx);
      expect_vjp_matches(f, in, 0, to_doubles(dx), to_doubles(dy), 1e-6, 3, "dx");

      // Rotation is orthogonal: backward(forward(x)) == x.
      Tensor back = named_zeros(shape, DType::f32, "back");
      ops::rope_backward(backend_ctx(), y, inv_freq, offset, nullptr, back);
      EXPECT_LT(relative_error(to_doubles(back), to_doubles(x)), 1e-6);

      // In place: y aliases x, dx aliases dy.
      Tensor inplace = x.clone();
      ops::rope_forward(backend_ctx(), inplace, inv_freq, offset, nullptr, inplace);
      EXPECT_EQ(to_doubles(inplace), to_doubles(y));
      ops::rope_backward(backend_ctx(), inplace, inv_freq, offset, nullptr, inplace);
      EXPECT_EQ(to_doubles(inplace), to_doubles(back));
    }
  }
}

// Per-token positions (a packed window whose positions restart at each
// document): the rotation HF applies with those position_ids, its transpose
// backward, and a document rotated bit for bit as it is alone at offset 0.
TEST_P(Rope, PerTokenPositionsMatchHfPositionIdsAndADocumentAlone) {
  const Shape shape{2, 7, 3, 8};
  // Row 0: documents of 3 and 4 tokens; row 1: 2, 1 and 4 tokens.
  const std::vector<std::int32_t> restart = {0, 1, 2, 0, 1, 2, 3, 0, 1, 0, 0, 1, 2, 3};
  Tensor positions = Tensor::empty({2, 7}, DType::i32, Device::host, "positions");
  std::copy(restart.begin(), restart.end(), positions.data_as<std::int32_t>());
  if (backend_ctx().device() != Device::host) positions = to_device(positions, backend_ctx().device());
  Tensor inv_freq = rope_inv_freq(8, 10000.0);
  for (const std::int64_t offset : {std::int64_t{0}, std::int64_t{11}}) {
    SCOPED_TRACE("offset " + std::to_string(offset));
    Tensor x = random_tensor(shape, 3, DType::f32, "q");
    Tensor y = named_zeros(shape, DType::f32, "q_rot");
    ops::rope_forward(backend_ctx(), x, inv_freq, offset, &positions, y);
    auto f = [&](const Inputs& in) { return rope_reference(in[0], shape, to_doubles(inv_freq), offset, restart); };
    const Inputs in{to_doubles(x)};
    EXPECT_LT(relative_error(to_doubles(y), f(in)), 1e-6);
    // Not the window's own positions: the test can tell them apart.
    EXPECT_GT(relative_error(to_doubles(y), rope_reference(in[0], shape, to_doubles(inv_freq), offset)), 1e-2);

    Tensor dy = random_tensor(shape, 4, DType::f32, "dy");
    Tensor dx = named_zeros(shape, DType::f32, "dx");
    ops::rope_backward(backend_ctx(), dy, inv_freq, offset, &positions, dx);
    expect_vjp_matches(f, in, 0, to_doubles(dx), to_doubles(dy), 1e-6, 3, "dx");
  }
  // Row 0's second document (columns 3..6) alone, positions 0..3: the same bits.
  Tensor x = random_tensor(shape, 5, DType::f32, "q");
  Tensor packed = named_zeros(shape, DType::f32, "packed");
  ops::rope_forward(backend_ctx(), x, inv_freq, 0, &positions, packed);
  const std::size_t row = 3 * 8;
  const std::vector<double> xs = to_doubles(x);
  Tensor alone_x = tensor_from({1, 4, 3, 8}, std::vector<double>(xs.begin() + 3 * row, xs.begin() + 7 * row));
  Tensor alone = named_zeros({1, 4, 3, 8}, DType::f32, "alone_rot");
  ops::rope_forward(backend_ctx(), alone_x, inv_freq, 0, nullptr, alone);
  const std::vector<float> packed_values = read_floats(packed);
  const std::vector<float> from_packed(packed_values.begin() + 3 * row, packed_values.begin() + 7 * row);
  const std::vector<float> by_itself = read_floats(alone);
  EXPECT_EQ(from_packed, by_itself);
}

TEST_P(Rope, Bf16InPlace) {
  const Shape shape{2, 6, 4, 16};
  Tensor inv_freq = rope_inv_freq(16, 500000.0);
  Tensor x = random_tensor(shape, 1, DType::bf16, "k");
  Tensor y = x.clone();
  ops::rope_forward(backend_ctx(), y, inv_freq, 5, nullptr, y);
  EXPECT_LT(relative_error(to_doubles(y), rope_reference(to_doubles(x), shape, to_doubles(inv_freq), 5)), 5e-3);
  ops::rope_backward(backend_ctx(), y, inv_freq, 5, nullptr, y);
  EXPECT_LT(relative_error(to_doubles(y), to_doubles(x)), 8e-3);
}

TEST_P(Rope, InverseFrequencies) {
  Tensor f = rope_inv_freq(8, 10000.0);
  ASSERT_EQ(f.shape(), (Shape{4}));
  const auto v = to_doubles(f);
  EXPECT_FLOAT_EQ(v[0], 1.0);
  EXPECT_FLOAT_EQ(v[1], 0.1);    // 10000^(-2/8)
  EXPECT_FLOAT_EQ(v[2], 0.01);   // 10000^(-4/8)
  EXPECT_FLOAT_EQ(v[3], 0.001);  // 10000^(-6/8)
}

TEST_P(Rope, Llama3ScalingMatchesHandComputedValues) {
  // head_dim 8, theta 10000: inv_freq {1, 0.1, 0.01, 0.001}, wavelengths
  // 2 pi / f = {6.283, 62.83, 628.3, 6283}. With original 1024, low factor 1,
  // high factor 4: low_freq_wavelen = 1024, high_freq_wavelen = 256.
  //  f = 1, 0.1  -> wavelen < 256: unchanged;
  //  f = 0.01    -> 256 <= 628.3 <= 1024: smooth = (1024 / 628.3 - 1) / 3,
  //                 (1 - smooth) * 0.01 / 8 + smooth * 0.01;
  //  f = 0.001   -> wavelen > 1024: 0.001 / 8.
  Tensor f = rope_inv_freq_llama3(8, 10000.0, 8.0, 1.0, 4.0, 1024);
  const auto v = to_doubles(f);
  ASSERT_EQ(v.size(), 4u);
  EXPECT_FLOAT_EQ(v[0], 1.0);
  EXPECT_FLOAT_EQ(v[1], 0.1);
  const double wavelen = 2 * std::numbers::pi / 0.01;
  const double smooth = (1024.0 / wavelen - 1.0) / 3.0;
  EXPECT_NEAR(smooth, 0.2099, 1e-4);
  EXPECT_FLOAT_EQ(v[2], (1 - smooth) * 0.01 / 8 + smooth * 0.01);
  EXPECT_FLOAT_EQ(v[3], 0.001 / 8);
  // Llama 3.1 8B (head_dim 128, theta 500000, factor 8, 1, 4, 8192): the
  // highest frequency is untouched, the lowest divided by 8.
  const auto l = to_doubles(rope_inv_freq_llama3(128, 500000.0, 8.0, 1.0, 4.0, 8192));
  const auto d = to_doubles(rope_inv_freq(128, 500000.0));
  EXPECT_EQ(l[0], d[0]);
  EXPECT_FLOAT_EQ(l[63], d[63] / 8);
}

TEST_P(Rope, ShapeErrors) {
  Tensor inv_freq = rope_inv_freq(8, 10000.0);
  Tensor x3 = named_zeros({2, 3, 8}, DType::f32, "q3d");
  expect_error_mentioning([&] { ops::rope_forward(backend_ctx(), x3, inv_freq, 0, nullptr, x3); }, {"rope_forward", "q3d", "[B, T, H, D]"});
  Tensor x = named_zeros({1, 2, 2, 6}, DType::f32, "q6");
  expect_error_mentioning([&] { ops::rope_forward(backend_ctx(), x, inv_freq, 0, nullptr, x); }, {"rope_forward", "inv_freq"});
  Tensor y = named_zeros({1, 2, 3, 8}, DType::f32, "bad_out");
  Tensor x8 = named_zeros({1, 2, 2, 8}, DType::f32, "q");
  expect_error_mentioning([&] { ops::rope_backward(backend_ctx(), x8, inv_freq, 0, nullptr, y); }, {"rope_backward", "bad_out"});
  Tensor wrong = named_zeros({1, 3}, DType::i32, "positions13");
  expect_error_mentioning([&] { ops::rope_forward(backend_ctx(), x8, inv_freq, 0, &wrong, x8); },
                          {"rope_forward", "positions13", "i32[1, 2]"});
  Tensor negative = Tensor::empty({1, 2}, DType::i32, Device::host, "positions");
  negative.data_as<std::int32_t>()[0] = 0;
  negative.data_as<std::int32_t>()[1] = -3;
  expect_error_mentioning([&] { ops::rope_backward(backend_ctx(), x8, inv_freq, 0, &negative, x8); },
                          {"rope_backward", "positions[0, 1] = -3", "negative"});
  EXPECT_THROW(rope_inv_freq(7, 10000.0), Error);
  EXPECT_THROW(rope_inv_freq_llama3(8, 10000.0, 8.0, 4.0, 1.0, 1024), Error);
}
