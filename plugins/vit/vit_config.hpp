// Vision Transformer hyperparameters (timm VisionTransformer), the presets
// with the published sizes, and the parsing of deck overrides.
//
// Keys are timm's constructor names where they are plain numbers (img_size ->
// image_size to match the deck's wording; timm's own spellings img_size,
// in_chans, embed_dim ... are accepted as aliases, as are Hugging Face
// ViTConfig's hidden_size, num_hidden_layers, num_attention_heads,
// intermediate_size). mlp_dim is the MLP hidden width (timm: embed_dim *
// mlp_ratio). Fixed by the architecture (timm defaults): class token, learned
// position embedding, pre-norm blocks, qkv_bias on, exact-erf GELU, LayerNorm
// eps 1e-6, class-token pooling, linear head.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace ftrain::vit {

struct VitConfig {
  std::int64_t image_size = 32;
  std::int64_t patch_size = 8;
  std::int64_t num_channels = 3;
  std::int64_t num_classes = 10;
  std::int64_t embed_dim = 64;
  std::int64_t depth = 2;
  std::int64_t num_heads = 4;
  std::int64_t mlp_dim = 256;
  double layer_norm_eps = 1e-6;
  double initializer_range = 0.02;

  std::int64_t grid() const { return image_size / patch_size; }
  std::int64_t num_patches() const { return grid() * grid(); }
  std::int64_t tokens() const { return num_patches() + 1; }  // + class token
  std::int64_t head_dim() const { return embed_dim / num_heads; }
  std::int64_t patch_features() const { return num_channels * patch_size * patch_size; }

  // Throws ftrain::UserError when the dimensions do not fit together.
  void validate() const;
  std::map<std::string, std::string> to_map() const;
  // Exact number of trainable parameters (what the units declare).
  std::int64_t parameter_count() const;
};

const std::vector<std::string>& preset_names();
VitConfig preset_config(const std::string& preset);
// Applies deck overrides in order, then validates. Unknown keys and bad values
// throw UserError naming the key and what was expected.
// The plugin's key for a timm or Hugging Face spelling (img_size ->
// image_size); any other key unchanged.
std::string canonical_key(const std::string& key);

VitConfig make_config(const std::string& preset, const std::vector<std::pair<std::string, std::string>>& overrides);

}  // namespace ftrain::vit
