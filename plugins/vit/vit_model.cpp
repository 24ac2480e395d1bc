// ViT forward and backward per unit, using ftrain::ops plus a few host loops
// for the data movement the op set has no op for (patch unfold, class-token
// and position-embedding assembly, class-token gather).
//
// Patch embedding = timm's Conv2d(Cin, C, kernel P, stride P) written as a
// GEMM: unfold puts patch n = (py * grid + px) of image b in row b*N + n with
// column c*P*P + ky*P + kx = pixel (py*P + ky, px*P + kx) channel c, which is
// the (c, kh, kw) order of the conv weight, so the weight [C, Cin, P, P] is
// used as the matrix [C, Cin*P*P] unchanged.
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
// fc2) run fp8::linear_* with one delayed-scaling state each, kept in the
// block unit across steps (q, k and v are one layer: one state, one scale
// update per iteration); patch embedding, norms, attention and head stay in
// the compute dtype, as Transformer Engine's te.Linear-only recipe does.
//
// Head: timm applies the final norm to every token and then pools the class
// token; LayerNorm is per row, so normalising only the class rows is the same
// and T times cheaper.
#include "vit_model.hpp"

#include <Kokkos_Core.hpp>
#include <cmath>
#include <cstring>
#include <string>

#include "core/error.hpp"
#include "fp8/linear.hpp"
#include "fp8/recipe.hpp"
#include "kernels/ops.hpp"
#include "plugin/lora.hpp"

