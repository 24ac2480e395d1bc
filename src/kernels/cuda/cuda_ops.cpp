// The CUDA op table (cuda_ops.hpp). Shapes and dtypes are checked by
// ops::<op> (kernels/op_checks.hpp); here, that tensors are in CUDA memory
// and the CUDA kernels' own limits. The arithmetic is in the launchers
// (kernels.hpp) and, below them, kernels/math/. Ops that still have no CUDA
// kernel would throw naming themselves (share/doc/status.md); every entry has
// one now (the FP8 ops are cuda_fp8_ops.cpp's).
#include "kernels/cuda/cuda_ops.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>
#include <utility>
#include <vector>

#include "backends/cuda/device/cuda_check.hpp"
#include "base/error.hpp"
#include "kernels/cuda/cross_entropy_head.hpp"
#include "kernels/cuda/cublaslt_linear.hpp"
#include "kernels/cuda/cuda_fp8_ops.hpp"
#include "kernels/cuda/cudnn_sdpa_plan.hpp"
#if defined(FTRAIN_HAVE_CUDNN)
#include "kernels/cuda/cudnn_sdpa_execute.hpp"
#endif
#include "kernels/cuda/kernels.hpp"
#include "kernels/op_checks.hpp"
#include "kernels/tensor_checks.hpp"
#include "runtime/execution_context.hpp"

