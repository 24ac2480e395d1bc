// Llama presets and override parsing; see llama_config.hpp.
//
// Preset values are copied from the published Hugging Face config.json files
// (meta-llama/Llama-2-{7b,13b,70b}-hf, Meta-Llama-3-8B, Llama-3.2-{1B,3B}).
#include "llama_config.hpp"

#include <algorithm>
#include <cmath>
#include <functional>

#include "base/error.hpp"
#include "plugin/config_keys.hpp"
#include "plugin/plugin_entry.hpp"

namespace ftrain::llama {

namespace {

LlamaConfig tiny() { return LlamaConfig{}; }

LlamaConfig llama2(std::int64_t hidden, std::int64_t inter, std::int64_t layers, std::int64_t heads,
                   std::int64_t kv_heads) {
  LlamaConfig c;
  c.vocab_size = 32000;
  c.hidden_size = hidden;
  c.intermediate_size = inter;
  c.num_hidden_layers = layers;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.max_position_embeddings = 4096;
  return c;
}

LlamaConfig llama3_8b() {
  LlamaConfig c;
  c.vocab_size = 128256;
  c.hidden_size = 4096;
  c.intermediate_size = 14336;
  c.num_hidden_layers = 32;
  c.num_attention_heads = 32;
  c.num_key_value_heads = 8;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 500000.0;
  c.max_position_embeddings = 8192;
  return c;
}

LlamaConfig llama3_2(std::int64_t hidden, std::int64_t layers, std::int64_t heads, std::int64_t head_dim) {
  LlamaConfig c;
  c.vocab_size = 128256;
  c.hidden_size = hidden;
  c.intermediate_size = 8192;
  c.num_hidden_layers = layers;
  c.num_attention_heads = heads;
  c.num_key_value_heads = 8;
  c.head_dim = head_dim;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 500000.0;
  c.rope_scaling = RopeScaling::llama3;
  c.rope_scaling_factor = 32.0;
  c.rope_scaling_low_freq_factor = 1.0;
  c.rope_scaling_high_freq_factor = 4.0;
  c.rope_scaling_original_max_position_embeddings = 8192;
  c.max_position_embeddings = 131072;
  c.tie_word_embeddings = true;
  return c;
}

using Preset = plugin_entry::Preset<LlamaConfig>;

const std::vector<Preset>& presets() {
  static const std::vector<Preset> table = {
      {"tiny", [] { return tiny(); }},
      {"llama2-7b", [] { return llama2(4096, 11008, 32, 32, 32); }},
      {"llama2-13b", [] { return llama2(5120, 13824, 40, 40, 40); }},
      {"llama2-70b", [] { return llama2(8192, 28672, 80, 64, 8); }},
      {"llama3-8b", [] { return llama3_8b(); }},
      {"llama3.2-1b", [] { return llama3_2(2048, 16, 32, 64); }},
      {"llama3.2-3b", [] { return llama3_2(3072, 28, 24, 128); }},
  };
  return table;
}

using Setter = std::function<void(LlamaConfig&, const std::string& key, const std::string& value)>;

// Key -> how to apply it, in HF config.json naming.
const std::vector<std::pair<std::string, Setter>>& setters() {
  auto int_field = [](std::int64_t LlamaConfig::*field) {
    return Setter(
        [field](LlamaConfig& c, const std::string& k, const std::string& v) { c.*field = plugin_config::positive_int("llama", k, v); });
  };
  auto double_field = [](double LlamaConfig::*field) {
    return Setter([field](LlamaConfig& c, const std::string& k, const std::string& v) {
      c.*field = plugin_config::positive_number("llama", k, v);
    });
  };
  static const std::vector<std::pair<std::string, Setter>> table = {
      {"vocab_size", int_field(&LlamaConfig::vocab_size)},
      {"hidden_size", int_field(&LlamaConfig::hidden_size)},
      {"intermediate_size", int_field(&LlamaConfig::intermediate_size)},
      {"num_hidden_layers", int_field(&LlamaConfig::num_hidden_layers)},
      {"num_attention_heads", int_field(&LlamaConfig::num_attention_heads)},
      {"num_key_value_heads", int_field(&LlamaConfig::num_key_value_heads)},
      {"head_dim", int_field(&LlamaConfig::head_dim)},
      {"rms_norm_eps", double_field(&LlamaConfig::rms_norm_eps)},
      {"rope_theta", double_field(&LlamaConfig::rope_theta)},
      {"rope_scaling",
       [](LlamaConfig& c, const std::string& k, const std::string& v) {
         if (v == "none" || v == "null" || v == "default") {
           c.rope_scaling = RopeScaling::none;
         } else if (v == "llama3") {
           c.rope_scaling = RopeScaling::llama3;
         } else {
           FT_USER_ERROR() << "llama hyperparameter '" << k << "' must be none or llama3, got '" << v << "'";
         }
       }},
      {"rope_scaling_factor", double_field(&LlamaConfig::rope_scaling_factor)},
      {"rope_scaling_low_freq_factor", double_field(&LlamaConfig::rope_scaling_low_freq_factor)},
      {"rope_scaling_high_freq_factor", double_field(&LlamaConfig::rope_scaling_high_freq_factor)},
      {"rope_scaling_original_max_position_embeddings",
       int_field(&LlamaConfig::rope_scaling_original_max_position_embeddings)},
      {"max_position_embeddings", int_field(&LlamaConfig::max_position_embeddings)},
      {"tie_word_embeddings",
       [](LlamaConfig& c, const std::string& k, const std::string& v) { c.tie_word_embeddings = plugin_config::boolean("llama", k, v); }},
      {"initializer_range", double_field(&LlamaConfig::initializer_range)},
  };
  return table;
}

// Names users bring from Meta's params.json and other codebases, mapped to
// the HF key they mean (too far from it for the edit distance to find).
const std::vector<plugin_config::KeyAlias>& aliases() {
  static const std::vector<plugin_config::KeyAlias> table = {
      {"dim", "hidden_size"},
      {"d_model", "hidden_size"},
      {"n_embd", "hidden_size"},
      {"n_layers", "num_hidden_layers"},
      {"n_layer", "num_hidden_layers"},
      {"num_layers", "num_hidden_layers"},
      {"n_heads", "num_attention_heads"},
      {"n_head", "num_attention_heads"},
      {"num_heads", "num_attention_heads"},
      {"n_kv_heads", "num_key_value_heads"},
      {"num_kv_heads", "num_key_value_heads"},
      {"norm_eps", "rms_norm_eps"},
      {"ffn_dim", "intermediate_size"},
      {"ffn_hidden_size", "intermediate_size"},
      {"max_seq_len", "max_position_embeddings"},
      {"tie_embeddings", "tie_word_embeddings"},
  };
  return table;
}

}  // namespace

const std::vector<std::string>& preset_names() {
  static const std::vector<std::string> names = plugin_entry::preset_names(presets());
  return names;
}

LlamaConfig preset_config(const std::string& preset) { return plugin_entry::make_preset(presets(), preset, "llama"); }

LlamaConfig make_config(const std::string& preset, const std::vector<std::pair<std::string, std::string>>& overrides) {
  LlamaConfig config = preset_config(preset);
  for (const auto& [key, value] : overrides) {
    const auto& table = setters();
    auto it = std::find_if(table.begin(), table.end(), [&](const auto& entry) { return entry.first == key; });
    if (it == table.end()) {
      std::vector<std::string_view> known;
      for (const auto& entry : table) known.push_back(entry.first);
      plugin_config::refuse_unknown_key("llama", key, known, aliases());
    }
    it->second(config, key, value);
  }
  config.validate();
  return config;
}

void LlamaConfig::validate() const {
  if (head_dim == 0 && hidden_size % num_attention_heads != 0) {
    FT_USER_ERROR() << "llama: hidden_size " << hidden_size << " is not divisible by num_attention_heads "
                    << num_attention_heads << " (set head_dim explicitly, or change one of them)";
  }
  if (num_attention_heads % num_key_value_heads != 0) {
    FT_USER_ERROR() << "llama: num_attention_heads " << num_attention_heads
                    << " is not a multiple of num_key_value_heads " << num_key_value_heads
                    << " (grouped-query attention shares each key/value head among a whole number of query heads)";
  }
  if (resolved_head_dim() % 2 != 0) {
    FT_USER_ERROR() << "llama: head_dim " << resolved_head_dim()
                    << " must be even (rotary embeddings rotate pairs of dimensions)";
  }
  if (rope_scaling == RopeScaling::llama3 && rope_scaling_high_freq_factor <= rope_scaling_low_freq_factor) {
    FT_USER_ERROR() << "llama: rope_scaling_high_freq_factor " << rope_scaling_high_freq_factor
                    << " must be greater than rope_scaling_low_freq_factor " << rope_scaling_low_freq_factor;
  }
}

std::map<std::string, std::string> LlamaConfig::to_map() const {
  std::map<std::string, std::string> m;
  m["vocab_size"] = std::to_string(vocab_size);
  m["hidden_size"] = std::to_string(hidden_size);
  m["intermediate_size"] = std::to_string(intermediate_size);
  m["num_hidden_layers"] = std::to_string(num_hidden_layers);
  m["num_attention_heads"] = std::to_string(num_attention_heads);
  m["num_key_value_heads"] = std::to_string(num_key_value_heads);
  m["head_dim"] = std::to_string(resolved_head_dim());
  m["rms_norm_eps"] = plugin_config::format_number(rms_norm_eps);
  m["rope_theta"] = plugin_config::format_number(rope_theta);
  m["rope_scaling"] = rope_scaling == RopeScaling::llama3 ? "llama3" : "none";
  if (rope_scaling == RopeScaling::llama3) {
    m["rope_scaling_factor"] = plugin_config::format_number(rope_scaling_factor);
    m["rope_scaling_low_freq_factor"] = plugin_config::format_number(rope_scaling_low_freq_factor);
    m["rope_scaling_high_freq_factor"] = plugin_config::format_number(rope_scaling_high_freq_factor);
    m["rope_scaling_original_max_position_embeddings"] = std::to_string(rope_scaling_original_max_position_embeddings);
  }
  m["max_position_embeddings"] = std::to_string(max_position_embeddings);
  m["tie_word_embeddings"] = tie_word_embeddings ? "true" : "false";
  m["initializer_range"] = plugin_config::format_number(initializer_range);
  m["hidden_act"] = "silu";
  m["attention_bias"] = "false";
  m["mlp_bias"] = "false";
  return m;
}

}  // namespace ftrain::llama
