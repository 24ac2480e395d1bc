// host adamw_update against a float64 reference of the documented update
// (ops.hpp) over three steps, with weight decay, bias correction and
// gradient scaling; argument errors.
#include <gtest/gtest.h>

#include <cmath>

#include "host_op_checks.hpp"
#include "kernels/ops.hpp"

using namespace ftrain;
using namespace ftrain::testing;

FTRAIN_BACKEND_TEST_SUITE(AdamW);

TEST_P(AdamW, ThreeStepsMatchDoubleReference) {
  const std::int64_t n = 4103;  // crosses element-wise chunks, odd tail
  const float lr = 1e-2f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f, grad_scale = 0.5f;
  Tensor param = random_tensor({n}, 1, DType::f32, "param");
  Tensor m = named_zeros({n}, DType::f32, "exp_avg"), v = named_zeros({n}, DType::f32, "exp_avg_sq");
  std::vector<double> p = to_doubles(param), mr(n, 0.0), vr(n, 0.0);
  for (std::int64_t step = 1; step <= 3; ++step) {
    Tensor grad = random_tensor({n}, 10 + static_cast<std::uint64_t>(step), DType::f32, "grad");
    const auto g = to_doubles(grad);
    ops::adamw_update(backend_ctx(), param, grad, m, v, lr, beta1, beta2, eps, weight_decay, step, grad_scale);
    const double b1 = beta1, b2 = beta2;
    for (std::int64_t i = 0; i < n; ++i) {
      const double gi = g[i] * grad_scale;
      mr[i] = b1 * mr[i] + (1 - b1) * gi;
      vr[i] = b2 * vr[i] + (1 - b2) * gi * gi;
      const double mhat = mr[i] / (1 - std::pow(b1, step));
      const double vhat = vr[i] / (1 - std::pow(b2, step));
      p[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + weight_decay * p[i]);
    }
    SCOPED_TRACE("step " + std::to_string(step));
    EXPECT_LT(relative_error(to_doubles(m), mr), 1e-6);
    EXPECT_LT(relative_error(to_doubles(v), vr), 1e-6);
    const auto pk = to_doubles(param);
    for (std::int64_t i = 0; i < n; ++i) ASSERT_NEAR(pk[i], p[i], 1e-6 + 1e-6 * std::abs(p[i])) << "element " << i;
  }
}

TEST_P(AdamW, FirstStepIsSignTimesLearningRate) {
  // With bias correction mhat / sqrt(vhat) = g / |g| on step 1.
  Tensor param = tensor_from({3}, {1.0, -2.0, 0.5});
  Tensor grad = tensor_from({3}, {0.3, -7.0, 1e-3});
  Tensor m = named_zeros({3}, DType::f32, "m"), v = named_zeros({3}, DType::f32, "v");
  ops::adamw_update(backend_ctx(), param, grad, m, v, 0.1f, 0.9f, 0.999f, 1e-12f, 0.0f, 1, 1.0f);
  const auto p = to_doubles(param);
  EXPECT_NEAR(p[0], 0.9, 1e-6);
  EXPECT_NEAR(p[1], -1.9, 1e-6);
  EXPECT_NEAR(p[2], 0.4, 1e-5);
}

TEST_P(AdamW, ArgumentErrors) {
  Tensor param = named_zeros({8}, DType::f32, "layers.0.w");
  Tensor grad_bf16 = named_zeros({8}, DType::bf16, "grad16");
  Tensor m = named_zeros({8}, DType::f32, "m"), v = named_zeros({8}, DType::f32, "v");
  expect_error_mentioning([&] { ops::adamw_update(backend_ctx(), param, grad_bf16, m, v, 1e-3f, 0.9f, 0.99f, 1e-8f, 0, 1, 1); },
                          {"adamw_update", "grad16", "f32"});
  Tensor v_short = named_zeros({7}, DType::f32, "v7");
  expect_error_mentioning([&] { ops::adamw_update(backend_ctx(), param, m, m, v_short, 1e-3f, 0.9f, 0.99f, 1e-8f, 0, 1, 1); },
                          {"adamw_update", "v7"});
  expect_error_mentioning([&] { ops::adamw_update(backend_ctx(), param, m, m, v, 1e-3f, 0.9f, 0.99f, 1e-8f, 0, 0, 1); },
                          {"adamw_update", "step 0", "layers.0.w"});
}
