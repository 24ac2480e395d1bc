// Llama presets and override parsing; see llama_config.hpp.
//
// Preset values are copied from the published Hugging Face config.json files
// (meta-llama/Llama-2-{7b,13b,70b}-hf, Meta-Llama-3-8B, Llama-3.2-{1B,3B}).
#include "llama_config.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <sstream>

#include "base/error.hpp"
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

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::int64_t parse_positive_int(const std::string& key, const std::string& value) {
  std::int64_t out = 0;
  const char* end = value.data() + value.size();
  auto [ptr, ec] = std::from_chars(value.data(), end, out);
  if (ec != std::errc() || ptr != end || out <= 0) {
    FT_USER_ERROR() << "llama hyperparameter '" << key << "' must be a positive integer, got '" << value << "'";
  }
  return out;
}

double parse_positive_double(const std::string& key, const std::string& value) {
  errno = 0;
  char* end = nullptr;
  const double out = std::strtod(value.c_str(), &end);
  if (value.empty() || end != value.c_str() + value.size() || errno == ERANGE || !std::isfinite(out) || out <= 0) {
    FT_USER_ERROR() << "llama hyperparameter '" << key << "' must be a positive number, got '" << value << "'";
  }
  return out;
}

bool parse_bool(const std::string& key, const std::string& value) {
  if (value == "true" || value == "1" || value == "yes" || value == "on") return true;
  if (value == "false" || value == "0" || value == "no" || value == "off") return false;
  FT_USER_ERROR() << "llama hyperparameter '" << key << "' must be true or false, got '" << value << "'";
}

using Setter = std::function<void(LlamaConfig&, const std::string& key, const std::string& value)>;

// Key -> how to apply it, in HF config.json naming.
const std::vector<std::pair<std::string, Setter>>& setters() {
  auto int_field = [](std::int64_t LlamaConfig::*field) {
    return Setter(
        [field](LlamaConfig& c, const std::string& k, const std::string& v) { c.*field = parse_positive_int(k, v); });
  };
  auto double_field = [](double LlamaConfig::*field) {
    return Setter([field](LlamaConfig& c, const std::string& k, const std::string& v) {
      c.*field = parse_positive_double(k, v);
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
       [](LlamaConfig& c, const std::string& k, const std::string& v) { c.tie_word_embeddings = parse_bool(k, v); }},
      {"initializer_range", double_field(&LlamaConfig::initializer_range)},
  };
  return table;
}

// Whole numbers as integers ("500000", not "5e+05"), others as the shortest
// text that reads back to the same double ("1e-05", "0.02").
std::string format_double(double v) {
  if (v == std::floor(v) && std::abs(v) < 1e15) return std::to_string(static_cast<std::int64_t>(v));
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), v);
  return std::string(buffer, end);
}

// Names users bring from Meta's params.json and other codebases, mapped to
// the HF key they mean (too far from it for the edit distance to find).
const char* alias_of(const std::string& key) {
  static const std::vector<std::pair<std::string, const char*>> aliases = {
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
  for (const auto& [alias, key_name] : aliases) {
    if (alias == key) return key_name;
  }
  return nullptr;
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
      if (const char* meant = alias_of(key)) {
        FT_USER_ERROR() << "unknown llama hyperparameter '" << key << "' (did you mean '" << meant << "'?)";
      }
      const auto closest = std::min_element(table.begin(), table.end(), [&](const auto& a, const auto& b) {
        return edit_distance(key, a.first) < edit_distance(key, b.first);
      });
      // Offer a suggestion only when it is plausibly a typo; otherwise list them all.
      if (edit_distance(key, closest->first) <= std::max<std::size_t>(3, key.size() / 3)) {
        FT_USER_ERROR() << "unknown llama hyperparameter '" << key << "' (did you mean '" << closest->first << "'?)";
      }
      std::ostringstream known;
      for (const auto& entry : table) known << (known.tellp() > 0 ? ", " : "") << entry.first;
      FT_USER_ERROR() << "unknown llama hyperparameter '" << key << "'; known hyperparameters: " << known.str();
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
  m["rms_norm_eps"] = format_double(rms_norm_eps);
  m["rope_theta"] = format_double(rope_theta);
  m["rope_scaling"] = rope_scaling == RopeScaling::llama3 ? "llama3" : "none";
  if (rope_scaling == RopeScaling::llama3) {
    m["rope_scaling_factor"] = format_double(rope_scaling_factor);
    m["rope_scaling_low_freq_factor"] = format_double(rope_scaling_low_freq_factor);
    m["rope_scaling_high_freq_factor"] = format_double(rope_scaling_high_freq_factor);
    m["rope_scaling_original_max_position_embeddings"] = std::to_string(rope_scaling_original_max_position_embeddings);
  }
  m["max_position_embeddings"] = std::to_string(max_position_embeddings);
  m["tie_word_embeddings"] = tie_word_embeddings ? "true" : "false";
  m["initializer_range"] = format_double(initializer_range);
  m["hidden_act"] = "silu";
  m["attention_bias"] = "false";
  m["mlp_bias"] = "false";
  return m;
}

}  // namespace ftrain::llama
