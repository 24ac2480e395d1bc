// host rmsnorm_forward / rmsnorm_backward (HF LlamaRMSNorm) against a float64
// reference and finite differences; dw accumulation; bf16; shape errors.
#include <gtest/gtest.h>

#include <cmath>

#include "host_op_checks.hpp"
#include "kernels/ops.hpp"

using namespace ftrain;
using namespace ftrain::testing;

FTRAIN_BACKEND_TEST_SUITE(RmsNorm);

namespace {

// y = w * x / sqrt(mean(x^2) + eps) per row; inputs {x, w}.
std::vector<double> rmsnorm_reference(const Inputs& in, std::int64_t width, double eps) {
  const auto& x = in[0];
  const auto& w = in[1];
  std::vector<double> y(x.size());
  for (std::size_t r = 0; r < x.size() / width; ++r) {
    double ss = 0;
    for (std::int64_t j = 0; j < width; ++j) ss += x[r * width + j] * x[r * width + j];
    const double s = 1.0 / std::sqrt(ss / width + eps);
    for (std::int64_t j = 0; j < width; ++j) y[r * width + j] = w[j] * x[r * width + j] * s;
  }
  return y;
}

}  // namespace

TEST_P(RmsNorm, ForwardAndBackwardMatchReference) {
  const float eps = 1e-5f;
  for (const Shape& shape : {Shape{7, 13}, Shape{2, 3, 40}, Shape{1, 3}, Shape{65, 8}}) {
    SCOPED_TRACE("x " + shape_string(shape));
    const std::int64_t width = shape.back(), rows = shape_numel(shape) / width;
    Tensor x = random_tensor(shape, 1, DType::f32, "x", 2.0);
    Tensor w = random_tensor({width}, 2, DType::f32, "w");
    Tensor y = named_zeros(shape, DType::f32, "y"), rstd = named_zeros({rows}, DType::f32, "rstd");
    ops::rmsnorm_forward(backend_ctx(), x, w, eps, y, rstd);
    const Inputs in{to_doubles(x), to_doubles(w)};
    auto f = [&](const Inputs& v) { return rmsnorm_reference(v, width, eps); };
    EXPECT_LT(relative_error(to_doubles(y), f(in)), 1e-6);
    const auto xs = to_doubles(x);
    for (std::int64_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (std::int64_t j = 0; j < width; ++j) ss += xs[r * width + j] * xs[r * width + j];
      EXPECT_NEAR(to_doubles(rstd)[r], 1.0 / std::sqrt(ss / width + eps), 1e-5);
    }

    Tensor dy = random_tensor(shape, 3, DType::f32, "dy");
    Tensor dx = named_zeros(shape, DType::f32, "dx"), dw = named_zeros({width}, DType::f32, "dw");
    ops::rmsnorm_backward(backend_ctx(), x, w, rstd, dy, dx, dw);
    expect_vjp_matches(f, in, 0, to_doubles(dx), to_doubles(dy), 1e-5, 4, "dx");
    expect_vjp_matches(f, in, 1, to_doubles(dw), to_doubles(dy), 1e-5, 5, "dw");
    const auto dx1 = to_doubles(dx), dw1 = to_doubles(dw);
    ops::rmsnorm_backward(backend_ctx(), x, w, rstd, dy, dx, dw);
    expect_scaled(to_doubles(dw), dw1, 2.0, 1e-6, "dw accumulates");
    expect_scaled(to_doubles(dx), dx1, 1.0, 0.0, "dx is written");
  }
}

TEST_P(RmsNorm, Bf16Storage) {
  const std::int64_t rows = 37, width = 96;  // several row blocks of the dw reduction
  const float eps = 1e-6f;
  Tensor x = random_tensor({rows, width}, 1, DType::bf16, "x");
  Tensor w = random_tensor({width}, 2, DType::bf16, "w");
  Tensor y = named_zeros({rows, width}, DType::bf16, "y"), rstd = named_zeros({rows}, DType::f32, "rstd");
  ops::rmsnorm_forward(backend_ctx(), x, w, eps, y, rstd);
  EXPECT_LT(relative_error(to_doubles(y), rmsnorm_reference({to_doubles(x), to_doubles(w)}, width, eps)), 5e-3);

  Tensor dy = random_tensor({rows, width}, 3, DType::bf16, "dy");
  Tensor dx = named_zeros({rows, width}, DType::bf16, "dx"), dw = named_zeros({width}, DType::bf16, "dw");
  ops::rmsnorm_backward(backend_ctx(), x, w, rstd, dy, dx, dw);
  Tensor x32 = tensor_from({rows, width}, to_doubles(x)), w32 = tensor_from({width}, to_doubles(w)),
         dy32 = tensor_from({rows, width}, to_doubles(dy));
  Tensor y32 = named_zeros({rows, width}, DType::f32, "y"), rstd32 = named_zeros({rows}, DType::f32, "rstd");
  Tensor dx32 = named_zeros({rows, width}, DType::f32, "dx"), dw32 = named_zeros({width}, DType::f32, "dw");
  ops::rmsnorm_forward(backend_ctx(), x32, w32, eps, y32, rstd32);
  ops::rmsnorm_backward(backend_ctx(), x32, w32, rstd32, dy32, dx32, dw32);
  EXPECT_LT(relative_error(to_doubles(dx), to_doubles(dx32)), 5e-3);
  EXPECT_LT(relative_error(to_doubles(dw), to_doubles(dw32)), 5e-3);
}

TEST_P(RmsNorm, ShapeErrors) {
  Tensor x = random_tensor({4, 6}, 1, DType::f32, "h");
  Tensor w = random_tensor({5}, 2, DType::f32, "input_layernorm.weight");
  Tensor y = named_zeros({4, 6}, DType::f32, "y"), rstd = named_zeros({4}, DType::f32, "rstd");
  expect_error_mentioning([&] { ops::rmsnorm_forward(backend_ctx(), x, w, 1e-5f, y, rstd); },
                          {"rmsnorm_forward", "input_layernorm.weight"});
  Tensor w6 = random_tensor({6}, 2, DType::f32, "w");
  Tensor rstd_bad = named_zeros({4}, DType::bf16, "rstd_bf16");
  expect_error_mentioning([&] { ops::rmsnorm_forward(backend_ctx(), x, w6, 1e-5f, y, rstd_bad); }, {"rstd_bf16", "f32"});
  Tensor dy_bad = named_zeros({4, 7}, DType::f32, "dy");
  Tensor dx = named_zeros({4, 6}, DType::f32, "dx"), dw = named_zeros({6}, DType::f32, "dw");
  expect_error_mentioning([&] { ops::rmsnorm_backward(backend_ctx(), x, w6, rstd, dy_bad, dx, dw); }, {"rmsnorm_backward", "dy"});
}
