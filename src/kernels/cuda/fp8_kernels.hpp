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
void launch_fp8_cast_transpose(FloatSpan x, std::int64_t rows, std::int64_t cols, const float* scale,
                               float* scale_inv, float* amax, std::uint32_t* amax_scratch, bool e4m3,
                               std::uint8_t* out, std::uint8_t* out_t, cudaStream_t stream);

// math::fp8_update_history_column for the three columns of history [len, 3].
void launch_fp8_update_scales(float* history, std::int64_t len, float* scale, float forward_max, float backward_max,
                              int margin, bool most_recent, cudaStream_t stream);

// y[r, c] = store(d[r, c] + bias[c]) for d f32 [rows, cols]: an f32 bias
// added after an FP8 GEMM (cuBLASLt's FP8 bias epilogue takes bf16 only),
// rounded once into y's dtype. d may alias y (f32 y).
void launch_fp8_bias_store(const float* d, FloatSpan bias, FloatSpan y, std::int64_t rows, std::int64_t cols,
                           cudaStream_t stream);

}  // namespace ftrain::cuda
