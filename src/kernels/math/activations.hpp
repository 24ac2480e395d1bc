// GELU (both PyTorch forms) and SwiGLU: value and derivative per element,
// shared by kernels/host/{gelu,swiglu}.cpp and kernels/cuda/activations.cu.
//
//   GELU none: y = x/2 (1 + erf(x / sqrt 2)),
//              y' = (1 + erf(x / sqrt 2)) / 2 + x exp(-x^2 / 2) / sqrt(2 pi)
//   GELU tanh: y = x/2 (1 + tanh(k (x + 0.044715 x^3))), k = sqrt(2 / pi),
//              y' = (1 + t) / 2 + x/2 (1 - t^2) k (1 + 3 * 0.044715 x^2)
//   SwiGLU:    out = silu(g) u, silu(g) = g s, s = sigmoid(g);
//              dup = dout g s, dgate = dout u s (1 + g (1 - s))
#pragma once

#include "kernels/math/fast_math.hpp"
#include "base/hd.hpp"

namespace ftrain::math {

inline constexpr float kInvSqrt2 = 0.70710678118654752f;
inline constexpr float kInvSqrt2Pi = 0.39894228040143268f;
inline constexpr float kSqrt2OverPi = 0.79788456080286536f;
inline constexpr float kTanhCubic = 0.044715f;

struct GeluExact {
  static FTRAIN_HD float value(float x) { return 0.5f * x * (1.0f + fast_math::erf(x * kInvSqrt2)); }
  static FTRAIN_HD float derivative(float x) {
    return 0.5f * (1.0f + fast_math::erf(x * kInvSqrt2)) + x * kInvSqrt2Pi * fast_math::exp(-0.5f * x * x);
  }
};

struct GeluTanh {
  static FTRAIN_HD float value(float x) {
    return 0.5f * x * (1.0f + fast_math::tanh(kSqrt2OverPi * (x + kTanhCubic * x * x * x)));
  }
  static FTRAIN_HD float derivative(float x) {
    const float t = fast_math::tanh(kSqrt2OverPi * (x + kTanhCubic * x * x * x));
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * kTanhCubic * x * x);
  }
};

FTRAIN_HD float swiglu_value(float gate, float up) { return gate * fast_math::sigmoid(gate) * up; }

struct SwigluGrads {
  float dgate, dup;
};
FTRAIN_HD SwigluGrads swiglu_grads(float gate, float up, float dout) {
  const float s = fast_math::sigmoid(gate);
  return {dout * up * s * (1.0f + gate * (1.0f - s)), dout * gate * s};
}

}  // namespace ftrain::math
