// Numerics of the SDK example plugin (share/doc/examples/mlp_plugin), loaded
// through the plugin loader the way ftrain loads it.
//
// The units are driven as the FSDP engine drives them: forward in order,
// backward in reverse with dy = f32[1] holding 1 / ntokens, tied slots
// sharing the owner's parameter and gradient buffers. Gradients are checked
// against a plain float64 reference forward of the bigram MLP with
// directional central differences (tests/support/op_test_util.hpp), so the
// example that plugin-sdk.md teaches from is known to be right, tied and
// untied. The out-of-tree build and a real training run are
// out_of_tree_plugin.sh's job.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "core/rng.hpp"
#include "core/tensor.hpp"
#include "kernels/ops.hpp"
#include "plugin/loader.hpp"
#include "plugin/model.hpp"
#include "support/op_test_util.hpp"

namespace ftrain {
namespace {

constexpr std::int64_t kBatch = 2;
constexpr std::int64_t kSeq = 5;

ModelHandle make_mlp(const ModelOverrides& overrides) {
  return PluginLoader({FTRAIN_TEST_MLP_PLUGIN_DIR}).create_model("mlp", "tiny", overrides);
}

using RefParams = std::map<std::string, std::vector<double>>;

struct Dims {
  std::int64_t V, C, I;
  bool tied;
};

Dims dims_of(const Model& model) {
  const auto c = model.config();
  return {std::stoll(c.at("vocab_size")), std::stoll(c.at("hidden_size")), std::stoll(c.at("intermediate_size")),
          c.at("tie_word_embeddings") == "true"};
}

double gelu_tanh(double a) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * a * (1.0 + std::tanh(k * (a + 0.044715 * a * a * a)));
}

// Sum over non-ignored targets of the cross entropy, in float64.
double ref_loss_sum(const Dims& d, const RefParams& p, const std::vector<int>& tokens,
                    const std::vector<int>& targets) {
  const auto& E = p.at("embed.weight");
  const auto& W1 = p.at("mlp.fc1.weight");
  const auto& b1 = p.at("mlp.fc1.bias");
  const auto& W2 = p.at("mlp.fc2.weight");
  const auto& b2 = p.at("mlp.fc2.bias");
  const auto& H = d.tied ? E : p.at("head.weight");
  const auto& hb = p.at("head.bias");
  double total = 0.0;
  for (std::size_t row = 0; row < tokens.size(); ++row) {
    if (targets[row] == kIgnoreIndex) continue;
    std::vector<double> h(d.C), act(d.I), y(d.C), logits(d.V);
    for (std::int64_t c = 0; c < d.C; ++c) h[c] = E[tokens[row] * d.C + c];
    for (std::int64_t i = 0; i < d.I; ++i) {
      double a = b1[i];
      for (std::int64_t c = 0; c < d.C; ++c) a += W1[i * d.C + c] * h[c];
      act[i] = gelu_tanh(a);
    }
    for (std::int64_t c = 0; c < d.C; ++c) {
      double s = b2[c];
      for (std::int64_t i = 0; i < d.I; ++i) s += W2[c * d.I + i] * act[i];
      y[c] = h[c] + s;
    }
    double max_logit = -1e300;
    for (std::int64_t v = 0; v < d.V; ++v) {
      double s = hb[v];
      for (std::int64_t c = 0; c < d.C; ++c) s += H[v * d.C + c] * y[c];
      logits[v] = s;
      max_logit = std::max(max_logit, s);
    }
    double z = 0.0;
    for (double l : logits) z += std::exp(l - max_logit);
    total += max_logit + std::log(z) - logits[targets[row]];
  }
  return total;
}

// Owns one f32 parameter and gradient per owned ParamSpec and runs the units
// over them the way the engine does.
class Driver {
 public:
  Driver(Model& model, DType compute_dtype) : model_(model) {
    ctx_.compute_dtype = compute_dtype;
    ctx_.vocab_chunk = 24;  // several chunks over the 64-token vocabulary
    for (int u = 0; u < model.num_units(); ++u) {
      std::vector<std::string> names;
      for (const auto& spec : model.unit(u).params()) {
        if (!spec.tied_to.empty()) {
          EXPECT_TRUE(slots_.count(spec.tied_to)) << spec.name << " ties to an unknown or later parameter";
          names.push_back(spec.tied_to);
          continue;
        }
        // Random values everywhere (biases too), of order one in the logits.
        Tensor p = Tensor::empty(spec.shape, DType::f32);
        float* data = p.data_as<float>();
        for (std::int64_t i = 0; i < p.numel(); ++i)
          data[i] = static_cast<float>(0.3 * rng::normal(11, rng::hash_name(spec.name), static_cast<std::uint64_t>(i)));
        slots_[spec.name] = Slot{p, Tensor::zeros(spec.shape, DType::f32)};
        order_.push_back(spec.name);
        names.push_back(spec.name);
      }
      unit_names_.push_back(names);
    }
  }

