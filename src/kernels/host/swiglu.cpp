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

void swiglu_forward(const Tensor& gate, const Tensor& up, Tensor& out) {
  constexpr const char* op = "swiglu_forward";
  spans::require_float_storage(op, gate, "gate");
  spans::require_float_storage(op, up, "up");
  spans::require_float_storage(op, out, "out");
  spans::require_same_shape(op, gate, "gate", up, "up");
  spans::require_same_shape(op, gate, "gate", out, "out");
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
  spans::require_float_storage(op, gate, "gate");
  spans::require_float_storage(op, up, "up");
  spans::require_float_storage(op, dout, "dout");
  spans::require_float_storage(op, dgate, "dgate");
  spans::require_float_storage(op, dup, "dup");
  spans::require_same_shape(op, gate, "gate", up, "up");
  spans::require_same_shape(op, gate, "gate", dout, "dout");
  spans::require_same_shape(op, gate, "gate", dgate, "dgate");
  spans::require_same_shape(op, gate, "gate", dup, "dup");
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
