#include "llama_hf_config.hpp"

#include <sstream>

#include "plugin/hf_config.hpp"

namespace ftrain::llama {

using nlohmann::json;

json hf_config(const std::map<std::string, std::string>& config, const std::string& torch_dtype) {
  json out = json::object();
  out["architectures"] = {"LlamaForCausalLM"};
  out["model_type"] = "llama";
  out["torch_dtype"] = torch_dtype;
  for (const auto& [key, value] : config) {
    if (key.rfind("rope_scaling", 0) == 0) continue;
    out[key] = hf_config::value_of(value);
  }
  const auto rope = config.find("rope_scaling");
  if (rope == config.end() || rope->second == "none") {
    out["rope_scaling"] = nullptr;
  } else {
    json scaling = {{"rope_type", rope->second}};
    for (const char* k : {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) {
      const auto it = config.find(std::string("rope_scaling_") + k);
      if (it != config.end()) scaling[k] = hf_config::value_of(it->second);
    }
    out["rope_scaling"] = scaling;
  }
  for (const char* id : {"bos_token_id", "eos_token_id", "pad_token_id"}) out[id] = nullptr;
  return out;
}

std::optional<std::string> deck_model_line(const json& config, const std::string& source) {
  // A timm config (model_args + architecture) is never a Llama's, whatever its model_type.
  if (config.contains("model_args") && config.contains("architecture")) return std::nullopt;
  if (config.value("model_type", "") != "llama") return std::nullopt;
  const auto refuse = [&](const std::string& key, const std::string& why) {
    hf_config::refuse(config, source, key, why);
  };
  if (config.value("hidden_act", "silu") != "silu") refuse("hidden_act", "ftrain's Llama uses SwiGLU (silu)");
  for (const char* key : {"attention_bias", "mlp_bias"})
    if (config.value(key, false)) refuse(key, "ftrain's Llama has no biases");
  // LlamaConfig's defaults (transformers 4.47) for what a config.json may omit.
  const json defaults = {{"vocab_size", 32000},          {"hidden_size", 4096},
                         {"intermediate_size", 11008},   {"num_hidden_layers", 32},
                         {"num_attention_heads", 32},    {"rms_norm_eps", 1e-6},
                         {"rope_theta", 10000.0},        {"max_position_embeddings", 2048},
                         {"tie_word_embeddings", false}};
  std::ostringstream line;
  line << "model llama preset tiny";
  for (const auto& [key, fallback] : defaults.items()) {
    const json& v = config.contains(key) && !config[key].is_null() ? config[key] : fallback;
    line << " " << key << " " << hf_config::deck_word(v);
  }
  const json heads = config.contains("num_attention_heads") ? config["num_attention_heads"] : defaults["num_attention_heads"];
  const json kv = config.contains("num_key_value_heads") && !config["num_key_value_heads"].is_null()
                      ? config["num_key_value_heads"] : heads;
  line << " num_key_value_heads " << hf_config::deck_word(kv);
  if (config.contains("head_dim") && !config["head_dim"].is_null())
    line << " head_dim " << hf_config::deck_word(config["head_dim"]);
  const json rope = config.value("rope_scaling", json());
  if (rope.is_null()) {
    line << " rope_scaling none";
  } else {
    const std::string rope_type = rope.value("rope_type", rope.value("type", ""));
    if (rope_type != "llama3") refuse("rope_scaling", "ftrain implements rope_type llama3 (or null)");
    line << " rope_scaling llama3";
    for (const char* k : {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) {
      if (!rope.contains(k)) refuse("rope_scaling", std::string("llama3 scaling needs ") + k);
      line << " rope_scaling_" << k << " " << hf_config::deck_word(rope[k]);
    }
  }
  return line.str();
}

}  // namespace ftrain::llama