  RefParams ref_params() const {
    RefParams out;
    for (const auto& [name, slot] : slots_) out[name] = testing::to_doubles(slot.param);
    return out;
  }
  const std::vector<std::string>& names() const { return order_; }
  const Tensor& grad(const std::string& name) const { return slots_.at(name).grad; }

  // Forward, then backward in reverse with dy = 1 / ntokens; `recompute`
  // clears the middle units' caches after forward and refills them with a
  // second forward before their backward (activation checkpointing).
  double run(const Batch& batch, int ntokens, bool recompute) {
    const int units = model_.num_units();
    std::vector<std::vector<Tensor>> params(units), grads(units);
    for (int u = 0; u < units; ++u) {
      for (const auto& name : unit_names_[u]) {
        const Slot& s = slots_.at(name);
        if (ctx_.compute_dtype == DType::f32) {
          params[u].push_back(s.param);
        } else {
          Tensor p = Tensor::empty(s.param.shape(), ctx_.compute_dtype);
          ops::cast(ftrain::host_context(), s.param, p);
          params[u].push_back(p);
        }
        grads[u].push_back(s.grad);
      }
    }
    std::vector<Tensor> inputs(units + 1);
    std::vector<UnitCache> caches(units);
    for (int u = 0; u < units; ++u) {
      inputs[u + 1] = model_.unit(u).forward(ctx_, params[u], batch, inputs[u], caches[u]);
      if (recompute && u > 0 && u < units - 1) caches[u].clear();
    }
    const Tensor& loss = inputs[units];
    EXPECT_EQ(loss.shape(), (Shape{1}));
    EXPECT_EQ(loss.dtype(), DType::f32);
    Tensor dy = from_floats({1}, {1.0f / static_cast<float>(ntokens)});
    for (int u = units - 1; u >= 0; --u) {
      if (recompute && u > 0 && u < units - 1) model_.unit(u).forward(ctx_, params[u], batch, inputs[u], caches[u]);
      dy = model_.unit(u).backward(ctx_, params[u], grads[u], batch, inputs[u], dy, caches[u]);
      if (u > 0) {
        EXPECT_EQ(dy.shape(), inputs[u].shape()) << "unit " << u;
        EXPECT_EQ(dy.dtype(), ctx_.compute_dtype) << "unit " << u;
      }
    }
    EXPECT_FALSE(dy.defined()) << "the embedding unit returns no input gradient";
    return to_float_vector(loss)[0];
  }

