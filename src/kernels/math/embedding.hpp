// Token embedding's one rule that both backends must agree on: which token
// ids are valid (kernels/host/embedding.cpp, kernels/cuda/embedding.cu). The
// rest is a row copy (forward) and a deterministic per-token row sum
// (backward).
#pragma once

#include <cstdint>

#include "base/hd.hpp"

namespace ftrain::math {

FTRAIN_HD bool embedding_token_valid(std::int32_t token, std::int64_t vocab) { return token >= 0 && token < vocab; }

}  // namespace ftrain::math
