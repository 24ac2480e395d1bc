// Llama forward and backward per unit, using only ftrain::ops.
//
// Decoder block (HF LlamaDecoderLayer), x and the output are [N, C]:
//   xn1 = rmsnorm(x);  q, k, v = xn1 Wq^T, xn1 Wk^T, xn1 Wv^T
//   q, k = rope(q), rope(k)            (rotate-half, positions offset + t)
//   a = causal_attention(q, k, v, scale 1/sqrt(D))   (GQA: Hq % Hkv == 0)
//   h1 = x + a Wo^T
//   xn2 = rmsnorm(h1);  y = h1 + (silu(xn2 Wg^T) * xn2 Wu^T) Wd^T
// Backward runs the same steps in reverse. What the block keeps for its
// backward (UnitCache::saved, indices below) is what is expensive to
// recompute (projections, attention output and its log-sum-exp); the norm
// outputs and the SwiGLU product are recomputed in backward, which costs
// O(N * C) elementwise work against the O(N * C^2) of the matmuls.
//
// precision fp8 (ctx.fp8): the seven projections of each decoder layer run
// through the shared FP8 linear (layers/linear.hpp: layers::LinearLayers, one
// delayed-scaling state each, kept in the layer unit across steps);
// embedding, norms, attention and lm_head stay in the compute dtype
// (Transformer Engine's recipe for te.Linear layers). In the forward the
// FP8 inputs come from fused ops, bit for bit the unfused norm / SwiGLU
// followed by one cast per consumer: ops::rmsnorm_forward_fp8 writes xn1
// and three FP8 copies of it (q, k and v each keep their own input scale and
// amax history, so one shared copy would change the goldens; TE fuses q, k,
// v into one GEMM with one scale instead), xn2 and two copies (gate, up);
// ops::swiglu_forward_fp8 writes act and down_proj's copy. The backward's
// recomputations stay unfused (the GPU's backward casts also write the
// transposed copies, which the fused forward ops do not).
#include "llama_model.hpp"

#include <cmath>
#include <initializer_list>
#include <string>

#include "base/error.hpp"
#include "kernels/ops.hpp"
#include "kernels/rope_frequencies.hpp"
#include "layers/context_parallel_attention.hpp"
#include "layers/linear.hpp"
#include "layers/lora.hpp"

