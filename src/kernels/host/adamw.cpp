// Host AdamW (ops.hpp), as torch.optim.AdamW:
//   g = grad * grad_scale
//   m = beta1 m + (1 - beta1) g;   v = beta2 v + (1 - beta2) g^2
//   p -= lr * (mhat / (sqrt(vhat) + eps) + weight_decay * p)
// with mhat = m / (1 - beta1^step), vhat = v / (1 - beta2^step), step >= 1.
// adamw_update runs it over one contiguous f32 range; adamw_update_chunks
// (and its guarded form) over the rows of a chunk table in one call, each
// chunk with the call's weight decay or none (math::adamw_chunk_constants).
//
// Conventions: param, grad, m, v are f32 with equal numel (the optimizer's
// master shard and state); the bias corrections are computed once in double.
// Element-wise, so any thread count and any chunking give identical results.
#include <Kokkos_Core.hpp>
#include <cmath>

#include "base/error.hpp"
#include "kernels/host/float_spans.hpp"
#include "kernels/host/host_ops.hpp"
#include "kernels/math/adamw.hpp"

namespace ftrain::host {

namespace {

// Dtypes, sizes and the step were checked by ops::adamw_* (kernels/op_checks.hpp).
void require_adamw_on_host(const char* op, const Tensor& param, const Tensor& grad, const Tensor& m,
                           const Tensor& v) {
  spans::require_on_host(op, {{&param, "param"}, {&grad, "grad"}, {&m, "m"}, {&v, "v"}});
}

// Every row of the table inside param, in increasing order and not
// overlapping (its dtype and shape: ops::adamw_update_chunks*): the kernel
// below updates the rows in parallel, so an overlap would be a race, and a
// row past the end would write outside the shard. Cheap next to the update
// itself (three integers per 65536 elements). The CUDA backend clamps rows
// in its kernel instead: its table stays on the device.
void require_chunk_rows(const char* op, const Tensor& chunks, const Tensor& param) {
  spans::require_defined_host(op, chunks, "chunks");
  const auto* table = chunks.data_as<std::int64_t>();
  std::int64_t end_of_previous = 0;
  for (std::int64_t r = 0; r < chunks.dim(0); ++r) {
    const std::int64_t* row = table + r * math::kAdamwChunkColumns;
    const math::AdamwChunk c = math::adamw_chunk(table, r);
    FT_CHECK(c.offset >= end_of_previous && c.count >= 1 && c.count <= math::kAdamwChunkElements &&
             c.offset + c.count <= param.numel() && (row[math::kAdamwChunkDecayColumn] & ~std::int64_t{1}) == 0)
        << op << ": chunks " << chunks.describe() << " row " << r << " {offset " << c.offset << ", count "
        << c.count << ", decay " << row[math::kAdamwChunkDecayColumn] << "} must lie in param " << param.describe()
        << " after the row before it (ending at " << end_of_previous << "), with 1 <= count <= "
        << math::kAdamwChunkElements << " and decay 0 or 1";
    end_of_previous = c.offset + c.count;
  }
}

// math::adamw_step over every chunk's range, chunks in parallel.
void update_chunks(const char* kernel_name, Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                   const Tensor& chunks, const math::AdamwConstants& k) {
  float* p = static_cast<float*>(param.data());
  const float* gr = static_cast<const float*>(grad.data());
  float* mm = static_cast<float*>(m.data());
  float* vv = static_cast<float*>(v.data());
  const auto* table = chunks.data_as<std::int64_t>();
  Kokkos::parallel_for(kernel_name, spans::HostPolicy(0, chunks.dim(0)), [=](std::int64_t r) {
    const math::AdamwChunk c = math::adamw_chunk(table, r);
    const math::AdamwConstants chunk_k = math::adamw_chunk_constants(k, c.weight_decay);
    for (std::int64_t i = c.offset; i < c.offset + c.count; ++i) math::adamw_step(chunk_k, gr[i], p[i], mm[i], vv[i]);
  });
}

}  // namespace

void adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, float lr, float beta1, float beta2,
                  float eps, float weight_decay, std::int64_t step, float grad_scale) {
  require_adamw_on_host("adamw_update", param, grad, m, v);
  const math::AdamwConstants k = math::adamw_constants(lr, beta1, beta2, eps, weight_decay, step, grad_scale);
  float* p = static_cast<float*>(param.data());
  const float* gr = static_cast<const float*>(grad.data());
  float* mm = static_cast<float*>(m.data());
  float* vv = static_cast<float*>(v.data());
  spans::for_each_chunk("ftrain::adamw::update", param.numel(), [=](std::int64_t begin, std::int64_t n) {
    for (std::int64_t i = begin; i < begin + n; ++i) math::adamw_step(k, gr[i], p[i], mm[i], vv[i]);
  });
}

void adamw_update_chunks(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const Tensor& chunks, float lr,
                         float beta1, float beta2, float eps, float weight_decay, std::int64_t step,
                         float grad_scale) {
  constexpr const char* op = "adamw_update_chunks";
  require_adamw_on_host(op, param, grad, m, v);
  require_chunk_rows(op, chunks, param);
  update_chunks("ftrain::adamw::update_chunks", param, grad, m, v, chunks,
                math::adamw_constants(lr, beta1, beta2, eps, weight_decay, step, grad_scale));
}

void adamw_update_chunks_guarded(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const Tensor& chunks,
                                 float lr, float beta1, float beta2, float eps, float weight_decay,
                                 std::int64_t step, const Tensor& grad_scale, const Tensor& diverged_step) {
  constexpr const char* op = "adamw_update_chunks_guarded";
  spans::require_on_host(op, {{&grad_scale, "grad_scale"}, {&diverged_step, "diverged_step"}});
  require_adamw_on_host(op, param, grad, m, v);
  require_chunk_rows(op, chunks, param);
  if (math::adamw_step_skipped(diverged_step.data_as<std::int64_t>()[0])) return;  // changes nothing
  update_chunks("ftrain::adamw::update_chunks_guarded", param, grad, m, v, chunks,
                math::adamw_constants(lr, beta1, beta2, eps, weight_decay, step, grad_scale.data_as<float>()[0]));
}

}  // namespace ftrain::host
