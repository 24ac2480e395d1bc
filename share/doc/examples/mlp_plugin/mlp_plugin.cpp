// ftrain_mlp.so: a bigram MLP language model, the worked example of an
// out-of-tree ftrain model plugin (share/doc/plugin-sdk.md walks through it).
//
// The model predicts token t+1 from token t alone, so it can learn exactly a
// first-order Markov chain such as the corpus `ftrain-prep synthetic` writes:
// its loss falls towards the entropy rate that ftrain-prep prints.
//
// Units and their parameters (V vocab, C hidden, I intermediate):
//   0 "embed"  embed.weight [V, C]                         h = embed[token]
//   1 "mlp"    mlp.fc1.weight [I, C], mlp.fc1.bias [I],     y = h + fc2(gelu(fc1(h)))
//              mlp.fc2.weight [C, I], mlp.fc2.bias [C]
//   2 "head"   head.weight [V, C] (tied: alias of embed.weight), head.bias [V]
//              loss = sum over target tokens of cross_entropy(y . head^T + bias)
//
// Conventions (kernels/ops.hpp): activations are [N, C] rows (N = batch *
// sequence) in ctx.compute_dtype; lse and losses are f32; parameter
// gradients accumulate (+=), activation gradients are written (=).
//
// Only SDK headers are included (core/, kernels/ops.hpp, plugin/): this file
// builds against an installed ftrain with find_package(ftrain).
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "base/error.hpp"
#include "core/tensor.hpp"
#include "kernels/ops.hpp"
#include "plugin/ftrain_plugin.h"
#include "plugin/model.hpp"
#include "plugin/plugin_entry.hpp"

namespace mlp_example {

using ftrain::Batch;
using ftrain::DataKind;
using ftrain::DType;
using ftrain::InitKind;
using ftrain::ParamSpec;
using ftrain::Shape;
using ftrain::StepContext;
using ftrain::Tensor;
using ftrain::UnitCache;

// ---- hyperparameters ------------------------------------------------------------

struct MlpConfig {
  std::int64_t vocab_size = 64;
  std::int64_t hidden_size = 32;
  std::int64_t intermediate_size = 64;
  bool tie_word_embeddings = true;
  double initializer_range = 0.02;

