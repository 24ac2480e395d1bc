// host swiglu_forward / swiglu_backward: reference, finite differences,
// written (not accumulated) gradients, bf16, shape errors.
#include <gtest/gtest.h>

#include <cmath>

#include "host_op_checks.hpp"
#include "kernels/ops.hpp"

using namespace ftrain;
using namespace ftrain::testing;

FTRAIN_BACKEND_TEST_SUITE(SwiGlu);

namespace {

// out = gate * sigmoid(gate) * up; inputs {gate, up}.
std::vector<double> swiglu_reference(const Inputs& in) {
  std::vector<double> out(in[0].size());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = in[0][i] / (1.0 + std::exp(-in[0][i])) * in[1][i];
  return out;
}

}  // namespace

TEST_P(SwiGlu, ForwardAndBackwardMatchReference) {
  // 5000 elements spans two element-wise chunks.
  for (const Shape& shape : {Shape{7, 13}, Shape{1, 1}, Shape{5, 1000}}) {
    SCOPED_TRACE("shape " + shape_string(shape));
    Tensor gate = random_tensor(shape, 1, DType::f32, "gate", 3.0);
    Tensor up = random_tensor(shape, 2, DType::f32, "up");
    Tensor out = named_zeros(shape, DType::f32, "out");
    ops::swiglu_forward(backend_ctx(), gate, up, out);
    const Inputs in{to_doubles(gate), to_doubles(up)};
    EXPECT_LT(relative_error(to_doubles(out), swiglu_reference(in)), 1e-6);

    Tensor dout = random_tensor(shape, 3, DType::f32, "dout");
    Tensor dgate = random_tensor(shape, 4, DType::f32, "dgate"), dup = random_tensor(shape, 5, DType::f32, "dup");
    ops::swiglu_backward(backend_ctx(), gate, up, dout, dgate, dup);
    expect_vjp_matches(swiglu_reference, in, 0, to_doubles(dgate), to_doubles(dout), 1e-5, 6, "dgate");
    expect_vjp_matches(swiglu_reference, in, 1, to_doubles(dup), to_doubles(dout), 1e-5, 7, "dup");
  }
}

TEST_P(SwiGlu, Bf16Storage) {
  const Shape shape{9, 70};
  Tensor gate = random_tensor(shape, 1, DType::bf16, "gate", 3.0);
  Tensor up = random_tensor(shape, 2, DType::bf16, "up");
  Tensor out = named_zeros(shape, DType::bf16, "out");
  ops::swiglu_forward(backend_ctx(), gate, up, out);
  const Inputs in{to_doubles(gate), to_doubles(up)};
  EXPECT_LT(relative_error(to_doubles(out), swiglu_reference(in)), 5e-3);
  Tensor dout = random_tensor(shape, 3, DType::bf16, "dout");
  Tensor dgate = named_zeros(shape, DType::bf16, "dgate"), dup = named_zeros(shape, DType::f32, "dup");
  ops::swiglu_backward(backend_ctx(), gate, up, dout, dgate, dup);
  Tensor g32 = tensor_from(shape, in[0]), u32 = tensor_from(shape, in[1]), d32 = tensor_from(shape, to_doubles(dout));
  Tensor dg32 = named_zeros(shape, DType::f32, "dg"), du32 = named_zeros(shape, DType::f32, "du");
  ops::swiglu_backward(backend_ctx(), g32, u32, d32, dg32, du32);
  EXPECT_LT(relative_error(to_doubles(dgate), to_doubles(dg32)), 5e-3);
  EXPECT_LT(relative_error(to_doubles(dup), to_doubles(du32)), 1e-6);
}

TEST_P(SwiGlu, ShapeErrors) {
  Tensor gate = named_zeros({4, 6}, DType::f32, "gate_proj");
  Tensor up = named_zeros({4, 7}, DType::f32, "up_proj");
  Tensor out = named_zeros({4, 6}, DType::f32, "out");
  expect_error_mentioning([&] { ops::swiglu_forward(backend_ctx(), gate, up, out); }, {"swiglu_forward", "up_proj", "gate_proj"});
  Tensor ints = named_zeros({4, 6}, DType::i32, "ints");
  expect_error_mentioning([&] { ops::swiglu_backward(backend_ctx(), gate, gate, out, ints, out); }, {"swiglu_backward", "ints"});
}
