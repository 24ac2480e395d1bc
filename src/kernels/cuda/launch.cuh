// The launch scaffolding every CUDA kernel of ftrain shares (the only
// CUDA-specific part of an elementwise or per-row op; the arithmetic is in
// kernels/math/*.hpp):
//  * launch_elementwise(n, stream, body): one grid-stride loop calling
//    body(i) for i in [0, n), configured by launch_config.hpp
//    (launch_grid_stride: the same loop with a given configuration);
//  * block_sum(value, scratch) / block_max: a warp-shuffle tree then a tree
//    over the block's warps, in a fixed order (deterministic for a given
//    block size);
//  * load_f32 / store_f32: f32 or bf16 storage, as the host's float_spans.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/device/cuda_check.hpp"
#include "kernels/cuda/kernels.hpp"
#include "kernels/cuda/launch_config.hpp"
#include "kernels/math/cross_entropy.hpp"
#include "base/hd.hpp"

namespace ftrain::cuda {

__device__ __forceinline__ float load_f32(FloatSpan s, std::int64_t i) {
  return s.storage == Storage::f32 ? static_cast<const float*>(s.data)[i]
                                   : math::bf16_bits_to_float(static_cast<const std::uint16_t*>(s.data)[i]);
}
__device__ __forceinline__ void store_f32(FloatSpan s, std::int64_t i, float v) {
  if (s.storage == Storage::f32) {
    static_cast<float*>(s.data)[i] = v;
  } else {
    static_cast<std::uint16_t*>(s.data)[i] = math::float_to_bf16_bits(v);
  }
}

// sum over d < n of a[a_row + d] * b[b_row + d], in f32 in order of d (the
// reference attention kernels' dot products).
__device__ __forceinline__ float row_dot(FloatSpan a, std::int64_t a_row, FloatSpan b, std::int64_t b_row,
                                         std::int64_t n) {
  float acc = 0.0f;
  for (std::int64_t d = 0; d < n; ++d) acc += load_f32(a, a_row + d) * load_f32(b, b_row + d);
  return acc;
}

template <class Body>
__global__ void grid_stride_kernel(std::int64_t n, Body body) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) body(i);
}

// body(i) for every i < n on `stream` with the grid and block of `c` (a
// launch_config.hpp function's result); errors of the launch are thrown
// naming `what` (ftrain::Error with file:line).
template <class Body>
void launch_grid_stride(const char* what, const LaunchConfig& c, std::int64_t n, cudaStream_t stream, Body body) {
  if (n <= 0) return;
  grid_stride_kernel<<<static_cast<unsigned>(c.grid_x), static_cast<unsigned>(c.block), 0, stream>>>(n, body);
  FTRAIN_CUDA_CHECK_LAUNCH(what);
}

// The same with elementwise_launch(n).
template <class Body>
void launch_elementwise(const char* what, std::int64_t n, cudaStream_t stream, Body body) {
  launch_grid_stride(what, elementwise_launch(n), n, stream, body);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum of `value` over the block, returned to every thread. `scratch` holds
// one float per warp; it may be reused right after the call returns.
__device__ __forceinline__ float block_sum(float value, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  value = warp_sum(value);
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  float total = lane < warps ? scratch[lane] : 0.0f;
  total = warp_sum(total);
  __syncthreads();
  return total;
}

// Maximum of `value` over the block (math::running_max's comparison), the
// same contract as block_sum.
__device__ __forceinline__ float block_max(float value, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  for (int offset = 16; offset > 0; offset >>= 1) value = math::running_max(value, __shfl_xor_sync(0xffffffffu, value, offset));
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  float total = lane < warps ? scratch[lane] : -INFINITY;
  for (int offset = 16; offset > 0; offset >>= 1) total = math::running_max(total, __shfl_xor_sync(0xffffffffu, total, offset));
  __syncthreads();
  return total;
}

}  // namespace ftrain::cuda
