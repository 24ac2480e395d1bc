// host linear_forward / linear_backward against a float64 reference and
// finite differences; accumulation of dw/db; bf16 storage; shape errors.
#include <gtest/gtest.h>

#include "host_op_checks.hpp"
#include "kernels/ops.hpp"

using namespace ftrain;
using namespace ftrain::testing;

FTRAIN_BACKEND_TEST_SUITE(Linear);

namespace {

// y[n, o] = sum_i x[n, i] w[o, i] + b[o]
std::vector<double> linear_reference(const Inputs& in, std::int64_t rows, std::int64_t din, std::int64_t dout,
                                     bool bias) {
  const auto& x = in[0];
  const auto& w = in[1];
  std::vector<double> y(static_cast<std::size_t>(rows * dout));
  for (std::int64_t n = 0; n < rows; ++n)
    for (std::int64_t o = 0; o < dout; ++o) {
      double s = bias ? in[2][o] : 0.0;
      for (std::int64_t i = 0; i < din; ++i) s += x[n * din + i] * w[o * din + i];
      y[n * dout + o] = s;
    }
  return y;
}

struct Case {
  Shape x_shape;
  std::int64_t out;
};

}  // namespace

TEST_P(Linear, ForwardAndBackwardMatchReference) {
  for (const Case c : {Case{{7, 13}, 5}, Case{{2, 3, 17}, 9}, Case{{1, 1}, 1}, Case{{33, 64}, 48}}) {
    const std::int64_t din = c.x_shape.back(), rows = shape_numel(c.x_shape) / din, dout = c.out;
    Shape y_shape = c.x_shape;
    y_shape.back() = dout;
    for (const bool bias : {true, false}) {
      SCOPED_TRACE("x " + shape_string(c.x_shape) + " out " + std::to_string(dout) + (bias ? " bias" : ""));
      Tensor x = random_tensor(c.x_shape, 1, DType::f32, "x");
      Tensor w = random_tensor({dout, din}, 2, DType::f32, "w", 0.5);
      Tensor b = random_tensor({dout}, 3, DType::f32, "b");
      Tensor y = named_zeros(y_shape, DType::f32, "y");
      ops::linear_forward(backend_ctx(), x, w, bias ? &b : nullptr, y);
      Inputs in{to_doubles(x), to_doubles(w), to_doubles(b)};
      auto f = [&](const Inputs& v) { return linear_reference(v, rows, din, dout, bias); };
      EXPECT_LT(relative_error(to_doubles(y), f(in)), 1e-6);

      Tensor dy = random_tensor(y_shape, 4, DType::f32, "dy");
      Tensor dx = named_zeros(c.x_shape, DType::f32, "dx");
      Tensor dw = named_zeros({dout, din}, DType::f32, "dw");
      Tensor db = named_zeros({dout}, DType::f32, "db");
      ops::linear_backward(backend_ctx(), x, w, dy, &dx, dw, bias ? &db : nullptr);
      const auto g = to_doubles(dy);
      expect_vjp_matches(f, in, 0, to_doubles(dx), g, 1e-5, 10, "dx");
      expect_vjp_matches(f, in, 1, to_doubles(dw), g, 1e-5, 11, "dw");
      if (bias) expect_vjp_matches(f, in, 2, to_doubles(db), g, 1e-5, 12, "db");
    }
  }
}

TEST_P(Linear, ParameterGradientsAccumulateAndDxIsWritten) {
  Tensor x = random_tensor({7, 13}, 1, DType::f32, "x");
  Tensor w = random_tensor({5, 13}, 2, DType::f32, "w");
  Tensor dy = random_tensor({7, 5}, 3, DType::f32, "dy");
  Tensor dx = named_zeros({7, 13}, DType::f32, "dx"), dw = named_zeros({5, 13}, DType::f32, "dw"),
         db = named_zeros({5}, DType::f32, "db");
  ops::linear_backward(backend_ctx(), x, w, dy, &dx, dw, &db);
  const auto dx1 = to_doubles(dx), dw1 = to_doubles(dw), db1 = to_doubles(db);
  ops::linear_backward(backend_ctx(), x, w, dy, &dx, dw, &db);
  expect_scaled(to_doubles(dw), dw1, 2.0, 1e-5, "dw twice");
  expect_scaled(to_doubles(db), db1, 2.0, 1e-5, "db twice");
  expect_scaled(to_doubles(dx), dx1, 1.0, 0.0, "dx written, not accumulated");
  // Without dx and db only dw changes.
  ops::linear_backward(backend_ctx(), x, w, dy, nullptr, dw, nullptr);
  expect_scaled(to_doubles(dw), dw1, 3.0, 1e-5, "dw thrice");
  expect_scaled(to_doubles(db), db1, 2.0, 1e-5, "db untouched");
}

