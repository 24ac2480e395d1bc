// CUDA fused linear head + softmax cross entropy, chunked over the
// vocabulary: the host's algorithm (kernels/host/cross_entropy.cpp), with
// cuBLASLt plans (cublaslt_plan.hpp, the linear layer's own) for the GEMMs
// and cross_entropy.cu for what happens to each chunk. Only one f32 chunk of
// logits [N, vocab_chunk] exists at a time; [N, V] never does.
//
// The GEMMs are the list plan_cross_entropy_head() makes (cross_entropy_plan.hpp,
// replayed on the host by tests/unit/cuda/test_cross_entropy_plan.cpp).
// Forward, per chunk v0: logits = h . w[v0 : v0+cs]^T (the linear forward
// plan, no epilogue: the bias is added by the row kernel in f32 as the host
// adds it), then the online log-sum-exp step; at the end lse and losses.
// Backward, per chunk: the same logits, then dlogit = loss_scale (softmax -
// onehot) from the saved lse, then dh (+)= dlogit . w[chunk] (the dgrad plan;
// beta 0 on the first chunk, 1 after: dh is written), dw[chunk] += dlogit^T h
// (the wgrad plan, beta 1; none for a frozen head), dbias[chunk] +=
// colsum(dlogit) (the deterministic column sum).
//
// Dtypes as on the host: h, w f32 or bf16. Both bf16: the GEMMs read them as
// stored and take dlogit rounded to bf16 (a BF16 GPU GEMM, what autocast
// does). Mixed: the bf16 one is widened to f32 (h once, w per chunk). dh
// accumulates in f32 (in place when f32, else in scratch, rounded once at
// the end); dw / dbias may be bf16 (rounded once per chunk, as the host's
// bf16 dw: cuBLASLt reads, adds in f32 and rounds for bf16 operands; for
// f32 operands an f32 partial is added element-wise).
//
// Targets are checked on the device (input_check_record.hpp) and reported
// at the next synchronisation, naming the op, its row and value.
//
// The vocabulary-parallel slice ops (tensor parallelism) run the same
// pipeline on w's rows [first_row, first_row + Vs) of a vocabulary of
// `vocab` rows: the same plans for Vs rows, targets checked against `vocab`
// and moved by first_row (math::cross_entropy_local_target); the forward
// stops at the slice's own log-sum-exp and target logit (the group combines
// them: cross_entropy_slice_sum_exp, cross_entropy_slice_loss).
#include "kernels/cuda/cross_entropy_head.hpp"

#include <algorithm>
#include <initializer_list>
#include <memory>
#include <utility>
#include <vector>

#include "backends/cuda/device/cuda_check.hpp"
#include "base/error.hpp"
#include "kernels/cuda/cross_entropy_plan.hpp"
#include "kernels/cuda/cublaslt_linear.hpp"
#include "kernels/cuda/kernels.hpp"
#include "kernels/cuda/launch_config.hpp"
#include "kernels/math/cross_entropy.hpp"
#include "kernels/op_list.hpp"
#include "runtime/execution_context.hpp"

