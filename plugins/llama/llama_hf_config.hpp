// The Llama plugin's Hugging Face config.json conversion (ftrain-convert,
// ftrain_plugin.h export_hf_config / import_hf_config).
#pragma once

#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace ftrain::llama {

// config.json in Hugging Face naming (LlamaForCausalLM) from the
// consolidated file's config keys (LlamaConfig::to_map naming).
// bos_token_id / eos_token_id / pad_token_id are null: ftrain-convert fills
// them from a tokenizer directory when it is given one.
nlohmann::json hf_config(const std::map<std::string, std::string>& config, const std::string& torch_dtype);

// The deck's `model llama ...` line for a LlamaForCausalLM config.json (keys
// it lacks take LlamaConfig's defaults, as from_pretrained does); nullopt
// when model_type is not "llama". UserError naming `source` and the key for
// what the plugin does not implement (hidden_act other than silu,
// attention/MLP biases, a rope_scaling type other than llama3).
std::optional<std::string> deck_model_line(const nlohmann::json& config, const std::string& source);

}  // namespace ftrain::llama
