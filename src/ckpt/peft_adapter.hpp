// LoRA adapters in Hugging Face PEFT's on-disk format (PEFT 0.14,
// PeftModel.save_pretrained / from_pretrained):
//
//   DIR/adapter_model.safetensors   one tensor per adapter matrix, key
//       "base_model.model." + "<module>.lora_A.weight" (A [r, in]) and
//       ... ".lora_B.weight" (B [out, r]); no adapter name inside the key
//       (PEFT strips "default"); metadata {"format": "pt"}
//   DIR/adapter_config.json         LoraConfig.to_dict(): every field PEFT
//       0.14 writes, sorted keys, "peft_type": "LORA", "r", "lora_alpha",
//       "lora_dropout", "target_modules" (a list, or "all-linear"),
//       "use_rslora", "task_type" (CAUSAL_LM for Llama; null for timm ViT)...
//
// ftrain's adapter names are these keys without "base_model.model.", so a
// file maps onto the engine's adapter flat parameters entry by entry.
//
// Sharding (share/doc/fsdp.md "LoRA"): save gathers each unit's adapter flat
// over its shard group and rank 0 writes; load has every rank read only its
// shard's slices; merge folds scale * B A into each rank's own piece of W
// after gathering that unit's (small) adapter flat.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/communicator.hpp"
#include "fsdp/engine.hpp"
#include "layers/lora.hpp"

namespace ftrain::ckpt {

inline constexpr const char* kPeftWeightsName = "adapter_model.safetensors";
inline constexpr const char* kPeftConfigName = "adapter_config.json";
inline constexpr const char* kPeftKeyPrefix = "base_model.model.";

// "model.layers.0.self_attn.q_proj.lora_A.weight" -> "base_model.model.model.layers.0..."
std::string peft_key(const std::string& adapter_name);

// adapter_config.json as PEFT 0.14 writes it for `config`. task_type:
// "CAUSAL_LM" for language models, "" for none (null).
nlohmann::json peft_adapter_config(const lora::Config& config, const std::string& base_model_name_or_path,
                                   const std::string& task_type);

// Checks a PEFT adapter directory against the deck's LoRA configuration
// (r, lora_alpha, use_rslora, target_modules, peft_type LORA, no DoRA, bias
// none) and returns its parsed config; UserError naming the file and field.
nlohmann::json check_peft_adapter_config(const std::string& dir, const lora::Config& config);

// Collective over `world`: writes DIR (rank 0) from the engine's adapters.
void save_adapter(FsdpEngine& engine, Communicator& world, const std::string& dir,
                  const std::string& base_model_name_or_path, const std::string& task_type);

// Not collective: every rank fills its adapter shards from DIR (after
// check_peft_adapter_config). Every adapter the engine has must be in the
// file with its shape; a lora tensor in the file the engine does not have
// (another target) is an error too.
void load_adapter(FsdpEngine& engine, const std::string& dir);

// Collective over each shard group: W += scale * B A for every adapted
// linear, into the base masters (the frozen base then holds the merged
// model; the adapters are left as they are). Call once, at the end.
void merge_adapter(FsdpEngine& engine);

}  // namespace ftrain::ckpt
