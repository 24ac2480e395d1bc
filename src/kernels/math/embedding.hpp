// Token embedding's rules that both backends must agree on: which token
// ids are valid, and which row of a vocabulary slice holds a token
// (kernels/host/embedding.cpp, kernels/cuda/embedding.cu). The rest is a row
// copy (forward) and a deterministic per-token row sum (backward).
#pragma once

#include <cstdint>

#include "base/hd.hpp"

namespace ftrain::math {

FTRAIN_HD bool embedding_token_valid(std::int32_t token, std::int64_t vocab) { return token >= 0 && token < vocab; }

// The row of a table slice holding vocabulary rows [first_row, first_row +
// rows) (tensor parallelism's vocabulary-parallel embedding; first_row 0 and
// rows = vocab for the whole table) that holds `token`, or -1 when another
// slice holds it or it is no token at all.
FTRAIN_HD std::int64_t embedding_slice_row(std::int32_t token, std::int64_t first_row, std::int64_t rows) {
  const std::int64_t local = static_cast<std::int64_t>(token) - first_row;
  return token >= 0 && local >= 0 && local < rows ? local : -1;
}

}  // namespace ftrain::math
