// Helpers for a plugin's C entry point (plugin/ftrain_plugin.h), so that
// every plugin gets the boundary rules right the same way:
//  * nothing crosses the C boundary as an exception: create_model turns any
//    failure into the one-line message the loader shows the user;
//  * the preset list is a NULL-terminated array that outlives the call.
//
// Usage in a plugin (see plugins/llama/llama_plugin.cpp):
//   void* create_model(ftrain_model_args* args) {
//     return ftrain::plugin_entry::create_guarded(args, "llama", [](const auto& preset, const auto& overrides) {
//       return std::make_unique<LlamaModel>(make_config(preset, overrides));
//     });
//   }
#pragma once

#include <cstdio>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/error.hpp"
#include "plugin/ftrain_plugin.h"
#include "plugin/model.hpp"

namespace ftrain::plugin_entry {

using Overrides = std::vector<std::pair<std::string, std::string>>;

inline void write_error(char* error, std::size_t capacity, const char* message) {
  if (error != nullptr && capacity > 0) std::snprintf(error, capacity, "%s", message);
}
inline void write_error(ftrain_model_args* args, const char* message) {
  write_error(args->error, args->error_capacity, message);
}

// produce() -> std::optional<std::string>: 1 with the text written, 0 for
// nullopt, -1 with the message of whatever it threw.
template <class Produce>
int guarded_text(ftrain_hf_config_args* args, const char* plugin_name, Produce&& produce) {
  try {
    const std::optional<std::string> text = produce();
    if (!text) return 0;
    args->write(args->sink, text->c_str());
    return 1;
  } catch (const std::exception& e) {
    write_error(args->error, args->error_capacity, e.what());
  } catch (...) {
    const std::string message = std::string("unknown error in the ") + plugin_name + " config conversion";
    write_error(args->error, args->error_capacity, message.c_str());
  }
  return -1;
}

// make(preset, overrides) -> std::unique_ptr<Derived of ftrain::Model>.
template <class Make>
void* create_guarded(ftrain_model_args* args, const char* plugin_name, Make&& make) {
  try {
    Overrides overrides;
    for (int i = 0; i < args->n_overrides; ++i) overrides.emplace_back(args->overrides[i].key, args->overrides[i].value);
    std::unique_ptr<Model> model = make(std::string(args->preset), overrides);
    return static_cast<void*>(model.release());  // the loader receives a ftrain::Model*
  } catch (const std::exception& e) {
    write_error(args, e.what());
  } catch (...) {
    const std::string message = std::string("unknown error while creating the ") + plugin_name + " model";
    write_error(args, message.c_str());
  }
  return nullptr;
}

inline void destroy(void* model) { delete static_cast<Model*>(model); }

// The Hugging Face config.json conversion (ftrain_plugin.h, ABI 4), with
// the same boundary rule as create_guarded.
// make(config, torch_dtype) -> std::string, the config.json text; `config`
// is the model's configuration as the consolidated file stores it.
using ConfigMap = std::map<std::string, std::string>;
template <class Make>
int export_hf_config_guarded(ftrain_hf_config_args* args, const char* plugin_name, Make&& make) {
  return guarded_text(args, plugin_name, [&]() -> std::optional<std::string> {
    ConfigMap config;
    for (int i = 0; i < args->n_config; ++i) config[args->config[i].key] = args->config[i].value;
    return make(config, std::string(args->torch_dtype != nullptr ? args->torch_dtype : ""));
  });
}
// read(json_text, source) -> std::optional<std::string>, the deck's model
// line; nullopt when the config is not one of this plugin's models.
template <class Read>
int import_hf_config_guarded(ftrain_hf_config_args* args, const char* plugin_name, Read&& read) {
  return guarded_text(args, plugin_name, [&]() -> std::optional<std::string> {
    return read(std::string(args->json != nullptr ? args->json : ""),
                std::string(args->source != nullptr ? args->source : "config.json"));
  });
}

// A plugin's preset table: name -> function building the configuration.
template <class Config>
struct Preset {
  const char* name;
  Config (*make)();
};

template <class Config>
std::vector<std::string> preset_names(const std::vector<Preset<Config>>& presets) {
  std::vector<std::string> names;
  for (const auto& p : presets) names.emplace_back(p.name);
  return names;
}

// The configuration of preset `name`, or a UserError listing the presets.
template <class Config>
Config make_preset(const std::vector<Preset<Config>>& presets, const std::string& name, const char* plugin_name) {
  for (const auto& p : presets)
    if (name == p.name) return p.make();
  std::string known;
  for (const auto& p : presets) known += (known.empty() ? "" : ", ") + std::string(p.name);
  FT_USER_ERROR() << "unknown " << plugin_name << " preset '" << name << "'; presets are: " << known;
}

// A NULL-terminated view of `names`, which must outlive it (a static).
inline std::vector<const char*> c_string_list(const std::vector<std::string>& names) {
  std::vector<const char*> out;
  for (const auto& n : names) out.push_back(n.c_str());
  out.push_back(nullptr);
  return out;
}

}  // namespace ftrain::plugin_entry
