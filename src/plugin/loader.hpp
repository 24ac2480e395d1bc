// The plugin loader: finds ftrain_<name>.so on a search path, dlopens it,
// validates its descriptor and turns create_model/destroy_model into a RAII
// handle.
//
// Search path, first match wins:
//   1. FTRAIN_PLUGIN_PATH (colon-separated, like PATH);
//   2. <install prefix>/<libdir>/ftrain/plugins, where the prefix is found
//      from the running libftrain.so (dladdr): prefix = dirname(dirname(lib))
//      for libdir "lib" (one more level for a multiarch libdir);
//   3. the build tree's plugin directory (FTRAIN_BUILD_PLUGIN_DIR), so that
//      an uninstalled build runs without any setup.
//
// Lifetime: a ModelHandle keeps its plugin library loaded (shared ownership
// of the dlopen handle) until the model is destroyed, so code from the
// plugin can never be unmapped under a live model. Every failure a user can
// cause (missing plugin, broken library, ABI mismatch, bad preset or
// hyperparameter) throws ftrain::UserError with a complete message.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "plugin/ftrain_plugin.h"
#include "plugin/model.hpp"

namespace ftrain {

class PluginLibrary;

// Destroys a model through the plugin that created it, then lets go of the
// library (dlclose happens once the last model and handle are gone).
struct ModelDeleter {
  std::shared_ptr<const PluginLibrary> library;
  void operator()(Model* model) const;
};
using ModelHandle = std::unique_ptr<Model, ModelDeleter>;

using ModelOverrides = std::vector<std::pair<std::string, std::string>>;

// One loaded, validated plugin library. Obtain through PluginLoader or
// PluginLibrary::open; always held by shared_ptr.
class PluginLibrary : public std::enable_shared_from_this<PluginLibrary> {
 public:
  // dlopen(RTLD_NOW | RTLD_LOCAL) + descriptor checks; throws UserError.
  static std::shared_ptr<const PluginLibrary> open(const std::string& path);
  ~PluginLibrary();
  PluginLibrary(const PluginLibrary&) = delete;
  PluginLibrary& operator=(const PluginLibrary&) = delete;

  const std::string& path() const { return path_; }
  const ftrain_plugin_descriptor& descriptor() const { return *descriptor_; }
  std::string name() const { return descriptor_->name; }
  std::vector<std::string> presets() const;

  // preset empty = the plugin's default (its first preset). Throws UserError
  // for an unknown preset or when the plugin refuses the hyperparameters.
  ModelHandle create_model(const std::string& preset, const ModelOverrides& overrides) const;

  // Hugging Face config.json conversion (ftrain_plugin.h export_hf_config /
  // import_hf_config). export: the config.json text for the model's
  // configuration as the consolidated file stores it; nullopt when the
  // plugin offers none. import: the deck's `model ...` line for a
  // config.json text; nullopt when the plugin offers none or the config is
  // not one of its models. Both throw UserError with the plugin's message.
  std::optional<std::string> export_hf_config(const std::map<std::string, std::string>& config,
                                              const std::string& torch_dtype) const;
  std::optional<std::string> import_hf_config(const std::string& json_text, const std::string& source) const;

 private:
  PluginLibrary(std::string path, void* handle, const ftrain_plugin_descriptor* descriptor);
  std::string path_;
  void* handle_ = nullptr;
  const ftrain_plugin_descriptor* descriptor_ = nullptr;
};

// What --list-models prints for one plugin file.
struct PluginInfo {
  std::string name;
  std::string description;
  std::vector<std::string> presets;
  std::string path;
  std::string error;  // non-empty: the file is there but cannot be used (and why)
};

// "ftrain_<name>.so"
std::string plugin_file_name(std::string_view name);

// The default search path described above, duplicates and empty entries
// removed, in search order.
std::vector<std::string> default_plugin_search_path();

class PluginLoader {
 public:
  // Searches default_plugin_search_path().
  PluginLoader();
  // Searches exactly these directories, in order.
  explicit PluginLoader(std::vector<std::string> search_path);

  const std::vector<std::string>& search_path() const { return search_path_; }

  // Full path of ftrain_<name>.so in the first directory that has it.
  std::optional<std::string> find(std::string_view name) const;
  // Finds and opens the plugin; throws UserError naming every directory
  // searched and the models that are available.
  std::shared_ptr<const PluginLibrary> load(std::string_view name) const;
  // load(name)->create_model(preset, overrides).
  ModelHandle create_model(std::string_view name, const std::string& preset, const ModelOverrides& overrides) const;
  // Every ftrain_*.so on the search path; a name shadowed by an earlier
  // directory is listed once (the one load() would pick). Sorted by name.
  std::vector<PluginInfo> list_plugins() const;

 private:
  std::vector<std::string> search_path_;
};

}  // namespace ftrain