 private:
  struct Slot {
    Tensor param, grad;
  };
  Model& model_;
  StepContext ctx_;
  std::map<std::string, Slot> slots_;
  std::vector<std::string> order_;
  std::vector<std::vector<std::string>> unit_names_;
};

struct FixedBatch {
  Batch batch;
  std::vector<int> tokens, targets;
  int ntokens = 0;
};

FixedBatch make_batch(std::int64_t vocab) {
  FixedBatch f;
  const std::int64_t n = kBatch * kSeq;
  for (std::int64_t i = 0; i < n; ++i) {
    f.tokens.push_back(static_cast<int>(rng::bits(5, 1, static_cast<std::uint64_t>(i)) % vocab));
    f.targets.push_back(static_cast<int>(rng::bits(5, 2, static_cast<std::uint64_t>(i)) % vocab));
  }
  f.targets[3] = kIgnoreIndex;  // padding contributes nothing
  f.batch.inputs = Tensor::empty({kBatch, kSeq}, DType::i32);
  f.batch.targets = Tensor::empty({kBatch, kSeq}, DType::i32);
  for (std::int64_t i = 0; i < n; ++i) {
    f.batch.inputs.data_as<std::int32_t>()[i] = f.tokens[i];
    f.batch.targets.data_as<std::int32_t>()[i] = f.targets[i];
    f.ntokens += f.targets[i] != kIgnoreIndex;
  }
  return f;
}

void check_gradients(const ModelOverrides& overrides, bool recompute, const std::string& label) {
  auto model = make_mlp(overrides);
  const Dims d = dims_of(*model);
  const FixedBatch fb = make_batch(d.V);
  Driver driver(*model, DType::f32);
  const double loss_sum = driver.run(fb.batch, fb.ntokens, recompute);
  const RefParams base = driver.ref_params();
  EXPECT_NEAR(loss_sum, ref_loss_sum(d, base, fb.tokens, fb.targets), 1e-4 * std::abs(loss_sum)) << label;

  // One direction per parameter tensor, then one through all of them.
  std::vector<std::vector<std::string>> groups;
  for (const auto& name : driver.names()) groups.push_back({name});
  groups.push_back(driver.names());
  std::uint64_t seed = 3;
  for (const auto& group : groups) {
    RefParams plus = base, minus = base;
    double analytic = 0, gradient_norm_sq = 0;
    const double h = 1e-5;
    for (const auto& name : group) {
      const auto u = testing::random_vector(base.at(name).size(), ++seed);
      const auto g = testing::to_doubles(driver.grad(name));
      analytic += testing::dot(g, u);
      gradient_norm_sq += testing::dot(g, g);
      for (std::size_t i = 0; i < u.size(); ++i) {
        plus[name][i] += h * u[i];
        minus[name][i] -= h * u[i];
      }
    }
    const double numeric =
        (ref_loss_sum(d, plus, fb.tokens, fb.targets) - ref_loss_sum(d, minus, fb.tokens, fb.targets)) / (2 * h) /
        fb.ntokens;
    const std::string what = label + ": " + (group.size() == 1 ? group[0] : "all parameters");
    const double gradient_norm = std::sqrt(gradient_norm_sq);
    EXPECT_GT(gradient_norm, 1e-4) << what << ": vanishing gradient, the check would be vacuous";
    EXPECT_NEAR(analytic, numeric, 1e-4 * std::max(std::abs(numeric), gradient_norm)) << what;
  }
}

TEST(SdkMlpExample, DescriptorAndParameters) {
  auto library = PluginLoader({FTRAIN_TEST_MLP_PLUGIN_DIR}).load("mlp");
  EXPECT_EQ(library->presets(), (std::vector<std::string>{"tiny", "small"}));
  auto model = make_mlp({});
  EXPECT_EQ(model->architecture(), "mlp");
  EXPECT_EQ(model->data_kind(), DataKind::tokens);
  EXPECT_EQ(model->output_size(), 64);
  ASSERT_EQ(model->num_units(), 3);
  const auto head = model->unit(2).params();
  ASSERT_EQ(head.size(), 2u);
  EXPECT_EQ(head[0].tied_to, "embed.weight");  // tied by default
  EXPECT_FALSE(head[1].weight_decay);          // head.bias
  auto untied = make_mlp({{"tie_word_embeddings", "false"}});
  EXPECT_TRUE(untied->unit(2).params()[0].tied_to.empty());
  // 6 * (fc1 + fc2 + head) weights per token.
  EXPECT_DOUBLE_EQ(model->training_flops_per_sample(10), 6.0 * (2 * 32 * 64 + 64 * 32) * 10);
}

TEST(SdkMlpExample, BadHyperparametersAreUserErrors) {
  try {
    make_mlp({{"hiden_size", "8"}});
    FAIL() << "an unknown key was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown mlp hyperparameter 'hiden_size'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(make_mlp({{"hidden_size", "0"}}), UserError);
  EXPECT_THROW(make_mlp({{"tie_word_embeddings", "yes"}}), UserError);
}

TEST(SdkMlpExample, GradientsMatchFiniteDifferences) {
  check_gradients({}, /*recompute=*/false, "tied");
  check_gradients({{"tie_word_embeddings", "false"}, {"intermediate_size", "24"}}, /*recompute=*/false, "untied");
  check_gradients({}, /*recompute=*/true, "tied, recomputed mlp cache");
}

TEST(SdkMlpExample, Bf16ComputeTracksFp32) {
  auto model = make_mlp({});
  const FixedBatch fb = make_batch(64);
  Driver f32(*model, DType::f32), bf16(*model, DType::bf16);
  const double loss32 = f32.run(fb.batch, fb.ntokens, false);
  const double loss16 = bf16.run(fb.batch, fb.ntokens, false);
  EXPECT_NEAR(loss16, loss32, 1e-2 * loss32);
  for (const auto& name : f32.names()) {
    EXPECT_LT(testing::relative_error(testing::to_doubles(bf16.grad(name)), testing::to_doubles(f32.grad(name))), 0.1)
        << name;
  }
}

}  // namespace
}  // namespace ftrain
