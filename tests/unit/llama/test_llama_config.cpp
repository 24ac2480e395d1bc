// Llama plugin: presets against the published parameter counts, parameter
// names/shapes/init in Hugging Face naming, FLOPs, and the messages for bad
// hyperparameter overrides. Everything here comes from params() and
// config(): no parameter is ever allocated, so the 70B preset costs nothing.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "base/error.hpp"
#include "plugin/loader.hpp"

using namespace ftrain;

namespace {

ModelHandle make_llama(const std::string& preset, const ModelOverrides& overrides = {}) {
  return PluginLoader({FTRAIN_TEST_LLAMA_PLUGIN_DIR}).create_model("llama", preset, overrides);
}

struct Counts {
  std::int64_t total = 0;  // distinct parameters (a tied alias counts once)
  int tied_aliases = 0;
};

Counts count_parameters(Model& model) {
  Counts c;
  for (int u = 0; u < model.num_units(); ++u) {
    for (const auto& spec : model.unit(u).params()) {
      if (!spec.tied_to.empty()) {
        ++c.tied_aliases;
        continue;
      }
      c.total += shape_numel(spec.shape);
    }
  }
  return c;
}

std::string create_error(const std::string& preset, const ModelOverrides& overrides) {
  try {
    make_llama(preset, overrides);
  } catch (const UserError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a UserError";
  return {};
}

}  // namespace

TEST(LlamaPresets, PublishedParameterCounts) {
  // Hugging Face's num_parameters() of the published checkpoints.
  const std::vector<std::tuple<std::string, std::int64_t, double, bool>> cases = {
      {"llama2-7b", 6738415616, 6.74e9, false},    {"llama2-13b", 13015864320, 13.02e9, false},
      {"llama2-70b", 68976648192, 68.98e9, false}, {"llama3-8b", 8030261248, 8.03e9, false},
      {"llama3.2-1b", 1235814400, 1.24e9, true},   {"llama3.2-3b", 3212749824, 3.21e9, true},
  };
  for (const auto& [preset, exact, rounded, tied] : cases) {
    auto model = make_llama(preset);
    const Counts c = count_parameters(*model);
    EXPECT_EQ(c.total, exact) << preset;
    EXPECT_NEAR(static_cast<double>(c.total), rounded, 0.01e9) << preset;
    EXPECT_EQ(c.tied_aliases, tied ? 1 : 0) << preset;
    EXPECT_EQ(model->config().at("tie_word_embeddings"), tied ? "true" : "false") << preset;
  }
}

TEST(LlamaPresets, RealConfigs) {
  auto l70 = make_llama("llama2-70b");
  const auto c70 = l70->config();
  EXPECT_EQ(c70.at("hidden_size"), "8192");
  EXPECT_EQ(c70.at("intermediate_size"), "28672");
  EXPECT_EQ(c70.at("num_hidden_layers"), "80");
  EXPECT_EQ(c70.at("num_attention_heads"), "64");
  EXPECT_EQ(c70.at("num_key_value_heads"), "8");
  EXPECT_EQ(c70.at("head_dim"), "128");
  EXPECT_EQ(c70.at("rms_norm_eps"), "1e-05");
  EXPECT_EQ(c70.at("rope_theta"), "10000");
  EXPECT_EQ(c70.at("rope_scaling"), "none");
  EXPECT_EQ(l70->num_units(), 82);
  EXPECT_EQ(l70->output_size(), 32000);

  const auto c8 = make_llama("llama3-8b")->config();
  EXPECT_EQ(c8.at("rope_theta"), "500000");
  EXPECT_EQ(c8.at("vocab_size"), "128256");

  const auto c1 = make_llama("llama3.2-1b")->config();
  EXPECT_EQ(c1.at("rope_scaling"), "llama3");
  EXPECT_EQ(c1.at("rope_scaling_factor"), "32");
  EXPECT_EQ(c1.at("rope_scaling_low_freq_factor"), "1");
  EXPECT_EQ(c1.at("rope_scaling_high_freq_factor"), "4");
  EXPECT_EQ(c1.at("rope_scaling_original_max_position_embeddings"), "8192");
  EXPECT_EQ(c1.at("head_dim"), "64");
  EXPECT_EQ(make_llama("llama3.2-3b")->config().at("head_dim"), "128");
}

TEST(LlamaPresets, TinyIsTheDefault) {
  auto library = PluginLoader({FTRAIN_TEST_LLAMA_PLUGIN_DIR}).load("llama");
  EXPECT_EQ(library->presets(), (std::vector<std::string>{"tiny", "llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b",
                                                          "llama3.2-1b", "llama3.2-3b"}));
  const auto c = library->create_model("", {})->config();
  EXPECT_EQ(c.at("vocab_size"), "256");
  EXPECT_EQ(c.at("hidden_size"), "64");
  EXPECT_EQ(c.at("intermediate_size"), "176");
  EXPECT_EQ(c.at("num_hidden_layers"), "2");
  EXPECT_EQ(c.at("num_attention_heads"), "4");
  EXPECT_EQ(c.at("num_key_value_heads"), "2");
}

TEST(LlamaParams, HuggingFaceNamesShapesAndInit) {
  auto model = make_llama("tiny", {{"head_dim", "8"}});  // D != C / Hq makes q/o shapes distinguishable
  ASSERT_EQ(model->num_units(), 4);
  EXPECT_EQ(model->unit(0).name(), "model.embed_tokens");
  EXPECT_EQ(model->unit(1).name(), "model.layers.0");
  EXPECT_EQ(model->unit(2).name(), "model.layers.1");
  EXPECT_EQ(model->unit(3).name(), "lm_head");

  const auto embed = model->unit(0).params();
  ASSERT_EQ(embed.size(), 1u);
  EXPECT_EQ(embed[0].name, "model.embed_tokens.weight");
  EXPECT_EQ(embed[0].shape, (Shape{256, 64}));

  const auto layer = model->unit(2).params();
  const std::vector<std::pair<std::string, Shape>> expected = {
      {"model.layers.1.input_layernorm.weight", {64}},      {"model.layers.1.self_attn.q_proj.weight", {32, 64}},
      {"model.layers.1.self_attn.k_proj.weight", {16, 64}}, {"model.layers.1.self_attn.v_proj.weight", {16, 64}},
      {"model.layers.1.self_attn.o_proj.weight", {64, 32}}, {"model.layers.1.post_attention_layernorm.weight", {64}},
      {"model.layers.1.mlp.gate_proj.weight", {176, 64}},   {"model.layers.1.mlp.up_proj.weight", {176, 64}},
      {"model.layers.1.mlp.down_proj.weight", {64, 176}},
  };
  ASSERT_EQ(layer.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(layer[i].name, expected[i].first);
    EXPECT_EQ(layer[i].shape, expected[i].second) << layer[i].name;
    const bool is_norm = layer[i].name.find("layernorm") != std::string::npos;
    EXPECT_EQ(layer[i].init, is_norm ? InitKind::ones : InitKind::normal) << layer[i].name;
    EXPECT_EQ(layer[i].weight_decay, !is_norm) << layer[i].name;
    if (!is_norm) {
      EXPECT_FLOAT_EQ(layer[i].init_std, 0.02f) << layer[i].name;
    }
    EXPECT_TRUE(layer[i].tied_to.empty());
  }

  const auto head = model->unit(3).params();
  ASSERT_EQ(head.size(), 2u);
  EXPECT_EQ(head[0].name, "model.norm.weight");
  EXPECT_EQ(head[0].init, InitKind::ones);
  EXPECT_FALSE(head[0].weight_decay);
  EXPECT_EQ(head[1].name, "lm_head.weight");
  EXPECT_EQ(head[1].shape, (Shape{256, 64}));
  EXPECT_TRUE(head[1].tied_to.empty());

  auto tied = make_llama("tiny", {{"tie_word_embeddings", "true"}, {"initializer_range", "0.5"}});
  const auto tied_head = tied->unit(3).params();
  EXPECT_EQ(tied_head[1].tied_to, "model.embed_tokens.weight");
  EXPECT_EQ(tied_head[1].shape, (Shape{256, 64}));
  EXPECT_FLOAT_EQ(tied->unit(1).params()[1].init_std, 0.5f);
}

TEST(LlamaFlops, PalmConvention) {
  auto model = make_llama("tiny");
  const double C = 64, I = 176, V = 256, L = 2, D = 16, Hq = 4, Hkv = 2, T = 128;
  const double per_layer = C * Hq * D * 2 + C * Hkv * D * 2 + 3 * C * I;
  const double expected = 6 * (L * per_layer + V * C) * T + 12 * L * Hq * D * T * T;
  EXPECT_DOUBLE_EQ(model->training_flops_per_sample(128), expected);
  // The attention part alone, for a document mask's pairs: 4 documents of 32
  // in the 128-token window attend 4 * 32^2 pairs, a quarter of 128^2.
  EXPECT_DOUBLE_EQ(model->attention_training_flops(4 * 32.0 * 32.0), 12 * L * Hq * D * 4 * 32 * 32);
  EXPECT_DOUBLE_EQ(model->training_flops_per_sample(128) - model->attention_training_flops(T * T),
                   6 * (L * per_layer + V * C) * T);

  // Llama 2 7B at 4096 tokens: the usual ~6 N T plus the attention term.
  auto l7 = make_llama("llama2-7b");
  const double matmul_params = 6738415616.0 - 32000.0 * 4096 - 65 * 4096.0;  // minus embedding and norms
  EXPECT_DOUBLE_EQ(l7->training_flops_per_sample(4096), 6 * matmul_params * 4096 + 12 * 32 * 4096.0 * 4096.0 * 4096.0);
}

TEST(LlamaOverrides, AppliedInOrder) {
  auto model = make_llama("llama2-7b", {{"num_hidden_layers", "3"},
                                        {"hidden_size", "256"},
                                        {"num_attention_heads", "8"},
                                        {"num_key_value_heads", "2"},
                                        {"intermediate_size", "512"},
                                        {"vocab_size", "1000"},
                                        {"rope_theta", "500000"},
                                        {"rope_scaling", "llama3"},
                                        {"rope_scaling_factor", "8"},
                                        {"rope_scaling_original_max_position_embeddings", "1024"},
                                        {"rms_norm_eps", "1e-6"},
                                        {"max_position_embeddings", "1024"},
                                        {"num_hidden_layers", "4"}});
  const auto c = model->config();
  EXPECT_EQ(model->num_units(), 6) << "the later num_hidden_layers wins";
  EXPECT_EQ(c.at("head_dim"), "32");
  EXPECT_EQ(c.at("rope_scaling"), "llama3");
  EXPECT_EQ(c.at("rope_scaling_factor"), "8");
  EXPECT_EQ(c.at("rope_scaling_original_max_position_embeddings"), "1024");
  EXPECT_EQ(c.at("rms_norm_eps"), "1e-06");
  EXPECT_EQ(c.at("max_position_embeddings"), "1024");
  EXPECT_EQ(model->output_size(), 1000);
  EXPECT_EQ(model->unit(1).params()[2].shape, (Shape{64, 256}));
}

TEST(LlamaOverrides, ErrorMessages) {
  const std::string prefix = "model 'llama' (preset 'tiny'): ";
  EXPECT_EQ(create_error("tiny", {{"hiden_size", "64"}}),
            prefix + "unknown llama hyperparameter 'hiden_size' (did you mean 'hidden_size'?)");
  EXPECT_EQ(create_error("tiny", {{"num_kv_heads", "2"}}),
            prefix + "unknown llama hyperparameter 'num_kv_heads' (did you mean 'num_key_value_heads'?)");
  EXPECT_EQ(create_error("tiny", {{"rope_theeta", "2"}}),
            prefix + "unknown llama hyperparameter 'rope_theeta' (did you mean 'rope_theta'?)");
  const std::string far = create_error("tiny", {{"batch", "2"}});
  EXPECT_NE(far.find("unknown llama hyperparameter 'batch'; known hyperparameters: vocab_size, hidden_size"),
            std::string::npos)
      << far;

  EXPECT_EQ(create_error("tiny", {{"hidden_size", "abc"}}),
            prefix + "llama hyperparameter 'hidden_size' must be a positive integer, got 'abc'");
  EXPECT_EQ(create_error("tiny", {{"num_hidden_layers", "0"}}),
            prefix + "llama hyperparameter 'num_hidden_layers' must be a positive integer, got '0'");
  EXPECT_EQ(create_error("tiny", {{"vocab_size", "12x"}}),
            prefix + "llama hyperparameter 'vocab_size' must be a positive integer, got '12x'");
  EXPECT_EQ(create_error("tiny", {{"rms_norm_eps", "-1e-5"}}),
            prefix + "llama hyperparameter 'rms_norm_eps' must be a positive number, got '-1e-5'");
  EXPECT_EQ(create_error("tiny", {{"rope_theta", "nan"}}),
            prefix + "llama hyperparameter 'rope_theta' must be a positive number, got 'nan'");
  EXPECT_EQ(create_error("tiny", {{"tie_word_embeddings", "maybe"}}),
            prefix + "llama hyperparameter 'tie_word_embeddings' must be true or false, got 'maybe'");
  EXPECT_EQ(create_error("tiny", {{"rope_scaling", "yarn"}}),
            prefix + "llama hyperparameter 'rope_scaling' must be none or llama3, got 'yarn'");

  EXPECT_EQ(create_error("tiny", {{"num_attention_heads", "3"}, {"num_key_value_heads", "1"}}),
            prefix +
                "llama: hidden_size 64 is not divisible by num_attention_heads 3 (set head_dim explicitly, or change "
                "one of them)");
  EXPECT_EQ(create_error("tiny", {{"num_key_value_heads", "3"}}),
            prefix +
                "llama: num_attention_heads 4 is not a multiple of num_key_value_heads 3 (grouped-query attention "
                "shares each key/value head among a whole number of query heads)");
  EXPECT_EQ(create_error("tiny", {{"head_dim", "7"}}),
            prefix + "llama: head_dim 7 must be even (rotary embeddings rotate pairs of dimensions)");
  EXPECT_EQ(create_error("tiny", {{"rope_scaling", "llama3"}, {"rope_scaling_high_freq_factor", "0.5"}}),
            prefix + "llama: rope_scaling_high_freq_factor 0.5 must be greater than rope_scaling_low_freq_factor 1");

  // An explicit head_dim lifts the divisibility requirement, as in HF.
  EXPECT_EQ(make_llama("tiny", {{"num_attention_heads", "6"}, {"num_key_value_heads", "3"}, {"head_dim", "10"}})
                ->config()
                .at("head_dim"),
            "10");

  const std::string preset = create_error("llama4", {});
  EXPECT_NE(preset.find("model 'llama' has no preset 'llama4'; its presets are: tiny, llama2-7b"), std::string::npos)
      << preset;
}

// The plugin is built with hidden visibility; its exceptions must still be
// catchable by their ftrain types in the engine (typeinfo matched by name).
TEST(LlamaErrors, PluginExceptionsKeepTheirType) {
  auto model = make_llama("tiny");
  EXPECT_THROW(model->unit(99), Error);
  StepContext ctx;
  Batch batch;
  batch.inputs = Tensor::zeros({1, 4}, DType::i32);
  UnitCache cache;
  try {
    model->unit(1).forward(ctx, {}, batch, Tensor(), cache);
    ADD_FAILURE() << "forward with no parameters must throw";
  } catch (const UserError&) {
    ADD_FAILURE() << "an internal check must not read as a user error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unit model.layers.0 expects 9 parameter tensors, got 0"), std::string::npos)
        << e.what();
  }
}
