// Llama hyperparameters: Hugging Face config.json names, the presets with
// the real published configs, and the parsing of deck overrides.
//
// Flattening: HF nests rope scaling as
//   "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
//                    "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
// Decks are flat KEY VALUE lists, so here it is `rope_scaling none|llama3`
// plus rope_scaling_factor, rope_scaling_low_freq_factor,
// rope_scaling_high_freq_factor and rope_scaling_original_max_position_embeddings.
// head_dim 0 means "hidden_size / num_attention_heads" (HF's default).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace ftrain::llama {

enum class RopeScaling : std::uint8_t { none, llama3 };

struct LlamaConfig {
  std::int64_t vocab_size = 256;
  std::int64_t hidden_size = 64;
  std::int64_t intermediate_size = 176;
  std::int64_t num_hidden_layers = 2;
  std::int64_t num_attention_heads = 4;
  std::int64_t num_key_value_heads = 2;
  std::int64_t head_dim = 0;  // 0 = hidden_size / num_attention_heads
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling = RopeScaling::none;
  double rope_scaling_factor = 8.0;
  double rope_scaling_low_freq_factor = 1.0;
  double rope_scaling_high_freq_factor = 4.0;
  std::int64_t rope_scaling_original_max_position_embeddings = 8192;
  std::int64_t max_position_embeddings = 2048;
  bool tie_word_embeddings = false;
  double initializer_range = 0.02;

  std::int64_t resolved_head_dim() const { return head_dim > 0 ? head_dim : hidden_size / num_attention_heads; }
  std::int64_t q_size() const { return num_attention_heads * resolved_head_dim(); }
  std::int64_t kv_size() const { return num_key_value_heads * resolved_head_dim(); }

  // Throws ftrain::UserError when the dimensions do not fit together.
  void validate() const;
  // Every hyperparameter, resolved, in HF naming (head_dim resolved).
  std::map<std::string, std::string> to_map() const;
};

// Preset names in descriptor order (the first is the default).
const std::vector<std::string>& preset_names();
// Throws UserError for an unknown preset.
LlamaConfig preset_config(const std::string& preset);
// Applies deck overrides in order, then validates. Unknown keys and bad
// values throw UserError: "unknown llama hyperparameter 'X' (did you mean 'Y'?)".
LlamaConfig make_config(const std::string& preset, const std::vector<std::pair<std::string, std::string>>& overrides);

}  // namespace ftrain::llama
