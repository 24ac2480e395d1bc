// The C entry point of ftrain_vit.so (plugin/ftrain_plugin.h).
//
// Nothing may cross the C boundary as an exception: create_model turns every
// failure into the one-line message the loader shows the user.
#include <cstdio>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "plugin/ftrain_plugin.h"
#include "vit_config.hpp"
#include "vit_model.hpp"

namespace {

void write_error(ftrain_model_args* args, const char* message) {
  if (args->error != nullptr && args->error_capacity > 0)
    std::snprintf(args->error, args->error_capacity, "%s", message);
}

void* create_model(ftrain_model_args* args) {
  try {
    std::vector<std::pair<std::string, std::string>> overrides;
    for (int i = 0; i < args->n_overrides; ++i) overrides.emplace_back(args->overrides[i].key, args->overrides[i].value);
    const ftrain::vit::VitConfig config = ftrain::vit::make_config(args->preset, overrides);
    ftrain::Model* model = new ftrain::vit::VitModel(config);
    return static_cast<void*>(model);
  } catch (const std::exception& e) {
    write_error(args, e.what());
  } catch (...) {
    write_error(args, "unknown error while creating the vit model");
  }
  return nullptr;
}

void destroy_model(void* model) { delete static_cast<ftrain::Model*>(model); }

const char* const* preset_list() {
  static const std::vector<const char*> list = [] {
    std::vector<const char*> out;
    for (const auto& name : ftrain::vit::preset_names()) out.push_back(name.c_str());
    out.push_back(nullptr);
    return out;
  }();
  return list.data();
}

}  // namespace

extern "C" FTRAIN_PLUGIN_EXPORT const ftrain_plugin_descriptor* ftrain_plugin_entry(void) {
  static const ftrain_plugin_descriptor descriptor = {
      FTRAIN_PLUGIN_ABI_VERSION,
      sizeof(ftrain_plugin_descriptor),
      "vit",
      "Vision Transformer (timm VisionTransformer): patch GEMM, class token, learned positions, pre-norm "
      "LayerNorm blocks, GELU MLP; tiny / ViT-B/16 / L/16 / H/14 presets",
      preset_list(),
      &create_model,
      &destroy_model,
  };
  return &descriptor;
}
