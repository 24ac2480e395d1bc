// ViT forward and backward per unit, entirely in ftrain::ops: the step reads
// no tensor data on the host, so it runs unchanged on any backend.
//
// Patch embedding = timm's Conv2d(Cin, C, kernel P, stride P) written as a
// GEMM: patchify_forward puts patch n = (py * grid + px) of image b in row
// b*N + n with column c*P*P + ky*P + kx = pixel (py*P + ky, px*P + kx)
// channel c, which is the (c, kh, kw) order of the conv weight, so the weight
// [C, Cin, P, P] is used as the matrix [C, Cin*P*P] unchanged. The token
// sequence is prepend_rows_forward (class token first) then
// broadcast_add_forward (position embedding), both in f32, rounded once to
// the compute dtype.
//
// Encoder block (timm Block, pre-norm, no layer scale, no dropout):
//   xn1 = LN1(x); q, k, v = xn1 Wqkv^T + bqkv  (rows of Wqkv: q, then k, then v;
//   within each, head h owns columns h*D .. h*D+D-1, timm's reshape(B,T,3,H,D))
//   h1 = x + attention(q, k, v, non-causal, scale D^-1/2) Wproj^T + bproj
//   y  = h1 + fc2(gelu_erf(fc1(LN2(h1))))
// q, k and v come from three GEMMs over row blocks of Wqkv (views, no copy):
// each output column depends only on its own weight row, so this is the same
// arithmetic as one [3C, C] GEMM and gives contiguous [B, T, H, D] tensors
// for the attention op. Norm outputs and the GELU are recomputed in backward.
//
// precision fp8 (ctx.fp8): the four linears of each block (qkv, proj, fc1,
// fc2) run through the shared FP8 linear (layers/linear.hpp: layers::LinearLayers,
// one delayed-scaling state each, kept in the block unit across steps; q, k
// and v are one layer: one state, one scale update per iteration); patch
// embedding, norms, attention and head stay in the compute dtype, as
// Transformer Engine's te.Linear-only recipe does.
//
// Head: timm applies the final norm to every token and then pools the class
// token; LayerNorm is per row, so normalising only the class rows is the same
// and T times cheaper.
#include "vit_model.hpp"

#include <cmath>
#include <string>

#include "base/error.hpp"
#include "kernels/ops.hpp"
#include "layers/linear.hpp"
#include "layers/lora.hpp"

namespace ftrain::vit {

namespace {

Tensor activation(const StepContext& ctx, const Shape& shape) {
  return Tensor::empty(shape, ctx.compute_dtype, ctx.device);
}
Tensor f32_tensor(const StepContext& ctx, const Shape& shape) { return Tensor::empty(shape, DType::f32, ctx.device); }

void check_params(const Unit& unit, const std::vector<Tensor>& params, std::size_t expected) {
  FT_CHECK(params.size() == expected) << "unit " << unit.name() << " expects " << expected << " parameter tensors, got "
                                      << params.size();
}

ParamSpec spec(const std::string& name, Shape shape, InitKind init, float std, bool decay) {
  ParamSpec p;
  p.name = name;
  p.shape = std::move(shape);
  p.init = init;
  p.init_std = std;
  p.weight_decay = decay;
  return p;
}
ParamSpec matrix(const std::string& name, Shape shape, const VitConfig& c) {
  return spec(name, std::move(shape), InitKind::normal, static_cast<float>(c.initializer_range), true);
}
// A block linear: LoRA may adapt it (layers/lora.hpp; PEFT's timm targets qkv, proj, fc1, fc2).
ParamSpec linear(const std::string& name, Shape shape, const VitConfig& c) {
  ParamSpec p = matrix(name, std::move(shape), c);
  p.adaptable = true;
  return p;
}
ParamSpec bias(const std::string& name, std::int64_t size) {
  return spec(name, {size}, InitKind::zeros, 0.0f, false);
}
ParamSpec norm_weight(const std::string& name, std::int64_t size) {
  return spec(name, {size}, InitKind::ones, 0.0f, false);
}

struct ImageDims {
  std::int64_t b, h, w, cin;
};
ImageDims image_dims(const VitConfig& c, const Batch& batch) {
  const Tensor& in = batch.inputs;
  FT_CHECK(in.ndim() == 4 && in.dtype() == DType::f32)
      << "vit expects f32 image batches [B, H, W, C], got " << in.describe();
  if (in.dim(1) != c.image_size || in.dim(2) != c.image_size || in.dim(3) != c.num_channels)
    FT_USER_ERROR() << "vit: images are " << in.dim(1) << "x" << in.dim(2) << "x" << in.dim(3)
                    << " (H x W x C) but the model expects " << c.image_size << "x" << c.image_size << "x"
                    << c.num_channels << " (set image_size / num_channels in the model command or resize the data)";
  return {in.dim(0), in.dim(1), in.dim(2), in.dim(3)};
}

// [B, H, W, Cin] images -> f32 [B*N, Cin*P*P] patch rows in conv weight order.
Tensor unfold_patches(const StepContext& ctx, const VitConfig& c, const Batch& batch) {
  const ImageDims d = image_dims(c, batch);
  Tensor out = f32_tensor(ctx, {d.b * c.num_patches(), c.patch_features()});
  ops::patchify_forward(ctx.execution(), batch.inputs, c.patch_size, out);
  return out;
}

// ---- unit 0: patch embedding, class token, position embedding -------------------------

class PatchEmbedUnit final : public Unit {
 public:
  explicit PatchEmbedUnit(const VitConfig& c) : config_(c) {}
  std::string name() const override { return "patch_embed"; }

