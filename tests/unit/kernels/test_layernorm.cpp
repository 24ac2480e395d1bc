// host layernorm_forward / layernorm_backward against a float64 reference
// and finite differences; dw/db accumulation; optional bias; bf16; errors.
#include <gtest/gtest.h>

#include <cmath>

#include "host_op_checks.hpp"
#include "kernels/ops.hpp"

using namespace ftrain;
using namespace ftrain::testing;

FTRAIN_BACKEND_TEST_SUITE(LayerNorm);

namespace {

// y = (x - mean) / sqrt(var + eps) * w + b per row (biased var); inputs {x, w, b}.
std::vector<double> layernorm_reference(const Inputs& in, std::int64_t width, double eps, bool bias) {
  const auto& x = in[0];
  std::vector<double> y(x.size());
  for (std::size_t r = 0; r < x.size() / width; ++r) {
    double mean = 0, var = 0;
    for (std::int64_t j = 0; j < width; ++j) mean += x[r * width + j];
    mean /= width;
    for (std::int64_t j = 0; j < width; ++j) var += (x[r * width + j] - mean) * (x[r * width + j] - mean);
    const double s = 1.0 / std::sqrt(var / width + eps);
    for (std::int64_t j = 0; j < width; ++j)
      y[r * width + j] = (x[r * width + j] - mean) * s * in[1][j] + (bias ? in[2][j] : 0.0);
  }
  return y;
}

}  // namespace

TEST_P(LayerNorm, ForwardAndBackwardMatchReference) {
  const float eps = 1e-5f;
  for (const Shape& shape : {Shape{7, 13}, Shape{2, 3, 40}, Shape{1, 3}, Shape{70, 8}}) {
    for (const bool bias : {true, false}) {
      SCOPED_TRACE("x " + shape_string(shape) + (bias ? " bias" : ""));
      const std::int64_t width = shape.back(), rows = shape_numel(shape) / width;
      Tensor x = random_tensor(shape, 1, DType::f32, "x", 2.0);
      Tensor w = random_tensor({width}, 2, DType::f32, "w");
      Tensor b = random_tensor({width}, 3, DType::f32, "b");
      Tensor y = named_zeros(shape, DType::f32, "y"), mean = named_zeros({rows}, DType::f32, "mean"),
             rstd = named_zeros({rows}, DType::f32, "rstd");
      ops::layernorm_forward(backend_ctx(), x, w, bias ? &b : nullptr, eps, y, mean, rstd);
      const Inputs in{to_doubles(x), to_doubles(w), to_doubles(b)};
      auto f = [&](const Inputs& v) { return layernorm_reference(v, width, eps, bias); };
      EXPECT_LT(relative_error(to_doubles(y), f(in)), 1e-6);

      Tensor dy = random_tensor(shape, 4, DType::f32, "dy");
      Tensor dx = named_zeros(shape, DType::f32, "dx"), dw = named_zeros({width}, DType::f32, "dw"),
             db = named_zeros({width}, DType::f32, "db");
      ops::layernorm_backward(backend_ctx(), x, w, mean, rstd, dy, dx, dw, bias ? &db : nullptr);
      const auto g = to_doubles(dy);
      expect_vjp_matches(f, in, 0, to_doubles(dx), g, 1e-5, 5, "dx");
      expect_vjp_matches(f, in, 1, to_doubles(dw), g, 1e-5, 6, "dw");
      if (bias) expect_vjp_matches(f, in, 2, to_doubles(db), g, 1e-5, 7, "db");
      const auto dx1 = to_doubles(dx), dw1 = to_doubles(dw), db1 = to_doubles(db);
      ops::layernorm_backward(backend_ctx(), x, w, mean, rstd, dy, dx, dw, bias ? &db : nullptr);
      expect_scaled(to_doubles(dw), dw1, 2.0, 1e-6, "dw accumulates");
      if (bias) expect_scaled(to_doubles(db), db1, 2.0, 1e-6, "db accumulates");
      expect_scaled(to_doubles(dx), dx1, 1.0, 0.0, "dx is written");
    }
  }
}

TEST_P(LayerNorm, Bf16Storage) {
  const std::int64_t rows = 37, width = 96;
  const float eps = 1e-6f;
  Tensor x = random_tensor({rows, width}, 1, DType::bf16, "x");
  Tensor w = random_tensor({width}, 2, DType::bf16, "w");
  Tensor b = random_tensor({width}, 3, DType::bf16, "b");
  Tensor y = named_zeros({rows, width}, DType::bf16, "y"), mean = named_zeros({rows}, DType::f32, "mean"),
         rstd = named_zeros({rows}, DType::f32, "rstd");
  ops::layernorm_forward(backend_ctx(), x, w, &b, eps, y, mean, rstd);
  const Inputs in{to_doubles(x), to_doubles(w), to_doubles(b)};
  EXPECT_LT(relative_error(to_doubles(y), layernorm_reference(in, width, eps, true)), 5e-3);

  Tensor dy = random_tensor({rows, width}, 4, DType::bf16, "dy");
  Tensor dx = named_zeros({rows, width}, DType::bf16, "dx"), dw = named_zeros({width}, DType::bf16, "dw"),
         db = named_zeros({width}, DType::f32, "db");
  ops::layernorm_backward(backend_ctx(), x, w, mean, rstd, dy, dx, dw, &db);
  Tensor x32 = tensor_from({rows, width}, to_doubles(x)), w32 = tensor_from({width}, to_doubles(w)),
         dy32 = tensor_from({rows, width}, to_doubles(dy));
  Tensor dx32 = named_zeros({rows, width}, DType::f32, "dx"), dw32 = named_zeros({width}, DType::f32, "dw"),
         db32 = named_zeros({width}, DType::f32, "db");
  ops::layernorm_backward(backend_ctx(), x32, w32, mean, rstd, dy32, dx32, dw32, &db32);
  EXPECT_LT(relative_error(to_doubles(dx), to_doubles(dx32)), 5e-3);
  EXPECT_LT(relative_error(to_doubles(dw), to_doubles(dw32)), 5e-3);
  EXPECT_LT(relative_error(to_doubles(db), to_doubles(db32)), 1e-6);
}

TEST_P(LayerNorm, ShapeErrors) {
  Tensor x = random_tensor({4, 6}, 1, DType::f32, "h");
  Tensor w = random_tensor({6}, 2, DType::f32, "w");
  Tensor b = random_tensor({5}, 3, DType::f32, "norm.bias");
  Tensor y = named_zeros({4, 6}, DType::f32, "y"), mean = named_zeros({4}, DType::f32, "mean"),
         rstd = named_zeros({3}, DType::f32, "rstd3");
  expect_error_mentioning([&] { ops::layernorm_forward(backend_ctx(), x, w, nullptr, 1e-5f, y, mean, rstd); },
                          {"layernorm_forward", "rstd3"});
  Tensor rstd4 = named_zeros({4}, DType::f32, "rstd");
  expect_error_mentioning([&] { ops::layernorm_forward(backend_ctx(), x, w, &b, 1e-5f, y, mean, rstd4); },
                          {"layernorm_forward", "norm.bias"});
  Tensor dx = named_zeros({4, 6}, DType::f32, "dx"), dw = named_zeros({6}, DType::f32, "dw");
  Tensor db = named_zeros({7}, DType::f32, "db7");
  expect_error_mentioning([&] { ops::layernorm_backward(backend_ctx(), x, w, mean, rstd4, y, dx, dw, &db); },
                          {"layernorm_backward", "db7"});
}
