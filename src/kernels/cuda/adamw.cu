// CUDA AdamW (kernels.hpp): math::adamw_step per element, one launch per
// contiguous f32 range, the same constants as the host (adamw_constants);
// the guarded form reads its grad scale and skip flag on the device.
#include "kernels/cuda/launch.cuh"
#include "kernels/math/adamw.hpp"

namespace ftrain::cuda {

void launch_adamw(float* param, const float* grad, float* m, float* v, const math::AdamwConstants& k,
                  std::int64_t n, cudaStream_t stream) {
  const math::AdamwConstants constants = k;
  launch_elementwise("ftrain::adamw::update", n, stream,
                     [=] __device__(std::int64_t i) { math::adamw_step(constants, grad[i], param[i], m[i], v[i]); });
}

void launch_adamw_guarded(float* param, const float* grad, float* m, float* v, const math::AdamwConstants& k,
                          const float* grad_scale, const std::int64_t* diverged_step, std::int64_t n,
                          cudaStream_t stream) {
  const math::AdamwConstants constants = k;
  launch_elementwise("ftrain::adamw::update_guarded", n, stream, [=] __device__(std::int64_t i) {
    if (math::adamw_step_skipped(*diverged_step)) return;
    math::AdamwConstants scaled = constants;
    scaled.grad_scale = *grad_scale;
    math::adamw_step(scaled, grad[i], param[i], m[i], v[i]);
  });
}

}  // namespace ftrain::cuda