// LoRA's frozen base (op_list.hpp): an undefined dw / db means the weight is
// frozen; dx is the same as with gradients wanted, and nothing is allocated.
TEST_P(Linear, UndefinedWeightGradientComputesDxOnly) {
  Tensor x = random_tensor({7, 13}, 1, DType::f32, "x");
  Tensor w = random_tensor({5, 13}, 2, DType::f32, "w");
  Tensor dy = random_tensor({7, 5}, 3, DType::f32, "dy");
  Tensor dx = named_zeros({7, 13}, DType::f32, "dx"), dw = named_zeros({5, 13}, DType::f32, "dw");
  ops::linear_backward(backend_ctx(), x, w, dy, &dx, dw, nullptr);
  Tensor frozen_dx = named_zeros({7, 13}, DType::f32, "frozen_dx"), frozen_dw, frozen_db;
  ops::linear_backward(backend_ctx(), x, w, dy, &frozen_dx, frozen_dw, &frozen_db);
  EXPECT_EQ(to_doubles(frozen_dx), to_doubles(dx));
  EXPECT_FALSE(frozen_dw.defined());
  EXPECT_FALSE(frozen_db.defined());
}

TEST_P(Linear, Bf16Storage) {
  const std::int64_t rows = 9, din = 24, dout = 11;
  Tensor x = random_tensor({rows, din}, 1, DType::bf16, "x");
  Tensor w = random_tensor({dout, din}, 2, DType::bf16, "w", 0.3);
  Tensor b = random_tensor({dout}, 3, DType::bf16, "b");
  Tensor y = named_zeros({rows, dout}, DType::bf16, "y");
  ops::linear_forward(backend_ctx(), x, w, &b, y);
  Inputs in{to_doubles(x), to_doubles(w), to_doubles(b)};
  EXPECT_LT(relative_error(to_doubles(y), linear_reference(in, rows, din, dout, true)), 8e-3);

  // Backward with bf16 activations and bf16 / f32 gradients vs the f32 path.
  Tensor dy = random_tensor({rows, dout}, 4, DType::bf16, "dy");
  Tensor dx = named_zeros({rows, din}, DType::bf16, "dx"), dw = named_zeros({dout, din}, DType::bf16, "dw"),
         db = named_zeros({dout}, DType::f32, "db");
  ops::linear_backward(backend_ctx(), x, w, dy, &dx, dw, &db);
  Tensor x32 = tensor_from({rows, din}, to_doubles(x)), w32 = tensor_from({dout, din}, to_doubles(w)),
         dy32 = tensor_from({rows, dout}, to_doubles(dy));
  Tensor dx32 = named_zeros({rows, din}, DType::f32, "dx"), dw32 = named_zeros({dout, din}, DType::f32, "dw"),
         db32 = named_zeros({dout}, DType::f32, "db");
  ops::linear_backward(backend_ctx(), x32, w32, dy32, &dx32, dw32, &db32);
  EXPECT_LT(relative_error(to_doubles(dx), to_doubles(dx32)), 8e-3);
  EXPECT_LT(relative_error(to_doubles(dw), to_doubles(dw32)), 8e-3);
  EXPECT_LT(relative_error(to_doubles(db), to_doubles(db32)), 1e-6);
  ops::linear_backward(backend_ctx(), x, w, dy, &dx, dw, &db);
  expect_scaled(to_doubles(dw), to_doubles(dw32), 2.0, 1e-2, "bf16 dw twice");
}

TEST_P(Linear, ShapeAndDtypeErrorsNameOpAndTensor) {
  Tensor x = random_tensor({4, 6}, 1, DType::f32, "act");
  Tensor w = random_tensor({3, 5}, 2, DType::f32, "proj.weight");
  Tensor y = named_zeros({4, 3}, DType::f32, "y");
  expect_error_mentioning([&] { ops::linear_forward(backend_ctx(), x, w, nullptr, y); },
                          {"linear_forward", "act f32[4, 6] host", "proj.weight"});
  Tensor w_ok = random_tensor({3, 6}, 2, DType::f32, "proj.weight");
  Tensor y_bad = named_zeros({5, 3}, DType::f32, "out");
  expect_error_mentioning([&] { ops::linear_forward(backend_ctx(), x, w_ok, nullptr, y_bad); }, {"linear_forward", "out"});
  Tensor b_bad = named_zeros({4}, DType::f32, "proj.bias");
  expect_error_mentioning([&] { ops::linear_forward(backend_ctx(), x, w_ok, &b_bad, y); }, {"linear_forward", "proj.bias"});
  Tensor dw_bad = named_zeros({3, 6}, DType::i32, "grad");
  expect_error_mentioning([&] { ops::linear_backward(backend_ctx(), x, w_ok, y, nullptr, dw_bad, nullptr); },
                          {"linear_backward", "grad"});
}