  std::map<std::string, std::string> to_map() const {
    std::ostringstream range;
    range << initializer_range;
    return {{"vocab_size", std::to_string(vocab_size)},
            {"hidden_size", std::to_string(hidden_size)},
            {"intermediate_size", std::to_string(intermediate_size)},
            {"tie_word_embeddings", tie_word_embeddings ? "true" : "false"},
            {"initializer_range", range.str()},
            {"hidden_act", "gelu_pytorch_tanh"}};
  }
};

// First preset is the default (ftrain_plugin_descriptor::presets).
const char* const kPresets[] = {"tiny", "small", nullptr};

MlpConfig preset_config(const std::string& preset) {
  MlpConfig c;
  if (preset == "tiny") return c;  // 6k parameters: trains in a fraction of a second
  if (preset == "small") {
    c.vocab_size = 256;
    c.hidden_size = 128;
    c.intermediate_size = 512;
    return c;
  }
  FT_USER_ERROR() << "unknown mlp preset '" << preset << "'; presets are: tiny, small";
}

std::int64_t parse_positive(const std::string& key, const std::string& value) {
  std::int64_t out = 0;
  const char* end = value.data() + value.size();
  const auto [ptr, ec] = std::from_chars(value.data(), end, out);
  if (ec != std::errc() || ptr != end || out <= 0)
    FT_USER_ERROR() << "mlp hyperparameter " << key << " must be a positive integer, got '" << value << "'";
  return out;
}

MlpConfig make_config(const std::string& preset, const std::vector<std::pair<std::string, std::string>>& overrides) {
  MlpConfig c = preset_config(preset);
  for (const auto& [key, value] : overrides) {
    if (key == "vocab_size") {
      c.vocab_size = parse_positive(key, value);
    } else if (key == "hidden_size") {
      c.hidden_size = parse_positive(key, value);
    } else if (key == "intermediate_size") {
      c.intermediate_size = parse_positive(key, value);
    } else if (key == "tie_word_embeddings") {
      if (value != "true" && value != "false")
        FT_USER_ERROR() << "mlp hyperparameter tie_word_embeddings must be true or false, got '" << value << "'";
      c.tie_word_embeddings = value == "true";
    } else if (key == "initializer_range") {
      std::size_t used = 0;
      double range = -1.0;
      try {
        range = std::stod(value, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != value.size() || !(range > 0.0))
        FT_USER_ERROR() << "mlp hyperparameter initializer_range must be a positive number, got '" << value << "'";
      c.initializer_range = range;
    } else {
      FT_USER_ERROR() << "unknown mlp hyperparameter '" << key
                      << "'; known: vocab_size, hidden_size, intermediate_size, tie_word_embeddings, "
                         "initializer_range";
    }
  }
  return c;
}

// ---- helpers ----------------------------------------------------------------------

Tensor activation(const StepContext& ctx, const Shape& shape) {
  return Tensor::empty(shape, ctx.compute_dtype, ctx.device);
}
Tensor f32_tensor(const StepContext& ctx, const Shape& shape) { return Tensor::empty(shape, DType::f32, ctx.device); }

ParamSpec matrix(const std::string& name, Shape shape, const MlpConfig& c) {
  ParamSpec p;
  p.name = name;
  p.shape = std::move(shape);
  p.init = InitKind::normal;
  p.init_std = static_cast<float>(c.initializer_range);
  return p;
}

// Biases start at zero and, like norms, are not decayed.
ParamSpec bias(const std::string& name, std::int64_t size) {
  ParamSpec p;
  p.name = name;
  p.shape = {size};
  p.init = InitKind::zeros;
  p.weight_decay = false;
  return p;
}

void check_params(const ftrain::Unit& unit, const std::vector<Tensor>& params, std::size_t expected) {
  FT_CHECK(params.size() == expected) << "unit " << unit.name() << " expects " << expected << " parameter tensors, got "
                                      << params.size();
}

// ---- unit 0: token embedding ----------------------------------------------------------
// The first unit receives no x: it reads the batch and starts the stream.

class EmbeddingUnit final : public ftrain::Unit {
 public:
  explicit EmbeddingUnit(const MlpConfig& c) : config_(c) {}
  std::string name() const override { return "embed"; }
  std::vector<ParamSpec> params() const override {
    return {matrix("embed.weight", {config_.vocab_size, config_.hidden_size}, config_)};
  }

  Tensor forward(const StepContext& ctx, const std::vector<Tensor>& p, const Batch& batch, const Tensor&,
                 UnitCache& cache) override {
    check_params(*this, p, 1);
    const std::int64_t n = batch.inputs.numel();
    Tensor h = activation(ctx, {n, config_.hidden_size});
    ftrain::ops::embedding_forward(ctx.execution(), batch.inputs.reshape({n}), p[0], h);
    cache.clear();  // backward needs only the tokens, which the batch still holds
    return h;
  }

  // The first unit returns an undefined tensor: there is nothing before it.
  Tensor backward(const StepContext& ctx, const std::vector<Tensor>& p, std::vector<Tensor>& g, const Batch& batch,
                  const Tensor&, const Tensor& dy, UnitCache&) override {
    check_params(*this, p, 1);
    ftrain::ops::embedding_backward(ctx.execution(), batch.inputs.reshape({batch.inputs.numel()}), dy, g[0]);
    return Tensor();
  }

 private:
  MlpConfig config_;
};

// ---- unit 1: residual MLP block ---------------------------------------------------------
// y = x + fc2(gelu(fc1(x))). Keeps the fc1 output for backward; gelu's
// output is recomputed there (O(N * I) elementwise work against the
// O(N * C * I) of the matmuls, and half the saved memory).

class MlpUnit final : public ftrain::Unit {
 public:
  explicit MlpUnit(const MlpConfig& c) : config_(c) {}
  std::string name() const override { return "mlp"; }

  enum Param { kFc1Weight, kFc1Bias, kFc2Weight, kFc2Bias, kNumParams };
  std::vector<ParamSpec> params() const override {
    const std::int64_t C = config_.hidden_size, I = config_.intermediate_size;
    return {matrix("mlp.fc1.weight", {I, C}, config_), bias("mlp.fc1.bias", I),
            matrix("mlp.fc2.weight", {C, I}, config_), bias("mlp.fc2.bias", C)};
  }

  enum Saved { kPreActivation, kNumSaved };

  Tensor forward(const StepContext& ctx, const std::vector<Tensor>& p, const Batch&, const Tensor& x,
                 UnitCache& cache) override {
    check_params(*this, p, kNumParams);
    const std::int64_t n = x.dim(0);
    Tensor pre = activation(ctx, {n, config_.intermediate_size});
    ftrain::ops::linear_forward(ctx.execution(), x, p[kFc1Weight], &p[kFc1Bias], pre);
    Tensor act = activation(ctx, {n, config_.intermediate_size});
    ftrain::ops::gelu_forward(ctx.execution(), pre, ftrain::GeluApproximation::tanh, act);
    Tensor y = activation(ctx, {n, config_.hidden_size});
    ftrain::ops::linear_forward(ctx.execution(), act, p[kFc2Weight], &p[kFc2Bias], y);
    ftrain::ops::add(ctx.execution(), x, y, y);
    // The engine may have cleared the cache (activation checkpointing) and
    // calls forward again to refill it: always start from empty.
    cache.clear();
    if (ctx.training) cache.saved = {pre};
    return y;
  }

  Tensor backward(const StepContext& ctx, const std::vector<Tensor>& p, std::vector<Tensor>& g, const Batch&,
                  const Tensor& x, const Tensor& dy, UnitCache& cache) override {
    check_params(*this, p, kNumParams);
    FT_CHECK(cache.saved.size() == kNumSaved) << "unit mlp: backward without a training forward (empty cache)";
    const Tensor& pre = cache.saved[kPreActivation];
    const std::int64_t n = x.dim(0);
    Tensor act = activation(ctx, {n, config_.intermediate_size});
    ftrain::ops::gelu_forward(ctx.execution(), pre, ftrain::GeluApproximation::tanh, act);

    Tensor dact = activation(ctx, {n, config_.intermediate_size});
    ftrain::ops::linear_backward(ctx.execution(), act, p[kFc2Weight], dy, &dact, g[kFc2Weight], &g[kFc2Bias]);
    Tensor dpre = activation(ctx, {n, config_.intermediate_size});
    ftrain::ops::gelu_backward(ctx.execution(), pre, dact, ftrain::GeluApproximation::tanh, dpre);
    Tensor dx = activation(ctx, {n, config_.hidden_size});
    ftrain::ops::linear_backward(ctx.execution(), x, p[kFc1Weight], dpre, &dx, g[kFc1Weight], &g[kFc1Bias]);
    ftrain::ops::add_inplace(ctx.execution(), dx, dy);  // the residual path
    return dx;
  }

 private:
  MlpConfig config_;
};

// ---- unit 2: output head and loss ----------------------------------------------------------
// The last unit returns f32[1] holding the SUM of per-token losses; in
// backward, dy is that same shape holding the loss scale.

class HeadUnit final : public ftrain::Unit {
 public:
  explicit HeadUnit(const MlpConfig& c) : config_(c) {}
  std::string name() const override { return "head"; }

  std::vector<ParamSpec> params() const override {
    ParamSpec head = matrix("head.weight", {config_.vocab_size, config_.hidden_size}, config_);
    if (config_.tie_word_embeddings) head.tied_to = "embed.weight";
    return {head, bias("head.bias", config_.vocab_size)};
  }

  enum Saved { kLse, kNumSaved };

  Tensor forward(const StepContext& ctx, const std::vector<Tensor>& p, const Batch& batch, const Tensor& x,
                 UnitCache& cache) override {
    check_params(*this, p, 2);
    const std::int64_t n = batch.targets.numel();
    FT_CHECK(n == x.dim(0)) << "head: " << batch.targets.describe() << " does not match " << x.describe();
    Tensor losses = f32_tensor(ctx, {n});
    Tensor lse = f32_tensor(ctx, {n});
    ftrain::ops::cross_entropy_forward(ctx.execution(), x, p[0], &p[1], batch.targets.reshape({n}), ctx.vocab_chunk,
                                       losses, lse);
    // Ignored targets (padding) give a zero loss, so a plain sum is right.
    // The sum is an op too: the loss never leaves the device inside the step
    // (ops run asynchronously; the engine reads it once the stream is done).
    Tensor loss = f32_tensor(ctx, {1});
    ftrain::ops::sum(ctx.execution(), losses, loss);
    cache.clear();
    if (ctx.training) cache.saved = {lse};
    return loss;
  }

  Tensor backward(const StepContext& ctx, const std::vector<Tensor>& p, std::vector<Tensor>& g, const Batch& batch,
                  const Tensor& x, const Tensor& dy, UnitCache& cache) override {
    check_params(*this, p, 2);
    FT_CHECK(cache.saved.size() == kNumSaved) << "head: backward without a training forward (empty cache)";
    FT_CHECK(dy.numel() == 1 && dy.dtype() == ftrain::DType::f32)
        << "head: dy must be the f32[1] loss scale, got " << dy.describe();
    const std::int64_t n = batch.targets.numel();
    Tensor dx = activation(ctx, {n, config_.hidden_size});
    // With tied embeddings g[0] is embed.weight's gradient: the engine hands
    // the same buffer to both units and both accumulate into it.
    ftrain::ops::cross_entropy_backward(ctx.execution(), x, p[0], &p[1], batch.targets.reshape({n}),
                                        cache.saved[kLse], dy, ctx.vocab_chunk, dx, g[0], &g[1]);
    return dx;
  }

 private:
  MlpConfig config_;
};

// ---- the model ------------------------------------------------------------------------

class MlpModel final : public ftrain::Model {
 public:
  explicit MlpModel(const MlpConfig& c) : config_(c) {
    units_.push_back(std::make_unique<EmbeddingUnit>(c));
    units_.push_back(std::make_unique<MlpUnit>(c));
    units_.push_back(std::make_unique<HeadUnit>(c));
  }
  std::string architecture() const override { return "mlp"; }
  std::map<std::string, std::string> config() const override { return config_.to_map(); }
  DataKind data_kind() const override { return DataKind::tokens; }
  int num_units() const override { return static_cast<int>(units_.size()); }
  ftrain::Unit& unit(int index) override {
    FT_CHECK(index >= 0 && index < num_units()) << "mlp has " << num_units() << " units, asked for " << index;
    return *units_[static_cast<std::size_t>(index)];
  }
  // 6 * (weights in matmuls) per token: fc1, fc2 and the head (the embedding
  // lookup is not a matmul).
  double training_flops_per_sample(std::int64_t sequence_length) const override {
    const double c = static_cast<double>(config_.hidden_size);
    const double matmul_params =
        2.0 * c * static_cast<double>(config_.intermediate_size) + c * static_cast<double>(config_.vocab_size);
    return 6.0 * matmul_params * static_cast<double>(sequence_length);
  }
  std::int64_t output_size() const override { return config_.vocab_size; }

 private:
  MlpConfig config_;
  std::vector<std::unique_ptr<ftrain::Unit>> units_;
};

// ---- the C entry point ------------------------------------------------------------------
// plugin/plugin_entry.hpp turns every failure into the one-line message the
// loader shows the user (no exception may cross the C boundary).

void* create_model(ftrain_model_args* args) {
  return ftrain::plugin_entry::create_guarded(
      args, "mlp", [](const std::string& preset, const ftrain::plugin_entry::Overrides& overrides) {
        return std::make_unique<MlpModel>(make_config(preset, overrides));
      });
}

}  // namespace mlp_example

extern "C" FTRAIN_PLUGIN_EXPORT const ftrain_plugin_descriptor* ftrain_plugin_entry(void) {
  static const ftrain_plugin_descriptor descriptor = {
      FTRAIN_PLUGIN_ABI_VERSION,
      sizeof(ftrain_plugin_descriptor),
      "mlp",
      "Bigram MLP (SDK example): embedding, one residual GELU MLP, tied output head",
      mlp_example::kPresets,
      &mlp_example::create_model,
      &ftrain::plugin_entry::destroy,
      nullptr,  // export_hf_config: no Hugging Face equivalent to convert to
      nullptr,  // import_hf_config
  };
  return &descriptor;
}
