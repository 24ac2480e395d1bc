// Host GELU (ops.hpp), both PyTorch forms:
//   none: y = x/2 * (1 + erf(x / sqrt 2)),
//         dy/dx = (1 + erf(x / sqrt 2)) / 2 + x * exp(-x^2 / 2) / sqrt(2 pi);
//   tanh: y = x/2 * (1 + tanh(k (x + 0.044715 x^3))), k = sqrt(2 / pi),
//         dy/dx = (1 + t) / 2 + x/2 * (1 - t^2) * k * (1 + 3 * 0.044715 x^2).
//
// Conventions: x, y, dy, dx share one shape, f32 or bf16 each, math in f32,
// chunked element-wise; the approximation is chosen once per call. dx is
// written. The formulas are kernels/math/activations.hpp's, shared with the
// CUDA backend.
//
// Host SwiGLU gate of Llama's MLP: out = silu(gate) * up, and its backward
// (ops.hpp).
//
// Conventions: gate, up, out, dout, dgate, dup all have one shape ([N, I] in
// the model); each may be f32 or bf16, math in f32, chunked element-wise.
// silu(g) = g * sigmoid(g);  d silu / dg = s * (1 + g * (1 - s)), s = sigmoid(g).
// dgate and dup are written. The arithmetic is kernels/math/activations.hpp's,
// shared with the CUDA backend.
#include <Kokkos_Core.hpp>
#include <cmath>

#include "base/error.hpp"
#include "kernels/host/float_spans.hpp"
#include "kernels/host/host_ops.hpp"
#include "kernels/math/activations.hpp"

namespace ftrain::host {

namespace {

using math::GeluExact;
using math::GeluTanh;

template <class Form>
void gelu_forward_impl(const Tensor& x, const Tensor& y) {
  spans::for_each_chunk("ftrain::gelu::forward", x.numel(), [=](std::int64_t begin, std::int64_t n) {
    const float* in = spans::read_f32(x, begin, n, spans::thread_scratch(0, n));
    float* out = spans::write_f32_begin(y, begin, spans::thread_scratch(1, n));
    for (std::int64_t i = 0; i < n; ++i) out[i] = Form::value(in[i]);
    spans::write_f32_end(y, begin, n, out);
  });
}

template <class Form>
void gelu_backward_impl(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  spans::for_each_chunk("ftrain::gelu::backward", x.numel(), [=](std::int64_t begin, std::int64_t n) {
    const float* in = spans::read_f32(x, begin, n, spans::thread_scratch(0, n));
    const float* g = spans::read_f32(dy, begin, n, spans::thread_scratch(1, n));
    float* out = spans::write_f32_begin(dx, begin, spans::thread_scratch(2, n));
    for (std::int64_t i = 0; i < n; ++i) out[i] = g[i] * Form::derivative(in[i]);
    spans::write_f32_end(dx, begin, n, out);
  });
}

}  // namespace

void gelu_forward(const Tensor& x, GeluApproximation approximation, Tensor& y) {
  constexpr const char* op = "gelu_forward";
  spans::require_on_host(op, {{&x, "x"}, {&y, "y"}});
  switch (approximation) {
    case GeluApproximation::none: return gelu_forward_impl<GeluExact>(x, y);
    case GeluApproximation::tanh: return gelu_forward_impl<GeluTanh>(x, y);
  }
  FT_THROW() << op << ": unknown approximation " << static_cast<int>(approximation);
}

void gelu_backward(const Tensor& x, const Tensor& dy, GeluApproximation approximation, Tensor& dx) {
  constexpr const char* op = "gelu_backward";
  spans::require_on_host(op, {{&x, "x"}, {&dy, "dy"}, {&dx, "dx"}});
  switch (approximation) {
    case GeluApproximation::none: return gelu_backward_impl<GeluExact>(x, dy, dx);
    case GeluApproximation::tanh: return gelu_backward_impl<GeluTanh>(x, dy, dx);
  }
  FT_THROW() << op << ": unknown approximation " << static_cast<int>(approximation);
}


void swiglu_forward(const Tensor& gate, const Tensor& up, Tensor& out) {
  constexpr const char* op = "swiglu_forward";
  spans::require_on_host(op, {{&gate, "gate"}, {&up, "up"}, {&out, "out"}});
  const Tensor tg = gate, tu = up, to = out;
  spans::for_each_chunk("ftrain::swiglu::forward", gate.numel(), [=](std::int64_t begin, std::int64_t n) {
    const float* g = spans::read_f32(tg, begin, n, spans::thread_scratch(0, n));
    const float* u = spans::read_f32(tu, begin, n, spans::thread_scratch(1, n));
    float* o = spans::write_f32_begin(to, begin, spans::thread_scratch(2, n));
    for (std::int64_t i = 0; i < n; ++i) o[i] = math::swiglu_value(g[i], u[i]);
    spans::write_f32_end(to, begin, n, o);
  });
}

void swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dout, Tensor& dgate, Tensor& dup) {
  constexpr const char* op = "swiglu_backward";
  spans::require_on_host(op, {{&gate, "gate"}, {&up, "up"}, {&dout, "dout"}, {&dgate, "dgate"}, {&dup, "dup"}});
  const Tensor tg = gate, tu = up, tdo = dout, tdg = dgate, tdu = dup;
  spans::for_each_chunk("ftrain::swiglu::backward", gate.numel(), [=](std::int64_t begin, std::int64_t n) {
    const float* g = spans::read_f32(tg, begin, n, spans::thread_scratch(0, n));
    const float* u = spans::read_f32(tu, begin, n, spans::thread_scratch(1, n));
    const float* d = spans::read_f32(tdo, begin, n, spans::thread_scratch(2, n));
    float* dg = spans::write_f32_begin(tdg, begin, spans::thread_scratch(3, n));
    float* du = spans::write_f32_begin(tdu, begin, spans::thread_scratch(4, n));
    for (std::int64_t i = 0; i < n; ++i) {
      const math::SwigluGrads grads = math::swiglu_grads(g[i], u[i], d[i]);  // dgate/dup may alias inputs
      dg[i] = grads.dgate;
      du[i] = grads.dup;
    }
    spans::write_f32_end(tdg, begin, n, dg);
    spans::write_f32_end(tdu, begin, n, du);
  });
}

}  // namespace ftrain::host
