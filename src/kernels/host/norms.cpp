// Host LayerNorm: y = (x - mean) * rstd * w + b per row (biased variance, as
// torch.nn.LayerNorm), and its backward (ops.hpp).
//
// Conventions: x, y, dy, dx are [..., C] with N = numel / C rows; w, b, dw, db
// are [C]; mean and rstd are f32 with N elements, saved by forward. Math is
// f32 with the variance taken about the mean (two passes: no cancellation).
// dw / db accumulate (+=) through per-block partials summed in block order;
// dx is written. b / db may be null.
//
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

float centred_square_sum(const float* a, float centre, std::int64_t n) {
  float acc[spans::kLanes] = {};
  std::int64_t i = 0;
  for (; i + spans::kLanes <= n; i += spans::kLanes)
    for (int l = 0; l < spans::kLanes; ++l) acc[l] += math::layernorm_centred_square(a[i + l], centre);
  for (; i < n; ++i) acc[0] += math::layernorm_centred_square(a[i], centre);
  return spans::lane_total(acc);
}

}  // namespace

void layernorm_forward(const Tensor& x, const Tensor& w, const Tensor* b, float eps, Tensor& y, Tensor& mean,
                       Tensor& rstd) {
  constexpr const char* op = "layernorm_forward";
  spans::require_on_host(op, {{&x, "x"}, {&w, "w"}, {&mean, "mean"}, {&rstd, "rstd"}, {&y, "y"}, {b, "b"}});
  const std::int64_t width = x.dim(-1);
  std::vector<float> w_store, b_store(static_cast<std::size_t>(width), 0.0f);
  const float* wf = spans::whole_as_f32("ftrain::layernorm::forward::widen_w", w, w_store);
  const float* bf = b_store.data();
  if (b != nullptr) {
    bf = spans::whole_as_f32("ftrain::layernorm::forward::widen_b", *b, b_store);
  }
  float* mean_out = static_cast<float*>(mean.data());
  float* rstd_out = static_cast<float*>(rstd.data());
  const Tensor tx = x, ty = y;
  const float inv_width = 1.0f / static_cast<float>(width);
  Kokkos::parallel_for("ftrain::layernorm::forward", spans::HostPolicy(0, x.numel() / width), [=](std::int64_t r) {
    const std::int64_t offset = r * width;
    const float* xr = spans::read_f32(tx, offset, width, spans::thread_scratch(0, width));
    float* yr = spans::write_f32_begin(ty, offset, spans::thread_scratch(1, width));
    const float m = spans::sum_f32(xr, width) * inv_width;
    const float s = math::layernorm_rstd(centred_square_sum(xr, m, width), inv_width, eps);
    for (std::int64_t j = 0; j < width; ++j) yr[j] = math::layernorm_value(xr[j], m, s, wf[j], bf[j]);
    spans::write_f32_end(ty, offset, width, yr);
    mean_out[r] = m;
    rstd_out[r] = s;
  });
}

void layernorm_backward(const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd, const Tensor& dy,
                        Tensor& dx, Tensor& dw, Tensor* db) {
  constexpr const char* op = "layernorm_backward";
  // Undefined dw / db: a frozen norm (op_list.hpp); partials not summed.
  const bool want_dw = dw.defined();
  if (db != nullptr && !db->defined()) db = nullptr;
  spans::require_on_host(op, {{&x, "x"}, {&w, "w"}, {&mean, "mean"}, {&rstd, "rstd"}, {&dy, "dy"}, {&dx, "dx"},
                              {want_dw ? &dw : nullptr, "dw"}, {db, "db"}});
  const std::int64_t width = x.dim(-1);
  const std::int64_t rows = x.numel() / width;
  std::vector<float> w_store;
  const float* wf = spans::whole_as_f32("ftrain::layernorm::backward::widen_w", w, w_store);
  const float* mean_in = static_cast<const float*>(mean.data());
  const float* rstd_in = static_cast<const float*>(rstd.data());
  const bool want_db = db != nullptr;
  spans::BlockPartials partials(rows, want_db ? 2 : 1, width);
  float* partial_base = partials.data.data();
  const std::int64_t partial_count = partials.count;
  const Tensor tx = x, tdy = dy, tdx = dx;
  const float inv_width = 1.0f / static_cast<float>(width);
  spans::for_each_row_in_blocks("ftrain::layernorm::backward", rows, [=](std::int64_t r, std::int64_t block) {
    const std::int64_t offset = r * width;
    const float* xr = spans::read_f32(tx, offset, width, spans::thread_scratch(0, width));
    const float* dyr = spans::read_f32(tdy, offset, width, spans::thread_scratch(1, width));
    float* dxhat = spans::thread_scratch(2, width);
    float* xhat = spans::thread_scratch(3, width);
    float* dxr = spans::write_f32_begin(tdx, offset, spans::thread_scratch(4, width));
    float* dw_acc = partial_base + block * partial_count * width;
    const float m = mean_in[r], s = rstd_in[r];
    for (std::int64_t j = 0; j < width; ++j) {
      dxhat[j] = math::norm_dxhat(dyr[j], wf[j]);
      xhat[j] = math::layernorm_xhat(xr[j], m, s);
    }
    const float a = spans::sum_f32(dxhat, width) * inv_width;
    const float c = spans::dot_f32(dxhat, xhat, width) * inv_width;
    for (std::int64_t j = 0; j < width; ++j) dw_acc[j] += dyr[j] * xhat[j];
    if (want_db) {
      float* db_acc = dw_acc + width;
      for (std::int64_t j = 0; j < width; ++j) db_acc[j] += dyr[j];
    }
    for (std::int64_t j = 0; j < width; ++j) dxr[j] = math::layernorm_dx(dxhat[j], xhat[j], s, a, c);
    spans::write_f32_end(tdx, offset, width, dxr);
  });
  if (want_dw) partials.add_into("ftrain::layernorm::backward::dw", 0, dw);
  if (want_db) partials.add_into("ftrain::layernorm::backward::db", 1, *db);
}

void rmsnorm_forward(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd) {
  constexpr const char* op = "rmsnorm_forward";
  spans::require_on_host(op, {{&x, "x"}, {&w, "w"}, {&rstd, "rstd"}, {&y, "y"}});
  const std::int64_t width = x.dim(-1);
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
  // Undefined dw: a frozen norm (op_list.hpp); the per-block partials are
  // still formed in the row loop (O(C) per row, beside dx) but not summed.
  const bool want_dw = dw.defined();
  spans::require_on_host(op, {{&x, "x"}, {&w, "w"}, {&rstd, "rstd"}, {&dy, "dy"}, {&dx, "dx"},
                              {want_dw ? &dw : nullptr, "dw"}});
  const std::int64_t width = x.dim(-1);
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
