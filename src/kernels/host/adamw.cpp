// Host AdamW step on one contiguous f32 range (ops.hpp), as torch.optim.AdamW:
//   g = grad * grad_scale
//   m = beta1 m + (1 - beta1) g;   v = beta2 v + (1 - beta2) g^2
//   p -= lr * (mhat / (sqrt(vhat) + eps) + weight_decay * p)
// with mhat = m / (1 - beta1^step), vhat = v / (1 - beta2^step), step >= 1.
//
// Conventions: param, grad, m, v are f32 with equal numel (the optimizer's
// master shard and state); the bias corrections are computed once in double.
// Element-wise, so any thread count gives identical results.
#include <Kokkos_Core.hpp>
#include <cmath>

#include "core/error.hpp"
#include "kernels/host/float_spans.hpp"
#include "kernels/host/host_ops.hpp"
#include "kernels/math/adamw.hpp"

namespace ftrain::host {

void adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, float lr, float beta1, float beta2,
                  float eps, float weight_decay, std::int64_t step, float grad_scale) {
  constexpr const char* op = "adamw_update";
  spans::require_dtype(op, param, "param", DType::f32);
  spans::require_dtype(op, grad, "grad", DType::f32);
  spans::require_dtype(op, m, "m", DType::f32);
  spans::require_dtype(op, v, "v", DType::f32);
  spans::require_numel(op, grad, "grad", param.numel(), "same as param");
  spans::require_numel(op, m, "m", param.numel(), "same as param");
  spans::require_numel(op, v, "v", param.numel(), "same as param");
  FT_CHECK(step >= 1) << op << ": step " << step << " must be >= 1 (bias correction) for param "
                      << param.describe();
  const math::AdamwConstants k = math::adamw_constants(lr, beta1, beta2, eps, weight_decay, step, grad_scale);
  float* p = static_cast<float*>(param.data());
  const float* gr = static_cast<const float*>(grad.data());
  float* mm = static_cast<float*>(m.data());
  float* vv = static_cast<float*>(v.data());
  spans::for_each_chunk("ftrain::adamw::update", param.numel(), [=](std::int64_t begin, std::int64_t n) {
    for (std::int64_t i = begin; i < begin + n; ++i) math::adamw_step(k, gr[i], p[i], mm[i], vv[i]);
  });
}

}  // namespace ftrain::host