namespace ftrain::cuda {

static_assert(math::kCrossEntropyIgnoreIndex == kIgnoreIndex, "one ignore index for both backends");

namespace {

cudaStream_t stream_of(ExecutionContext& ctx) { return static_cast<cudaStream_t>(ctx.compute().native_handle()); }

Storage storage_of(const Tensor& t) { return t.dtype() == DType::f32 ? Storage::f32 : Storage::bf16; }
GemmElement element_of(const Tensor& t) { return t.dtype() == DType::f32 ? GemmElement::f32 : GemmElement::bf16; }

// Each of `tensors` (a null entry is an absent optional one) in CUDA memory:
// the backend's own check, once ops::cross_entropy_* checked shapes and
// dtypes (kernels/op_checks.hpp).
void require_cuda(const char* op, std::initializer_list<std::pair<const Tensor*, const char*>> tensors) {
  for (const auto& [t, role] : tensors) {
    if (t == nullptr) continue;
    FT_CHECK(t->defined()) << op << ": " << role << " is undefined";
    FT_CHECK(t->device() == Device::cuda) << op << ": " << role << " " << t->describe()
                                          << " is not on the CUDA device (CUDA backend)";
  }
}

// Element `index` of a float tensor as a span (bias, dw and dbias chunks).
FloatSpan span_at(const Tensor& t, std::int64_t index) {
  auto* base = static_cast<char*>(t.data());
  return {base + index * static_cast<std::int64_t>(dtype_size(t.dtype())), storage_of(t)};
}

struct HeadShape {
  std::int64_t rows = 0, channels = 0, vocab = 0, chunk = 0;
};

// vocab: the whole vocabulary's rows, the targets' bound (w's own, or more for a slice).
HeadShape check_head(ExecutionContext& ctx, const char* op, InputCheck target_check, const Tensor& h, const Tensor& w,
                     const Tensor* bias, const Tensor& targets, std::int64_t vocab, std::int64_t vocab_chunk) {
  require_cuda(op, {{&h, "h"}, {&w, "w"}, {bias, "bias"}, {&targets, "targets"}});
  HeadShape s{h.dim(0), h.dim(1), w.dim(0), 0};
  s.chunk = cross_entropy_chunk_width(s.vocab, vocab_chunk);

  // The targets are checked on the device; a bad one is recorded there and
  // thrown at the next synchronisation (input_check_record.hpp), so the head
  // never waits for the stream. Its kernels never index with a bad target.
  launch_input_range_check(target_check, targets.data_as<std::int32_t>(), s.rows, vocab, stream_of(ctx));
  return s;
}

// The GEMM operands of the head in one element type (cuBLASLt multiplies A
// and B of one type): as stored when h and w agree, else f32 with the bf16
// one widened (h once here, w chunk by chunk in w_chunk()).
class HeadOperands {
 public:
  HeadOperands(ExecutionContext& ctx, const Tensor& h, const Tensor& w, const HeadShape& s)
      : ctx_(ctx), w_(w), s_(s) {
    element_ = h.dtype() == w.dtype() ? element_of(h) : GemmElement::f32;
    h_ = h.data();
    if (h.dtype() != w.dtype() && h.dtype() == DType::bf16) {
      h_wide_ = ctx.allocator().allocate(static_cast<std::size_t>(h.numel()) * sizeof(float));
      launch_cast({h.data(), Storage::bf16}, {h_wide_.get(), Storage::f32}, h.numel(), stream_of(ctx));
      h_ = h_wide_.get();
    }
  }
  GemmElement element() const { return element_; }
  const void* h() const { return h_; }
  // Rows [v0, v0 + cs) of w in element(); valid until the next call.
  const void* w_chunk(std::int64_t v0, std::int64_t cs) {
    const std::int64_t first = v0 * s_.channels, count = cs * s_.channels;
    if (w_.dtype() == DType::f32 || element_ == GemmElement::bf16)
      return static_cast<const char*>(w_.data()) + first * static_cast<std::int64_t>(dtype_size(w_.dtype()));
    // bf16 w next to an f32 h: widen this chunk (the old scratch goes back in stream order).
    w_wide_ = ctx_.allocator().allocate(static_cast<std::size_t>(count) * sizeof(float));
    launch_cast(span_at(w_, first), {w_wide_.get(), Storage::f32}, count, stream_of(ctx_));
    return w_wide_.get();
  }