  enum Param { kCls, kPos, kWeight, kBias, kNumParams };
  std::vector<ParamSpec> params() const override {
    const auto& c = config_;
    const std::int64_t C = c.embed_dim;
    return {
        spec("cls_token", {1, 1, C}, InitKind::normal, 1e-6f, false),
        spec("pos_embed", {1, c.tokens(), C}, InitKind::normal, static_cast<float>(c.initializer_range), false),
        matrix("patch_embed.proj.weight", {C, c.num_channels, c.patch_size, c.patch_size}, c),
        bias("patch_embed.proj.bias", C),
    };
  }

  Tensor forward(const StepContext& ctx, const std::vector<Tensor>& p, const Batch& batch, const Tensor&,
                 UnitCache& cache) override {
    check_params(*this, p, kNumParams);
    const std::int64_t B = image_dims(config_, batch).b, N = config_.num_patches(), T = config_.tokens(),
                       C = config_.embed_dim;
    Tensor unfolded = unfold_patches(ctx, config_, batch);
    Tensor patches = f32_tensor(ctx, {B, N, C});
    Tensor patch_rows = patches.reshape({B * N, C});
    ops::linear_forward(ctx.execution(), unfolded, p[kWeight].reshape({C, config_.patch_features()}), &p[kBias],
                        patch_rows);
    // Tokens: class token, then the patches (f32), plus the position
    // embedding, rounded once into the compute dtype.
    Tensor h32 = f32_tensor(ctx, {B, T, C});
    ops::prepend_rows_forward(ctx.execution(), p[kCls].reshape({1, C}), patches, h32);
    Tensor h = ctx.compute_dtype == DType::f32 ? h32 : activation(ctx, {B, T, C});
    ops::broadcast_add_forward(ctx.execution(), h32, p[kPos].reshape({T, C}), h);
    cache.clear();
    return h.reshape({B * T, C});
  }

  Tensor backward(const StepContext& ctx, const std::vector<Tensor>& p, std::vector<Tensor>& g, const Batch& batch,
                  const Tensor&, const Tensor& dy, UnitCache&) override {
    check_params(*this, p, kNumParams);
    const std::int64_t B = image_dims(config_, batch).b, N = config_.num_patches(), T = config_.tokens(),
                       C = config_.embed_dim;
    const Tensor dy3 = dy.reshape({B, T, C});
    Tensor dpos = g[kPos].reshape({T, C});
    ops::broadcast_add_backward(ctx.execution(), dy3, dpos);
    Tensor dcls = g[kCls].reshape({1, C});
    Tensor dpatches = f32_tensor(ctx, {B, N, C});
    ops::prepend_rows_backward(ctx.execution(), dy3, dcls, dpatches);
    Tensor unfolded = unfold_patches(ctx, config_, batch);
    Tensor dw = g[kWeight].reshape({C, config_.patch_features()});
    ops::linear_backward(ctx.execution(), unfolded, p[kWeight].reshape({C, config_.patch_features()}),
                         dpatches.reshape({B * N, C}), nullptr, dw, &g[kBias]);
    return Tensor();
  }

