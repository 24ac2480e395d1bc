// Launchers of the FP8 kernels (kernels/cuda/fp8.cu): raw device pointers, no
// Tensor, like kernels.hpp. The arithmetic is kernels/math/fp8.hpp's, the
// functions the host ops (kernels/host/fp8.cpp) run.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/kernels.hpp"

namespace ftrain::cuda {

// out[i] = math::fp8_cast(x[i], *scale, e4m3) for x viewed as [rows, cols];
// out_t (nullable) = its transposed copy [cols, rows] (math::transposed_index);
// *scale_inv = 1 / *scale; amax (nullable) = math::amax_combine(*amax, max |x|),
// NaN when x holds one. amax_scratch: one device u32 for the max key,
// zeroed here on the stream.
// out_t [cols, rows] = the transpose of the FP8 codes in [rows, cols]
// (fp8_transpose): the cast kernel's tiles without the cast.
void launch_fp8_transpose(const std::uint8_t* in, std::int64_t rows, std::int64_t cols, std::uint8_t* out_t,
                          cudaStream_t stream);

void launch_fp8_cast_transpose(FloatSpan x, std::int64_t rows, std::int64_t cols, const float* scale,
                               float* scale_inv, float* amax, std::uint32_t* amax_scratch, bool e4m3,
                               std::uint8_t* out, std::uint8_t* out_t, cudaStream_t stream);

// The FP8 casts a fused producer writes (op_list.hpp: Fp8Casts, at most
// kMaxFp8Casts; cuda_fp8_ops.cpp checks the two agree): per cast the scale it
// reads, scale_inv it writes, its amax slot (nullable) and its codes.
inline constexpr int kMaxFp8Casts = 4;
struct Fp8CastTargets {
  int count = 0;
  const float* scale[kMaxFp8Casts] = {};
  float* scale_inv[kMaxFp8Casts] = {};
  float* amax[kMaxFp8Casts] = {};
  std::uint8_t* codes[kMaxFp8Casts] = {};
  bool e4m3[kMaxFp8Casts] = {};
};

// fp8_fusions.cu, math/fp8_fusions.hpp: rmsnorm_forward's y and rstd, and for
// every target codes = math::fp8_cast(stored y, *scale, e4m3), *scale_inv =
// 1 / *scale, *amax = math::amax_combine(*amax, max |stored y|), in one pass
// (a block per row, launch rmsnorm_fp8_launch). amax_scratch: one device u32.
void launch_rmsnorm_forward_fp8(FloatSpan x, FloatSpan w, float eps, FloatSpan y, float* rstd, std::int64_t rows,
                                std::int64_t width, const Fp8CastTargets& targets, std::uint32_t* amax_scratch,
                                cudaStream_t stream);
// swiglu_forward's out and one cast of it (targets.count == 1), one pass.
void launch_swiglu_forward_fp8(FloatSpan gate, FloatSpan up, FloatSpan out, std::int64_t n,
                               const Fp8CastTargets& targets, std::uint32_t* amax_scratch, cudaStream_t stream);

// math::fp8_update_history_column for the three columns of history [len, 3]:
// the new scale and its scale_inv.
void launch_fp8_update_scales(float* history, std::int64_t len, float* scale, float* scale_inv, float forward_max,
                              float backward_max, int margin, bool most_recent, cudaStream_t stream);

// y[r, c] = store(d[r, c] + bias[c]) for d f32 [rows, cols]: an f32 bias
// added after an FP8 GEMM (cuBLASLt's FP8 bias epilogue takes bf16 only),
// rounded once into y's dtype. d may alias y (f32 y).
void launch_fp8_bias_store(const float* d, FloatSpan bias, FloatSpan y, std::int64_t rows, std::int64_t cols,
                           cudaStream_t stream);

}  // namespace ftrain::cuda
