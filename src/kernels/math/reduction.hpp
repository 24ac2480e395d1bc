// The summation order of ftrain's whole-tensor f64 reductions (op_list.hpp:
// sum, sum_squares, sum_squares_accumulate: the loss sums and the gradient
// norm), written once for both backends (share/doc/execution-model.md,
// section 4) so that the host's result is the GPU's bit for bit and neither
// depends on a thread count, a grid size or the device.
//
// The order (the host's since sum_squares was written; kept so that no curve
// moves):
//   1. the tensor is cut into chunks of kReduceChunk elements (the last one
//      shorter);
//   2. in a chunk of len elements, lane l (0 <= l < kReduceLanes) adds the
//      terms of elements l, l + 8, l + 16, ... below the last whole group of
//      kReduceLanes, in index order, from 0.0; lane 0 then adds the tail
//      (the len % 8 last elements) in index order;
//   3. the chunk's partial is 0.0 + lane 0 + lane 1 + ... + lane 7, in lane
//      order;
//   4. the total is 0.0 + partial 0 + partial 1 + ..., in chunk order.
// A term is the element widened to double (sum) or its exact double square
// (sum_squares: math::square_in_double).
//
// On the GPU (kernels/cuda/elementwise.cu) steps 2-3 are the first pass:
// kReduceLanes consecutive threads per chunk, as many chunks in flight as
// the grid holds (reduction_launch in kernels/cuda/launch_config.hpp, at
// least a block per multiprocessor for a large tensor), one f64 partial per
// chunk; step 4 is the second pass, one thread adding the partials in order
// (n / 4096 doubles: 1/2048 of the bytes the first pass reads). On the host
// (kernels/host/elementwise.cpp) the chunks are spread over the host
// threads and step 4 runs after them. No atomics, no order that depends on
// who finishes first: every run gives the same bits.
#pragma once

#include <cstdint>

#include "base/hd.hpp"
#include "kernels/math/pointwise.hpp"

namespace ftrain::math {

inline constexpr std::int64_t kReduceChunk = 4096;
inline constexpr int kReduceLanes = 8;

// What a reduction adds per element: the value or its square, in double.
enum class ReduceTerm : std::uint8_t { value, square };

FTRAIN_HD double reduce_term(float x, ReduceTerm term) {
  return term == ReduceTerm::square ? square_in_double(x) : static_cast<double>(x);
}

// Chunks (= f64 partials) of an n-element reduction.
FTRAIN_HD std::int64_t reduce_chunks(std::int64_t n) { return n <= 0 ? 0 : (n + kReduceChunk - 1) / kReduceChunk; }

// Elements of chunk `chunk` of an n-element reduction.
FTRAIN_HD std::int64_t reduce_chunk_length(std::int64_t n, std::int64_t chunk) {
  const std::int64_t begin = chunk * kReduceChunk;
  return n - begin < kReduceChunk ? n - begin : kReduceChunk;
}

// Step 2: lane `lane`'s sum over the chunk whose elements load(0 .. len) returns.
template <class Load>
FTRAIN_HD double reduce_lane(const Load& load, std::int64_t len, int lane, ReduceTerm term) {
  const std::int64_t whole = len - len % kReduceLanes;
  double acc = 0.0;
  for (std::int64_t i = lane; i < whole; i += kReduceLanes) acc += reduce_term(load(i), term);
  if (lane == 0)
    for (std::int64_t i = whole; i < len; ++i) acc += reduce_term(load(i), term);
  return acc;
}

// Step 3: the chunk's partial from its kReduceLanes lane sums.
FTRAIN_HD double reduce_combine_lanes(const double* lanes) {
  double s = 0.0;
  for (int l = 0; l < kReduceLanes; ++l) s += lanes[l];
  return s;
}

// Step 4: the total of `count` partials, in chunk order.
FTRAIN_HD double reduce_combine_partials(const double* partials, std::int64_t count) {
  double total = 0.0;
  for (std::int64_t c = 0; c < count; ++c) total += partials[c];
  return total;
}

}  // namespace ftrain::math