namespace ftrain::llama {

namespace {

Tensor activation(const StepContext& ctx, const Shape& shape) {
  return Tensor::empty(shape, ctx.compute_dtype, ctx.device);
}

Tensor f32_tensor(const StepContext& ctx, const Shape& shape) { return Tensor::empty(shape, DType::f32, ctx.device); }

void check_params(const Unit& unit, const std::vector<Tensor>& params, std::size_t expected) {
  FT_CHECK(params.size() == expected) << "unit " << unit.name() << " expects " << expected << " parameter tensors, got "
                                      << params.size();
}

ParamSpec matrix(const std::string& name, Shape shape, const LlamaConfig& c) {
  ParamSpec p;
  p.name = name;
  p.shape = std::move(shape);
  p.init = InitKind::normal;
  p.init_std = static_cast<float>(c.initializer_range);
  p.weight_decay = true;
  return p;
}

ParamSpec norm_weight(const std::string& name, std::int64_t size) {
  ParamSpec p;
  p.name = name;
  p.shape = {size};
  p.init = InitKind::ones;
  p.weight_decay = false;
  return p;
}

// Token rows of a [B, T] batch tensor.
std::int64_t token_rows(const Tensor& tokens) { return tokens.numel(); }

// The packed window's document ids when the deck asks for the document mask
// (data ... document_mask on), else none: attention over the whole window.
const Tensor* documents_of(const Batch& batch) { return batch.documents.defined() ? &batch.documents : nullptr; }

// Per-token RoPE positions (a packed window whose positions restart at each
// document), else none: position_offset + t.
const Tensor* positions_of(const Batch& batch) { return batch.positions.defined() ? &batch.positions : nullptr; }

// A block projection: a linear LoRA may adapt (layers/lora.hpp).
ParamSpec projection(const std::string& name, Shape shape, const LlamaConfig& c) {
  ParamSpec p = matrix(name, std::move(shape), c);
  p.adaptable = true;
  return p;
}

// ---- tensor parallelism (Megatron's layout) -----------------------------------------
//
// At parallel tensor T each unit holds its tensor rank's slices: q, k, v,
// gate and up split by output rows (column-parallel: a rank computes its own
// heads / intermediate columns, no communication), o and down by input
// columns (row-parallel: the partial outputs are summed over the tensor
// group), the embedding and the head by vocabulary rows (the lookup and the
// cross entropy reduce over the group, the logits are never gathered).
// Norm weights are whole on every rank; the residual stream between the
// blocks is sequence-parallel (SequenceRows below). Backward mirrors it: the
// input gradient of a column-parallel projection is partial and summed over
// the group; a row-parallel one's is already the rank's part.

// This rank's slice of `full` along `dim`, T of them.
ParamSpec split_spec(ParamSpec p, int dim, std::int64_t tensor_size) {
  if (tensor_size <= 1) return p;
  p.full_shape = p.shape;
  p.shape[static_cast<std::size_t>(dim)] /= tensor_size;
  p.tensor_split_dim = dim;
  return p;
}

ParallelGroup& tensor_group(const StepContext& ctx, const std::string& unit) {
  FT_CHECK(ctx.parallel != nullptr && ctx.parallel->tensor != nullptr)
      << "unit " << unit << " was split for tensor parallelism but its step has no tensor group";
  return *ctx.parallel->tensor;
}

// Context parallelism (use_context_parallel): a batch holds this rank's
// chunks of each window and attention runs as a ring over the context
// group, causal by Batch::sequence_index (layers/context_parallel_attention.hpp).
// Everything else in the model works token by token and needs no change.
ParallelGroup& context_group(const StepContext& ctx, const std::string& unit, const Batch& batch) {
  FT_CHECK(ctx.parallel != nullptr && ctx.parallel->context != nullptr)
      << "unit " << unit << " runs context-parallel attention but its step has no context group";
  FT_CHECK(batch.sequence_index.defined())
      << "unit " << unit << ": a context-parallel batch without sequence_index (the tokens' places in the window)";
  return *ctx.parallel->context;
}

// Sequence parallelism (Megatron's, with tensor parallelism): between the
// blocks each tensor rank holds 1/T of the token rows (rows [r n/T, (r+1) n/T)
// of the flattened [N, C] stream), so the norms and residual adds run on a
// slice and those activations take 1/T of the memory. A block all-gathers
// the rows before its column-parallel projections and reduce-scatters the
// row-parallel outputs (instead of all-reducing them); backward mirrors it.
// At T = 1 these are the tensors themselves.
class SequenceRows {
 public:
  SequenceRows(const StepContext& ctx, const std::string& unit, std::int64_t tensor_size)
      : ctx_(ctx), unit_(unit), tensor_size_(tensor_size) {}
  // This rank's share of n token rows.
  std::int64_t local(std::int64_t n) const {
    if (n % tensor_size_ != 0)
      FT_USER_ERROR() << "llama: parallel tensor " << tensor_size_ << " shares the micro-batch's " << n
                      << " token rows (micro x seq_len) among the tensor ranks (sequence parallelism), but " << n
                      << " is not a multiple of " << tensor_size_ << "; choose micro or seq_len to make it one";
    return n / tensor_size_;
  }
  // [n/T, C] -> [n, C]: every rank's rows in rank order.
  Tensor gather(const Tensor& rows) const {
    if (tensor_size_ <= 1) return rows;
    Tensor all = Tensor::empty({rows.dim(0) * tensor_size_, rows.dim(1)}, rows.dtype(), ctx_.device);
    tensor_group(ctx_, unit_).all_gather(ctx_.execution(), rows, all);
    return all;
  }
  // [n, C] partial sums -> this rank's [n/T, C] rows of their sum over the group.
  Tensor scatter(const Tensor& partial) const {
    if (tensor_size_ <= 1) return partial;
    Tensor mine = Tensor::empty({local(partial.dim(0)), partial.dim(1)}, partial.dtype(), ctx_.device);
    tensor_group(ctx_, unit_).reduce_scatter_sum(ctx_.execution(), partial, mine);
    return mine;
  }
  // rmsnorm backward on this rank's rows: the norm weight's gradient from
  // them is part of the whole, summed over the group (this call's part only,
  // so gradients accumulated before are not summed again).
  void norm_backward(const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy, Tensor& dx,
                     Tensor& dw) const {
    if (tensor_size_ <= 1 || !dw.defined()) {
      ops::rmsnorm_backward(ctx_.execution(), x, w, rstd, dy, dx, dw);
      return;
    }
    Tensor part = Tensor::empty(dw.shape(), DType::f32, ctx_.device);
    ops::fill(ctx_.execution(), part, 0.0f);
    ops::rmsnorm_backward(ctx_.execution(), x, w, rstd, dy, dx, part);
    tensor_group(ctx_, unit_).all_reduce_sum(ctx_.execution(), part);
    ops::add_inplace(ctx_.execution(), dw, part);
  }

 private:
  const StepContext& ctx_;
  const std::string& unit_;
  std::int64_t tensor_size_;
};

// ---- unit 0: token embedding ------------------------------------------------------

class EmbeddingUnit final : public Unit {
 public:
  EmbeddingUnit(const LlamaConfig& c, std::int64_t tensor_size) : config_(c), tensor_size_(tensor_size) {}
  std::string name() const override { return "model.embed_tokens"; }
  std::vector<ParamSpec> params() const override {
    return {split_spec(matrix("model.embed_tokens.weight", {config_.vocab_size, config_.hidden_size}, config_), 0,
                       tensor_size_)};
  }

