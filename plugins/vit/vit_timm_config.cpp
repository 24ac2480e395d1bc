#include "vit_timm_config.hpp"

#include <sstream>
#include <utility>
#include <vector>

#include "plugin/hf_config.hpp"
#include "vit_config.hpp"

namespace ftrain::vit {

using nlohmann::json;

json timm_config(const std::map<std::string, std::string>& config) {
  const auto get = [&](const char* key) -> json {
    const auto it = config.find(key);
    if (it == config.end()) FT_USER_ERROR() << "vit config: the consolidated file has no attribute '" << key << "'";
    return hf_config::value_of(it->second);
  };
  const json embed = get("embed_dim"), mlp = get("mlp_dim");
  // timm builds the MLP as int(embed_dim * mlp_ratio) wide: the ratio must give mlp_dim back exactly.
  const double ratio = mlp.get<double>() / embed.get<double>();
  if (static_cast<std::int64_t>(embed.get<double>() * ratio) != mlp.get<std::int64_t>())
    FT_USER_ERROR() << "vit: mlp_dim " << mlp << " is not int(embed_dim " << embed << " * mlp_ratio) for any "
                    << "double mlp_ratio timm would take; not exported";
  const json model_args = {
      {"img_size", get("image_size")},       {"patch_size", get("patch_size")},
      {"in_chans", get("num_channels")},     {"num_classes", get("num_classes")},
      {"embed_dim", embed},                  {"depth", get("depth")},
      {"num_heads", get("num_heads")},       {"mlp_ratio", ratio},
      {"qkv_bias", true},                    {"class_token", true},
      {"global_pool", "token"}};
  // timm's VisionTransformer has no eps argument (LayerNorm eps 1e-6): a
  // model trained with another would load and silently compute otherwise.
  if (get("layer_norm_eps").get<double>() != 1e-6)
    FT_USER_ERROR() << "vit: layer_norm_eps " << config.at("layer_norm_eps")
                    << " has no timm equivalent (timm's VisionTransformer uses 1e-6); not exported";
  // timm's hub config.json shape; model_args override every size of the
  // named architecture, so create_model(architecture, **model_args) builds
  // exactly this model whatever its dimensions.
  return {{"architecture", "vit_base_patch16_224"},
          {"num_classes", get("num_classes")},
          {"num_features", embed},
          {"global_pool", "token"},
          {"model_args", model_args},
          {"pretrained_cfg",
           {{"input_size", {get("num_channels"), get("image_size"), get("image_size")}},
            {"num_classes", get("num_classes")},
            {"classifier", "head"},
            {"first_conv", "patch_embed.proj"}}}};
}

std::optional<std::string> deck_model_line(const json& config, const std::string& source) {
  if (!config.contains("model_args") || !config.contains("architecture")) return std::nullopt;
  const auto refuse = [&](const std::string& key, const std::string& why) {
    hf_config::refuse(config, source, key, why);
  };
  const json& a = config["model_args"];
  if (config["architecture"].get<std::string>().rfind("vit_", 0) != 0)
    refuse("architecture", "ftrain's vit plugin is timm's VisionTransformer (vit_*)");
  for (const auto& [key, want] : std::map<std::string, json>{{"class_token", true}, {"global_pool", "token"}})
    if (a.contains(key) && a[key] != want) refuse("model_args." + key, "ftrain's ViT pools the class token");
  if (a.contains("qkv_bias") && a["qkv_bias"] != true) refuse("model_args.qkv_bias", "ftrain's ViT has qkv bias");
  std::ostringstream line;
  line << "model vit preset tiny";
  // timm's names, written as the plugin's own keys (make_config takes both).
  for (const char* timm_key :
       {"img_size", "patch_size", "in_chans", "num_classes", "embed_dim", "depth", "num_heads", "mlp_ratio"}) {
    if (!a.contains(timm_key)) refuse(std::string("model_args.") + timm_key, "needed (no default assumed)");
    line << " " << canonical_key(timm_key) << " " << hf_config::deck_word(a[timm_key]);
  }
  return line.str();
}

}  // namespace ftrain::vit