 private:
  VitConfig config_;
};

// ---- units 1..depth: encoder blocks ------------------------------------------------------

class BlockUnit final : public Unit {
 public:
  BlockUnit(const VitConfig& c, int index)
      : config_(c),
        prefix_("blocks." + std::to_string(index)),
        linears_({prefix_ + ".attn.qkv", prefix_ + ".attn.proj", prefix_ + ".mlp.fc1", prefix_ + ".mlp.fc2"}) {}
  std::string name() const override { return prefix_; }

  enum Param { kN1W, kN1B, kQkvW, kQkvB, kProjW, kProjB, kN2W, kN2B, kFc1W, kFc1B, kFc2W, kFc2B, kNumParams };
  std::vector<ParamSpec> params() const override {
    const auto& c = config_;
    const std::int64_t C = c.embed_dim, M = c.mlp_dim;
    const std::string& p = prefix_;
    return {
        norm_weight(p + ".norm1.weight", C),   bias(p + ".norm1.bias", C),
        linear(p + ".attn.qkv.weight", {3 * C, C}, c), bias(p + ".attn.qkv.bias", 3 * C),
        linear(p + ".attn.proj.weight", {C, C}, c),    bias(p + ".attn.proj.bias", C),
        norm_weight(p + ".norm2.weight", C),   bias(p + ".norm2.bias", C),
        linear(p + ".mlp.fc1.weight", {M, C}, c),      bias(p + ".mlp.fc1.bias", M),
        linear(p + ".mlp.fc2.weight", {C, M}, c),      bias(p + ".mlp.fc2.bias", C),
    };
  }

  enum Saved { kMean1, kRstd1, kQ, kK, kV, kAttn, kLse, kH1, kMean2, kRstd2, kFc1Out, kNumSaved };

  Tensor forward(const StepContext& ctx, const std::vector<Tensor>& p, const Batch& batch, const Tensor& x,
                 UnitCache& cache) override {
    check_params(*this, p, kNumParams);
    const Dims d = dims(batch, x);
    const float eps = static_cast<float>(config_.layer_norm_eps);

    Tensor xn1 = activation(ctx, {d.n, d.c});
    Tensor mean1 = f32_tensor(ctx, {d.n}), rstd1 = f32_tensor(ctx, {d.n});
    ops::layernorm_forward(ctx.execution(), x, p[kN1W], &p[kN1B], eps, xn1, mean1, rstd1);

    Tensor q = activation(ctx, {d.b, d.t, d.h, d.hd});
    Tensor k = activation(ctx, {d.b, d.t, d.h, d.hd});
    Tensor v = activation(ctx, {d.b, d.t, d.h, d.hd});
    for (int part = 0; part < 3; ++part) {
      Tensor w = p[kQkvW].view({d.c, d.c}, part * d.c * d.c);
      Tensor bpart = p[kQkvB].view({d.c}, part * d.c);
      Tensor out = (part == 0 ? q : part == 1 ? k : v).reshape({d.n, d.c});
      linear_forward(ctx, kQkvLayer, xn1, w, &bpart, out, /*out_first=*/part * d.c);
    }
    Tensor attn = activation(ctx, {d.b, d.t, d.h, d.hd});
    Tensor lse = f32_tensor(ctx, {d.b, d.h, d.t});
    ops::attention_forward(ctx.execution(), q, k, v, /*causal=*/false, /*documents=*/nullptr, softmax_scale(), attn, lse);

    Tensor h1 = activation(ctx, {d.n, d.c});
    linear_forward(ctx, kProjLayer, attn.reshape({d.n, d.c}), p[kProjW], &p[kProjB], h1);
    ops::add(ctx.execution(), x, h1, h1);

    Tensor xn2 = activation(ctx, {d.n, d.c});
    Tensor mean2 = f32_tensor(ctx, {d.n}), rstd2 = f32_tensor(ctx, {d.n});
    ops::layernorm_forward(ctx.execution(), h1, p[kN2W], &p[kN2B], eps, xn2, mean2, rstd2);
    Tensor f1 = activation(ctx, {d.n, d.m});
    linear_forward(ctx, kFc1Layer, xn2, p[kFc1W], &p[kFc1B], f1);
    Tensor act = activation(ctx, {d.n, d.m});
    ops::gelu_forward(ctx.execution(), f1, GeluApproximation::none, act);
    Tensor y = activation(ctx, {d.n, d.c});
    linear_forward(ctx, kFc2Layer, act, p[kFc2W], &p[kFc2B], y);
    ops::add(ctx.execution(), h1, y, y);

    cache.clear();
    if (ctx.training) cache.saved = {mean1, rstd1, q, k, v, attn, lse, h1, mean2, rstd2, f1};
    return y;
  }