  Tensor forward(const StepContext& ctx, const std::vector<Tensor>& params, const Batch& batch, const Tensor&,
                 UnitCache&) override {
    check_params(*this, params, 1);
    const std::int64_t n = token_rows(batch.inputs);
    Tensor h = activation(ctx, {n, config_.hidden_size});
    if (tensor_size_ <= 1) {
      ops::embedding_forward(ctx.execution(), batch.inputs.reshape({n}), params[0], h);
      return h;
    }
    // Vocabulary-parallel: this rank's vocabulary rows, zeros for the others'
    // ids; the sum's token rows are scattered (sequence parallelism).
    ops::embedding_forward_rows(ctx.execution(), batch.inputs.reshape({n}), params[0], first_row(ctx),
                                config_.vocab_size, h);
    return SequenceRows(ctx, name_, tensor_size_).scatter(h);
  }

  Tensor backward(const StepContext& ctx, const std::vector<Tensor>& params, std::vector<Tensor>& grads,
                  const Batch& batch, const Tensor&, const Tensor& dy, UnitCache&) override {
    check_params(*this, params, 1);
    const Tensor tokens = batch.inputs.reshape({token_rows(batch.inputs)});
    if (tensor_size_ <= 1) {
      ops::embedding_backward(ctx.execution(), tokens, dy, grads[0]);
    } else {
      const Tensor dy_all = SequenceRows(ctx, name_, tensor_size_).gather(dy);
      ops::embedding_backward_rows(ctx.execution(), tokens, dy_all, first_row(ctx), grads[0]);
    }
    return Tensor();
  }

 private:
  std::int64_t first_row(const StepContext& ctx) const {
    return tensor_group(ctx, name()).rank() * (config_.vocab_size / tensor_size_);
  }
  LlamaConfig config_;
  std::int64_t tensor_size_;
  const std::string name_ = "model.embed_tokens";
};

// ---- units 1..L: decoder layers ------------------------------------------------------

class DecoderLayerUnit final : public Unit {
 public:
  DecoderLayerUnit(const LlamaConfig& c, int layer, const Tensor& inv_freq, std::int64_t tensor_size,
                   const int& context_size)
      : config_(c),
        tensor_size_(tensor_size),
        context_size_(context_size),
        prefix_("model.layers." + std::to_string(layer)),
        inv_freq_(inv_freq),
        linears_(projection_names(prefix_)) {}

  std::string name() const override { return prefix_; }

  // Order here is the order of `params` in forward/backward.
  enum Param { kInputNorm, kQ, kK, kV, kO, kPostNorm, kGate, kUp, kDown, kNumParams };

  std::vector<ParamSpec> params() const override {
    const auto& c = config_;
    const std::int64_t C = c.hidden_size, I = c.intermediate_size, T = tensor_size_;
    // Column-parallel (split dim 0: output rows) and row-parallel (dim 1: input columns).
    auto column = [&](const std::string& n, Shape shape) { return split_spec(projection(n, std::move(shape), c), 0, T); };
    auto row = [&](const std::string& n, Shape shape) { return split_spec(projection(n, std::move(shape), c), 1, T); };
    return {
        norm_weight(prefix_ + ".input_layernorm.weight", C),
        column(prefix_ + ".self_attn.q_proj.weight", {c.q_size(), C}),
        column(prefix_ + ".self_attn.k_proj.weight", {c.kv_size(), C}),
        column(prefix_ + ".self_attn.v_proj.weight", {c.kv_size(), C}),
        row(prefix_ + ".self_attn.o_proj.weight", {C, c.q_size()}),
        norm_weight(prefix_ + ".post_attention_layernorm.weight", C),
        column(prefix_ + ".mlp.gate_proj.weight", {I, C}),
        column(prefix_ + ".mlp.up_proj.weight", {I, C}),
        row(prefix_ + ".mlp.down_proj.weight", {C, I}),
    };
  }

  // Indices into UnitCache::saved.
  enum Saved { kRstd1, kQRot, kKRot, kVal, kAttn, kLse, kH1, kRstd2, kGateOut, kUpOut, kNumSaved };