namespace ftrain::cuda {

namespace {

cudaStream_t stream_of(ExecutionContext& ctx) { return static_cast<cudaStream_t>(ctx.compute().native_handle()); }

using checks::require_numel;
using checks::require_same_shape;
using checks::row_width;

void require_cuda(const char* op, const Tensor& t, const char* role) {
  checks::require_defined(op, t, role);
  FT_CHECK(t.device() == Device::cuda) << op << ": " << role << " " << t.describe()
                                       << " is not on the CUDA device (CUDA backend)";
}

FloatSpan float_span(const char* op, const Tensor& t, const char* role) {
  require_cuda(op, t, role);
  checks::require_float(op, t, role);
  return {t.data(), t.dtype() == DType::f32 ? Storage::f32 : Storage::bf16};
}

FloatSpan optional_span(const char* op, const Tensor* t, const char* role) {
  return t != nullptr ? float_span(op, *t, role) : FloatSpan{nullptr, Storage::f32};
}

void require_dtype(const char* op, const Tensor& t, const char* role, DType dtype) {
  require_cuda(op, t, role);
  checks::require_dtype(op, t, role, dtype);
}

// Every op of op_list.hpp has an entry: an op added to the list without a
// CUDA kernel gets this one (a template, so the real function below, a
// non-template, wins where it exists) and is refused naming itself.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#define FTRAIN_CUDA_MISSING(R, NAME, PARAMS, ARGS, DEVICE_TENSOR)                                           \
  template <int = 0>                                                                                       \
  [[noreturn]] R NAME(ExecutionContext& ctx, FTRAIN_UNPAREN PARAMS) {                                      \
    FT_THROW() << "op " #NAME " on " << (DEVICE_TENSOR).describe()                                         \
               << ": the CUDA backend has no kernel for it yet (share/doc/status.md); run with `device host`"; \
  }
FTRAIN_OP_LIST(FTRAIN_CUDA_MISSING)
#undef FTRAIN_CUDA_MISSING
#pragma GCC diagnostic pop

// The FP8 ops live in cuda_fp8_ops.cpp; these non-templates win over the
// fallbacks above when the table takes their addresses.
using fp8_ops::cast_to_fp8;
using fp8_ops::fp8_transpose;
using fp8_ops::fp8_linear_backward;
using fp8_ops::fp8_linear_forward;
using fp8_ops::fp8_update_scales;
using fp8_ops::rmsnorm_forward_fp8;
using fp8_ops::swiglu_forward_fp8;

GemmElement element_of(const Tensor& t) { return t.dtype() == DType::f32 ? GemmElement::f32 : GemmElement::bf16; }

// ---- linear (cuBLASLt plans) ---------------------------------------------------

using op_checks::LinearDims;

// The two GEMM operands in one dtype: as stored when they agree, else the
// bf16 one widened (exactly) to f32 scratch, as the host widens for
// OpenBLAS. The scratch is released in stream order when `keep` goes.
struct GemmInputs {
  const void* first;
  const void* second;
  GemmElement element;
  std::vector<std::shared_ptr<void>> keep;
};

GemmInputs same_dtype(ExecutionContext& ctx, const char* op, const Tensor& first, const Tensor& second) {
  if (first.dtype() == second.dtype()) return {first.data(), second.data(), element_of(first), {}};
  GemmInputs in{first.data(), second.data(), GemmElement::f32, {}};
  const Tensor& narrow = first.dtype() == DType::bf16 ? first : second;
  std::shared_ptr<void> wide = ctx.allocator().allocate(static_cast<std::size_t>(narrow.numel()) * sizeof(float));
  launch_cast(float_span(op, narrow, "bf16 operand"), {wide.get(), Storage::f32}, narrow.numel(), stream_of(ctx));
  (first.dtype() == DType::bf16 ? in.first : in.second) = wide.get();
  in.keep.push_back(std::move(wide));
  return in;
}

void linear_forward(ExecutionContext& ctx, const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y) {
  constexpr const char* op = "linear_forward";
  // Shapes and dtypes: checked by ops::linear_forward (kernels/op_checks.hpp).
  require_cuda(op, x, "x");
  require_cuda(op, w, "w");
  require_cuda(op, y, "y");
  if (b != nullptr) require_cuda(op, *b, "b");
  const LinearDims d = op_checks::linear_dims(x, w);
  const GemmInputs in = same_dtype(ctx, op, x, w);
  LinearShape shape{d.rows, d.in, d.out, in.element, in.element, element_of(y), b != nullptr};
  if (b != nullptr) {
    shape.bias_type = element_of(*b);
    shape.bias_alignment = address_alignment(b->data());
  }
  const GemmPlan plan = plan_linear(LinearPass::forward, shape);
  GemmOperands o{in.second, in.first, y.data(), nullptr};
  // The bias as the plan applies it (cublaslt_plan.hpp: GemmBiasStep); the
  // scratch is released in stream order when it goes.
  std::shared_ptr<void> bias_scratch, d_scratch;
  const cudaStream_t stream = stream_of(ctx);
  switch (plan.bias_step) {
    case GemmBiasStep::none: break;
    case GemmBiasStep::epilogue: o.bias = b->data(); break;
    case GemmBiasStep::epilogue_of_converted: {
      // Into a fresh (256-byte aligned) block of D's dtype: bf16 -> f32 is exact.
      const Storage to = plan.bias_type == GemmElement::f32 ? Storage::f32 : Storage::bf16;
      bias_scratch = ctx.allocator().allocate(static_cast<std::size_t>(d.out) * element_bytes(plan.bias_type));
      launch_cast(float_span(op, *b, "b"), {bias_scratch.get(), to}, d.out, stream);
      o.bias = bias_scratch.get();
      break;
    }
    case GemmBiasStep::add_after:
      d_scratch = ctx.allocator().allocate(static_cast<std::size_t>(d.rows * d.out) * sizeof(float));
      o.c = d_scratch.get();
      break;
  }
  execute_gemm_plan(ctx, plan, o);
  if (plan.bias_step == GemmBiasStep::add_after && d.rows > 0)
    // y = D + b in f32, rounded once to y's dtype (as the host does).
    launch_broadcast_add_forward({d_scratch.get(), Storage::f32}, float_span(op, *b, "b"), float_span(op, y, "y"),
                                 d.rows, 1, d.out, stream);
}

void linear_backward(ExecutionContext& ctx, const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx,
                     Tensor& dw, Tensor* db) {
  constexpr const char* op = "linear_backward";
  // Shapes and dtypes: checked by ops::linear_backward (kernels/op_checks.hpp).
  // An undefined dw (and db) is a frozen weight (LoRA's base layers, the op
  // contract in op_list.hpp): only dx is computed, as on the host.
  const bool want_dw = dw.defined();
  require_cuda(op, x, "x");
  require_cuda(op, w, "w");
  require_cuda(op, dy, "dy");
  if (want_dw) require_cuda(op, dw, "dw");
  if (dx != nullptr) require_cuda(op, *dx, "dx");
  if (db != nullptr && db->defined()) require_cuda(op, *db, "db");
  const LinearDims d = op_checks::linear_dims(x, w);
  if (dx != nullptr) {
    const GemmInputs in = same_dtype(ctx, op, dy, w);
    const GemmPlan dgrad =
        plan_linear(LinearPass::dgrad, {d.rows, d.in, d.out, in.element, in.element, element_of(*dx), false});
    execute_gemm_plan(ctx, dgrad, {in.second, in.first, dx->data(), nullptr});
  }
  if (want_dw) {
    const GemmInputs in = same_dtype(ctx, op, x, dy);
    const GemmPlan wgrad =
        plan_linear(LinearPass::wgrad, {d.rows, d.in, d.out, in.element, in.element, element_of(dw), false});
    execute_gemm_plan(ctx, wgrad, {in.first, in.second, dw.data(), nullptr});
  }
  if (db != nullptr && db->defined()) {
    const FloatSpan dbs = float_span(op, *db, "db");
    launch_column_sum_accumulate(float_span(op, dy, "dy"), d.rows, d.out, dbs, stream_of(ctx));
  }
}

// ---- embedding -----------------------------------------------------------------

// Shapes and dtypes: checked by ops::embedding_* (kernels/op_checks.hpp).

void embedding_forward(ExecutionContext& ctx, const Tensor& tokens, const Tensor& table, Tensor& out) {
  constexpr const char* op = "embedding_forward";
  require_cuda(op, tokens, "tokens");
  // A bad token is recorded on the device and thrown at the next
  // synchronisation (input_check_record.hpp): no wait here.
  launch_embedding_forward(tokens.data_as<std::int32_t>(), tokens.numel(), float_span(op, table, "table"),
                           table.dim(0), table.dim(1), float_span(op, out, "out"), stream_of(ctx));
}

void embedding_backward(ExecutionContext& ctx, const Tensor& tokens, const Tensor& dout, Tensor& dtable) {
  constexpr const char* op = "embedding_backward";
  if (!dtable.defined()) return;  // a frozen table (op_list.hpp): there is no activation gradient to compute
  require_cuda(op, tokens, "tokens");
  // The sort's keys, rows and CUB storage, released in stream order.
  const std::shared_ptr<void> scratch =
      ctx.allocator().allocate(std::max<std::size_t>(embedding_backward_scratch_bytes(tokens.numel(), dtable.dim(0)), 1));
  launch_embedding_backward(tokens.data_as<std::int32_t>(), tokens.numel(), float_span(op, dout, "dout"),
                            dtable.dim(0), dtable.dim(1), float_span(op, dtable, "dtable"), scratch.get(),
                            stream_of(ctx));
}

// The vocabulary-parallel pair (tensor parallelism): this rank's rows
// [first_row, first_row + table rows) of the table.
void embedding_forward_rows(ExecutionContext& ctx, const Tensor& tokens, const Tensor& table, std::int64_t first_row,
                            std::int64_t vocab, Tensor& out) {
  constexpr const char* op = "embedding_forward_rows";
  require_cuda(op, tokens, "tokens");
  launch_embedding_forward_rows(tokens.data_as<std::int32_t>(), tokens.numel(), float_span(op, table, "table"),
                                first_row, table.dim(0), vocab, table.dim(1), float_span(op, out, "out"),
                                stream_of(ctx));
}

void embedding_backward_rows(ExecutionContext& ctx, const Tensor& tokens, const Tensor& dout, std::int64_t first_row,
                             Tensor& dtable) {
  constexpr const char* op = "embedding_backward_rows";
  if (!dtable.defined()) return;  // a frozen table, as embedding_backward
  require_cuda(op, tokens, "tokens");
  const std::shared_ptr<void> scratch =
      ctx.allocator().allocate(std::max<std::size_t>(embedding_backward_scratch_bytes(tokens.numel(), dtable.dim(0)), 1));
  launch_embedding_backward_rows(tokens.data_as<std::int32_t>(), tokens.numel(), float_span(op, dout, "dout"),
                                 first_row, dtable.dim(0), dtable.dim(1), float_span(op, dtable, "dtable"),
                                 scratch.get(), stream_of(ctx));
}

// ---- norms -----------------------------------------------------------------------

// Shapes and dtypes: checked by ops::<norm> (kernels/op_checks.hpp). The
// statistics are read through raw pointers: they must be CUDA memory too.
std::int64_t norm_width(const char* op, const Tensor& x,
                        std::initializer_list<std::pair<const Tensor*, const char*>> stats) {
  for (const auto& [stat, role] : stats) require_cuda(op, *stat, role);
  return x.dim(-1);
}

void rmsnorm_forward(ExecutionContext& ctx, const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd) {
  constexpr const char* op = "rmsnorm_forward";
  const std::int64_t width = norm_width(op, x, {{&rstd, "rstd"}});
  launch_rmsnorm_forward(float_span(op, x, "x"), float_span(op, w, "w"), eps, float_span(op, y, "y"),
                         rstd.data_as<float>(), x.numel() / width, width, stream_of(ctx));
}

// The norms' f32 dw / db partials (kernels/math/column_sums.hpp), released
// in stream order after the backward ran.
std::shared_ptr<void> norm_partials_scratch(ExecutionContext& ctx, std::int64_t rows, std::int64_t width, int count) {
  return ctx.allocator().allocate(
      static_cast<std::size_t>(std::max<std::int64_t>(norm_backward_partials(rows, width, count), 1)) * sizeof(float));
}

void rmsnorm_backward(ExecutionContext& ctx, const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy,
                      Tensor& dx, Tensor& dw) {
  constexpr const char* op = "rmsnorm_backward";
  const std::int64_t width = norm_width(op, x, {{&rstd, "rstd"}});
  const std::int64_t rows = x.numel() / width;
  const std::shared_ptr<void> partials = norm_partials_scratch(ctx, rows, width, 1);
  launch_rmsnorm_backward(float_span(op, x, "x"), float_span(op, w, "w"), rstd.data_as<float>(),
                          float_span(op, dy, "dy"), float_span(op, dx, "dx"), float_span(op, dw, "dw"),
                          static_cast<float*>(partials.get()), rows, width, stream_of(ctx));
}

void layernorm_forward(ExecutionContext& ctx, const Tensor& x, const Tensor& w, const Tensor* b, float eps, Tensor& y,
                       Tensor& mean, Tensor& rstd) {
  constexpr const char* op = "layernorm_forward";
  const std::int64_t width = norm_width(op, x, {{&mean, "mean"}, {&rstd, "rstd"}});
  launch_layernorm_forward(float_span(op, x, "x"), float_span(op, w, "w"), optional_span(op, b, "b"), eps,
                           float_span(op, y, "y"), mean.data_as<float>(), rstd.data_as<float>(), x.numel() / width,
                           width, stream_of(ctx));
}

void layernorm_backward(ExecutionContext& ctx, const Tensor& x, const Tensor& w, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dy, Tensor& dx, Tensor& dw, Tensor* db) {
  constexpr const char* op = "layernorm_backward";
  const std::int64_t width = norm_width(op, x, {{&mean, "mean"}, {&rstd, "rstd"}});
  const std::int64_t rows = x.numel() / width;
  const std::shared_ptr<void> partials = norm_partials_scratch(ctx, rows, width, db != nullptr ? 2 : 1);
  launch_layernorm_backward(float_span(op, x, "x"), float_span(op, w, "w"), mean.data_as<float>(),
                            rstd.data_as<float>(), float_span(op, dy, "dy"), float_span(op, dx, "dx"),
                            float_span(op, dw, "dw"), optional_span(op, db, "db"), static_cast<float*>(partials.get()),
                            rows, width, stream_of(ctx));
}

// ---- rope ------------------------------------------------------------------------

void rope(ExecutionContext& ctx, const char* op, const Tensor& in, const char* in_role, const Tensor& inv_freq,
          std::int64_t position_offset, const Tensor* positions, Tensor& out, const char* out_role, float direction) {
  // Shapes and dtypes: checked by ops::rope_* (kernels/op_checks.hpp).
  const FloatSpan is = float_span(op, in, in_role), os = float_span(op, out, out_role);
  require_cuda(op, inv_freq, "inv_freq");
  if (positions != nullptr) require_cuda(op, *positions, "positions");
  const std::int64_t head_dim = in.dim(3);
  launch_rope(is, inv_freq.data_as<float>(), position_offset,
              positions != nullptr ? positions->data_as<std::int32_t>() : nullptr, os, direction, in.dim(0),
              in.dim(1), in.dim(2), head_dim, stream_of(ctx));
}

void rope_forward(ExecutionContext& ctx, const Tensor& x, const Tensor& inv_freq, std::int64_t position_offset,
                  const Tensor* positions, Tensor& y) {
  rope(ctx, "rope_forward", x, "x", inv_freq, position_offset, positions, y, "y", 1.0f);
}

void rope_backward(ExecutionContext& ctx, const Tensor& dy, const Tensor& inv_freq, std::int64_t position_offset,
                   const Tensor* positions, Tensor& dx) {
  rope(ctx, "rope_backward", dy, "dy", inv_freq, position_offset, positions, dx, "dx", -1.0f);
}

// ---- activations -------------------------------------------------------------------
// Shapes, dtypes and the GELU form: checked by ops::<op> (kernels/op_checks.hpp).

void swiglu_forward(ExecutionContext& ctx, const Tensor& gate, const Tensor& up, Tensor& out) {
  constexpr const char* op = "swiglu_forward";
  launch_swiglu_forward(float_span(op, gate, "gate"), float_span(op, up, "up"), float_span(op, out, "out"),
                        gate.numel(), stream_of(ctx));
}

void swiglu_backward(ExecutionContext& ctx, const Tensor& gate, const Tensor& up, const Tensor& dout, Tensor& dgate,
                     Tensor& dup) {
  constexpr const char* op = "swiglu_backward";
  launch_swiglu_backward(float_span(op, gate, "gate"), float_span(op, up, "up"), float_span(op, dout, "dout"),
                         float_span(op, dgate, "dgate"), float_span(op, dup, "dup"), gate.numel(), stream_of(ctx));
}

void gelu_forward(ExecutionContext& ctx, const Tensor& x, GeluApproximation approximation, Tensor& y) {
  constexpr const char* op = "gelu_forward";
  launch_gelu_forward(float_span(op, x, "x"), approximation == GeluApproximation::tanh, float_span(op, y, "y"),
                      x.numel(), stream_of(ctx));
}

void gelu_backward(ExecutionContext& ctx, const Tensor& x, const Tensor& dy, GeluApproximation approximation,
                   Tensor& dx) {
  constexpr const char* op = "gelu_backward";
  launch_gelu_backward(float_span(op, x, "x"), float_span(op, dy, "dy"), approximation == GeluApproximation::tanh,
                       float_span(op, dx, "dx"), x.numel(), stream_of(ctx));
}

// ---- attention (the reference kernel, the on-device oracle) ------------------------

// Shapes and dtypes: checked by ops::attention_* (kernels/op_checks.hpp).
// What is left is this backend's own: every tensor in CUDA memory (the cuDNN
// path takes raw pointers), and the head dimension the reference kernel takes.
AttentionDims attention_dims(const char* op, std::initializer_list<std::pair<const Tensor*, const char*>> tensors,
                             const Tensor& q, const Tensor& k) {
  for (const auto& [t, role] : tensors) require_cuda(op, *t, role);
  const AttentionDims dims{q.dim(0), q.dim(1), q.dim(2), k.dim(2), q.dim(3)};
  FT_CHECK(dims.head_dim <= kAttentionReferenceMaxHeadDim)
      << op << ": q " << q.describe() << " has head dim " << dims.head_dim
      << "; the CUDA reference attention takes at most " << kAttentionReferenceMaxHeadDim;
  return dims;
}

// The plan-cache key of one attention call: its shape, its storage (bf16
// when every tensor is bf16, else the first other dtype: refused), causal,
// direction and, under the document mask, the ragged batch its documents
// fit (cudnn_sdpa_plan.hpp).
SdpaPlanKey attention_key(const AttentionDims& d, bool causal, SdpaDirection direction,
                          std::initializer_list<const Tensor*> tensors, const SdpaDocumentSegments* documents) {
  DType dtype = DType::bf16;
  for (const Tensor* t : tensors)
    if (t->dtype() != DType::bf16) {
      dtype = t->dtype();
      break;
    }
  SdpaPlanKey key{d.batch, d.seq, d.q_heads, d.kv_heads, d.head_dim, dtype, causal, direction};
  if (documents != nullptr) sdpa_set_ragged_bucket(*documents, key.ragged_sequences, key.ragged_length);
  return key;
}

// Why cuDNN cannot run this call ("" if it can): a tensor not 16-byte
// aligned (a view at an odd offset), else the shape's cached plan refusal.
std::string cudnn_refusal(ExecutionContext& ctx, const SdpaPlanKey& key,
                          std::initializer_list<std::pair<const char*, const Tensor*>> tensors) {
#if defined(FTRAIN_HAVE_CUDNN)
  for (const auto& [role, t] : tensors)
    if (reinterpret_cast<std::uintptr_t>(t->data()) % 16 != 0)
      return std::string(role) + " " + t->describe() + " is not 16-byte aligned (a view at an odd offset)";
  return cudnn_sdpa_prepare(ctx, key);
#else
  (void)ctx, (void)key, (void)tensors;
  return "this libftrain_cuda was built without cuDNN";
#endif
}

// Applies the context's attention_backend to one call: `reference` never
// asks cuDNN; `cudnn` on a shape cuDNN refuses throws naming the shape and
// cuDNN's reason; `auto` takes cuDNN where its plan builds and otherwise the
// reference kernel. Which one runs is logged once per shape and setting
// (stderr, every rank), so a fallback is never silent.
bool attention_uses_cudnn(ExecutionContext& ctx, const SdpaPlanKey& key,
                          std::initializer_list<std::pair<const char*, const Tensor*>> tensors) {
  if (ctx.attention_backend() == AttentionBackend::reference) return false;
  const std::string refusal = cudnn_refusal(ctx, key, tensors);
  const AttentionBackendChoice choice = choose_attention_backend(ctx.attention_backend(), describe(key), refusal);
  static std::mutex mutex;
  static std::set<std::pair<SdpaPlanKey, AttentionBackend>> logged;
  const std::lock_guard<std::mutex> lock(mutex);
  if (logged.insert({key, ctx.attention_backend()}).second) {
    if (choice.use_cudnn)
      std::cerr << "ftrain: " << describe(key) << ": cuDNN fused SDPA (attention_backend "
                << attention_backend_name(ctx.attention_backend()) << ")\n";
    else
      std::cerr << "ftrain: " << choice.fallback_note << "\n";
  }
  return choice.use_cudnn;
}

// The document ids of a packed window, read back to the host and split
// into documents: the cuDNN path's plan and ragged arrays depend on them,
// and both paths refuse ids that do not make documents (not starting at 0,
// decreasing), which the reference kernel's tile skipping relies on. One
// small copy and a wait on the compute stream per call.
std::optional<SdpaDocumentSegments> read_documents(ExecutionContext& ctx, const char* op, const Tensor* documents) {
  if (documents == nullptr) return std::nullopt;
  require_dtype(op, *documents, "documents", DType::i32);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(documents->numel()));
  FTRAIN_CUDA_CHECK(cudaMemcpyAsync(ids.data(), documents->data(), ids.size() * sizeof(std::int32_t),
                                    cudaMemcpyDeviceToHost, stream_of(ctx)));
  FTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream_of(ctx)));
  return sdpa_document_segments(ids.data(), documents->dim(0), documents->dim(1),
                                std::string(op) + ": documents " + documents->describe());
}

