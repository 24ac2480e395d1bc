// The summation order of the column sums over rows that the norms' weight
// and bias gradients accumulate (RMSNorm dw; LayerNorm dw, db), written once
// for both backends (share/doc/execution-model.md, "Adding the CUDA
// backend": kernel math lives in kernels/math/ and both backends call it):
//   1. the rows are cut into blocks of kColumnSumRows (the last one shorter);
//   2. per block and column, a partial = 0.0f + the block's terms in row
//      order (f32);
//   3. per column, 0.0f + the partials in block order (f32), then one add
//      into the gradient (dst += sum, rounded once to its dtype).
// The host (kernels/host/float_spans.hpp: BlockPartials, spans::kRowsPerBlock
// = kColumnSumRows) runs the blocks on its threads; the GPU
// (kernels/cuda/norms.cu) gives every (block, column) a thread in pass 1 and
// every column a thread in pass 2 (column_partials_launch in
// kernels/cuda/launch_config.hpp: the row blocks spread over the grid), so
// the two give the same bits, and neither depends on a thread count or a
// grid. No atomics.
#pragma once

#include <cstdint>

#include "base/hd.hpp"

namespace ftrain::math {

inline constexpr std::int64_t kColumnSumRows = 32;

// Row blocks (= partials per column) of a column sum over `rows` rows.
FTRAIN_HD std::int64_t column_sum_blocks(std::int64_t rows) {
  return rows <= 0 ? 0 : (rows + kColumnSumRows - 1) / kColumnSumRows;
}

}  // namespace ftrain::math
