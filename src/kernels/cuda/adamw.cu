// CUDA AdamW (kernels.hpp): math::adamw_step per element, the same constants
// as the host (adamw_constants). adamw_update: one launch per contiguous f32
// range; adamw_update_chunks: one launch per flat shard over its chunk table
// (the multi-tensor form, one block per chunk). The guarded form reads its
// grad scale and skip flag on the device.
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

namespace ftrain::cuda {

namespace {

// Block b takes rows b, b + gridDim.x, ...; its threads stride over the
// row's elements. Guarded: the whole launch does nothing while the diverged
// flag is set, and the clip factor comes from the device.
template <bool Guarded>
__global__ void adamw_chunks_kernel(float* param, const float* grad, float* m, float* v, const std::int64_t* chunks,
                                    std::int64_t chunk_count, math::AdamwConstants k, const float* grad_scale,
                                    const std::int64_t* diverged_step, std::int64_t n) {
  if constexpr (Guarded) {
    if (math::adamw_step_skipped(*diverged_step)) return;
    k.grad_scale = *grad_scale;
  }
  for (std::int64_t row = blockIdx.x; row < chunk_count; row += gridDim.x) {
    const math::AdamwChunk c = math::adamw_chunk(chunks, row);
    const math::AdamwConstants chunk_k = math::adamw_chunk_constants(k, c.weight_decay);
    const std::int64_t begin = c.offset < 0 ? 0 : c.offset;
    const std::int64_t end = c.offset + c.count < n ? c.offset + c.count : n;
    for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
      math::adamw_step(chunk_k, grad[i], param[i], m[i], v[i]);
  }
}

template <bool Guarded>
void launch_chunks(const char* what, float* param, const float* grad, float* m, float* v, const std::int64_t* chunks,
                   std::int64_t chunk_count, const math::AdamwConstants& k, const float* grad_scale,
                   const std::int64_t* diverged_step, std::int64_t n, cudaStream_t stream) {
  if (chunk_count <= 0 || n <= 0) return;
  const LaunchConfig c = adamw_chunks_launch(chunk_count);
  adamw_chunks_kernel<Guarded><<<static_cast<unsigned>(c.grid_x), static_cast<unsigned>(c.block), 0, stream>>>(
      param, grad, m, v, chunks, chunk_count, k, grad_scale, diverged_step, n);
  FTRAIN_CUDA_CHECK_LAUNCH(what);
}

}  // namespace

void launch_adamw_chunks(float* param, const float* grad, float* m, float* v, const std::int64_t* chunks,
                         std::int64_t chunk_count, const math::AdamwConstants& k, std::int64_t n,
                         cudaStream_t stream) {
  launch_chunks<false>("ftrain::adamw::update_chunks", param, grad, m, v, chunks, chunk_count, k, nullptr, nullptr,
                       n, stream);
}

void launch_adamw_chunks_guarded(float* param, const float* grad, float* m, float* v, const std::int64_t* chunks,
                                 std::int64_t chunk_count, const math::AdamwConstants& k, const float* grad_scale,
                                 const std::int64_t* diverged_step, std::int64_t n, cudaStream_t stream) {
  launch_chunks<true>("ftrain::adamw::update_chunks_guarded", param, grad, m, v, chunks, chunk_count, k, grad_scale,
                      diverged_step, n, stream);
}

}  // namespace ftrain::cuda
