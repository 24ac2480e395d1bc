// Host flash attention with the tile sizes as parameters.
//
// ftrain::host::attention_forward / attention_backward (ops.hpp) call these
// with the default AttentionTiles. Tests
// call them with small, unequal tiles so that partial tiles, the causal
// diagonal inside a tile and many online-softmax rescalings are exercised on
// tensors small enough for a float64 finite-difference reference. Benchmarks
// may call them to compare tile sizes.
#pragma once

#include <cstdint>

#include "core/tensor.hpp"

namespace ftrain::host::detail {

// 64 x 64: a task's Q, K, V, S and accumulator tiles stay in L2 for D <= 128,
// and the 64-wide rows keep OpenBLAS' micro-kernels busy.
struct AttentionTiles {
  std::int64_t query = 64;
  std::int64_t key = 64;
};

// documents: nullptr, or the i32 [B, T] document ids of a packed window
// (op_list.hpp, attention_forward).
void attention_forward_tiled(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, const Tensor* documents,
                             float softmax_scale, Tensor& out, Tensor& lse, AttentionTiles tiles);

void attention_backward_tiled(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                              const Tensor& lse, const Tensor& dout, bool causal, const Tensor* documents,
                              float softmax_scale, Tensor& dq, Tensor& dk, Tensor& dv, AttentionTiles tiles);

}  // namespace ftrain::host::detail