namespace ftrain::vit {

namespace {

using HostPolicy = Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>;

Tensor activation(const StepContext& ctx, const Shape& shape) {
  return Tensor::empty(shape, ctx.compute_dtype, ctx.device);
}
Tensor f32_tensor(const StepContext& ctx, const Shape& shape) { return Tensor::empty(shape, DType::f32, ctx.device); }

void check_params(const Unit& unit, const std::vector<Tensor>& params, std::size_t expected) {
  FT_CHECK(params.size() == expected) << "unit " << unit.name() << " expects " << expected << " parameter tensors, got "
                                      << params.size();
}

// Before a host loop touches `t`: it must be host memory, and the ops
// enqueued so far (which may read or write it) must have run.
void require_host(ExecutionContext& exec, const char* what, const Tensor& t) {
  FT_CHECK(t.device() == Device::host) << "vit " << what << ": " << t.describe()
                                       << " is not on the host (this step has host loops only)";
  exec.compute().synchronize();
}

// t itself when it is f32, else an f32 copy.
Tensor as_f32(ExecutionContext& exec, const Tensor& t) {
  if (t.dtype() == DType::f32) return t;
  Tensor out = Tensor::empty(t.shape(), DType::f32, t.device());
  ops::cast(exec, t, out);
  return out;
}

// Stores an f32 result into `out` (any float dtype); no copy when out is f32.
void store(ExecutionContext& exec, const Tensor& f32, Tensor& out) {
  if (out.dtype() == DType::f32 && out.data() == f32.data()) return;
  ops::cast(exec, f32, out);
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
// A block linear: LoRA may adapt it (plugin/lora.hpp; PEFT's timm targets qkv, proj, fc1, fc2).
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
Tensor unfold_patches(ExecutionContext& exec, const VitConfig& c, const Batch& batch) {
  const ImageDims d = image_dims(c, batch);
  require_host(exec, "patch unfold", batch.inputs);
  const std::int64_t P = c.patch_size, G = c.grid(), N = c.num_patches(), K = c.patch_features();
  const std::int64_t W = d.w, Cin = d.cin;
  Tensor out = Tensor::empty({d.b * N, K}, DType::f32);
  const float* img = batch.inputs.data_as<float>();
  float* rows = out.data_as<float>();
  const std::int64_t H = d.h;
  Kokkos::parallel_for("ftrain::vit::patch_embed::unfold", HostPolicy(0, d.b * N), [=](std::int64_t r) {
    const std::int64_t b = r / N, n = r % N, py = n / G, px = n % G;
    float* row = rows + r * K;
    for (std::int64_t ch = 0; ch < Cin; ++ch)
      for (std::int64_t ky = 0; ky < P; ++ky)
        for (std::int64_t kx = 0; kx < P; ++kx)
          row[(ch * P + ky) * P + kx] = img[((b * H + py * P + ky) * W + px * P + kx) * Cin + ch];
  });
  return out;
}

// Copies rows of `row_bytes` bytes: dst row i <- src row src_row(i).
template <class RowOf>
void copy_rows(ExecutionContext& exec, const char* kernel, const Tensor& src, Tensor& dst, std::int64_t rows,
               std::int64_t width, RowOf src_row, std::int64_t dst_stride_rows = 1, std::int64_t dst_first = 0) {
  FT_CHECK(src.dtype() == dst.dtype()) << kernel << ": " << src.describe() << " vs " << dst.describe();
  require_host(exec, kernel, src);
  require_host(exec, kernel, dst);
  const std::size_t row_bytes = static_cast<std::size_t>(width) * dtype_size(src.dtype());
  const char* s = static_cast<const char*>(src.data());
  char* t = static_cast<char*>(dst.data());
  Kokkos::parallel_for(kernel, HostPolicy(0, rows), [=](std::int64_t i) {
    std::memcpy(t + static_cast<std::size_t>(dst_first + i * dst_stride_rows) * row_bytes,
                s + static_cast<std::size_t>(src_row(i)) * row_bytes, row_bytes);
  });
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
    Tensor unfolded = unfold_patches(ctx.execution(), config_, batch);
    Tensor patches = f32_tensor(ctx, {B * N, C});
    ops::linear_forward(ctx.execution(), unfolded, p[kWeight].reshape({C, config_.patch_features()}), &p[kBias],
                        patches);

    const Tensor cls = as_f32(ctx.execution(), p[kCls]);
    const Tensor pos = as_f32(ctx.execution(), p[kPos]);
    Tensor h32 = f32_tensor(ctx, {B * T, C});
    require_host(ctx.execution(), "patch_embed assembly", h32);
    const float* pf = patches.data_as<float>();
    const float* cf = cls.data_as<float>();
    const float* posf = pos.data_as<float>();
    float* hf = h32.data_as<float>();
    Kokkos::parallel_for("ftrain::vit::patch_embed::assemble", HostPolicy(0, B * T), [=](std::int64_t r) {
      const std::int64_t b = r / T, t = r % T;
      const float* src = t == 0 ? cf : pf + (b * N + t - 1) * C;
      const float* pe = posf + t * C;
      float* dst = hf + r * C;
      for (std::int64_t i = 0; i < C; ++i) dst[i] = src[i] + pe[i];
    });
    cache.clear();
    if (ctx.compute_dtype == DType::f32) return h32;
    Tensor h = activation(ctx, {B * T, C});
    store(ctx.execution(), h32, h);
    return h;
  }

  Tensor backward(const StepContext& ctx, const std::vector<Tensor>& p, std::vector<Tensor>& g, const Batch& batch,
                  const Tensor&, const Tensor& dy, UnitCache&) override {
    check_params(*this, p, kNumParams);
    const std::int64_t B = image_dims(config_, batch).b, N = config_.num_patches(), T = config_.tokens(),
                       C = config_.embed_dim;
    const Tensor dy32 = as_f32(ctx.execution(), dy);
    require_host(ctx.execution(), "patch_embed backward", dy32);
    for (int i : {kCls, kPos}) {
      FT_CHECK(g[i].dtype() == DType::f32 && g[i].device() == Device::host)
          << "patch_embed: gradient " << g[i].describe() << " must be a host f32 tensor";
    }
    const float* d = dy32.data_as<float>();
    float* dcls = g[kCls].data_as<float>();
    float* dpos = g[kPos].data_as<float>();
    // Each (token, feature) sums over the batch in its own iteration: no races.
    Kokkos::parallel_for("ftrain::vit::patch_embed::backward_pos", HostPolicy(0, T * C), [=](std::int64_t e) {
      float s = 0.0f;
      for (std::int64_t b = 0; b < B; ++b) s += d[b * T * C + e];
      dpos[e] += s;
      if (e < C) dcls[e] += s;
    });
    Tensor dpatches = f32_tensor(ctx, {B * N, C});
    copy_rows(ctx.execution(), "ftrain::vit::patch_embed::backward_rows", dy32, dpatches, B * N, C,
              [=](std::int64_t r) { return (r / N) * T + 1 + r % N; });
    Tensor unfolded = unfold_patches(ctx.execution(), config_, batch);
    Tensor dw = g[kWeight].reshape({C, config_.patch_features()});
    ops::linear_backward(ctx.execution(), unfolded, p[kWeight].reshape({C, config_.patch_features()}), dpatches,
                         nullptr, dw, &g[kBias]);
    return Tensor();
  }

 private:
  VitConfig config_;
};

// ---- units 1..depth: encoder blocks ------------------------------------------------------

class BlockUnit final : public Unit {
 public:
  BlockUnit(const VitConfig& c, int index) : config_(c), prefix_("blocks." + std::to_string(index)) {}
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
    ops::attention_forward(ctx.execution(), q, k, v, /*causal=*/false, softmax_scale(), attn, lse);

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
    ops::attention_backward(ctx.execution(), s[kQ], s[kK], s[kV], s[kAttn], s[kLse], dattn, /*causal=*/false,
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
      linear_backward(ctx, kQkvLayer, xn1, w, dout, part == 0 ? &dxn1 : &dxn1_part, dw, &db,
                      /*last_call_of_iteration=*/part == 2, /*out_first=*/part * d.c);
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
  enum Fp8Layer { kQkvLayer, kProjLayer, kFc1Layer, kFc2Layer, kNumFp8Layers };

 private:
  fp8::LinearState& fp8_layer(const StepContext& ctx, Fp8Layer layer) {
    FT_CHECK(ctx.fp8_recipe != nullptr) << "unit " << prefix_ << ": StepContext::fp8 without a recipe";
    create_fp8_states(*ctx.fp8_recipe);
    return fp8_[layer];
  }
  void create_fp8_states(const fp8::Recipe& recipe) {
    if (!fp8_.empty()) return;
    for (int i = 0; i < kNumFp8Layers; ++i) fp8_.push_back(fp8::LinearState::create(recipe.amax_history_len));
  }

 public:
  std::vector<Fp8StateRef> fp8_states(const fp8::Recipe& recipe) override {
    create_fp8_states(recipe);
    static const char* const kNames[kNumFp8Layers] = {".attn.qkv", ".attn.proj", ".mlp.fc1", ".mlp.fc2"};
    std::vector<Fp8StateRef> out;
    for (int i = 0; i < kNumFp8Layers; ++i) out.push_back({prefix_ + kNames[i], &fp8_[static_cast<std::size_t>(i)]});
    return out;
  }

 private:
  // The LoRA slot (plugin/lora.hpp) of each block linear: its weight's Param.
  static int lora_slot(Fp8Layer layer) {
    static constexpr Param kWeights[kNumFp8Layers] = {kQkvW, kProjW, kFc1W, kFc2W};
    return kWeights[layer];
  }
  // Every block linear goes through here: the base (FP8 or not), then its
  // LoRA adapter when the engine gave it one. out_first: which output
  // features of the linear y holds (qkv is computed in three parts).
  void linear_forward(const StepContext& ctx, Fp8Layer layer, const Tensor& x, const Tensor& w, const Tensor* b,
                      Tensor& y, std::int64_t out_first = 0) {
    if (!ctx.fp8) {
      ops::linear_forward(ctx.execution(), x, w, b, y);
    } else {
      fp8::linear_forward(ctx.execution(), *ctx.fp8_recipe, fp8_layer(ctx, layer), /*record=*/ctx.training, x, w, b,
                          y);
    }
    lora::add_forward(ctx, lora_slot(layer), x, y, out_first);
  }
  // dw / db are undefined when the base is frozen (LoRA): only dx is computed.
  void linear_backward(const StepContext& ctx, Fp8Layer layer, const Tensor& x, const Tensor& w, const Tensor& dy,
                       Tensor* dx, Tensor& dw, Tensor* db, bool last_call_of_iteration = true,
                       std::int64_t out_first = 0) {
    if (!ctx.fp8) {
      ops::linear_backward(ctx.execution(), x, w, dy, dx, dw, db);
    } else {
      fp8::LinearState& state = fp8_layer(ctx, layer);
      fp8::linear_backward(ctx.execution(), *ctx.fp8_recipe, state, /*record=*/true, x, w, dy, dx, dw, db);
    }
    (void)last_call_of_iteration;  // scales are updated by the engine after the step (model.hpp: fp8_states)
    lora::add_backward(ctx, lora_slot(layer), x, dy, dx, out_first);
  }

  VitConfig config_;
  std::string prefix_;
  std::vector<fp8::LinearState> fp8_;
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
    Tensor dx = activation(ctx, {B * T, C});
    ops::fill(ctx.execution(), dx, 0.0f);
    copy_rows(ctx.execution(), "ftrain::vit::head::scatter_cls", dcls, dx, B, C, [](std::int64_t b) { return b; }, T);
    return dx;
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
    Tensor cls = Tensor::empty({B, C}, x.dtype(), ctx.device);
    copy_rows(ctx.execution(), "ftrain::vit::head::gather_cls", x, cls, B, C, [=](std::int64_t b) { return b * T; });
    return cls;
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
