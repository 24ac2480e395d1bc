// CUDA GELU and SwiGLU (kernels.hpp): kernels/math/activations.hpp's
// functions through the shared grid-stride launcher, as the host kernels.
#include "kernels/cuda/launch.cuh"
#include "kernels/math/activations.hpp"

namespace ftrain::cuda {

namespace {
template <class Form>
void gelu_forward(FloatSpan x, FloatSpan y, std::int64_t n, cudaStream_t stream) {
  launch_elementwise("ftrain::gelu::forward", n, stream,
                     [=] __device__(std::int64_t i) { store_f32(y, i, Form::value(load_f32(x, i))); });
}
template <class Form>
void gelu_backward(FloatSpan x, FloatSpan dy, FloatSpan dx, std::int64_t n, cudaStream_t stream) {
  launch_elementwise("ftrain::gelu::backward", n, stream, [=] __device__(std::int64_t i) {
    store_f32(dx, i, load_f32(dy, i) * Form::derivative(load_f32(x, i)));
  });
}
}  // namespace

void launch_gelu_forward(FloatSpan x, bool tanh_form, FloatSpan y, std::int64_t n, cudaStream_t stream) {
  if (tanh_form) return gelu_forward<math::GeluTanh>(x, y, n, stream);
  gelu_forward<math::GeluExact>(x, y, n, stream);
}

void launch_gelu_backward(FloatSpan x, FloatSpan dy, bool tanh_form, FloatSpan dx, std::int64_t n,
                          cudaStream_t stream) {
  if (tanh_form) return gelu_backward<math::GeluTanh>(x, dy, dx, n, stream);
  gelu_backward<math::GeluExact>(x, dy, dx, n, stream);
}

void launch_swiglu_forward(FloatSpan gate, FloatSpan up, FloatSpan out, std::int64_t n, cudaStream_t stream) {
  launch_elementwise("ftrain::swiglu::forward", n, stream, [=] __device__(std::int64_t i) {
    store_f32(out, i, math::swiglu_value(load_f32(gate, i), load_f32(up, i)));
  });
}

void launch_swiglu_backward(FloatSpan gate, FloatSpan up, FloatSpan dout, FloatSpan dgate, FloatSpan dup,
                            std::int64_t n, cudaStream_t stream) {
  launch_elementwise("ftrain::swiglu::backward", n, stream, [=] __device__(std::int64_t i) {
    // All three loads before either store: dgate / dup may alias the inputs.
    const math::SwigluGrads g = math::swiglu_grads(load_f32(gate, i), load_f32(up, i), load_f32(dout, i));
    store_f32(dgate, i, g.dgate);
    store_f32(dup, i, g.dup);
  });
}

}  // namespace ftrain::cuda
