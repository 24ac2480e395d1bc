// Host RMSNorm (Hugging Face LlamaRMSNorm): y = w * (x * rsqrt(mean(x^2) + eps))
// per row, and its backward (ops.hpp).
//
// Conventions: x, y, dy, dx are [..., C] with N = numel / C rows; w, dw are
// [C]; rstd is f32 with N elements, saved by forward for backward. All math
// is f32 (HF also normalises in f32; unlike HF we do not round x * rstd to the
// input dtype before multiplying by w: y is rounded once). Rows run in
// parallel; dw accumulates (+=) through per-block partials summed in block
// order, so results do not depend on the thread count. dx is written.
#include <Kokkos_Core.hpp>
#include <cmath>
#include <vector>

#include "base/error.hpp"
#include "kernels/host/float_spans.hpp"
#include "kernels/host/host_ops.hpp"
#include "kernels/math/norms.hpp"

namespace ftrain::host {

namespace {

std::int64_t check_rmsnorm(const char* op, const Tensor& x, const Tensor& w, const Tensor& rstd) {
  spans::require_float_storage(op, x, "x");
  spans::require_float_storage(op, w, "w");
  spans::require_dtype(op, rstd, "rstd", DType::f32);
  const std::int64_t width = spans::row_width(op, x, "x");
  spans::require_numel(op, w, "w", width, "one weight per feature of x");
  spans::require_numel(op, rstd, "rstd", x.numel() / width, "one per row of x");
  return width;
}

}  // namespace

void rmsnorm_forward(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd) {
  constexpr const char* op = "rmsnorm_forward";
  const std::int64_t width = check_rmsnorm(op, x, w, rstd);
  spans::require_float_storage(op, y, "y");
  spans::require_same_shape(op, x, "x", y, "y");
  std::vector<float> w_store;
  const float* wf = spans::whole_as_f32("ftrain::rmsnorm::forward::widen_w", w, w_store);
  float* rstd_out = static_cast<float*>(rstd.data());
  const Tensor tx = x, ty = y;
  const float inv_width = 1.0f / static_cast<float>(width);
  Kokkos::parallel_for("ftrain::rmsnorm::forward", spans::HostPolicy(0, x.numel() / width), [=](std::int64_t r) {
    const std::int64_t offset = r * width;
    const float* xr = spans::read_f32(tx, offset, width, spans::thread_scratch(0, width));
    float* yr = spans::write_f32_begin(ty, offset, spans::thread_scratch(1, width));
    const float s = math::rmsnorm_rstd(spans::dot_f32(xr, xr, width), inv_width, eps);
    for (std::int64_t j = 0; j < width; ++j) yr[j] = math::rmsnorm_value(xr[j], s, wf[j]);
    spans::write_f32_end(ty, offset, width, yr);
    rstd_out[r] = s;
  });
}

void rmsnorm_backward(const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy, Tensor& dx,
                      Tensor& dw) {
  constexpr const char* op = "rmsnorm_backward";
  const std::int64_t width = check_rmsnorm(op, x, w, rstd);
  spans::require_float_storage(op, dy, "dy");
  spans::require_float_storage(op, dx, "dx");
  spans::require_same_shape(op, x, "x", dy, "dy");
  spans::require_same_shape(op, x, "x", dx, "dx");
  // Undefined dw: a frozen norm (op_list.hpp); the per-block partials are
  // still formed in the row loop (O(C) per row, beside dx) but not summed.
  const bool want_dw = dw.defined();
  if (want_dw) {
    spans::require_float_storage(op, dw, "dw");
    spans::require_numel(op, dw, "dw", width, "one per feature of x");
  }
  const std::int64_t rows = x.numel() / width;
  std::vector<float> w_store;
  const float* wf = spans::whole_as_f32("ftrain::rmsnorm::backward::widen_w", w, w_store);
  const float* rstd_in = static_cast<const float*>(rstd.data());
  spans::BlockPartials partials(rows, 1, width);
  float* partial_base = partials.data.data();
  const Tensor tx = x, tdy = dy, tdx = dx;
  const float inv_width = 1.0f / static_cast<float>(width);
  spans::for_each_row_in_blocks("ftrain::rmsnorm::backward", rows, [=](std::int64_t r, std::int64_t block) {
    const std::int64_t offset = r * width;
    const float* xr = spans::read_f32(tx, offset, width, spans::thread_scratch(0, width));
    const float* dyr = spans::read_f32(tdy, offset, width, spans::thread_scratch(1, width));
    float* dxhat = spans::thread_scratch(2, width);
    float* dxr = spans::write_f32_begin(tdx, offset, spans::thread_scratch(3, width));
    float* dw_acc = partial_base + block * width;
    const float s = rstd_in[r];
    for (std::int64_t j = 0; j < width; ++j) dxhat[j] = math::norm_dxhat(dyr[j], wf[j]);
    const float c = math::rmsnorm_backward_coefficient(spans::dot_f32(dxhat, xr, width), s, inv_width);
    for (std::int64_t j = 0; j < width; ++j) {
      dw_acc[j] += math::rmsnorm_dw_term(dyr[j], xr[j], s);
      dxr[j] = math::rmsnorm_dx(dxhat[j], xr[j], s, c);
    }
    spans::write_f32_end(tdx, offset, width, dxr);
  });
  if (want_dw) partials.add_into("ftrain::rmsnorm::backward::dw", 0, dw);
}

}  // namespace ftrain::host
