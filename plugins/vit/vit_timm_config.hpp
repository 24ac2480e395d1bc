// The ViT plugin's timm config.json conversion (ftrain-convert,
// ftrain_plugin.h export_hf_config / import_hf_config).
#pragma once

#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace ftrain::vit {

// timm's config.json (the hub layout: architecture, num_classes, model_args,
// pretrained_cfg) from the consolidated file's VitConfig keys:
// timm.create_model(cfg["architecture"], **cfg["model_args"]) builds the
// model. UserError for what timm cannot express (an mlp_dim no mlp_ratio
// gives back, a layer_norm_eps other than 1e-6).
nlohmann::json timm_config(const std::map<std::string, std::string>& config);

// The deck's `model vit ...` line for a timm ViT config.json (its
// model_args); nullopt when the config is not timm's (no model_args and
// architecture). UserError naming `source` and the key for another
// architecture, a ViT without class-token pooling or without qkv bias, or
// a size it does not give.
std::optional<std::string> deck_model_line(const nlohmann::json& config, const std::string& source);

}  // namespace ftrain::vit
