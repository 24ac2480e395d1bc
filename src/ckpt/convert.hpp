// ftrain-convert: consolidated HDF5 state dict <-> Hugging Face safetensors.
//
// Both directions stream tensor by tensor: memory is bounded by the largest
// tensor (one read buffer plus one converted copy), whatever the model size.
//
// h5_to_safetensors writes OUTDIR/model-0000K-of-0000N.safetensors, filled in
// dataset-name order, a new shard starting when the next tensor would push
// the current one past `shard_bytes` (a tensor larger than that gets a shard
// of its own), plus model.safetensors.index.json ({"metadata": {"total_size":
// bytes of all tensors}, "weight_map": {...}}); when everything fits in one
// shard, a single model.safetensors and no index (save_pretrained's layout).
// Every shard's __metadata__ has "format": "pt" (transformers requires it) and the consolidated file's
// root attributes as "ftrain.<name>" (step, model_type, config keys), which
// safetensors_to_h5 restores. When the model's plugin (named by the
// model_type attribute) provides one, it also writes that model's
// config.json (Hugging Face's for llama, timm's for vit; plugin_hf_config).
//
// safetensors_to_h5 takes a .safetensors file or a directory (as `init
// safetensors`) and writes a consolidated file in the layout save_final
// writes (consolidated.hpp): root datasets in HF naming and shape, contiguous,
// no filters, f32 (or bf16 bits, see consolidated.hpp), and the root
// attributes. Serial HDF5; the file appears under its name only when complete
// (written as OUT.tmp, renamed).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "base/dtype.hpp"

namespace ftrain {
class PluginLoader;  // plugin/loader.hpp
}  // namespace ftrain

namespace ftrain::ckpt {

// "5GB" (10^9), "500MB", "2GiB" (2^30), "4096" (bytes), ...; UserError on
// anything else or zero.
std::uint64_t parse_byte_size(std::string_view text);

struct ConvertSummary {
  std::int64_t tensors = 0;
  std::int64_t files = 0;
  std::uint64_t bytes = 0;  // tensor data written
};

// `dtype` f32 or bf16; empty keeps each dataset's stored type.
// `tokenizer_dir` (optional): a Hugging Face model or tokenizer directory
// (typically the one the run was initialised from). Its tokenizer files
// (kTokenizerFiles) are copied into out_dir, and a config.json that names
// bos_token_id / eos_token_id / pad_token_id (a Llama's) takes them from its
// config.json (else its generation_config.json). Without it those ids are null: ftrain's
// consolidated file does not know the tokenizer. UserError when the
// directory has no tokenizer file at all.
ConvertSummary h5_to_safetensors(const std::string& in_h5, const std::string& out_dir, std::uint64_t shard_bytes,
                                 std::optional<DType> dtype, const std::string& tokenizer_dir = {});

// Files of a Hugging Face tokenizer that h5_to_safetensors copies through.
inline constexpr const char* kTokenizerFiles[] = {"tokenizer.json",          "tokenizer.model",
                                                  "tokenizer_config.json",   "special_tokens_map.json",
                                                  "added_tokens.json",       "generation_config.json"};

// `dtype` f32 or bf16; empty: bf16 for BF16 tensors, f32 for every other type.
ConvertSummary safetensors_to_h5(const std::string& in, const std::string& out_h5, std::optional<DType> dtype);

// The model's Hugging Face config.json from its plugin (the plugin named
// `model_type`, ftrain_plugin.h export_hf_config), given its configuration as
// the consolidated file's attributes store it; null when no plugin of that
// name is found or it offers no conversion. UserError with the plugin's
// message for a model it cannot express.
nlohmann::json plugin_hf_config(const std::string& model_type, const std::map<std::string, std::string>& config,
                                std::string_view torch_dtype, const PluginLoader& loader);
nlohmann::json plugin_hf_config(const std::string& model_type, const std::map<std::string, std::string>& config,
                                std::string_view torch_dtype);  // the default plugin search path

// The deck's `model ...` line for a config.json, from the first plugin (by
// name) that recognises it (import_hf_config). UserError naming `source`
// and the key for anything the plugin does not implement, or model_type
// when no plugin recognises the config.
std::string deck_model_line(const nlohmann::json& config, const std::string& source, const PluginLoader& loader);
std::string deck_model_line(const nlohmann::json& config, const std::string& source);  // the default search path

}  // namespace ftrain::ckpt
