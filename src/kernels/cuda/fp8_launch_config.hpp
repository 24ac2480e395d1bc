// Launch configurations of the FP8 kernels (kernels/cuda/fp8.cu), pure
// functions of the shape like launch_config.hpp's, checked against the sm_90
// limits for every preset shape by tests/unit/cuda/test_cuda_launch_config.cpp
// without a GPU.
//
//  * cast_transpose: one block per 32 x 32 tile of x viewed as [rows, cols]
//    (cols = the last dimension), 32 x 8 threads, each thread four rows of
//    its column; the tile goes through shared memory so both the FP8 data
//    and its transposed copy are written in whole rows (coalesced). The grid
//    is one-dimensional (tiles linearised, grid-stride beyond the limit) so a
//    long sequence never meets the 65535 limit of grid y. One atomicMax per
//    warp records the amax (kernels/math/fp8.hpp: amax_key).
//  * rmsnorm_fp8 / swiglu_fp8: the fused FP8 producers (below).
//  * update_scales: one block of one warp, a thread per amax-history column
//    (Fp8Operand: input, weight, grad_output).
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/launch_config.hpp"

namespace ftrain::cuda {

inline constexpr std::int64_t kFp8Tile = 32;       // tile edge (elements)
inline constexpr std::int64_t kFp8TileRows = 8;    // threadIdx.y extent: each thread does kFp8Tile / 8 rows
inline constexpr std::int64_t kFp8MaxTileBlocks = 65536;

struct Fp8TileGrid {
  std::int64_t tile_rows = 0, tile_cols = 0;  // tiles down / across
  LaunchConfig config;
};

inline Fp8TileGrid cast_transpose_launch(std::int64_t rows, std::int64_t cols,
                                         const DeviceLimits& limits = kSm90Limits) {
  Fp8TileGrid g;
  g.tile_rows = (std::max<std::int64_t>(rows, 1) + kFp8Tile - 1) / kFp8Tile;
  g.tile_cols = (std::max<std::int64_t>(cols, 1) + kFp8Tile - 1) / kFp8Tile;
  g.config.block = kFp8Tile * kFp8TileRows;
  g.config.grid_x = std::clamp<std::int64_t>(g.tile_rows * g.tile_cols, 1, std::min(limits.max_grid_x, kFp8MaxTileBlocks));
  // The uint8 tile, one byte of padding per row against bank conflicts on
  // the transposed read (the amax needs none: warp max, then an atomic).
  g.config.shared_bytes = kFp8Tile * (kFp8Tile + 1);
  return g;
}

// rmsnorm_forward_fp8 (fp8_fusions.cu): the unfused RMSNorm's per-row launch,
// unchanged, so block_sum adds a row in the same order and rstd and y get
// the bits rmsnorm_forward gives on the GPU; the block is a whole number of
// warps (per_row_launch rounds up), which the full-mask warp max of the amax
// key needs. One f32 per warp of shared memory (block_sum's scratch).
inline LaunchConfig rmsnorm_fp8_launch(std::int64_t rows, std::int64_t width,
                                       const DeviceLimits& limits = kSm90Limits) {
  return per_row_launch(rows, width, 1, limits);
}

// swiglu_forward_fp8 (fp8_fusions.cu): the elementwise grid-stride launch
// (whole warps of 256 threads), then a warp max and one atomicMax per warp.
inline LaunchConfig swiglu_fp8_launch(std::int64_t n, const DeviceLimits& limits = kSm90Limits) {
  return elementwise_launch(n, limits);
}

inline LaunchConfig fp8_update_scales_launch(const DeviceLimits& limits = kSm90Limits) {
  LaunchConfig c;
  c.block = limits.warp_size;  // threads 0..2 work, one per column
  c.grid_x = 1;
  return c;
}

}  // namespace ftrain::cuda
