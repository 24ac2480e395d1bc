// Index math of the ViT row ops (op_list.hpp: patchify, prepend_rows,
// broadcast_add, slice_rows), shared by kernels/host/token_rows.cpp and
// kernels/cuda/token_rows.cu: which source element each output element
// copies, and the batch-order sum their backward passes accumulate.
//
// Conventions: images are [B, H, W, C] channels last; patches [B * gh * gw,
// C * P * P] with column k = (channel, ky, kx) as timm's Conv2d weight
// flattens it; sequences [B, rows, C] row-major. A "source row" of -1 means
// the output row is zero. Sums over the batch add in f32 in batch order
// (deterministic on both backends: one thread per output element).
#pragma once

#include <cstdint>

#include "base/hd.hpp"
#include "kernels/math/pointwise.hpp"

namespace ftrain::math {

struct PatchGeometry {
  std::int64_t batch, height, width, channels, patch, grid_h, grid_w;
  FTRAIN_HD std::int64_t rows() const { return batch * grid_h * grid_w; }
  FTRAIN_HD std::int64_t cols() const { return channels * patch * patch; }
};

// Element offset in the images of column k of patch row r.
FTRAIN_HD std::int64_t patch_pixel_offset(const PatchGeometry& g, std::int64_t r, std::int64_t k) {
  const std::int64_t per_image = g.grid_h * g.grid_w;
  const std::int64_t b = r / per_image, n = r % per_image, py = n / g.grid_w, px = n % g.grid_w;
  const std::int64_t ch = k / (g.patch * g.patch), ky = (k / g.patch) % g.patch, kx = k % g.patch;
  return ((b * g.height + py * g.patch + ky) * g.width + px * g.patch + kx) * g.channels + ch;
}

// prepend_rows_forward: out row r of [B, R + N, C] copies prefix row
// `row` (from_prefix) or x row `row` of [B * N, C].
struct RowSource {
  bool from_prefix;
  std::int64_t row;
};
FTRAIN_HD RowSource prepend_rows_source(std::int64_t r, std::int64_t prefix_rows, std::int64_t rows) {
  const std::int64_t total = prefix_rows + rows, b = r / total, t = r % total;
  return t < prefix_rows ? RowSource{true, t} : RowSource{false, b * rows + t - prefix_rows};
}

// prepend_rows_backward: dx row r of [B, N, C] is dout row ... of [B, R + N, C].
FTRAIN_HD std::int64_t prepend_rows_dx_source(std::int64_t r, std::int64_t prefix_rows, std::int64_t rows) {
  const std::int64_t b = r / rows, n = r % rows;
  return b * (prefix_rows + rows) + prefix_rows + n;
}

// broadcast_add_forward: row r of [B, R, C] adds bias row r mod R.
FTRAIN_HD std::int64_t broadcast_bias_row(std::int64_t r, std::int64_t rows) { return r % rows; }

// slice_rows_forward: out row r of [B, R, C] is x row ... of [B, T, C].
FTRAIN_HD std::int64_t slice_rows_source(std::int64_t r, std::int64_t first, std::int64_t count,
                                         std::int64_t total) {
  const std::int64_t b = r / count, i = r % count;
  return b * total + first + i;
}

// slice_rows_backward: dx row r of [B, T, C] takes dout row ... of [B, R, C],
// or -1 (zero) outside [first, first + R).
FTRAIN_HD std::int64_t slice_rows_dx_source(std::int64_t r, std::int64_t first, std::int64_t count,
                                            std::int64_t total) {
  const std::int64_t b = r / total, t = r % total;
  return t >= first && t < first + count ? b * count + t - first : -1;
}

// One step of a batch-order sum (prepend_rows' dprefix, broadcast_add's
// dbias): running + the next batch item's value, then acc + the finished sum.
FTRAIN_HD float batch_sum_step(float running, float value) { return add_value(running, value); }

}  // namespace ftrain::math
