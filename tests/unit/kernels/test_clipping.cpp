// sum_squares_accumulate and clip_coefficient (the gradient clipping and
// divergence flag that read nothing on the host) against float64
// references: the accumulated sum of squares, the norm and the clip factor
// of torch.nn.utils.clip_grad_norm_, the sticky first diverged step;
// argument errors. The guarded AdamW step is test_adamw.cpp's.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "host_op_checks.hpp"
#include "kernels/ops.hpp"

using namespace ftrain;
using namespace ftrain::testing;

FTRAIN_BACKEND_TEST_SUITE(Clipping);

namespace {

Tensor to_host(const Tensor& t) {
  backend_synchronize();
  return t.device() == Device::host ? t : to_device(t, Device::host);
}
double read_f64(const Tensor& t) { return to_host(t).data_as<double>()[0]; }
std::int64_t read_i64(const Tensor& t) { return to_host(t).data_as<std::int64_t>()[0]; }
float read_f32(const Tensor& t) { return to_host(t).data_as<float>()[0]; }

}  // namespace

TEST_P(Clipping, SumSquaresAccumulatesInDoubleLikeSumSquares) {
  Tensor a = random_tensor({5001}, 3, DType::f32, "a");
  Tensor b = random_tensor({77}, 4, DType::bf16, "b");
  Tensor acc = named_zeros({1}, DType::f64, "acc");
  ops::sum_squares_accumulate(backend_ctx(), a, acc);
  ops::sum_squares_accumulate(backend_ctx(), b, acc);
  double expect = 0;
  for (double v : to_doubles(a)) expect += v * v;
  for (double v : to_doubles(b)) expect += v * v;
  EXPECT_NEAR(read_f64(acc), expect, 1e-12 * expect);
  // Bit for bit the host's former arithmetic: 0 + sum_squares(a) + sum_squares(b) in double.
  const double host = (0.0 + ops::sum_squares(backend_ctx(), a)) + ops::sum_squares(backend_ctx(), b);
  EXPECT_EQ(read_f64(acc), host);
}

TEST_P(Clipping, CoefficientIsTorchClipGradNormAndTheFlagSticks) {
  Tensor sum_sq = named_zeros({1}, DType::f64, "sum_sq"), norm = named_zeros({1}, DType::f64, "norm");
  Tensor scale = named_zeros({1}, DType::f32, "scale"), diverged = named_zeros({1}, DType::i64, "diverged_step");
  Tensor g = random_tensor({300}, 9, DType::f32, "g");
  ops::sum_squares_accumulate(backend_ctx(), g, sum_sq);
  const double n = std::sqrt(read_f64(sum_sq));
  ASSERT_GT(n, 2.0);
  ops::clip_coefficient(backend_ctx(), sum_sq, 2.0, 1, norm, scale, diverged);  // clipped
  EXPECT_EQ(read_f64(norm), n);
  EXPECT_EQ(read_f32(scale), static_cast<float>(2.0 / (n + 1e-6)));
  EXPECT_EQ(read_i64(diverged), 0);
  ops::clip_coefficient(backend_ctx(), sum_sq, 1e9, 2, norm, scale, diverged);  // below the limit
  EXPECT_EQ(read_f32(scale), 1.0f);
  ops::clip_coefficient(backend_ctx(), sum_sq, 0.0, 3, norm, scale, diverged);  // clipping off
  EXPECT_EQ(read_f32(scale), 1.0f);
  // A non-finite norm flags its step; a later one does not move the flag.
  Tensor inf = named_zeros({1}, DType::f32, "inf");
  ops::fill(backend_ctx(), inf, std::numeric_limits<float>::infinity());
  ops::sum_squares_accumulate(backend_ctx(), inf, sum_sq);
  ops::clip_coefficient(backend_ctx(), sum_sq, 1.0, 4, norm, scale, diverged);
  EXPECT_TRUE(std::isinf(read_f64(norm)));
  EXPECT_EQ(read_i64(diverged), 4);
  ops::clip_coefficient(backend_ctx(), sum_sq, 1.0, 5, norm, scale, diverged);
  EXPECT_EQ(read_i64(diverged), 4);
}

TEST_P(Clipping, ArgumentErrorsNameTheTensor) {
  Tensor x = random_tensor({8}, 1, DType::f32, "x");
  Tensor wrong = named_zeros({1}, DType::f32, "acc32");
  expect_error_mentioning([&] { ops::sum_squares_accumulate(backend_ctx(), x, wrong); },
                          {"sum_squares_accumulate", "acc32", "f64"});
  Tensor sum_sq = named_zeros({1}, DType::f64, "sum_sq"), norm = named_zeros({1}, DType::f64, "norm");
  Tensor scale = named_zeros({1}, DType::f32, "scale"), flag32 = named_zeros({1}, DType::i32, "flag32");
  expect_error_mentioning([&] { ops::clip_coefficient(backend_ctx(), sum_sq, 1.0, 1, norm, scale, flag32); },
                          {"clip_coefficient", "flag32"});
}