  Tensor forward(const StepContext& ctx, const std::vector<Tensor>& p, const Batch& batch, const Tensor& x,
                 UnitCache& cache) override {
    check_params(*this, p, kNumParams);
    const Dims d = dims(batch);
    const float eps = static_cast<float>(config_.rms_norm_eps);

    const SequenceRows rows(ctx, prefix_, tensor_size_);
    const std::int64_t nl = rows.local(d.n);  // this rank's rows of the stream (all at T = 1)
    Tensor xn1 = activation(ctx, {nl, d.c});
    Tensor rstd1 = f32_tensor(ctx, {nl});
    Tensor q = activation(ctx, {d.n, d.hq * d.hd});
    Tensor k = activation(ctx, {d.n, d.hkv * d.hd});
    Tensor v = activation(ctx, {d.n, d.hkv * d.hd});
    if (ctx.fp8) {
      // One pass: xn1 and its FP8 copies for q, k and v, each with that
      // projection's own input scale and amax slot (see the header).
      Fp8Casts qkv = input_casts(ctx, {kQ, kK, kV}, xn1.shape());
      ops::rmsnorm_forward_fp8(ctx.execution(), x, p[kInputNorm], eps, xn1, rstd1, qkv);
      linear_forward_cast(ctx, kQ, xn1, qkv.out[0], p[kQ], q);
      linear_forward_cast(ctx, kK, xn1, qkv.out[1], p[kK], k);
      linear_forward_cast(ctx, kV, xn1, qkv.out[2], p[kV], v);
    } else {
      ops::rmsnorm_forward(ctx.execution(), x, p[kInputNorm], eps, xn1, rstd1);
      const Tensor xn1_all = rows.gather(xn1);
      linear_forward(ctx, kQ, xn1_all, p[kQ], q);
      linear_forward(ctx, kK, xn1_all, p[kK], k);
      linear_forward(ctx, kV, xn1_all, p[kV], v);
    }
    Tensor q4 = q.reshape({d.b, d.t, d.hq, d.hd});
    Tensor k4 = k.reshape({d.b, d.t, d.hkv, d.hd});
    Tensor v4 = v.reshape({d.b, d.t, d.hkv, d.hd});
    ops::rope_forward(ctx.execution(), q4, inv_freq(ctx), batch.position_offset, positions_of(batch), q4);
    ops::rope_forward(ctx.execution(), k4, inv_freq(ctx), batch.position_offset, positions_of(batch), k4);

    Tensor attn = activation(ctx, {d.b, d.t, d.hq, d.hd});
    Tensor lse = f32_tensor(ctx, {d.b, d.hq, d.t});
    if (context_size_ > 1)
      layers::context_parallel_attention_forward(ctx.execution(), context_group(ctx, prefix_, batch), q4, k4, v4,
                                                 batch.sequence_index, documents_of(batch), /*causal=*/true,
                                                 softmax_scale(), attn, lse);
    else
      ops::attention_forward(ctx.execution(), q4, k4, v4, /*causal=*/true, documents_of(batch), softmax_scale(), attn,
                             lse);

    Tensor o = activation(ctx, {d.n, d.c});
    linear_forward(ctx, kO, attn.reshape({d.n, d.hq * d.hd}), p[kO], o);
    Tensor h1 = rows.scatter(o);  // row-parallel o_proj: each rank's heads' share, summed
    ops::add(ctx.execution(), x, h1, h1);

    Tensor xn2 = activation(ctx, {nl, d.c});
    Tensor rstd2 = f32_tensor(ctx, {nl});
    Tensor gate = activation(ctx, {d.n, d.i});
    Tensor up = activation(ctx, {d.n, d.i});
    Tensor act = activation(ctx, {d.n, d.i});
    Tensor y_all = activation(ctx, {d.n, d.c});
    if (ctx.fp8) {
      Fp8Casts gate_up = input_casts(ctx, {kGate, kUp}, xn2.shape());
      ops::rmsnorm_forward_fp8(ctx.execution(), h1, p[kPostNorm], eps, xn2, rstd2, gate_up);
      linear_forward_cast(ctx, kGate, xn2, gate_up.out[0], p[kGate], gate);
      linear_forward_cast(ctx, kUp, xn2, gate_up.out[1], p[kUp], up);
      Fp8Tensor actq = linears_.input_cast(ctx, kDown, act.shape());
      ops::swiglu_forward_fp8(ctx.execution(), gate, up, act, actq);
      linear_forward_cast(ctx, kDown, act, actq, p[kDown], y_all);
    } else {
      ops::rmsnorm_forward(ctx.execution(), h1, p[kPostNorm], eps, xn2, rstd2);
      const Tensor xn2_all = rows.gather(xn2);
      linear_forward(ctx, kGate, xn2_all, p[kGate], gate);
      linear_forward(ctx, kUp, xn2_all, p[kUp], up);
      ops::swiglu_forward(ctx.execution(), gate, up, act);
      linear_forward(ctx, kDown, act, p[kDown], y_all);
    }
    Tensor y = rows.scatter(y_all);  // row-parallel down_proj
    ops::add(ctx.execution(), h1, y, y);

    cache.clear();
    if (ctx.training) {
      cache.saved = {rstd1, q4, k4, v4, attn, lse, h1, rstd2, gate, up};
    }
    return y;
  }

