// CUDA FP8 kernels (fp8_kernels.hpp): the fused cast + transpose + amax, the
// delayed-scaling update and the f32 bias step of the FP8 GEMM. Every value
// they compute comes from kernels/math/fp8.hpp (the host's functions); the
// launch shapes from fp8_launch_config.hpp.
#include "kernels/cuda/fp8_kernels.hpp"
#include "kernels/cuda/fp8_launch_config.hpp"
#include "kernels/cuda/launch.cuh"
#include "kernels/math/fp8.hpp"

namespace ftrain::cuda {

namespace {

// One 32 x 32 tile per block iteration (fp8_launch_config.hpp): load, cast
// and store row-wise, keep the codes in shared memory, store the transposed
// copy row-wise too; each thread's max amax key, then a warp max and one
// atomicMax per warp.
__global__ void cast_transpose_kernel(FloatSpan x, std::int64_t rows, std::int64_t cols, std::int64_t tile_cols,
                                      std::int64_t tiles, const float* scale_ptr, float* scale_inv, bool e4m3,
                                      std::uint8_t* out, std::uint8_t* out_t, std::uint32_t* amax_key) {
  __shared__ std::uint8_t tile[kFp8Tile][kFp8Tile + 1];
  const float scale = *scale_ptr;
  if (blockIdx.x == 0 && threadIdx.x == 0 && threadIdx.y == 0) *scale_inv = math::fp8_scale_inv(scale);
  std::uint32_t key = 0;
  for (std::int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const std::int64_t r0 = (t / tile_cols) * kFp8Tile, c0 = (t % tile_cols) * kFp8Tile;
    for (std::int64_t k = 0; k < kFp8Tile; k += kFp8TileRows) {
      const std::int64_t r = r0 + threadIdx.y + k, c = c0 + threadIdx.x;
      if (r < rows && c < cols) {
        const float v = load_f32(x, r * cols + c);
        key = max(key, math::amax_key(v));
        const std::uint8_t code = math::fp8_cast(v, scale, e4m3);
        out[r * cols + c] = code;
        tile[threadIdx.y + k][threadIdx.x] = code;
      }
    }
    if (out_t != nullptr) {  // uniform over the block
      __syncthreads();
      for (std::int64_t k = 0; k < kFp8Tile; k += kFp8TileRows) {
        // Row c0 + threadIdx.y + k of out_t, column r0 + threadIdx.x: consecutive threads, consecutive bytes.
        const std::int64_t c = c0 + threadIdx.y + k, r = r0 + threadIdx.x;
        if (r < rows && c < cols) out_t[math::transposed_index(r, c, rows)] = tile[threadIdx.x][threadIdx.y + k];
      }
      __syncthreads();
    }
  }
  if (amax_key != nullptr) {
    key = __reduce_max_sync(0xffffffffu, key);
    if (threadIdx.x == 0) atomicMax(amax_key, key);
  }
}

// Codes through the same 32 x 32 shared-memory tiles as the cast: coalesced
// reads along rows of in, coalesced writes along rows of out_t.
__global__ void transpose_kernel(const std::uint8_t* in, std::int64_t rows, std::int64_t cols,
                                 std::int64_t tile_cols, std::int64_t tiles, std::uint8_t* out_t) {
  __shared__ std::uint8_t tile[kFp8Tile][kFp8Tile + 1];
  for (std::int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const std::int64_t r0 = (t / tile_cols) * kFp8Tile, c0 = (t % tile_cols) * kFp8Tile;
    for (std::int64_t k = 0; k < kFp8Tile; k += kFp8TileRows) {
      const std::int64_t r = r0 + threadIdx.y + k, c = c0 + threadIdx.x;
      if (r < rows && c < cols) tile[threadIdx.y + k][threadIdx.x] = in[r * cols + c];
    }
    __syncthreads();
    for (std::int64_t k = 0; k < kFp8Tile; k += kFp8TileRows) {
      const std::int64_t c = c0 + threadIdx.y + k, r = r0 + threadIdx.x;
      if (r < rows && c < cols) out_t[math::transposed_index(r, c, rows)] = tile[threadIdx.x][threadIdx.y + k];
    }
    __syncthreads();
  }
}

__global__ void amax_finalize_kernel(float* amax, const std::uint32_t* key) {
  *amax = math::amax_combine(*amax, math::amax_of_key(*key));
}

__global__ void update_scales_kernel(float* history, std::int64_t len, float* scale, float* scale_inv,
                                     float forward_max, float backward_max, int margin, bool most_recent) {
  const int column = static_cast<int>(threadIdx.x);
  if (column >= 3) return;
  math::fp8_update_history_column(history, len, 3, column, scale, scale_inv,
                                  column == 2 ? backward_max : forward_max, margin, most_recent);
}

}  // namespace

void launch_fp8_transpose(const std::uint8_t* in, std::int64_t rows, std::int64_t cols, std::uint8_t* out_t,
                          cudaStream_t stream) {
  if (rows * cols == 0) return;
  const Fp8TileGrid g = cast_transpose_launch(rows, cols);  // the cast's grid, tested against sm_90 limits
  const dim3 block(static_cast<unsigned>(kFp8Tile), static_cast<unsigned>(kFp8TileRows));
  transpose_kernel<<<static_cast<unsigned>(g.config.grid_x), block, 0, stream>>>(in, rows, cols, g.tile_cols,
                                                                                 g.tile_rows * g.tile_cols, out_t);
  FTRAIN_CUDA_CHECK_LAUNCH("ftrain::fp8_transpose");
}

void launch_fp8_cast_transpose(FloatSpan x, std::int64_t rows, std::int64_t cols, const float* scale,
                               float* scale_inv, float* amax, std::uint32_t* amax_scratch, bool e4m3,
                               std::uint8_t* out, std::uint8_t* out_t, cudaStream_t stream) {
  const Fp8TileGrid g = cast_transpose_launch(rows, cols);
  if (amax != nullptr) FTRAIN_CUDA_CHECK(cudaMemsetAsync(amax_scratch, 0, sizeof(std::uint32_t), stream));
  const dim3 block(static_cast<unsigned>(kFp8Tile), static_cast<unsigned>(kFp8TileRows));
  // rows * cols == 0 still runs one block: scale_inv is written, the amax combines with 0.
  cast_transpose_kernel<<<static_cast<unsigned>(g.config.grid_x), block, 0, stream>>>(
      x, rows, cols, g.tile_cols, rows * cols == 0 ? 0 : g.tile_rows * g.tile_cols, scale, scale_inv, e4m3, out,
      out_t, amax != nullptr ? amax_scratch : nullptr);
  FTRAIN_CUDA_CHECK_LAUNCH("ftrain::cast_to_fp8::cast_transpose");
  if (amax != nullptr) {
    amax_finalize_kernel<<<1, 1, 0, stream>>>(amax, amax_scratch);
    FTRAIN_CUDA_CHECK_LAUNCH("ftrain::cast_to_fp8::amax");
  }
}

void launch_fp8_update_scales(float* history, std::int64_t len, float* scale, float* scale_inv, float forward_max,
                              float backward_max, int margin, bool most_recent, cudaStream_t stream) {
  const LaunchConfig c = fp8_update_scales_launch();
  update_scales_kernel<<<static_cast<unsigned>(c.grid_x), static_cast<unsigned>(c.block), 0, stream>>>(
      history, len, scale, scale_inv, forward_max, backward_max, margin, most_recent);
  FTRAIN_CUDA_CHECK_LAUNCH("ftrain::fp8_update_scales");
}

void launch_fp8_bias_store(const float* d, FloatSpan bias, FloatSpan y, std::int64_t rows, std::int64_t cols,
                           cudaStream_t stream) {
  launch_elementwise("ftrain::fp8_linear::forward::bias", rows * cols, stream,
                     [=] __device__(std::int64_t i) { store_f32(y, i, d[i] + load_f32(bias, i % cols)); });
}

}  // namespace ftrain::cuda
