// RMSNorm and LayerNorm, the arithmetic around the row reductions: shared by
// kernels/host/{rmsnorm,layernorm}.cpp and kernels/cuda/norms.cu. The sums
// over a row are the backend's (lanes of 16 on the host, a warp/block tree
// on the GPU: their rounding order differs and the CUDA tests compare dx
// with a tolerance); dw and db over rows follow kernels/math/column_sums.hpp
// on both, bit for bit.
//
// RMSNorm:   s = 1 / sqrt(sum(x^2) / C + eps);  y = w (x s)
//            dxhat = dy w;  c = sum(dxhat x) s / C;  dx = s (dxhat - x s c);  dw += dy x s
// LayerNorm: m = sum(x) / C;  s = 1 / sqrt(sum((x - m)^2) / C + eps);  y = (x - m) s w + b
//            xhat = (x - m) s;  a = sum(dxhat) / C;  c = sum(dxhat xhat) / C
//            dx = s (dxhat - a - xhat c);  dw += dy xhat;  db += dy
#pragma once

#include "base/hd.hpp"

namespace ftrain::math {

FTRAIN_HD float rmsnorm_rstd(float sum_of_squares, float inv_width, float eps) {
  return 1.0f / sqrt_f32(sum_of_squares * inv_width + eps);
}
FTRAIN_HD float rmsnorm_value(float x, float rstd, float w) { return w * (x * rstd); }
// c of the backward from sum(dxhat * x) over the row.
FTRAIN_HD float rmsnorm_backward_coefficient(float dot_dxhat_x, float rstd, float inv_width) {
  return dot_dxhat_x * rstd * inv_width;
}
FTRAIN_HD float rmsnorm_dx(float dxhat, float x, float rstd, float c) {
  const float xhat = x * rstd;
  return rstd * (dxhat - xhat * c);
}
FTRAIN_HD float rmsnorm_dw_term(float dy, float x, float rstd) { return dy * (x * rstd); }

FTRAIN_HD float norm_dxhat(float dy, float w) { return dy * w; }

FTRAIN_HD float layernorm_centred_square(float x, float mean) {
  const float d = x - mean;
  return d * d;
}
FTRAIN_HD float layernorm_rstd(float centred_square_sum, float inv_width, float eps) {
  return 1.0f / sqrt_f32(centred_square_sum * inv_width + eps);
}
FTRAIN_HD float layernorm_xhat(float x, float mean, float rstd) { return (x - mean) * rstd; }
FTRAIN_HD float layernorm_value(float x, float mean, float rstd, float w, float b) {
  return (x - mean) * rstd * w + b;
}
// a = mean(dxhat), c = mean(dxhat * xhat) over the row.
FTRAIN_HD float layernorm_dx(float dxhat, float xhat, float rstd, float a, float c) {
  return rstd * (dxhat - a - xhat * c);
}

}  // namespace ftrain::math