  Tensor backward(const StepContext& ctx, const std::vector<Tensor>& p, std::vector<Tensor>& g, const Batch& batch,
                  const Tensor& x, const Tensor& dy, UnitCache& cache) override {
    check_params(*this, p, kNumParams);
    FT_CHECK(cache.saved.size() == kNumSaved)
        << "unit " << prefix_ << ": backward without a training forward (empty cache)";
    const Dims d = dims(batch, x);
    const float eps = static_cast<float>(config_.layer_norm_eps);
    const auto& s = cache.saved;

    // MLP half; recompute LN2 output and the GELU.
    Tensor xn2 = activation(ctx, {d.n, d.c});
    Tensor mean_scratch = f32_tensor(ctx, {d.n}), rstd_scratch = f32_tensor(ctx, {d.n});
    ops::layernorm_forward(ctx.execution(), s[kH1], p[kN2W], &p[kN2B], eps, xn2, mean_scratch, rstd_scratch);
    Tensor act = activation(ctx, {d.n, d.m});
    ops::gelu_forward(ctx.execution(), s[kFc1Out], GeluApproximation::none, act);

    Tensor dact = activation(ctx, {d.n, d.m});
    linear_backward(ctx, kFc2Layer, act, p[kFc2W], dy, &dact, g[kFc2W], &g[kFc2B]);
    Tensor df1 = activation(ctx, {d.n, d.m});
    ops::gelu_backward(ctx.execution(), s[kFc1Out], dact, GeluApproximation::none, df1);
    Tensor dxn2 = activation(ctx, {d.n, d.c});
    linear_backward(ctx, kFc1Layer, xn2, p[kFc1W], df1, &dxn2, g[kFc1W], &g[kFc1B]);
    Tensor dh1 = activation(ctx, {d.n, d.c});
    ops::layernorm_backward(ctx.execution(), s[kH1], p[kN2W], s[kMean2], s[kRstd2], dxn2, dh1, g[kN2W], &g[kN2B]);
    ops::add(ctx.execution(), dh1, dy, dh1);

    // Attention half.
    Tensor dattn = activation(ctx, {d.b, d.t, d.h, d.hd});
    Tensor dattn2 = dattn.reshape({d.n, d.c});
    linear_backward(ctx, kProjLayer, s[kAttn].reshape({d.n, d.c}), p[kProjW], dh1, &dattn2, g[kProjW], &g[kProjB]);
    Tensor dq = activation(ctx, {d.b, d.t, d.h, d.hd});
    Tensor dk = activation(ctx, {d.b, d.t, d.h, d.hd});
    Tensor dv = activation(ctx, {d.b, d.t, d.h, d.hd});
    ops::attention_backward(ctx.execution(), s[kQ], s[kK], s[kV], s[kAttn], s[kLse], dattn, /*causal=*/false, /*documents=*/nullptr,
                            softmax_scale(), dq, dk, dv);

    Tensor xn1 = activation(ctx, {d.n, d.c});
    ops::layernorm_forward(ctx.execution(), x, p[kN1W], &p[kN1B], eps, xn1, mean_scratch, rstd_scratch);
    Tensor dxn1 = activation(ctx, {d.n, d.c});
    Tensor dxn1_part = activation(ctx, {d.n, d.c});
    for (int part = 0; part < 3; ++part) {
      Tensor w = p[kQkvW].view({d.c, d.c}, part * d.c * d.c);
      // Frozen base (LoRA): the gradients are undefined, and so are their parts.
      Tensor dw = g[kQkvW].defined() ? g[kQkvW].view({d.c, d.c}, part * d.c * d.c) : Tensor();
      Tensor db = g[kQkvB].defined() ? g[kQkvB].view({d.c}, part * d.c) : Tensor();
      Tensor dout = (part == 0 ? dq : part == 1 ? dk : dv).reshape({d.n, d.c});
      linear_backward(ctx, kQkvLayer, xn1, w, dout, part == 0 ? &dxn1 : &dxn1_part, dw, &db, /*out_first=*/part * d.c);
      if (part > 0) ops::add_inplace(ctx.execution(), dxn1, dxn1_part);
    }
    Tensor dx = activation(ctx, {d.n, d.c});
    ops::layernorm_backward(ctx.execution(), x, p[kN1W], s[kMean1], s[kRstd1], dxn1, dx, g[kN1W], &g[kN1B]);
    ops::add(ctx.execution(), dx, dh1, dx);
    return dx;
  }