  Tensor backward(const StepContext& ctx, const std::vector<Tensor>& p, std::vector<Tensor>& g, const Batch& batch,
                  const Tensor& x, const Tensor& dy, UnitCache& cache) override {
    check_params(*this, p, kNumParams);
    FT_CHECK(cache.saved.size() == kNumSaved)
        << "unit " << prefix_ << ": backward without a training forward (empty cache)";
    const Dims d = dims(batch);
    const float eps = static_cast<float>(config_.rms_norm_eps);
    const auto& s = cache.saved;

    // MLP half. Recompute xn2 and silu(gate) * up rather than keeping them.
    const SequenceRows rows(ctx, prefix_, tensor_size_);
    const std::int64_t nl = rows.local(d.n);
    Tensor xn2_mine = activation(ctx, {nl, d.c});
    Tensor rstd_scratch = f32_tensor(ctx, {nl});
    ops::rmsnorm_forward(ctx.execution(), s[kH1], p[kPostNorm], eps, xn2_mine, rstd_scratch);
    const Tensor xn2 = rows.gather(xn2_mine);
    Tensor act = activation(ctx, {d.n, d.i});
    ops::swiglu_forward(ctx.execution(), s[kGateOut], s[kUpOut], act);

    Tensor dact = activation(ctx, {d.n, d.i});
    linear_backward(ctx, kDown, act, p[kDown], rows.gather(dy), &dact, g[kDown]);
    Tensor dgate = activation(ctx, {d.n, d.i});
    Tensor dup = activation(ctx, {d.n, d.i});
    ops::swiglu_backward(ctx.execution(), s[kGateOut], s[kUpOut], dact, dgate, dup);
    Tensor dxn2 = activation(ctx, {d.n, d.c});
    Tensor dxn2_up = activation(ctx, {d.n, d.c});
    linear_backward(ctx, kGate, xn2, p[kGate], dgate, &dxn2, g[kGate]);
    linear_backward(ctx, kUp, xn2, p[kUp], dup, &dxn2_up, g[kUp]);
    ops::add_inplace(ctx.execution(), dxn2, dxn2_up);
    const Tensor dxn2_mine = rows.scatter(dxn2);  // column-parallel gate/up: each rank's columns' share, summed
    // dh1 = dy (residual) + d rmsnorm2
    Tensor dh1 = activation(ctx, {nl, d.c});
    rows.norm_backward(s[kH1], p[kPostNorm], s[kRstd2], dxn2_mine, dh1, g[kPostNorm]);
    ops::add(ctx.execution(), dh1, dy, dh1);

    // Attention half.
    Tensor dattn = activation(ctx, {d.b, d.t, d.hq, d.hd});
    Tensor dattn2 = dattn.reshape({d.n, d.hq * d.hd});
    linear_backward(ctx, kO, s[kAttn].reshape({d.n, d.hq * d.hd}), p[kO], rows.gather(dh1), &dattn2, g[kO]);
    Tensor dq = activation(ctx, {d.b, d.t, d.hq, d.hd});
    Tensor dk = activation(ctx, {d.b, d.t, d.hkv, d.hd});
    Tensor dv = activation(ctx, {d.b, d.t, d.hkv, d.hd});
    if (context_size_ > 1)
      layers::context_parallel_attention_backward(ctx.execution(), context_group(ctx, prefix_, batch), s[kQRot],
                                                  s[kKRot], s[kVal], s[kAttn], s[kLse], dattn, batch.sequence_index,
                                                  documents_of(batch), /*causal=*/true, softmax_scale(), dq, dk, dv);
    else
      ops::attention_backward(ctx.execution(), s[kQRot], s[kKRot], s[kVal], s[kAttn], s[kLse], dattn,
                              /*causal=*/true, documents_of(batch), softmax_scale(), dq, dk, dv);
    ops::rope_backward(ctx.execution(), dq, inv_freq(ctx), batch.position_offset, positions_of(batch), dq);
    ops::rope_backward(ctx.execution(), dk, inv_freq(ctx), batch.position_offset, positions_of(batch), dk);

    Tensor xn1_mine = activation(ctx, {nl, d.c});
    ops::rmsnorm_forward(ctx.execution(), x, p[kInputNorm], eps, xn1_mine, rstd_scratch);
    const Tensor xn1 = rows.gather(xn1_mine);
    Tensor dxn1 = activation(ctx, {d.n, d.c});
    Tensor dxn1_part = activation(ctx, {d.n, d.c});
    linear_backward(ctx, kQ, xn1, p[kQ], dq.reshape({d.n, d.hq * d.hd}), &dxn1, g[kQ]);
    linear_backward(ctx, kK, xn1, p[kK], dk.reshape({d.n, d.hkv * d.hd}), &dxn1_part, g[kK]);
    ops::add_inplace(ctx.execution(), dxn1, dxn1_part);
    linear_backward(ctx, kV, xn1, p[kV], dv.reshape({d.n, d.hkv * d.hd}), &dxn1_part, g[kV]);
    ops::add_inplace(ctx.execution(), dxn1, dxn1_part);
    const Tensor dxn1_mine = rows.scatter(dxn1);  // column-parallel q/k/v
    // dx = dh1 (residual) + d rmsnorm1
    Tensor dx = activation(ctx, {nl, d.c});
    rows.norm_backward(x, p[kInputNorm], s[kRstd1], dxn1_mine, dx, g[kInputNorm]);
    ops::add(ctx.execution(), dx, dh1, dx);
    return dx;
  }

