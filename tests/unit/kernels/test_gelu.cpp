// host gelu_forward / gelu_backward, exact (erf) and tanh forms: reference,
// finite differences, bf16, shape errors.
#include <gtest/gtest.h>

#include <cmath>

#include "host_op_checks.hpp"
#include "kernels/ops.hpp"

using namespace ftrain;
using namespace ftrain::testing;

FTRAIN_BACKEND_TEST_SUITE(Gelu);

namespace {

std::vector<double> gelu_reference(const Inputs& in, GeluApproximation approximation) {
  std::vector<double> y(in[0].size());
  for (std::size_t i = 0; i < y.size(); ++i) {
    const double x = in[0][i];
    y[i] = approximation == GeluApproximation::none
               ? 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)))
               : 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
  }
  return y;
}

}  // namespace

TEST_P(Gelu, ForwardAndBackwardMatchReference) {
  for (const auto approximation : {GeluApproximation::none, GeluApproximation::tanh}) {
    for (const Shape& shape : {Shape{7, 13}, Shape{3}, Shape{2, 2500}}) {
      SCOPED_TRACE("shape " + shape_string(shape) + (approximation == GeluApproximation::tanh ? " tanh" : " erf"));
      Tensor x = random_tensor(shape, 1, DType::f32, "x", 2.5);
      Tensor y = named_zeros(shape, DType::f32, "y");
      ops::gelu_forward(backend_ctx(), x, approximation, y);
      auto f = [&](const Inputs& in) { return gelu_reference(in, approximation); };
      const Inputs in{to_doubles(x)};
      EXPECT_LT(relative_error(to_doubles(y), f(in)), 1e-6);
      Tensor dy = random_tensor(shape, 2, DType::f32, "dy");
      Tensor dx = random_tensor(shape, 3, DType::f32, "dx");
      ops::gelu_backward(backend_ctx(), x, dy, approximation, dx);
      expect_vjp_matches(f, in, 0, to_doubles(dx), to_doubles(dy), 1e-5, 4, "dx");
    }
  }
  // The two forms differ (by < 1e-3 at x = 1).
  Tensor one = tensor_from({1}, {1.0});
  Tensor a = named_zeros({1}, DType::f32, "a"), b = named_zeros({1}, DType::f32, "b");
  ops::gelu_forward(backend_ctx(), one, GeluApproximation::none, a);
  ops::gelu_forward(backend_ctx(), one, GeluApproximation::tanh, b);
  EXPECT_NEAR(to_doubles(a)[0], 0.8413447460685429, 1e-6);
  EXPECT_NEAR(to_doubles(b)[0], 0.8411919906082768, 1e-6);
}

TEST_P(Gelu, Bf16Storage) {
  const Shape shape{5, 77};
  Tensor x = random_tensor(shape, 1, DType::bf16, "x", 2.0);
  Tensor y = named_zeros(shape, DType::bf16, "y");
  ops::gelu_forward(backend_ctx(), x, GeluApproximation::tanh, y);
  EXPECT_LT(relative_error(to_doubles(y), gelu_reference({to_doubles(x)}, GeluApproximation::tanh)), 5e-3);
  Tensor dy = random_tensor(shape, 2, DType::bf16, "dy");
  Tensor dx = named_zeros(shape, DType::bf16, "dx");
  ops::gelu_backward(backend_ctx(), x, dy, GeluApproximation::none, dx);
  Tensor x32 = tensor_from(shape, to_doubles(x)), dy32 = tensor_from(shape, to_doubles(dy));
  Tensor dx32 = named_zeros(shape, DType::f32, "dx");
  ops::gelu_backward(backend_ctx(), x32, dy32, GeluApproximation::none, dx32);
  EXPECT_LT(relative_error(to_doubles(dx), to_doubles(dx32)), 5e-3);
}

TEST_P(Gelu, ShapeErrors) {
  Tensor x = named_zeros({4, 6}, DType::f32, "fc1_out");
  Tensor y = named_zeros({6, 4}, DType::f32, "act");
  expect_error_mentioning([&] { ops::gelu_forward(backend_ctx(), x, GeluApproximation::none, y); }, {"gelu_forward", "act"});
  Tensor dy = named_zeros({4, 6}, DType::fp8_e4m3, "dy8");
  expect_error_mentioning([&] { ops::gelu_backward(backend_ctx(), x, dy, GeluApproximation::none, x); }, {"gelu_backward", "dy8"});
}
