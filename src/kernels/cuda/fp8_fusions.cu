// CUDA fused FP8 producers (fp8_kernels.hpp: launch_rmsnorm_forward_fp8,
// launch_swiglu_forward_fp8): the activation, its store and its FP8 cast(s)
// in one pass, so the GEMM input is never read back from memory to be cast.
// Every value is kernels/math/fp8_fusions.hpp's (the host op's functions):
// the code and the amax come from the stored (activation-dtype) value, as in
// the unfused rmsnorm_forward / swiglu_forward + cast_to_fp8. The amax is a
// warp max of math::amax_key and one atomicMax per warp into a u32 zeroed on
// the stream (fp8.cu's scheme), combined into each amax slot after the pass.
// Launch shapes: fp8_launch_config.hpp (rmsnorm_fp8_launch, swiglu_fp8_launch).
#include "kernels/cuda/fp8_kernels.hpp"
#include "kernels/cuda/fp8_launch_config.hpp"
#include "kernels/cuda/launch.cuh"
#include "kernels/math/fp8_fusions.hpp"

namespace ftrain::cuda {

namespace {

// Block 0 writes every target's scale_inv (cast_to_fp8's contract).
__device__ __forceinline__ void write_scale_inv(const Fp8CastTargets& t) {
  if (blockIdx.x == 0 && threadIdx.x == 0)
    for (int c = 0; c < t.count; ++c) *t.scale_inv[c] = math::fp8_scale_inv(*t.scale[c]);
}

// A warp's max key, one atomicMax per warp (blocks are whole warps).
__device__ __forceinline__ void record_amax_key(std::uint32_t key, std::uint32_t* amax_key) {
  key = __reduce_max_sync(0xffffffffu, key);
  if ((threadIdx.x & 31u) == 0) atomicMax(amax_key, key);
}

__global__ void rmsnorm_fp8_kernel(FloatSpan x, FloatSpan w, float eps, FloatSpan y, float* rstd, std::int64_t rows,
                                   std::int64_t width, Fp8CastTargets t, std::uint32_t* amax_key) {
  extern __shared__ float scratch[];
  write_scale_inv(t);
  float scale[kMaxFp8Casts];
  for (int c = 0; c < kMaxFp8Casts; ++c) scale[c] = c < t.count ? *t.scale[c] : 0.0f;
  const bool bf16 = y.storage == Storage::bf16;
  const float inv_width = 1.0f / static_cast<float>(width);
  std::uint32_t key = 0;
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const std::int64_t base = r * width;
    float sq = 0.0f;
    for (std::int64_t j = threadIdx.x; j < width; j += blockDim.x) {
      const float v = load_f32(x, base + j);
      sq += v * v;
    }
    const float s = math::rmsnorm_rstd(block_sum(sq, scratch), inv_width, eps);
    for (std::int64_t j = threadIdx.x; j < width; j += blockDim.x) {
      const float v = math::rmsnorm_fp8_stored(load_f32(x, base + j), s, load_f32(w, j), bf16);
      store_f32(y, base + j, v);  // exact: v is on y's grid
      key = max(key, math::amax_key(v));
#pragma unroll
      for (int c = 0; c < kMaxFp8Casts; ++c)
        if (c < t.count) t.codes[c][base + j] = math::fp8_cast(v, scale[c], t.e4m3[c]);
    }
    if (threadIdx.x == 0) rstd[r] = s;
  }
  record_amax_key(key, amax_key);
}

__global__ void swiglu_fp8_kernel(FloatSpan gate, FloatSpan up, FloatSpan out, std::int64_t n, Fp8CastTargets t,
                                  std::uint32_t* amax_key) {
  write_scale_inv(t);
  const float scale = *t.scale[0];
  const bool e4m3 = t.e4m3[0];
  std::uint8_t* codes = t.codes[0];
  const bool bf16 = out.storage == Storage::bf16;
  std::uint32_t key = 0;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = math::swiglu_fp8_stored(load_f32(gate, i), load_f32(up, i), bf16);
    store_f32(out, i, v);
    key = max(key, math::amax_key(v));
    codes[i] = math::fp8_cast(v, scale, e4m3);
  }
  record_amax_key(key, amax_key);
}

__global__ void amax_finalize_targets_kernel(Fp8CastTargets t, const std::uint32_t* key) {
  const float amax = math::amax_of_key(*key);
  for (int c = 0; c < t.count; ++c)
    if (t.amax[c] != nullptr) *t.amax[c] = math::amax_combine(*t.amax[c], amax);
}

bool any_amax(const Fp8CastTargets& t) {
  for (int c = 0; c < t.count; ++c)
    if (t.amax[c] != nullptr) return true;
  return false;
}

void finalize(const char* what, const Fp8CastTargets& t, const std::uint32_t* amax_scratch, cudaStream_t stream) {
  if (!any_amax(t)) return;
  amax_finalize_targets_kernel<<<1, 1, 0, stream>>>(t, amax_scratch);
  FTRAIN_CUDA_CHECK_LAUNCH(what);
}

}  // namespace

void launch_rmsnorm_forward_fp8(FloatSpan x, FloatSpan w, float eps, FloatSpan y, float* rstd, std::int64_t rows,
                                std::int64_t width, const Fp8CastTargets& targets, std::uint32_t* amax_scratch,
                                cudaStream_t stream) {
  FTRAIN_CUDA_CHECK(cudaMemsetAsync(amax_scratch, 0, sizeof(std::uint32_t), stream));
  // rows == 0 still runs one block: scale_inv is written, the amax combines with 0.
  const LaunchConfig c = rmsnorm_fp8_launch(rows, width);
  rmsnorm_fp8_kernel<<<static_cast<unsigned>(c.grid_x), static_cast<unsigned>(c.block),
                       static_cast<std::size_t>(c.shared_bytes), stream>>>(x, w, eps, y, rstd, rows, width, targets,
                                                                           amax_scratch);
  FTRAIN_CUDA_CHECK_LAUNCH("ftrain::rmsnorm_fp8::forward");
  finalize("ftrain::rmsnorm_fp8::amax", targets, amax_scratch, stream);
}

void launch_swiglu_forward_fp8(FloatSpan gate, FloatSpan up, FloatSpan out, std::int64_t n,
                               const Fp8CastTargets& targets, std::uint32_t* amax_scratch, cudaStream_t stream) {
  FTRAIN_CUDA_CHECK(cudaMemsetAsync(amax_scratch, 0, sizeof(std::uint32_t), stream));
  const LaunchConfig c = swiglu_fp8_launch(n);
  swiglu_fp8_kernel<<<static_cast<unsigned>(c.grid_x), static_cast<unsigned>(c.block), 0, stream>>>(
      gate, up, out, n, targets, amax_scratch);
  FTRAIN_CUDA_CHECK_LAUNCH("ftrain::swiglu_fp8::forward");
  finalize("ftrain::swiglu_fp8::amax", targets, amax_scratch, stream);
}

}  // namespace ftrain::cuda