#if defined(FTRAIN_HAVE_CUDNN)
// The cuDNN ragged batch's lengths and offsets for this call's documents.
std::optional<SdpaRaggedArrays> ragged_arrays(const std::optional<SdpaDocumentSegments>& segments,
                                              const SdpaPlanKey& key) {
  if (!segments) return std::nullopt;
  return sdpa_ragged_arrays(*segments, key.shape());
}
#endif

const std::int32_t* document_ids(const Tensor* documents) {
  return documents == nullptr ? nullptr : documents->data_as<std::int32_t>();
}

void attention_forward(ExecutionContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                       const Tensor* documents, float softmax_scale, Tensor& out, Tensor& lse) {
  constexpr const char* op = "attention_forward";
  const AttentionDims dims =
      attention_dims(op, {{&q, "q"}, {&k, "k"}, {&v, "v"}, {&out, "out"}, {&lse, "lse"}}, q, k);
  if (q.numel() == 0) return;
  const std::optional<SdpaDocumentSegments> segments = read_documents(ctx, op, documents);
  const SdpaPlanKey key = attention_key(dims, causal, SdpaDirection::forward, {&q, &k, &v, &out},
                                        segments ? &*segments : nullptr);
  if (attention_uses_cudnn(ctx, key, {{"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}, {"lse", &lse}})) {
#if defined(FTRAIN_HAVE_CUDNN)
    SdpaBuffers b;
    b.q = q.data(), b.k = k.data(), b.v = v.data(), b.out = out.data(), b.stats = lse.data();
    // lse: cuDNN's stats are the host's layout (cudnn_sdpa_plan.hpp)
    const std::optional<SdpaRaggedArrays> ragged = ragged_arrays(segments, key);
    cudnn_sdpa_run(ctx, key, b, softmax_scale, ragged ? &*ragged : nullptr);
#endif
    return;
  }
  launch_attention_reference_forward(float_span(op, q, "q"), float_span(op, k, "k"), float_span(op, v, "v"), causal,
                                     document_ids(documents), softmax_scale, float_span(op, out, "out"),
                                     lse.data_as<float>(), dims, stream_of(ctx));
}

void attention_backward(ExecutionContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const Tensor& dout, bool causal, const Tensor* documents,
                        float softmax_scale, Tensor& dq, Tensor& dk, Tensor& dv) {
  constexpr const char* op = "attention_backward";
  const AttentionDims dims = attention_dims(op,
                                            {{&q, "q"},
                                             {&k, "k"},
                                             {&v, "v"},
                                             {&out, "out"},
                                             {&lse, "lse"},
                                             {&dout, "dout"},
                                             {&dq, "dq"},
                                             {&dk, "dk"},
                                             {&dv, "dv"}},
                                            q, k);
  if (q.numel() == 0) return;
  const std::optional<SdpaDocumentSegments> segments = read_documents(ctx, op, documents);
  const SdpaPlanKey key = attention_key(dims, causal, SdpaDirection::backward,
                                        {&q, &k, &v, &out, &dout, &dq, &dk, &dv}, segments ? &*segments : nullptr);
  if (attention_uses_cudnn(ctx, key,
                           {{"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}, {"lse", &lse}, {"dout", &dout},
                            {"dq", &dq}, {"dk", &dk}, {"dv", &dv}})) {
#if defined(FTRAIN_HAVE_CUDNN)
    SdpaBuffers b;
    b.q = q.data(), b.k = k.data(), b.v = v.data(), b.out = out.data(), b.stats = lse.data();
    b.dout = dout.data(), b.dq = dq.data(), b.dk = dk.data(), b.dv = dv.data();
    const std::optional<SdpaRaggedArrays> ragged = ragged_arrays(segments, key);
    cudnn_sdpa_run(ctx, key, b, softmax_scale, ragged ? &*ragged : nullptr);
#endif
    return;
  }
  launch_attention_reference_backward(float_span(op, q, "q"), float_span(op, k, "k"), float_span(op, v, "v"),
                                      float_span(op, out, "out"), lse.data_as<float>(), float_span(op, dout, "dout"),
                                      causal, document_ids(documents), softmax_scale, float_span(op, dq, "dq"),
                                      float_span(op, dk, "dk"), float_span(op, dv, "dv"), dims, stream_of(ctx));
}

// Ring attention's blocks: the reference scheme (attention_block.cu), no
// cuDNN path; shapes checked by ops::attention_block_* (op_checks.hpp).
AttentionBlockDims block_dims(const char* op, std::initializer_list<std::pair<const Tensor*, const char*>> tensors,
                              const Tensor& q, const Tensor& k) {
  for (const auto& [t, role] : tensors) require_cuda(op, *t, role);
  const AttentionBlockDims dims{q.dim(0), q.dim(1), k.dim(1), q.dim(2), k.dim(2), q.dim(3)};
  FT_CHECK(dims.head_dim <= kAttentionReferenceMaxHeadDim)
      << op << ": q " << q.describe() << " has head dim " << dims.head_dim
      << "; the CUDA block attention takes at most " << kAttentionReferenceMaxHeadDim;
  return dims;
}

AttentionBlockTokens block_tokens(const char* op, const Tensor& q_positions, const Tensor& k_positions,
                                  const Tensor* q_documents, const Tensor* k_documents) {
  require_dtype(op, q_positions, "q_positions", DType::i32);
  require_dtype(op, k_positions, "k_positions", DType::i32);
  if (q_documents != nullptr) require_dtype(op, *q_documents, "q_documents", DType::i32);
  if (k_documents != nullptr) require_dtype(op, *k_documents, "k_documents", DType::i32);
  return {q_positions.data_as<std::int32_t>(), k_positions.data_as<std::int32_t>(),
          q_documents ? q_documents->data_as<std::int32_t>() : nullptr,
          k_documents ? k_documents->data_as<std::int32_t>() : nullptr};
}

void attention_block_forward(ExecutionContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& q_positions, const Tensor& k_positions, const Tensor* q_documents,
                             const Tensor* k_documents, bool causal, float softmax_scale, Tensor& out, Tensor& lse) {
  constexpr const char* op = "attention_block_forward";
  const AttentionBlockDims dims =
      block_dims(op, {{&q, "q"}, {&k, "k"}, {&v, "v"}, {&out, "out"}, {&lse, "lse"}}, q, k);
  if (q.numel() == 0) return;
  launch_attention_block_forward(float_span(op, q, "q"), float_span(op, k, "k"), float_span(op, v, "v"),
                                 block_tokens(op, q_positions, k_positions, q_documents, k_documents), causal,
                                 softmax_scale, float_span(op, out, "out"), lse.data_as<float>(), dims, stream_of(ctx));
}

void attention_block_merge(ExecutionContext& ctx, Tensor& out, Tensor& lse, const Tensor& block_out,
                           const Tensor& block_lse) {
  constexpr const char* op = "attention_block_merge";
  require_dtype(op, out, "out", DType::f32);
  require_dtype(op, lse, "lse", DType::f32);
  require_dtype(op, block_lse, "block_lse", DType::f32);
  if (out.numel() == 0) return;
  launch_attention_block_merge(out.data_as<float>(), lse.data_as<float>(), float_span(op, block_out, "block_out"),
                               block_lse.data_as<float>(), out.dim(0), out.dim(1), out.dim(2), out.dim(3),
                               stream_of(ctx));
}

void attention_block_backward(ExecutionContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& lse, const Tensor& dout, const Tensor& q_positions,
                              const Tensor& k_positions, const Tensor* q_documents, const Tensor* k_documents,
                              bool causal, float softmax_scale, Tensor& dq, Tensor& dk, Tensor& dv) {
  constexpr const char* op = "attention_block_backward";
  const AttentionBlockDims dims = block_dims(op,
                                             {{&q, "q"},
                                              {&k, "k"},
                                              {&v, "v"},
                                              {&out, "out"},
                                              {&lse, "lse"},
                                              {&dout, "dout"},
                                              {&dq, "dq"},
                                              {&dk, "dk"},
                                              {&dv, "dv"}},
                                             q, k);
  if (q.numel() == 0 || k.numel() == 0) return;
  launch_attention_block_backward(float_span(op, q, "q"), float_span(op, k, "k"), float_span(op, v, "v"),
                                  float_span(op, out, "out"), lse.data_as<float>(), float_span(op, dout, "dout"),
                                  block_tokens(op, q_positions, k_positions, q_documents, k_documents), causal,
                                  softmax_scale, float_span(op, dq, "dq"), float_span(op, dk, "dk"),
                                  float_span(op, dv, "dv"), dims, stream_of(ctx));
}

// The fused chunked head: kernels/cuda/cross_entropy_head.cpp.
void cross_entropy_forward(ExecutionContext& ctx, const Tensor& h, const Tensor& w, const Tensor* bias,
                           const Tensor& targets, std::int64_t vocab_chunk, Tensor& losses, Tensor& lse) {
  cross_entropy_head_forward(ctx, h, w, bias, targets, vocab_chunk, losses, lse);
}
void cross_entropy_backward(ExecutionContext& ctx, const Tensor& h, const Tensor& w, const Tensor* bias,
                            const Tensor& targets, const Tensor& lse, const Tensor& loss_scale,
                            std::int64_t vocab_chunk, Tensor& dh, Tensor& dw, Tensor* dbias) {
  cross_entropy_head_backward(ctx, h, w, bias, targets, lse, loss_scale, vocab_chunk, dh, dw, dbias);
}

// The vocabulary-parallel head (tensor parallelism): the fused head's
// pipeline over a slice of w's rows, and the two per-row steps that combine
// the group's slices (math::cross_entropy_slice_sum_exp, log_sum_exp and
// cross_entropy_loss: cross_entropy.cu).
void cross_entropy_slice_forward(ExecutionContext& ctx, const Tensor& h, const Tensor& w, const Tensor& targets,
                                 std::int64_t first_row, std::int64_t vocab, std::int64_t vocab_chunk,
                                 Tensor& local_lse, Tensor& target_logit) {
  cross_entropy_slice_head_forward(ctx, h, w, targets, first_row, vocab, vocab_chunk, local_lse, target_logit);
}
void cross_entropy_slice_backward(ExecutionContext& ctx, const Tensor& h, const Tensor& w, const Tensor& targets,
                                  std::int64_t first_row, std::int64_t vocab, const Tensor& lse,
                                  const Tensor& loss_scale, std::int64_t vocab_chunk, Tensor& dh, Tensor& dw) {
  cross_entropy_slice_head_backward(ctx, h, w, targets, first_row, vocab, lse, loss_scale, vocab_chunk, dh, dw);
}
void cross_entropy_slice_sum_exp(ExecutionContext& ctx, const Tensor& local_lse, const Tensor& row_max,
                                 Tensor& sum_exp) {
  constexpr const char* op = "cross_entropy_slice_sum_exp";
  require_dtype(op, local_lse, "local_lse", DType::f32);
  require_dtype(op, row_max, "row_max", DType::f32);
  require_dtype(op, sum_exp, "sum_exp", DType::f32);
  launch_cross_entropy_slice_sum_exp(local_lse.data_as<float>(), row_max.data_as<float>(), local_lse.numel(),
                                     sum_exp.data_as<float>(), stream_of(ctx));
}
// lse may alias row_max: each row reads its max before it writes its lse.
void cross_entropy_slice_loss(ExecutionContext& ctx, const Tensor& row_max, const Tensor& sum_exp,
                              const Tensor& target_logit, const Tensor& targets, Tensor& losses, Tensor& lse) {
  constexpr const char* op = "cross_entropy_slice_loss";
  require_dtype(op, row_max, "row_max", DType::f32);
  require_dtype(op, sum_exp, "sum_exp", DType::f32);
  require_dtype(op, target_logit, "target_logit", DType::f32);
  require_dtype(op, targets, "targets", DType::i32);
  require_dtype(op, losses, "losses", DType::f32);
  require_dtype(op, lse, "lse", DType::f32);
  launch_cross_entropy_finish(row_max.data_as<float>(), sum_exp.data_as<float>(), target_logit.data_as<float>(),
                              targets.data_as<std::int32_t>(), row_max.numel(), losses.data_as<float>(),
                              lse.data_as<float>(), stream_of(ctx));
}

// ---- element-wise ------------------------------------------------------------------
// Shapes, sizes and dtypes: checked by ops::<op> (kernels/op_checks.hpp).

void add(ExecutionContext& ctx, const Tensor& a, const Tensor& b, Tensor& out) {
  constexpr const char* op = "add";
  launch_add(float_span(op, a, "a"), float_span(op, b, "b"), float_span(op, out, "out"), a.numel(), stream_of(ctx));
}

void add_inplace(ExecutionContext& ctx, Tensor& acc, const Tensor& x) {
  constexpr const char* op = "add_inplace";
  launch_add_inplace(float_span(op, acc, "acc"), float_span(op, x, "x"), acc.numel(), stream_of(ctx));
}

void scale_inplace(ExecutionContext& ctx, Tensor& x, float factor) {
  launch_scale_inplace(float_span("scale_inplace", x, "x"), factor, x.numel(), stream_of(ctx));
}

void fill(ExecutionContext& ctx, Tensor& x, float value) {
  constexpr const char* op = "fill";
  require_cuda(op, x, "x");
  std::uint64_t pattern = 0;
  switch (x.dtype()) {
    case DType::f32: {
      std::uint32_t word = 0;
      std::memcpy(&word, &value, 4);
      pattern = word;
      break;
    }
    case DType::f64: {  // accumulators (the gradient norm), as the host
      const double wide = value;
      std::memcpy(&pattern, &wide, 8);
      break;
    }
    case DType::bf16: pattern = to_bf16(value).bits; break;
    case DType::f16: pattern = to_f16(value).bits; break;
    case DType::fp8_e4m3: pattern = to_fp8_e4m3(value).bits; break;
    case DType::fp8_e5m2: pattern = to_fp8_e5m2(value).bits; break;
    default: FT_THROW() << op << ": x " << x.describe() << " must have a float dtype";
  }
  launch_fill_pattern(x.data(), static_cast<int>(dtype_size(x.dtype())), pattern, x.numel(), stream_of(ctx));
}

void cast(ExecutionContext& ctx, const Tensor& src, Tensor& dst) {
  constexpr const char* op = "cast";
  require_cuda(op, src, "src");
  require_cuda(op, dst, "dst");
  if (src.dtype() == dst.dtype()) {
    if (src.data() != dst.data())
      FTRAIN_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), src.nbytes(), cudaMemcpyDeviceToDevice, stream_of(ctx)));
    return;
  }
  // f32, bf16, f16 (kernels/math/f16.hpp) and fp8, unscaled and saturating
  // (kernels/math/fp8.hpp), the host cast's arithmetic.
  const auto element = [](DType t, CastElement& e) {
    switch (t) {
      case DType::f32: e = CastElement::f32; return true;
      case DType::bf16: e = CastElement::bf16; return true;
      case DType::f16: e = CastElement::f16; return true;
      case DType::fp8_e4m3: e = CastElement::fp8_e4m3; return true;
      case DType::fp8_e5m2: e = CastElement::fp8_e5m2; return true;
      default: return false;
    }
  };
  CastElement from{}, to{};
  FT_CHECK(element(src.dtype(), from) && element(dst.dtype(), to))
      << op << ": cannot convert " << src.describe() << " to " << dst.describe() << " (float dtypes only)";
  launch_cast_elements(src.data(), from, dst.data(), to, src.numel(), stream_of(ctx));
}

// The f64 partials of a two-pass reduction (kernels/math/reduction.hpp),
// released in stream order after the reduction ran.
std::shared_ptr<void> reduction_scratch(ExecutionContext& ctx, std::int64_t n) {
  return ctx.allocator().allocate(static_cast<std::size_t>(std::max<std::int64_t>(reduction_partials(n), 1)) *
                                  sizeof(double));
}

void sum(ExecutionContext& ctx, const Tensor& x, Tensor& out) {
  constexpr const char* op = "sum";
  require_cuda(op, out, "out");
  const std::shared_ptr<void> partials = reduction_scratch(ctx, x.numel());
  launch_sum(float_span(op, x, "x"), x.numel(), static_cast<double*>(partials.get()), out.data_as<float>(),
             stream_of(ctx));
}

double sum_squares(ExecutionContext& ctx, const Tensor& x) {
  auto* device_total = static_cast<double*>(ctx.workspace(sizeof(double)));
  const std::shared_ptr<void> partials = reduction_scratch(ctx, x.numel());
  launch_sum_squares(float_span("sum_squares", x, "x"), x.numel(), static_cast<double*>(partials.get()),
                     device_total, stream_of(ctx));
  double total = 0.0;
  FTRAIN_CUDA_CHECK(cudaMemcpyAsync(&total, device_total, sizeof total, cudaMemcpyDeviceToHost, stream_of(ctx)));
  ctx.compute().synchronize();
  return total;
}

// AdamW's f32 operands of one size, and a step that bias correction can use.
// Dtypes, sizes and the step: checked by ops::adamw_* (kernels/op_checks.hpp).
void require_adamw_on_device(const char* op, const Tensor& param, const Tensor& grad, const Tensor& m,
                             const Tensor& v) {
  require_cuda(op, param, "param");
  require_cuda(op, grad, "grad");
  require_cuda(op, m, "m");
  require_cuda(op, v, "v");
}

void adamw_update(ExecutionContext& ctx, Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, float lr,
                  float beta1, float beta2, float eps, float weight_decay, std::int64_t step, float grad_scale) {
  constexpr const char* op = "adamw_update";
  require_adamw_on_device(op, param, grad, m, v);
  launch_adamw(param.data_as<float>(), grad.data_as<float>(), m.data_as<float>(), v.data_as<float>(),
               math::adamw_constants(lr, beta1, beta2, eps, weight_decay, step, grad_scale), param.numel(),
               stream_of(ctx));
}

// ---- gradient clipping and the guarded step (scalars stay on the device) --------
// Dtypes and sizes: checked by ops::<op> (kernels/op_checks.hpp).

void sum_squares_accumulate(ExecutionContext& ctx, const Tensor& x, Tensor& acc) {
  constexpr const char* op = "sum_squares_accumulate";
  require_cuda(op, acc, "acc");
  const std::shared_ptr<void> partials = reduction_scratch(ctx, x.numel());
  launch_sum_squares_accumulate(float_span(op, x, "x"), x.numel(), static_cast<double*>(partials.get()),
                                acc.data_as<double>(), stream_of(ctx));
}

void clip_coefficient(ExecutionContext& ctx, const Tensor& sum_sq, double max_norm, std::int64_t step, Tensor& norm,
                      Tensor& scale, Tensor& diverged_step) {
  constexpr const char* op = "clip_coefficient";
  require_cuda(op, sum_sq, "sum_sq");
  require_cuda(op, norm, "norm");
  require_cuda(op, scale, "scale");
  require_cuda(op, diverged_step, "diverged_step");
  launch_clip_coefficient(sum_sq.data_as<double>(), max_norm, step, norm.data_as<double>(), scale.data_as<float>(),
                          diverged_step.data_as<std::int64_t>(), stream_of(ctx));
}

// ---- the multi-tensor AdamW (one launch per flat shard, adamw.cu) -----------------

// The table's device (its dtype and shape: ops::adamw_update_chunks*). Its
// rows stay on the device (reading them here would wait for the stream); the
// kernel clamps each row to the shard, and the host backend, which the tests
// run, checks every row.
std::int64_t require_chunk_table(const char* op, const Tensor& chunks) {
  require_cuda(op, chunks, "chunks");
  return chunks.dim(0);
}

void adamw_update_chunks(ExecutionContext& ctx, Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                         const Tensor& chunks, float lr, float beta1, float beta2, float eps, float weight_decay,
                         std::int64_t step, float grad_scale) {
  constexpr const char* op = "adamw_update_chunks";
  require_adamw_on_device(op, param, grad, m, v);
  const std::int64_t chunk_count = require_chunk_table(op, chunks);
  launch_adamw_chunks(param.data_as<float>(), grad.data_as<float>(), m.data_as<float>(), v.data_as<float>(),
                      chunks.data_as<std::int64_t>(), chunk_count,
                      math::adamw_constants(lr, beta1, beta2, eps, weight_decay, step, grad_scale), param.numel(),
                      stream_of(ctx));
}

void adamw_update_chunks_guarded(ExecutionContext& ctx, Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                                 const Tensor& chunks, float lr, float beta1, float beta2, float eps,
                                 float weight_decay, std::int64_t step, const Tensor& grad_scale,
                                 const Tensor& diverged_step) {
  constexpr const char* op = "adamw_update_chunks_guarded";
  require_cuda(op, grad_scale, "grad_scale");
  require_cuda(op, diverged_step, "diverged_step");
  require_adamw_on_device(op, param, grad, m, v);
  const std::int64_t chunk_count = require_chunk_table(op, chunks);
  // grad_scale 1 here: the kernel puts the device value in its place.
  launch_adamw_chunks_guarded(param.data_as<float>(), grad.data_as<float>(), m.data_as<float>(),
                              v.data_as<float>(), chunks.data_as<std::int64_t>(), chunk_count,
                              math::adamw_constants(lr, beta1, beta2, eps, weight_decay, step, 1.0f),
                              grad_scale.data_as<float>(), diverged_step.data_as<std::int64_t>(), param.numel(),
                              stream_of(ctx));
}

// ---- dropout and the ViT row ops (token_rows.cu, dropout.cu) ---------------------
// Shapes, dtypes and the op's rules: checked by ops::<op> (kernels/op_checks.hpp);
// float_span() refuses a tensor outside CUDA memory.

void dropout(ExecutionContext& ctx, const Tensor& x, float p, std::uint64_t seed, std::uint64_t stream,
             std::int64_t first_row, Tensor& y) {
  constexpr const char* op = "dropout";
  const FloatSpan sx = float_span(op, x, "x"), sy = float_span(op, y, "y");
  const std::int64_t width = x.dim(-1);
  if (x.numel() == 0) return;
  launch_dropout(sx, p, seed, stream, first_row, width, sy, x.numel(), stream_of(ctx));
}

struct Rows3 {
  std::int64_t batch, rows, cols;
};

Rows3 rows_3d(const Tensor& t) { return {t.dim(0), t.dim(1), t.dim(2)}; }

void patchify_forward(ExecutionContext& ctx, const Tensor& images, std::int64_t patch_size, Tensor& patches) {
  constexpr const char* op = "patchify_forward";
  const math::PatchGeometry g = op_checks::patch_geometry(images, patch_size);
  launch_patchify_forward(float_span(op, images, "images"), g, float_span(op, patches, "patches"), stream_of(ctx));
}

void prepend_rows_forward(ExecutionContext& ctx, const Tensor& prefix, const Tensor& x, Tensor& out) {
  constexpr const char* op = "prepend_rows_forward";
  const Rows3 dx = rows_3d(x);
  const std::int64_t R = prefix.dim(0);
  launch_prepend_rows_forward(float_span(op, prefix, "prefix"), float_span(op, x, "x"), float_span(op, out, "out"),
                              dx.batch, R, dx.rows, dx.cols, stream_of(ctx));
}

void prepend_rows_backward(ExecutionContext& ctx, const Tensor& dout, Tensor& dprefix, Tensor& dx) {
  constexpr const char* op = "prepend_rows_backward";
  const Rows3 dd = rows_3d(dout), dxd = rows_3d(dx);
  const std::int64_t R = dd.rows - dxd.rows, C = dd.cols;
  const FloatSpan sdout = float_span(op, dout, "dout"), sdprefix = float_span(op, dprefix, "dprefix");
  // Row t < R of every image feeds the same prefix row: dprefix[t] += sum_b dout[b, t].
  if (R > 0) launch_batch_sum_accumulate(sdout, dd.batch, dd.rows * C, sdprefix, R * C, stream_of(ctx));
  launch_prepend_rows_dx(sdout, float_span(op, dx, "dx"), dd.batch, R, dxd.rows, C, stream_of(ctx));
}

void broadcast_add_forward(ExecutionContext& ctx, const Tensor& x, const Tensor& bias, Tensor& out) {
  constexpr const char* op = "broadcast_add_forward";
  const Rows3 dx = rows_3d(x);
  launch_broadcast_add_forward(float_span(op, x, "x"), float_span(op, bias, "bias"), float_span(op, out, "out"),
                               dx.batch, dx.rows, dx.cols, stream_of(ctx));
}

void broadcast_add_backward(ExecutionContext& ctx, const Tensor& dout, Tensor& dbias) {
  constexpr const char* op = "broadcast_add_backward";
  const Rows3 d = rows_3d(dout);
  launch_batch_sum_accumulate(float_span(op, dout, "dout"), d.batch, d.rows * d.cols, float_span(op, dbias, "dbias"),
                              d.rows * d.cols, stream_of(ctx));
}

void slice_rows_forward(ExecutionContext& ctx, const Tensor& x, std::int64_t first, Tensor& out) {
  constexpr const char* op = "slice_rows_forward";
  const Rows3 d = rows_3d(x);
  launch_slice_rows_forward(float_span(op, x, "x"), first, float_span(op, out, "out"), d.batch, out.dim(1), d.rows,
                            d.cols, stream_of(ctx));
}

void slice_rows_backward(ExecutionContext& ctx, const Tensor& dout, std::int64_t first, Tensor& dx) {
  constexpr const char* op = "slice_rows_backward";
  const Rows3 d = rows_3d(dx);
  launch_slice_rows_backward(float_span(op, dout, "dout"), first, float_span(op, dx, "dx"), d.batch, dout.dim(1),
                             d.rows, d.cols, stream_of(ctx));
}

}  // namespace

const OpTable& cuda_op_table() {
  static const OpTable table = [] {
    OpTable t;
    t.name = "cuda";
    t.device = Device::cuda;
#define FTRAIN_CUDA_TABLE(R, NAME, PARAMS, ARGS, DEVICE_TENSOR) t.NAME = &NAME;
    FTRAIN_OP_LIST(FTRAIN_CUDA_TABLE)
#undef FTRAIN_CUDA_TABLE
    return t;
  }();
  return table;
}

}  // namespace ftrain::cuda