 private:
  struct Dims {
    std::int64_t b, t, n, c, i, hq, hkv, hd;
  };
  Dims dims(const Batch& batch) const {
    FT_CHECK(batch.inputs.ndim() == 2) << "llama expects token batches [B, T], got " << batch.inputs.describe();
    const std::int64_t b = batch.inputs.dim(0), t = batch.inputs.dim(1);
    // This tensor rank's heads, KV heads and intermediate columns.
    return {b,
            t,
            b * t,
            config_.hidden_size,
            config_.intermediate_size / tensor_size_,
            config_.num_attention_heads / tensor_size_,
            config_.num_key_value_heads / tensor_size_,
            config_.resolved_head_dim()};
  }

  float softmax_scale() const {
    return static_cast<float>(1.0 / std::sqrt(static_cast<double>(config_.resolved_head_dim())));
  }

  // The checkpoint names of the seven projections, indexed by Param (empty:
  // not a projection).
  static std::vector<std::string> projection_names(const std::string& prefix) {
    static const char* const kNames[kNumParams] = {nullptr, ".self_attn.q_proj", ".self_attn.k_proj",
                                                   ".self_attn.v_proj", ".self_attn.o_proj", nullptr,
                                                   ".mlp.gate_proj", ".mlp.up_proj", ".mlp.down_proj"};
    std::vector<std::string> names;
    for (const char* n : kNames) names.push_back(n != nullptr ? prefix + n : std::string());
    return names;
  }

 public:
  std::vector<Fp8StateRef> fp8_states(const fp8::Recipe& recipe) override { return linears_.states(recipe); }

 private:
  // Every projection goes through here: the base linear (FP8 or not, the
  // shared layers::LinearLayers), then its LoRA adapter when the engine gave it
  // one (the Param index is both the layer index and the LoRA slot).
  void linear_forward(const StepContext& ctx, Param weight, const Tensor& x, const Tensor& w, Tensor& y) {
    linears_.forward(ctx, weight, x, w, nullptr, y);
    lora::add_forward(ctx, weight, x, y);
  }
  // The same on an input a fused op already cast into xq (x: the activation
  // it was cast from, which LoRA's adapter reads).
  void linear_forward_cast(const StepContext& ctx, Param weight, const Tensor& x, const Fp8Tensor& xq,
                           const Tensor& w, Tensor& y) {
    linears_.forward_cast(ctx, weight, xq, w, nullptr, y);
    lora::add_forward(ctx, weight, x, y);
  }
  // The FP8 input descriptors of projections reading one activation.
  Fp8Casts input_casts(const StepContext& ctx, std::initializer_list<Param> weights, const Shape& shape) {
    Fp8Casts casts;
    for (Param weight : weights) casts.out[casts.count++] = linears_.input_cast(ctx, weight, shape);
    return casts;
  }
  // dw is undefined when the base is frozen (LoRA): only dx is computed.
  void linear_backward(const StepContext& ctx, Param weight, const Tensor& x, const Tensor& w, const Tensor& dy,
                       Tensor* dx, Tensor& dw) {
    linears_.backward(ctx, weight, x, w, dy, dx, dw, nullptr);
    lora::add_backward(ctx, weight, x, dy, dx);
  }

  // The RoPE frequencies on the step's device: made on the host with the
  // model, copied to the device once (ops never take host tensors there).
  const Tensor& inv_freq(const StepContext& ctx) {
    if (inv_freq_.device() != ctx.device) inv_freq_ = to_device(inv_freq_, ctx.device);
    return inv_freq_;
  }

  LlamaConfig config_;
  std::int64_t tensor_size_;
  const int& context_size_;  // the model's: set by use_context_parallel
  std::string prefix_;
  Tensor inv_freq_;
  layers::LinearLayers linears_;  // the projections, indexed by Param; FP8 under precision fp8
};

// ---- unit L+1: final norm, output head and loss ------------------------------------------

class HeadUnit final : public Unit {
 public:
  HeadUnit(const LlamaConfig& c, std::int64_t tensor_size) : config_(c), tensor_size_(tensor_size) {}
  std::string name() const override { return "lm_head"; }

