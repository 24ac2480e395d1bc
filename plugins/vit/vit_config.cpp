// ViT presets and override parsing; see vit_config.hpp.
//
// Preset sizes are timm's vit_base_patch16_224, vit_large_patch16_224 and
// vit_huge_patch14_224 (Dosovitskiy et al., table 1): 86.6M, 304.3M and
// 632.0M parameters with a 1000-class head.
#include "vit_config.hpp"

#include <algorithm>
#include <cmath>

#include "base/error.hpp"
#include "plugin/config_keys.hpp"
#include "plugin/plugin_entry.hpp"

namespace ftrain::vit {

namespace {

VitConfig imagenet(std::int64_t patch, std::int64_t embed, std::int64_t depth, std::int64_t heads,
                   std::int64_t mlp) {
  VitConfig c;
  c.image_size = 224;
  c.patch_size = patch;
  c.num_channels = 3;
  c.num_classes = 1000;
  c.embed_dim = embed;
  c.depth = depth;
  c.num_heads = heads;
  c.mlp_dim = mlp;
  return c;
}

using Preset = plugin_entry::Preset<VitConfig>;

const std::vector<Preset>& presets() {
  static const std::vector<Preset> table = {
      {"tiny", [] { return VitConfig{}; }},
      {"vit-b16", [] { return imagenet(16, 768, 12, 12, 3072); }},
      {"vit-l16", [] { return imagenet(16, 1024, 24, 16, 4096); }},
      {"vit-h14", [] { return imagenet(14, 1280, 32, 16, 5120); }},
  };
  return table;
}

struct IntKey {
  const char* name;
  std::int64_t VitConfig::*field;
};
struct DoubleKey {
  const char* name;
  double VitConfig::*field;
};

const std::vector<IntKey>& int_keys() {
  static const std::vector<IntKey> keys = {
      {"image_size", &VitConfig::image_size}, {"patch_size", &VitConfig::patch_size},
      {"num_channels", &VitConfig::num_channels}, {"num_classes", &VitConfig::num_classes},
      {"embed_dim", &VitConfig::embed_dim},   {"depth", &VitConfig::depth},
      {"num_heads", &VitConfig::num_heads},   {"mlp_dim", &VitConfig::mlp_dim},
  };
  return keys;
}
const std::vector<DoubleKey>& double_keys() {
  static const std::vector<DoubleKey> keys = {{"layer_norm_eps", &VitConfig::layer_norm_eps},
                                              {"initializer_range", &VitConfig::initializer_range}};
  return keys;
}


std::vector<std::string_view> known_keys() {
  std::vector<std::string_view> known;
  for (const auto& k : int_keys()) known.push_back(k.name);
  for (const auto& k : double_keys()) known.push_back(k.name);
  known.push_back("mlp_ratio");
  return known;
}

}  // namespace

// timm and Hugging Face spellings of the same hyperparameters.
std::string canonical_key(const std::string& key) {
  static const std::vector<std::pair<std::string, std::string>> aliases = {
      {"img_size", "image_size"},        {"in_chans", "num_channels"},
      {"hidden_size", "embed_dim"},      {"num_hidden_layers", "depth"},
      {"num_attention_heads", "num_heads"}, {"intermediate_size", "mlp_dim"},
      {"patch", "patch_size"},           {"eps", "layer_norm_eps"},
  };
  for (const auto& [alias, name] : aliases)
    if (alias == key) return name;
  return key;
}

const std::vector<std::string>& preset_names() {
  static const std::vector<std::string> names = plugin_entry::preset_names(presets());
  return names;
}

VitConfig preset_config(const std::string& preset) { return plugin_entry::make_preset(presets(), preset, "vit"); }

VitConfig make_config(const std::string& preset, const std::vector<std::pair<std::string, std::string>>& overrides) {
  VitConfig config = preset_config(preset.empty() ? "tiny" : preset);
  // mlp_ratio (timm) is applied after every other key, so that
  // "embed_dim 96 mlp_ratio 4" means 384 whatever the order.
  double mlp_ratio = 0;
  for (const auto& [raw_key, value] : overrides) {
    const std::string key = canonical_key(raw_key);
    if (key == "mlp_ratio") {
      mlp_ratio = plugin_config::positive_number("vit", raw_key, value);
      continue;
    }
    bool found = false;
    for (const auto& k : int_keys()) {
      if (key == k.name) {
        config.*k.field = plugin_config::positive_int("vit", raw_key, value);
        found = true;
      }
    }
    for (const auto& k : double_keys()) {
      if (key == k.name) {
        config.*k.field = plugin_config::positive_number("vit", raw_key, value);
        found = true;
      }
    }
    if (!found) plugin_config::refuse_unknown_key("vit", raw_key, known_keys());
  }
  if (mlp_ratio > 0) config.mlp_dim = static_cast<std::int64_t>(std::llround(mlp_ratio * config.embed_dim));
  config.validate();
  return config;
}

void VitConfig::validate() const {
  if (image_size % patch_size != 0)
    FT_USER_ERROR() << "vit: image_size " << image_size << " is not a multiple of patch_size " << patch_size
                    << " (patches tile the image exactly, as timm's PatchEmbed requires)";
  if (embed_dim % num_heads != 0)
    FT_USER_ERROR() << "vit: embed_dim " << embed_dim << " is not divisible by num_heads " << num_heads;
}

std::map<std::string, std::string> VitConfig::to_map() const {
  std::map<std::string, std::string> m;
  m["image_size"] = std::to_string(image_size);
  m["patch_size"] = std::to_string(patch_size);
  m["num_channels"] = std::to_string(num_channels);
  m["num_classes"] = std::to_string(num_classes);
  m["embed_dim"] = std::to_string(embed_dim);
  m["depth"] = std::to_string(depth);
  m["num_heads"] = std::to_string(num_heads);
  m["mlp_dim"] = std::to_string(mlp_dim);
  m["layer_norm_eps"] = plugin_config::format_number(layer_norm_eps);
  m["initializer_range"] = plugin_config::format_number(initializer_range);
  m["num_patches"] = std::to_string(num_patches());
  m["class_token"] = "true";
  m["global_pool"] = "token";
  m["qkv_bias"] = "true";
  m["act_layer"] = "gelu";
  return m;
}

std::int64_t VitConfig::parameter_count() const {
  const std::int64_t C = embed_dim;
  const std::int64_t embed = C * patch_features() + C + C + tokens() * C;
  const std::int64_t block = 2 * 2 * C + (3 * C * C + 3 * C) + (C * C + C) + (mlp_dim * C + mlp_dim) + (C * mlp_dim + C);
  const std::int64_t head = 2 * C + num_classes * C + num_classes;
  return embed + depth * block + head;
}

}  // namespace ftrain::vit
