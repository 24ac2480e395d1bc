// CUDA AdamW (kernels.hpp): math::adamw_step per element, one launch per
// contiguous f32 range, the same constants as the host (adamw_constants).
#include "kernels/cuda/launch.cuh"
#include "kernels/math/adamw.hpp"

namespace ftrain::cuda {

void launch_adamw(float* param, const float* grad, float* m, float* v, const math::AdamwConstants& k,
                  std::int64_t n, cudaStream_t stream) {
  const math::AdamwConstants constants = k;
  launch_elementwise("ftrain::adamw::update", n, stream,
                     [=] __device__(std::int64_t i) { math::adamw_step(constants, grad[i], param[i], m[i], v[i]); });
}

}  // namespace ftrain::cuda
