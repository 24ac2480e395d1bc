// CUDA clip_coefficient (kernels.hpp): the global-norm clipping scalars on
// the device, one thread, with kernels/math/pointwise.hpp's f64 arithmetic,
// the host's (kernels/host/clipping.cpp) bit for bit: norm = sqrt(sum_sq),
// scale = clip_scale(norm, max_norm), the sticky diverged step.
#include "kernels/cuda/launch.cuh"
#include "kernels/math/pointwise.hpp"

namespace ftrain::cuda {

namespace {

__global__ void clip_coefficient_kernel(const double* sum_sq, double max_norm, std::int64_t step, double* norm,
                                        float* scale, std::int64_t* diverged_step) {
  const double n = math::norm_from_sum_squares(*sum_sq);
  *norm = n;
  *scale = math::clip_scale(n, max_norm);
  *diverged_step = math::diverged_step_after(*diverged_step, n, step);
}

}  // namespace

void launch_clip_coefficient(const double* sum_sq, double max_norm, std::int64_t step, double* norm, float* scale,
                             std::int64_t* diverged_step, cudaStream_t stream) {
  clip_coefficient_kernel<<<1, 1, 0, stream>>>(sum_sq, max_norm, step, norm, scale, diverged_step);
  FTRAIN_CUDA_CHECK_LAUNCH("ftrain::clip_coefficient");
}

}  // namespace ftrain::cuda