 private:
  ExecutionContext& ctx_;
  const Tensor& w_;
  HeadShape s_;
  GemmElement element_;
  const void* h_ = nullptr;
  std::shared_ptr<void> h_wide_, w_wide_;
};

std::shared_ptr<void> device_floats(ExecutionContext& ctx, std::int64_t count) {
  return ctx.allocator().allocate(static_cast<std::size_t>(std::max<std::int64_t>(count, 1)) * sizeof(float));
}

// The buffers of one chunk under the names the plans give them (the linear
// layer each GEMM is: x = h, w = the chunk's rows of w, dy = dlogit, y =
// logits, dx = dh, dw = the chunk's rows of dw or its f32 partial): a plan
// says which operand is A, B and C, and this follows it, so the host replay
// of the plans (tests/unit/cuda/test_cross_entropy_plan.cpp) is what runs.
struct ChunkPointers {
  const void* x;
  const void* w;
  const void* dy;
  void* y;
  void* dx;
  void* dw;
};

GemmOperands operands_of(const GemmPlan& plan, const ChunkPointers& c) {
  const auto input = [&](LinearOperand o) -> const void* {
    switch (o) {
      case LinearOperand::x: return c.x;
      case LinearOperand::w: return c.w;
      case LinearOperand::dy: return c.dy;
      default: break;
    }
    FT_THROW() << "cross-entropy " << pass_name(plan.pass) << " plan reads an output operand";
    return nullptr;  // not reached: the line above throws
  };
  void* out = plan.c == LinearOperand::y ? c.y : plan.c == LinearOperand::dx ? c.dx
                                             : plan.c == LinearOperand::dw ? c.dw : nullptr;
  FT_CHECK(out != nullptr) << "cross-entropy " << pass_name(plan.pass) << " plan writes no output of its pass";
  return {input(plan.a), input(plan.b), out, nullptr};
}

FloatSpan bias_span(const Tensor* bias) {
  return bias != nullptr ? FloatSpan{bias->data(), storage_of(*bias)} : FloatSpan{nullptr, Storage::f32};
}

// The online log-sum-exp state (row_max, row_sum, target_logit: f32[rows]
// each) of w's rows, vocabulary rows [first_row, first_row + s.vocab), per
// row of h.
void online_log_sum_exp(ExecutionContext& ctx, const HeadShape& s, const Tensor& h, const Tensor& w,
                        const Tensor* bias, const Tensor& targets, std::int64_t first_row, float* row_max,
                        float* row_sum, float* target_logit) {
  cudaStream_t stream = stream_of(ctx);
  HeadOperands in(ctx, h, w, s);
  const std::shared_ptr<void> logits = device_floats(ctx, s.rows * s.chunk);
  const auto* tgt = targets.data_as<std::int32_t>();
  launch_cross_entropy_init(row_max, row_sum, target_logit, s.rows, stream);
  auto* chunk = static_cast<float*>(logits.get());
  for (const CrossEntropyChunkPlan& p : plan_cross_entropy_head({s.rows, s.channels, s.vocab, s.chunk, in.element(),
                                                                 GemmElement::f32, false})) {
    execute_gemm_plan(ctx, p.logits,
                      operands_of(p.logits, {in.h(), in.w_chunk(p.v0, p.width), nullptr, chunk, nullptr, nullptr}));
    launch_cross_entropy_forward_chunk(chunk, bias_span(bias), tgt, first_row, s.rows, p.v0, p.width, row_max,
                                       row_sum, target_logit, stream);
  }
}

// The backward over w's rows [first_row, first_row + s.vocab) of the
// vocabulary, lse the whole row's: the whole head's (first_row 0) or a
// slice's.
void head_backward(ExecutionContext& ctx, const char* op, const HeadShape& s, const Tensor& h, const Tensor& w,
                   const Tensor* bias, const Tensor& targets, std::int64_t first_row, const Tensor& lse,
                   const Tensor& loss_scale, Tensor& dh, Tensor& dw, Tensor* dbias) {
  // Undefined dw / dbias: a frozen head (op_list.hpp); only dh is computed.
  const bool want_dw = dw.defined();
  if (dbias != nullptr && !dbias->defined()) dbias = nullptr;
  require_cuda(op, {{&loss_scale, "loss_scale"}, {&lse, "lse"}, {&dh, "dh"}, {want_dw ? &dw : nullptr, "dw"},
                    {dbias, "dbias"}});
  if (s.rows == 0) return;  // dh is empty; no row contributes to dw or dbias

  cudaStream_t stream = stream_of(ctx);
  const std::int64_t N = s.rows, C = s.channels;
  HeadOperands in(ctx, h, w, s);
  const bool bf16_gemms = in.element() == GemmElement::bf16;
  const std::shared_ptr<void> logits = device_floats(ctx, N * s.chunk);
  // bf16 GEMMs take dlogit rounded to bf16 (two bytes per element).
  const std::shared_ptr<void> dlogit16 = bf16_gemms ? device_floats(ctx, (N * s.chunk + 1) / 2) : nullptr;
  // dh accumulates over chunks in f32: in place when it is f32.
  std::shared_ptr<void> dh_scratch;
  void* dh32 = dh.data();
  if (dh.dtype() != DType::f32) {
    dh_scratch = device_floats(ctx, N * C);
    dh32 = dh_scratch.get();
  }
  const auto* tgt = targets.data_as<std::int32_t>();
  auto* dlogit = static_cast<float*>(logits.get());
  const void* dlogit_gemm = bf16_gemms ? dlogit16.get() : static_cast<const void*>(dlogit);
  const GemmElement dw_element = want_dw ? element_of(dw) : GemmElement::f32;
  for (const CrossEntropyChunkPlan& p :
       plan_cross_entropy_head({N, C, s.vocab, s.chunk, in.element(), dw_element, want_dw})) {
    const void* w_chunk = in.w_chunk(p.v0, p.width);
    execute_gemm_plan(ctx, p.logits, operands_of(p.logits, {in.h(), w_chunk, nullptr, dlogit, nullptr, nullptr}));
    launch_cross_entropy_backward_chunk(dlogit, bias_span(bias), tgt, first_row, lse.data_as<float>(),
                                        loss_scale.data_as<float>(), N, p.v0, p.width,
                                        static_cast<std::uint16_t*>(dlogit16.get()), stream);
    // The logits buffer holds dlogit now: an input (dy), no longer an output.
    std::shared_ptr<void> partial;
    void* dw_out = want_dw ? span_at(dw, p.w_offset).data : nullptr;
    if (p.dw_partial) {
      partial = device_floats(ctx, p.width * C);
      dw_out = partial.get();
    }
    const ChunkPointers grads{in.h(), w_chunk, dlogit_gemm, nullptr, dh32, dw_out};
    execute_gemm_plan(ctx, p.dh, operands_of(p.dh, grads));
    if (want_dw) {
      execute_gemm_plan(ctx, p.dw, operands_of(p.dw, grads));
      if (p.dw_partial)
        launch_add_inplace(span_at(dw, p.w_offset), {partial.get(), Storage::f32}, p.width * C, stream);
    }
    // dbias[chunk] += colsum(dlogit), rows in order (deterministic).
    if (dbias != nullptr)
      launch_column_sum_accumulate({dlogit, Storage::f32}, N, p.width, span_at(*dbias, p.v0), stream);
  }
  if (dh.dtype() != DType::f32) launch_cast({dh32, Storage::f32}, {dh.data(), Storage::bf16}, N * C, stream);
}

}  // namespace

void cross_entropy_head_forward(ExecutionContext& ctx, const Tensor& h, const Tensor& w, const Tensor* bias,
                                const Tensor& targets, std::int64_t vocab_chunk, Tensor& losses, Tensor& lse) {
  constexpr const char* op = "cross_entropy_forward";
  const HeadShape s =
      check_head(ctx, op, InputCheck::cross_entropy_forward, h, w, bias, targets, w.dim(0), vocab_chunk);
  require_cuda(op, {{&losses, "losses"}, {&lse, "lse"}});
  if (s.rows == 0) return;
  const std::shared_ptr<void> state = device_floats(ctx, 3 * s.rows);
  float* row_max = static_cast<float*>(state.get());
  float* row_sum = row_max + s.rows;
  float* target_logit = row_sum + s.rows;
  online_log_sum_exp(ctx, s, h, w, bias, targets, 0, row_max, row_sum, target_logit);
  launch_cross_entropy_finish(row_max, row_sum, target_logit, targets.data_as<std::int32_t>(), s.rows,
                              losses.data_as<float>(), lse.data_as<float>(), stream_of(ctx));
}

void cross_entropy_head_backward(ExecutionContext& ctx, const Tensor& h, const Tensor& w, const Tensor* bias,
                                 const Tensor& targets, const Tensor& lse, const Tensor& loss_scale,
                                 std::int64_t vocab_chunk, Tensor& dh, Tensor& dw, Tensor* dbias) {
  constexpr const char* op = "cross_entropy_backward";
  const HeadShape s =
      check_head(ctx, op, InputCheck::cross_entropy_backward, h, w, bias, targets, w.dim(0), vocab_chunk);
  head_backward(ctx, op, s, h, w, bias, targets, 0, lse, loss_scale, dh, dw, dbias);
}

void cross_entropy_slice_head_forward(ExecutionContext& ctx, const Tensor& h, const Tensor& w, const Tensor& targets,
                                      std::int64_t first_row, std::int64_t vocab, std::int64_t vocab_chunk,
                                      Tensor& local_lse, Tensor& target_logit) {
  constexpr const char* op = "cross_entropy_slice_forward";
  const HeadShape s =
      check_head(ctx, op, InputCheck::cross_entropy_slice_forward, h, w, nullptr, targets, vocab, vocab_chunk);
  require_cuda(op, {{&local_lse, "local_lse"}, {&target_logit, "target_logit"}});
  if (s.rows == 0) return;
  // The target logit goes straight to its output; the running max and sum
  // end in the slice's log-sum-exp.
  const std::shared_ptr<void> state = device_floats(ctx, 2 * s.rows);
  float* row_max = static_cast<float*>(state.get());
  float* row_sum = row_max + s.rows;
  online_log_sum_exp(ctx, s, h, w, nullptr, targets, first_row, row_max, row_sum, target_logit.data_as<float>());
  launch_cross_entropy_row_lse(row_max, row_sum, s.rows, local_lse.data_as<float>(), stream_of(ctx));
}

void cross_entropy_slice_head_backward(ExecutionContext& ctx, const Tensor& h, const Tensor& w, const Tensor& targets,
                                       std::int64_t first_row, std::int64_t vocab, const Tensor& lse,
                                       const Tensor& loss_scale, std::int64_t vocab_chunk, Tensor& dh, Tensor& dw) {
  constexpr const char* op = "cross_entropy_slice_backward";
  const HeadShape s =
      check_head(ctx, op, InputCheck::cross_entropy_slice_backward, h, w, nullptr, targets, vocab, vocab_chunk);
  head_backward(ctx, op, s, h, w, nullptr, targets, first_row, lse, loss_scale, dh, dw, nullptr);
}

}  // namespace ftrain::cuda
