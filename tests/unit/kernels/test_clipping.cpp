// sum_squares_accumulate, clip_coefficient and adamw_update_guarded (the
// gradient clipping and divergence guard that read nothing on the host)
// against float64 references: the accumulated sum of squares, the norm and
// the clip factor of torch.nn.utils.clip_grad_norm_, the sticky first
// diverged step, and an AdamW step that is applied when the flag is clear
// and changes nothing when it is set; argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
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

Tensor scalar_i64(std::int64_t value, const char* name) {
  Tensor t = Tensor::zeros({1}, DType::i64, Device::host, name);
  t.data_as<std::int64_t>()[0] = value;
  const Device d = backend_ctx().device();
  return d == Device::host ? t : to_device(t, d);
}

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

TEST_P(Clipping, GuardedAdamwAppliesWhenClearAndChangesNothingWhenFlagged) {
  const std::int64_t n = 4103;
  Tensor p1 = random_tensor({n}, 1, DType::f32, "p1"), p2 = random_tensor({n}, 1, DType::f32, "p2");
  Tensor grad = random_tensor({n}, 2, DType::f32, "grad");
  Tensor m1 = named_zeros({n}, DType::f32, "m1"), v1 = named_zeros({n}, DType::f32, "v1");
  Tensor m2 = named_zeros({n}, DType::f32, "m2"), v2 = named_zeros({n}, DType::f32, "v2");
  Tensor scale = named_zeros({1}, DType::f32, "scale");
  ops::fill(backend_ctx(), scale, 0.25f);
  // Clear flag: exactly adamw_update with the scale read on the device.
  ops::adamw_update_guarded(backend_ctx(), p1, grad, m1, v1, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, scale,
                            scalar_i64(0, "clear"));
  ops::adamw_update(backend_ctx(), p2, grad, m2, v2, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 0.25f);
  const auto a = read_floats(p1), b = read_floats(p2);
  ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  EXPECT_EQ(read_floats(m1), read_floats(m2));
  // Flagged: param and both moments keep their bits.
  const auto p_before = read_floats(p1), m_before = read_floats(m1), v_before = read_floats(v1);
  ops::adamw_update_guarded(backend_ctx(), p1, grad, m1, v1, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 2, scale,
                            scalar_i64(2, "diverged"));
  EXPECT_EQ(std::memcmp(read_floats(p1).data(), p_before.data(), p_before.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(read_floats(m1).data(), m_before.data(), m_before.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(read_floats(v1).data(), v_before.data(), v_before.size() * sizeof(float)), 0);
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
  Tensor p = random_tensor({8}, 1, DType::f32, "p"), m = named_zeros({8}, DType::f32, "m");
  Tensor v = named_zeros({8}, DType::f32, "v"), scale2 = named_zeros({2}, DType::f32, "scale2");
  Tensor clear = named_zeros({1}, DType::i64, "clear");
  expect_error_mentioning(
      [&] { ops::adamw_update_guarded(backend_ctx(), p, x, m, v, 1e-3f, 0.9f, 0.99f, 1e-8f, 0, 1, scale2, clear); },
      {"adamw_update_guarded", "scale2"});
}