 private:
  struct Dims {
    std::int64_t b, t, n, c, h, hd, m;
  };
  Dims dims(const Batch& batch, const Tensor& x) const {
    const std::int64_t b = image_dims(config_, batch).b, t = config_.tokens();
    FT_CHECK(x.numel() == b * t * config_.embed_dim)
        << "unit " << prefix_ << ": input " << x.describe() << " is not [" << b * t << ", " << config_.embed_dim << "]";
    return {b, t, b * t, config_.embed_dim, config_.num_heads, config_.head_dim(), config_.mlp_dim};
  }
  float softmax_scale() const { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(config_.head_dim()))); }

 public:
  // Indices of the block's linear layers in linears_ (q, k and v are one
  // layer: one FP8 state, one scale update per iteration).
  enum Linear { kQkvLayer, kProjLayer, kFc1Layer, kFc2Layer };

  std::vector<Fp8StateRef> fp8_states(const fp8::Recipe& recipe) override { return linears_.states(recipe); }

 private:
  // The LoRA slot (layers/lora.hpp) of each block linear: its weight's Param.
  static int lora_slot(Linear layer) {
    static constexpr Param kWeights[] = {kQkvW, kProjW, kFc1W, kFc2W};
    return kWeights[layer];
  }
  // Every block linear goes through here: the base (FP8 or not, the shared
  // layers::LinearLayers), then its LoRA adapter when the engine gave it one.
  // out_first: which output features of the linear y holds (qkv is computed
  // in three parts).
  void linear_forward(const StepContext& ctx, Linear layer, const Tensor& x, const Tensor& w, const Tensor* b,
                      Tensor& y, std::int64_t out_first = 0) {
    linears_.forward(ctx, layer, x, w, b, y);
    lora::add_forward(ctx, lora_slot(layer), x, y, out_first);
  }
  // dw / db are undefined when the base is frozen (LoRA): only dx is computed.
  void linear_backward(const StepContext& ctx, Linear layer, const Tensor& x, const Tensor& w, const Tensor& dy,
                       Tensor* dx, Tensor& dw, Tensor* db, std::int64_t out_first = 0) {
    linears_.backward(ctx, layer, x, w, dy, dx, dw, db);
    lora::add_backward(ctx, lora_slot(layer), x, dy, dx, out_first);
  }

  VitConfig config_;
  std::string prefix_;
  layers::LinearLayers linears_;  // indexed by Linear; FP8 under precision fp8
};

// ---- last unit: final norm on the class token, head, cross entropy ---------------------

class HeadUnit final : public Unit {
 public:
  explicit HeadUnit(const VitConfig& c) : config_(c) {}
  std::string name() const override { return "head"; }

  enum Param { kNormW, kNormB, kHeadW, kHeadB, kNumParams };
  std::vector<ParamSpec> params() const override {
    const std::int64_t C = config_.embed_dim;
    return {norm_weight("norm.weight", C), bias("norm.bias", C),
            matrix("head.weight", {config_.num_classes, C}, config_), bias("head.bias", config_.num_classes)};
  }

  enum Saved { kMean, kRstd, kNormed, kLse, kNumSaved };

  Tensor forward(const StepContext& ctx, const std::vector<Tensor>& p, const Batch& batch, const Tensor& x,
                 UnitCache& cache) override {
    check_params(*this, p, kNumParams);
    const std::int64_t B = rows(batch), C = config_.embed_dim;
    const Tensor cls = gather_class_tokens(ctx, x, B);
    Tensor normed = activation(ctx, {B, C});
    Tensor mean = f32_tensor(ctx, {B}), rstd = f32_tensor(ctx, {B});
    ops::layernorm_forward(ctx.execution(), cls, p[kNormW], &p[kNormB], static_cast<float>(config_.layer_norm_eps),
                           normed, mean, rstd);
    Tensor losses = f32_tensor(ctx, {B});
    Tensor lse = f32_tensor(ctx, {B});
    ops::cross_entropy_forward(ctx.execution(), normed, p[kHeadW], &p[kHeadB], batch.targets.reshape({B}),
                               ctx.vocab_chunk, losses, lse);
    Tensor loss = f32_tensor(ctx, {1});  // the sum stays on the device
    ops::sum(ctx.execution(), losses, loss);
    cache.clear();
    if (ctx.training) cache.saved = {mean, rstd, normed, lse};
    return loss;
  }

