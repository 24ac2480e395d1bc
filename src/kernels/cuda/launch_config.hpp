// Launch configurations of the CUDA kernels, as pure functions of the shape
// and the device's limits: plain C++ (no CUDA header), so the host test suite
// checks every preset shape against the sm_90 limits without a GPU
// (tests/unit/kernels/test_cuda_launch_config.cpp), and the .cu files only
// apply what these return.
//
// Kernel families:
//  * elementwise: one grid-stride loop over n elements (kernels/cuda/launch.cuh);
//  * per_row: one block per row (grid-stride over rows), a block reduction
//    of `reductions` floats per row through shared memory (one slot per warp
//    each);
//  * embedding_backward: one block per sorted token run, threads over columns;
//  * cross_entropy_chunk: one block per row of a logits chunk (a per-row
//    launch over the chunk's width, one reduction slot per warp shared by its
//    block max and block sum); its per-logit backward is element-wise over
//    rows x chunk;
//  * token_rows (token_rows.cu, dropout.cu): the ViT row ops and dropout are
//    grid-stride loops over their output elements (row_copy_launch); the
//    batch sums of their backward passes run one thread per output column,
//    each adding the batch items in order (batch_sum_launch: no atomics,
//    the same bits every run);
//  * adamw_chunks: one block per chunk of the multi-tensor AdamW's table;
//  * column_partials: the norms' dw / db column sums over rows
//    (kernels/math/column_sums.hpp), pass 1 a thread per (32-row block,
//    column), pass 2 a thread per column;
//  * reduction: the whole-tensor f64 sums (sum, sum_squares: the loss and
//    the gradient norm) in two passes, kernels/math/reduction.hpp's order:
//    kReduceLanes threads per chunk of kReduceChunk elements, one f64
//    partial each, then one thread adds the partials in chunk order.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/math/column_sums.hpp"
#include "kernels/math/reduction.hpp"

