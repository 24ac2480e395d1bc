// The C entry point of ftrain_vit.so (plugin/ftrain_plugin.h).
#include <memory>

#include "plugin/plugin_entry.hpp"
#include "vit_timm_config.hpp"
#include "vit_config.hpp"
#include "vit_model.hpp"

namespace {

void* create_model(ftrain_model_args* args) {
  return ftrain::plugin_entry::create_guarded(
      args, "vit", [](const std::string& preset, const ftrain::plugin_entry::Overrides& overrides) {
        return std::make_unique<ftrain::vit::VitModel>(ftrain::vit::make_config(preset, overrides));
      });
}

int export_hf_config(ftrain_hf_config_args* args) {
  return ftrain::plugin_entry::export_hf_config_guarded(
      args, "vit", [](const ftrain::plugin_entry::ConfigMap& config, const std::string& /*torch_dtype: timm records none*/) {
        return ftrain::vit::timm_config(config).dump();
      });
}

int import_hf_config(ftrain_hf_config_args* args) {
  return ftrain::plugin_entry::import_hf_config_guarded(
      args, "vit", [](const std::string& text, const std::string& source) {
        return ftrain::vit::deck_model_line(nlohmann::json::parse(text), source);
      });
}

}  // namespace

extern "C" FTRAIN_PLUGIN_EXPORT const ftrain_plugin_descriptor* ftrain_plugin_entry(void) {
  static const std::vector<const char*> presets = ftrain::plugin_entry::c_string_list(ftrain::vit::preset_names());
  static const ftrain_plugin_descriptor descriptor = {
      FTRAIN_PLUGIN_ABI_VERSION,
      sizeof(ftrain_plugin_descriptor),
      "vit",
      "Vision Transformer (timm VisionTransformer): patch GEMM, class token, learned positions, pre-norm "
      "LayerNorm blocks, GELU MLP; tiny / ViT-B/16 / L/16 / H/14 presets",
      presets.data(),
      &create_model,
      &ftrain::plugin_entry::destroy,
      &export_hf_config,
      &import_hf_config,
  };
  return &descriptor;
}