  Tensor backward(const StepContext& ctx, const std::vector<Tensor>& p, std::vector<Tensor>& g, const Batch& batch,
                  const Tensor& x, const Tensor& dy, UnitCache& cache) override {
    check_params(*this, p, kNumParams);
    FT_CHECK(cache.saved.size() == kNumSaved) << "head: backward without a training forward (empty cache)";
    FT_CHECK(dy.numel() == 1 && dy.dtype() == DType::f32)
        << "head: dy must be the f32[1] loss scale, got " << dy.describe();
    const std::int64_t B = rows(batch), T = config_.tokens(), C = config_.embed_dim;
    const auto& s = cache.saved;
    Tensor dnormed = activation(ctx, {B, C});
    ops::cross_entropy_backward(ctx.execution(), s[kNormed], p[kHeadW], &p[kHeadB], batch.targets.reshape({B}),
                                s[kLse], dy, ctx.vocab_chunk, dnormed, g[kHeadW], &g[kHeadB]);
    const Tensor cls = gather_class_tokens(ctx, x, B);
    Tensor dcls = activation(ctx, {B, C});
    ops::layernorm_backward(ctx.execution(), cls, p[kNormW], s[kMean], s[kRstd], dnormed, dcls, g[kNormW], &g[kNormB]);
    // Only the class tokens reach the loss; every other row's gradient is 0.
    Tensor dx = activation(ctx, {B, T, C});
    ops::slice_rows_backward(ctx.execution(), dcls.reshape({B, 1, C}), 0, dx);
    return dx.reshape({B * T, C});
  }

 private:
  std::int64_t rows(const Batch& batch) const {
    FT_CHECK(batch.targets.dtype() == DType::i32 && batch.targets.ndim() == 1)
        << "vit expects i32 labels [B], got " << batch.targets.describe();
    return batch.targets.dim(0);
  }
  Tensor gather_class_tokens(const StepContext& ctx, const Tensor& x, std::int64_t B) const {
    const std::int64_t T = config_.tokens(), C = config_.embed_dim;
    FT_CHECK(x.numel() == B * T * C) << "head: input " << x.describe() << " is not [" << B * T << ", " << C << "]";
    Tensor cls = Tensor::empty({B, 1, C}, x.dtype(), ctx.device);
    ops::slice_rows_forward(ctx.execution(), x.reshape({B, T, C}), 0, cls);
    return cls.reshape({B, C});
  }

  VitConfig config_;
};

}  // namespace

VitModel::VitModel(const VitConfig& config) : config_(config) {
  config_.validate();
  units_.push_back(std::make_unique<PatchEmbedUnit>(config_));
  for (int i = 0; i < config_.depth; ++i) units_.push_back(std::make_unique<BlockUnit>(config_, i));
  units_.push_back(std::make_unique<HeadUnit>(config_));
}

VitModel::~VitModel() = default;

Unit& VitModel::unit(int index) {
  FT_CHECK(index >= 0 && index < num_units()) << "vit has " << num_units() << " units, asked for unit " << index;
  return *units_[static_cast<std::size_t>(index)];
}

double VitModel::training_flops_per_sample(std::int64_t) const {
  const auto& c = config_;
  const double C = static_cast<double>(c.embed_dim), M = static_cast<double>(c.mlp_dim);
  const double T = static_cast<double>(c.tokens()), N = static_cast<double>(c.num_patches());
  const double L = static_cast<double>(c.depth);
  const double matmul = L * (4.0 * C * C + 2.0 * C * M) * T + C * static_cast<double>(c.patch_features()) * N +
                        static_cast<double>(c.num_classes) * C;
  return 6.0 * matmul + 12.0 * L * C * T * T;
}

}  // namespace ftrain::vit