  std::vector<ParamSpec> params() const override {
    // Vocabulary-parallel; tied, the embedding's own slice (the same rows).
    ParamSpec head =
        split_spec(matrix("lm_head.weight", {config_.vocab_size, config_.hidden_size}, config_), 0, tensor_size_);
    if (config_.tie_word_embeddings) head.tied_to = "model.embed_tokens.weight";
    return {norm_weight("model.norm.weight", config_.hidden_size), head};
  }

  enum Saved { kRstd, kNormed, kLse, kNumSaved };

  Tensor forward(const StepContext& ctx, const std::vector<Tensor>& p, const Batch& batch, const Tensor& x,
                 UnitCache& cache) override {
    check_params(*this, p, 2);
    const std::int64_t n = token_rows(batch.targets);
    const SequenceRows rows(ctx, name_, tensor_size_);
    const std::int64_t nl = rows.local(n);
    FT_CHECK(nl == x.dim(0)) << "lm_head: " << batch.targets.describe() << " does not match " << x.describe();
    Tensor normed_mine = activation(ctx, {nl, config_.hidden_size});
    Tensor rstd = f32_tensor(ctx, {nl});
    ops::rmsnorm_forward(ctx.execution(), x, p[0], static_cast<float>(config_.rms_norm_eps), normed_mine, rstd);
    const Tensor normed = rows.gather(normed_mine);  // every token row: the head's vocabulary slice scores them all
    Tensor losses = f32_tensor(ctx, {n});
    Tensor lse = f32_tensor(ctx, {n});
    if (tensor_size_ <= 1) {
      ops::cross_entropy_forward(ctx.execution(), normed, p[1], nullptr, batch.targets.reshape({n}), ctx.vocab_chunk,
                                 losses, lse);
    } else {
      vocab_parallel_cross_entropy(ctx, normed, p[1], batch.targets.reshape({n}), losses, lse);
    }

    // The loss sum stays on the device (f64 accumulation inside the op): the
    // engine reads it, the plugin never does.
    Tensor loss = f32_tensor(ctx, {1});
    ops::sum(ctx.execution(), losses, loss);

    cache.clear();
    if (ctx.training) cache.saved = {rstd, normed, lse};
    return loss;
  }

  Tensor backward(const StepContext& ctx, const std::vector<Tensor>& p, std::vector<Tensor>& g, const Batch& batch,
                  const Tensor& x, const Tensor& dy, UnitCache& cache) override {
    check_params(*this, p, 2);
    FT_CHECK(cache.saved.size() == kNumSaved) << "lm_head: backward without a training forward (empty cache)";
    FT_CHECK(dy.numel() == 1 && dy.dtype() == DType::f32)
        << "lm_head: dy must be the f32[1] loss scale, got " << dy.describe();
    const std::int64_t n = token_rows(batch.targets);
    const auto& s = cache.saved;
    const SequenceRows rows(ctx, name_, tensor_size_);
    Tensor dnormed = activation(ctx, {n, config_.hidden_size});
    if (tensor_size_ <= 1) {
      ops::cross_entropy_backward(ctx.execution(), s[kNormed], p[1], nullptr, batch.targets.reshape({n}), s[kLse], dy,
                                  ctx.vocab_chunk, dnormed, g[1], nullptr);
    } else {
      // This slice's share of dnormed (its logits' gradient through its
      // rows), summed and scattered to the ranks' token rows.
      ops::cross_entropy_slice_backward(ctx.execution(), s[kNormed], p[1], batch.targets.reshape({n}), first_row(ctx),
                                        config_.vocab_size, s[kLse], dy, ctx.vocab_chunk, dnormed, g[1]);
      dnormed = rows.scatter(dnormed);
    }
    Tensor dx = activation(ctx, {x.dim(0), config_.hidden_size});
    rows.norm_backward(x, p[0], s[kRstd], dnormed, dx, g[0]);
    return dx;
  }

 private:
  std::int64_t first_row(const StepContext& ctx) const {
    return tensor_group(ctx, name()).rank() * (config_.vocab_size / tensor_size_);
  }