namespace ftrain::cuda {

struct DeviceLimits {
  std::int64_t max_threads_per_block;
  std::int64_t max_shared_bytes_per_block;  // without the opt-in attribute
  std::int64_t max_grid_x;
  std::int64_t max_grid_yz;
  std::int64_t warp_size;
  std::int64_t multiprocessors;
};

// H100 SXM (sm_90): cudaDeviceProp of an H100 SXM5 80GB.
inline constexpr DeviceLimits kSm90Limits{1024, 49152, 2147483647, 65535, 32, 132};

struct LaunchConfig {
  std::int64_t grid_x = 1, grid_y = 1, grid_z = 1;
  std::int64_t block = 1;
  std::int64_t shared_bytes = 0;
};

// Empty string when `config` is launchable on `limits`, else what is wrong.
inline std::string launch_config_problem(const LaunchConfig& c, const DeviceLimits& limits) {
  if (c.block < 1 || c.block > limits.max_threads_per_block)
    return "block of " + std::to_string(c.block) + " threads (limit " + std::to_string(limits.max_threads_per_block) + ")";
  if (c.block % limits.warp_size != 0)
    return "block of " + std::to_string(c.block) + " threads is not a multiple of the warp size";
  if (c.grid_x < 1 || c.grid_x > limits.max_grid_x) return "grid x of " + std::to_string(c.grid_x);
  if (c.grid_y < 1 || c.grid_y > limits.max_grid_yz || c.grid_z < 1 || c.grid_z > limits.max_grid_yz)
    return "grid y/z of " + std::to_string(c.grid_y) + "/" + std::to_string(c.grid_z);
  if (c.shared_bytes < 0 || c.shared_bytes > limits.max_shared_bytes_per_block)
    return std::to_string(c.shared_bytes) + " bytes of shared memory (limit " +
           std::to_string(limits.max_shared_bytes_per_block) + ")";
  return {};
}

inline constexpr std::int64_t kElementwiseBlock = 256;
// Blocks per multiprocessor a grid-stride loop needs to saturate memory.
inline constexpr std::int64_t kElementwiseBlocksPerSm = 32;

inline LaunchConfig elementwise_launch(std::int64_t n, const DeviceLimits& limits = kSm90Limits) {
  LaunchConfig c;
  c.block = kElementwiseBlock;
  const std::int64_t wanted = (std::max<std::int64_t>(n, 1) + c.block - 1) / c.block;
  c.grid_x = std::min(wanted, limits.multiprocessors * kElementwiseBlocksPerSm);
  return c;
}

// One block per row: enough threads that each handles a few elements,
// rounded to whole warps, at most 1024; the grid covers the rows directly up
// to the grid limit (the kernel strides over the rest).
inline LaunchConfig per_row_launch(std::int64_t rows, std::int64_t width, int reductions,
                                   const DeviceLimits& limits = kSm90Limits) {
  LaunchConfig c;
  constexpr std::int64_t kElementsPerThread = 4;
  const std::int64_t threads = (std::max<std::int64_t>(width, 1) + kElementsPerThread - 1) / kElementsPerThread;
  const std::int64_t warps = (threads + limits.warp_size - 1) / limits.warp_size;
  c.block = std::clamp<std::int64_t>(warps * limits.warp_size, limits.warp_size, limits.max_threads_per_block);
  c.grid_x = std::clamp<std::int64_t>(rows, 1, std::min<std::int64_t>(limits.max_grid_x, 65536));
  c.shared_bytes = static_cast<std::int64_t>(reductions) * (c.block / limits.warp_size) *
                   static_cast<std::int64_t>(sizeof(float));
  return c;
}

// One block per token (only the first row of each sorted run works), up to
// 256 threads striding over the columns.
inline LaunchConfig embedding_backward_launch(std::int64_t tokens, std::int64_t width,
                                              const DeviceLimits& limits = kSm90Limits) {
  LaunchConfig c;
  const std::int64_t warps = (std::clamp<std::int64_t>(width, 1, 256) + limits.warp_size - 1) / limits.warp_size;
  c.block = warps * limits.warp_size;
  c.grid_x = std::clamp<std::int64_t>(tokens, 1, limits.max_grid_x);
  return c;
}

// The vocabulary chunk the fused cross entropy works on: vocab_chunk columns,
// or the whole vocabulary when it is smaller (the op's rule on both backends).
inline std::int64_t cross_entropy_chunk_width(std::int64_t vocab, std::int64_t vocab_chunk) {
  return std::max<std::int64_t>(1, std::min(vocab, vocab_chunk));
}

// Forward step of one chunk: a block per row of `chunk_width` logits.
inline LaunchConfig cross_entropy_chunk_launch(std::int64_t rows, std::int64_t chunk_width,
                                               const DeviceLimits& limits = kSm90Limits) {
  return per_row_launch(rows, chunk_width, 1, limits);
}

// patchify, prepend_rows, broadcast_add, slice_rows (forward and the
// copies of their backward) and dropout: one thread per element of the
// [rows, width] output, grid-stride.
inline LaunchConfig row_copy_launch(std::int64_t rows, std::int64_t width, const DeviceLimits& limits = kSm90Limits) {
  return elementwise_launch(rows * width, limits);
}

// dprefix / dbias: one thread per column of the summed [columns] slice.
inline LaunchConfig batch_sum_launch(std::int64_t columns, const DeviceLimits& limits = kSm90Limits) {
  return elementwise_launch(columns, limits);
}

// adamw_update_chunks (the multi-tensor AdamW): one block per row of the
// chunk table, as apex's multi_tensor_apply, its threads striding over the
// chunk's elements (kAdamwChunkElements / 512 = 128 each); past the grid
// limit the blocks stride over the rows.
inline constexpr std::int64_t kAdamwChunksBlock = 512;

inline LaunchConfig adamw_chunks_launch(std::int64_t chunks, const DeviceLimits& limits = kSm90Limits) {
  LaunchConfig c;
  c.block = std::min(kAdamwChunksBlock, limits.max_threads_per_block);
  c.grid_x = std::clamp<std::int64_t>(chunks, 1, limits.max_grid_x);
  return c;
}

// Pass 1 of the norms' dw / db column sums: x over the columns (blocks of up
// to 256 threads, whole warps), y over the 32-row blocks (past the grid's y
// limit the blocks stride), a thread per (row block, column). One thread per
// column over every row (the old launch: 8 blocks for a 2048-wide norm) left
// the GPU idle behind a row-long dependent chain.
inline constexpr std::int64_t kColumnPartialsBlock = 256;

inline LaunchConfig column_partials_launch(std::int64_t rows, std::int64_t width,
                                           const DeviceLimits& limits = kSm90Limits) {
  LaunchConfig c;
  const std::int64_t warps = (std::max<std::int64_t>(width, 1) + limits.warp_size - 1) / limits.warp_size;
  c.block = std::min(warps * limits.warp_size, std::min(kColumnPartialsBlock, limits.max_threads_per_block));
  c.grid_x = std::clamp<std::int64_t>((std::max<std::int64_t>(width, 1) + c.block - 1) / c.block, 1, limits.max_grid_x);
  c.grid_y = std::clamp<std::int64_t>(math::column_sum_blocks(rows), 1, limits.max_grid_yz);
  return c;
}

// The first pass of a whole-tensor reduction (kernels/math/reduction.hpp):
// kReduceBlock threads = 32 chunks per block; as many blocks as the chunks
// need, up to kReduceBlocksPerSm per multiprocessor (the blocks stride over
// the rest). Each chunk's partial is the same whatever the grid, so the
// result does not depend on the device. A large tensor gets at least one
// block per multiprocessor: the gradient norm of a 10^9-element shard reads
// its 4 GB with the whole GPU, not one SM.
inline constexpr std::int64_t kReduceBlock = 256;
inline constexpr std::int64_t kReduceBlocksPerSm = 16;

struct ReductionLaunch {
  LaunchConfig partials;          // pass 1: one f64 partial per chunk
  std::int64_t chunks = 0;        // = the partials buffer's length in doubles
  std::int64_t chunks_per_block = 0;
};

inline ReductionLaunch reduction_launch(std::int64_t n, const DeviceLimits& limits = kSm90Limits) {
  ReductionLaunch r;
  r.chunks = math::reduce_chunks(n);
  r.partials.block = std::min(kReduceBlock, limits.max_threads_per_block);
  r.chunks_per_block = r.partials.block / math::kReduceLanes;
  const std::int64_t wanted = (std::max<std::int64_t>(r.chunks, 1) + r.chunks_per_block - 1) / r.chunks_per_block;
  r.partials.grid_x = std::clamp<std::int64_t>(wanted, 1, std::min(limits.max_grid_x, limits.multiprocessors * kReduceBlocksPerSm));
  return r;
}

}  // namespace ftrain::cuda
