// The C entry point of ftrain_llama.so (plugin/ftrain_plugin.h).
#include <memory>

#include "llama_config.hpp"
#include "llama_model.hpp"
#include "plugin/plugin_entry.hpp"
#include "llama_hf_config.hpp"

namespace {

void* create_model(ftrain_model_args* args) {
  return ftrain::plugin_entry::create_guarded(
      args, "llama", [](const std::string& preset, const ftrain::plugin_entry::Overrides& overrides) {
        return std::make_unique<ftrain::llama::LlamaModel>(ftrain::llama::make_config(preset, overrides));
      });
}

int export_hf_config(ftrain_hf_config_args* args) {
  return ftrain::plugin_entry::export_hf_config_guarded(
      args, "llama", [](const ftrain::plugin_entry::ConfigMap& config, const std::string& torch_dtype) {
        return ftrain::llama::hf_config(config, torch_dtype).dump();
      });
}

int import_hf_config(ftrain_hf_config_args* args) {
  return ftrain::plugin_entry::import_hf_config_guarded(
      args, "llama", [](const std::string& text, const std::string& source) {
        return ftrain::llama::deck_model_line(nlohmann::json::parse(text), source);
      });
}

}  // namespace

extern "C" FTRAIN_PLUGIN_EXPORT const ftrain_plugin_descriptor* ftrain_plugin_entry(void) {
  static const std::vector<const char*> presets =
      ftrain::plugin_entry::c_string_list(ftrain::llama::preset_names());
  static const ftrain_plugin_descriptor descriptor = {
      FTRAIN_PLUGIN_ABI_VERSION,
      sizeof(ftrain_plugin_descriptor),
      "llama",
      "Llama decoder (Hugging Face LlamaForCausalLM): RMSNorm, RoPE, GQA, SwiGLU; Llama 2 / 3 / 3.2 presets",
      presets.data(),
      &create_model,
      &ftrain::plugin_entry::destroy,
      &export_hf_config,
      &import_hf_config,
  };
  return &descriptor;
}