  // Cross entropy over vocabulary-parallel logits, never gathered: each rank
  // takes the log-sum-exp of its slice and the target's logit where it holds
  // it; the group's max of the slices' lse, the sum of their exp against it
  // and the sum of the target logits give every rank the whole row's lse and
  // loss (Megatron's vocab_parallel_cross_entropy).
  void vocab_parallel_cross_entropy(const StepContext& ctx, const Tensor& normed, const Tensor& w,
                                    const Tensor& targets, Tensor& losses, Tensor& lse) const {
    ExecutionContext& exec = ctx.execution();
    ParallelGroup& group = tensor_group(ctx, name());
    const std::int64_t n = targets.numel();
    Tensor local_lse = f32_tensor(ctx, {n});
    Tensor target_logit = f32_tensor(ctx, {n});
    ops::cross_entropy_slice_forward(exec, normed, w, targets, first_row(ctx), config_.vocab_size, ctx.vocab_chunk,
                                     local_lse, target_logit);
    Tensor row_max = f32_tensor(ctx, {n});
    ops::cast(exec, local_lse, row_max);
    group.all_reduce_max(exec, row_max);
    Tensor sum_exp = f32_tensor(ctx, {n});
    ops::cross_entropy_slice_sum_exp(exec, local_lse, row_max, sum_exp);
    group.all_reduce_sum(exec, sum_exp);
    group.all_reduce_sum(exec, target_logit);
    ops::cross_entropy_slice_loss(exec, row_max, sum_exp, target_logit, targets, losses, lse);
  }

  LlamaConfig config_;
  std::int64_t tensor_size_;
  const std::string name_ = "lm_head";
};

Tensor make_inv_freq(const LlamaConfig& c) {
  c.validate();  // before anything relies on head_dim being even
  const std::int64_t d = c.resolved_head_dim();
  if (c.rope_scaling == RopeScaling::llama3) {
    return rope_inv_freq_llama3(d, c.rope_theta, c.rope_scaling_factor, c.rope_scaling_low_freq_factor,
                                c.rope_scaling_high_freq_factor, c.rope_scaling_original_max_position_embeddings);
  }
  return rope_inv_freq(d, c.rope_theta);
}

}  // namespace

LlamaModel::LlamaModel(const LlamaConfig& config) : config_(config), inv_freq_(make_inv_freq(config)) {
  make_units();
}

void LlamaModel::make_units() {
  units_.clear();
  units_.push_back(std::make_unique<EmbeddingUnit>(config_, tensor_size_));
  for (int layer = 0; layer < config_.num_hidden_layers; ++layer) {
    units_.push_back(std::make_unique<DecoderLayerUnit>(config_, layer, inv_freq_, tensor_size_, context_size_));
  }
  units_.push_back(std::make_unique<HeadUnit>(config_, tensor_size_));
}

void LlamaModel::split_for_tensor_parallel(int tensor_size) {
  if (tensor_size == tensor_size_) return;
  FT_CHECK(tensor_size_ == 1) << "llama: split for tensor parallel " << tensor_size << " after " << tensor_size_;
  const auto& c = config_;
  const std::int64_t T = tensor_size;
  auto require = [T](std::int64_t count, const char* what) {
    if (count % T != 0)
      FT_USER_ERROR() << "llama: parallel tensor " << T << " divides the " << what << " among the tensor ranks, but "
                      << count << " is not a multiple of " << T;
  };
  require(c.num_attention_heads, "num_attention_heads");
  require(c.num_key_value_heads, "num_key_value_heads (GQA's KV heads)");
  require(c.intermediate_size, "intermediate_size");
  require(c.vocab_size, "vocab_size (the vocabulary-parallel embedding and head)");
  tensor_size_ = tensor_size;
  make_units();
}

void LlamaModel::use_context_parallel(int context_size) {
  FT_CHECK(context_size >= 1) << "llama: parallel context " << context_size;
  context_size_ = context_size;  // the decoder layers read it (the ring, or one rank's attention)
}

LlamaModel::~LlamaModel() = default;

Unit& LlamaModel::unit(int index) {
  FT_CHECK(index >= 0 && index < num_units()) << "llama has " << num_units() << " units, asked for unit " << index;
  return *units_[static_cast<std::size_t>(index)];
}

double LlamaModel::training_flops_per_sample(std::int64_t sequence_length) const {
  const auto& c = config_;
  const double C = static_cast<double>(c.hidden_size);
  const double per_layer =
      C * static_cast<double>(2 * c.q_size() + 2 * c.kv_size()) + 3.0 * C * static_cast<double>(c.intermediate_size);
  const double matmul_params =
      per_layer * static_cast<double>(c.num_hidden_layers) + static_cast<double>(c.vocab_size) * C;
  const double t = static_cast<double>(sequence_length);
  return 6.0 * matmul_params * t + attention_training_flops(t * t);
}

// Scores q k^T and the weighted values p v: 2 matmuls of 2 * q_size FLOPs
// per (query, key) pair forward, twice that backward.
double LlamaModel::attention_training_flops(double query_key_pairs) const {
  return 12.0 * static_cast<double>(config_.num_hidden_layers) * static_cast<double>(config_.q_size()) *
         query_key_pairs;
}

}  // namespace ftrain::llama
