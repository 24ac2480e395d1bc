// Plugin discovery and loading; see loader.hpp for the search order and the
// lifetime rules.
#include "plugin/loader.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <map>
#include <sstream>
#include <system_error>

#include "base/error.hpp"
#include "ftrain_build_paths.hpp"

namespace ftrain {

namespace {

constexpr std::string_view kFilePrefix = "ftrain_";
constexpr std::string_view kFileSuffix = ".so";

std::string join(const std::vector<std::string>& items, std::string_view separator) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += separator;
    out += items[i];
  }
  return out;
}

std::vector<std::string> split_path_list(const char* text) {
  std::vector<std::string> out;
  if (text == nullptr) return out;
  std::string_view rest(text);
  while (true) {
    const std::size_t colon = rest.find(':');
    std::string_view item = rest.substr(0, colon);
    if (!item.empty()) out.emplace_back(item);
    if (colon == std::string_view::npos) break;
    rest.remove_prefix(colon + 1);
  }
  return out;
}

// The directory holding the library (or executable) this function lives in:
// libftrain.so normally, the test executable when linked statically.
std::optional<std::filesystem::path> this_library_path() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&default_plugin_search_path), &info) == 0 || info.dli_fname == nullptr) {
    return std::nullopt;
  }
  std::error_code ec;
  std::filesystem::path path = std::filesystem::canonical(info.dli_fname, ec);
  if (ec) path = info.dli_fname;
  return path;
}

// "ftrain_llama.so" -> "llama"; empty if the file is not a plugin name.
std::string plugin_name_from_file(const std::string& file) {
  if (file.size() <= kFilePrefix.size() + kFileSuffix.size()) return {};
  if (file.compare(0, kFilePrefix.size(), kFilePrefix) != 0) return {};
  if (file.compare(file.size() - kFileSuffix.size(), kFileSuffix.size(), kFileSuffix) != 0) return {};
  return file.substr(kFilePrefix.size(), file.size() - kFilePrefix.size() - kFileSuffix.size());
}

std::string available_models_sentence(const std::vector<PluginInfo>& plugins) {
  std::vector<std::string> names;
  for (const auto& p : plugins) {
    if (p.error.empty()) names.push_back(p.name);
  }
  if (names.empty()) return "no models are available there";
  return "available models: " + join(names, ", ");
}

}  // namespace

// ---- PluginLibrary ------------------------------------------------------------

PluginLibrary::PluginLibrary(std::string path, void* handle, const ftrain_plugin_descriptor* descriptor)
    : path_(std::move(path)), handle_(handle), descriptor_(descriptor) {}

PluginLibrary::~PluginLibrary() {
  if (handle_ != nullptr) dlclose(handle_);
}

std::shared_ptr<const PluginLibrary> PluginLibrary::open(const std::string& path) {
  dlerror();  // clear any stale message so the one we report is ours
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    FT_USER_ERROR() << "cannot load model plugin " << path << ": " << (why != nullptr ? why : "unknown dlopen error");
  }
  // From here on the handle must be closed on every error path.
  struct Closer {
    void* handle;
    ~Closer() {
      if (handle != nullptr) dlclose(handle);
    }
  } closer{handle};

  dlerror();
  void* symbol = dlsym(handle, FTRAIN_PLUGIN_ENTRY_SYMBOL);
  if (symbol == nullptr) {
    const char* why = dlerror();
    FT_USER_ERROR() << "model plugin " << path << " does not export the entry point '" FTRAIN_PLUGIN_ENTRY_SYMBOL
                    << "' (" << (why != nullptr ? why : "symbol is null")
                    << "); build it with ftrain_add_plugin() from FtrainPlugin.cmake";
  }
  auto entry = reinterpret_cast<ftrain_plugin_entry_fn>(symbol);
  const ftrain_plugin_descriptor* descriptor = entry();
  if (descriptor == nullptr) {
    FT_USER_ERROR() << "model plugin " << path << ": " FTRAIN_PLUGIN_ENTRY_SYMBOL "() returned no descriptor";
  }
  // The version is the first field of every descriptor layout, so it can be
  // read before anything else is trusted.
  if (descriptor->abi_version != FTRAIN_PLUGIN_ABI_VERSION) {
    FT_USER_ERROR() << "model plugin " << path << " was built for plugin ABI version " << descriptor->abi_version
                    << ", but this ftrain uses ABI version " << FTRAIN_PLUGIN_ABI_VERSION
                    << "; rebuild the plugin against this ftrain: configure its CMake project with "
                       "-DCMAKE_PREFIX_PATH=<this ftrain's install prefix> (find_package(ftrain) + "
                       "ftrain_add_plugin) and build it again (share/doc/plugin-sdk.md, section 3)";
  }
  if (descriptor->struct_size != sizeof(ftrain_plugin_descriptor)) {
    FT_USER_ERROR() << "model plugin " << path << " has a descriptor of " << descriptor->struct_size
                    << " bytes, but ABI version " << FTRAIN_PLUGIN_ABI_VERSION << " expects "
                    << sizeof(ftrain_plugin_descriptor) << "; rebuild the plugin against this ftrain";
  }
  if (descriptor->name == nullptr || descriptor->create_model == nullptr || descriptor->destroy_model == nullptr ||
      descriptor->presets == nullptr || descriptor->presets[0] == nullptr) {
    FT_USER_ERROR() << "model plugin " << path
                    << " has an incomplete descriptor (name, presets, create_model and destroy_model are required)";
  }
  closer.handle = nullptr;
  return std::shared_ptr<const PluginLibrary>(new PluginLibrary(path, handle, descriptor));
}

std::vector<std::string> PluginLibrary::presets() const {
  std::vector<std::string> out;
  for (const char* const* p = descriptor_->presets; *p != nullptr; ++p) out.emplace_back(*p);
  return out;
}

ModelHandle PluginLibrary::create_model(const std::string& preset, const ModelOverrides& overrides) const {
  const std::vector<std::string> known = presets();
  const std::string chosen = preset.empty() ? known.front() : preset;
  if (std::find(known.begin(), known.end(), chosen) == known.end()) {
    FT_USER_ERROR() << "model '" << name() << "' has no preset '" << chosen
                    << "'; its presets are: " << join(known, ", ");
  }

  std::vector<ftrain_kv> kvs;
  kvs.reserve(overrides.size());
  for (const auto& [key, value] : overrides) kvs.push_back(ftrain_kv{key.c_str(), value.c_str()});
  std::vector<char> error(1024, '\0');
  ftrain_model_args args{};
  args.preset = chosen.c_str();
  args.overrides = kvs.empty() ? nullptr : kvs.data();
  args.n_overrides = static_cast<int>(kvs.size());
  args.error = error.data();
  args.error_capacity = error.size();

  void* model = descriptor_->create_model(&args);
  if (model == nullptr) {
    error.back() = '\0';  // a plugin that fills the buffer completely must not make us read past it
    const std::string message = error[0] != '\0' ? std::string(error.data()) : std::string("no reason given");
    FT_USER_ERROR() << "model '" << name() << "' (preset '" << chosen << "'): " << message;
  }
  return ModelHandle(static_cast<Model*>(model), ModelDeleter{shared_from_this()});
}

namespace {

// Calls one of the descriptor's config conversions, collecting the text it
// writes; nullopt when it answers 0 (not this plugin's).
std::optional<std::string> call_conversion(const PluginLibrary& plugin, int (*convert)(ftrain_hf_config_args*),
                                           ftrain_hf_config_args& args, const char* what) {
  std::string text;
  std::vector<char> error(1024, '\0');
  args.sink = &text;
  args.write = [](void* sink, const char* t) { *static_cast<std::string*>(sink) = t != nullptr ? t : ""; };
  args.error = error.data();
  args.error_capacity = error.size();
  const int status = convert(&args);
  if (status == 0) return std::nullopt;
  if (status != 1) {
    error.back() = '\0';  // a plugin that fills the buffer completely must not make us read past it
    const std::string message = error[0] != '\0' ? std::string(error.data()) : std::string("no reason given");
    FT_USER_ERROR() << "model '" << plugin.name() << "' " << what << ": " << message;
  }
  return text;
}

}  // namespace

std::optional<std::string> PluginLibrary::export_hf_config(const std::map<std::string, std::string>& config,
                                                           const std::string& torch_dtype) const {
  if (descriptor_->export_hf_config == nullptr) return std::nullopt;
  std::vector<ftrain_kv> kvs;
  for (const auto& [key, value] : config) kvs.push_back(ftrain_kv{key.c_str(), value.c_str()});
  ftrain_hf_config_args args{};
  args.config = kvs.empty() ? nullptr : kvs.data();
  args.n_config = static_cast<int>(kvs.size());
  args.torch_dtype = torch_dtype.c_str();
  return call_conversion(*this, descriptor_->export_hf_config, args, "config.json export");
}

std::optional<std::string> PluginLibrary::import_hf_config(const std::string& json_text,
                                                           const std::string& source) const {
  if (descriptor_->import_hf_config == nullptr) return std::nullopt;
  ftrain_hf_config_args args{};
  args.json = json_text.c_str();
  args.source = source.c_str();
  return call_conversion(*this, descriptor_->import_hf_config, args, "config.json import");
}

void ModelDeleter::operator()(Model* model) const {
  if (model != nullptr && library != nullptr) library->descriptor().destroy_model(model);
}

// ---- search path ----------------------------------------------------------------

std::string plugin_file_name(std::string_view name) {
  return std::string(kFilePrefix) + std::string(name) + std::string(kFileSuffix);
}

std::vector<std::string> default_plugin_search_path() {
  std::vector<std::string> dirs = split_path_list(std::getenv("FTRAIN_PLUGIN_PATH"));
  if (auto lib = this_library_path()) {
    // libftrain.so sits in <prefix>/<libdir>; <libdir> is "lib" (prefix =
    // dirname(dirname(lib))) or a multiarch "lib/x86_64-linux-gnu", so strip
    // as many components as the libdir part of the plugin subdir has.
    const std::filesystem::path subdir(FTRAIN_INSTALL_PLUGIN_SUBDIR);  // <libdir>/ftrain/plugins
    std::filesystem::path prefix = lib->parent_path();
    const auto components = std::distance(subdir.begin(), subdir.end());
    for (std::ptrdiff_t i = 0; i + 2 < components; ++i) prefix = prefix.parent_path();
    dirs.push_back((prefix / subdir).lexically_normal().string());
  }
  dirs.emplace_back(FTRAIN_BUILD_PLUGIN_DIR);

  std::vector<std::string> unique;
  for (auto& d : dirs) {
    if (std::find(unique.begin(), unique.end(), d) == unique.end()) unique.push_back(std::move(d));
  }
  return unique;
}

// ---- PluginLoader ----------------------------------------------------------------

PluginLoader::PluginLoader() : search_path_(default_plugin_search_path()) {}

PluginLoader::PluginLoader(std::vector<std::string> search_path) : search_path_(std::move(search_path)) {}

std::optional<std::string> PluginLoader::find(std::string_view name) const {
  const std::string file = plugin_file_name(name);
  for (const auto& dir : search_path_) {
    std::error_code ec;
    const std::filesystem::path candidate = std::filesystem::path(dir) / file;
    if (std::filesystem::is_regular_file(candidate, ec)) return candidate.string();
  }
  return std::nullopt;
}

std::shared_ptr<const PluginLibrary> PluginLoader::load(std::string_view name) const {
  const auto path = find(name);
  if (!path) {
    std::ostringstream searched;
    for (const auto& dir : search_path_) searched << "\n  " << dir;
    FT_USER_ERROR() << "unknown model '" << name << "': " << plugin_file_name(name)
                    << " is in none of the plugin directories searched:" << searched.str() << "\n"
                    << available_models_sentence(list_plugins())
                    << " (FTRAIN_PLUGIN_PATH, colon-separated, adds directories in front)";
  }
  auto library = PluginLibrary::open(*path);
  if (library->name() != name) {
    FT_USER_ERROR() << "model plugin " << *path << " calls itself '" << library->name() << "', but its file name says '"
                    << name << "'; rename the file to " << plugin_file_name(library->name());
  }
  return library;
}

ModelHandle PluginLoader::create_model(std::string_view name, const std::string& preset,
                                       const ModelOverrides& overrides) const {
  return load(name)->create_model(preset, overrides);
}

std::vector<PluginInfo> PluginLoader::list_plugins() const {
  std::map<std::string, PluginInfo> by_name;  // first directory wins, as in find()
  for (const auto& dir : search_path_) {
    std::error_code ec;
    std::filesystem::directory_iterator it(dir, ec);
    if (ec) continue;  // a missing directory on the path is normal
    std::vector<std::filesystem::path> files;
    for (const auto& entry : it) {
      std::error_code entry_ec;
      if (entry.is_regular_file(entry_ec)) files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& file : files) {
      const std::string name = plugin_name_from_file(file.filename().string());
      if (name.empty() || by_name.count(name) != 0) continue;
      PluginInfo info;
      info.name = name;
      info.path = file.string();
      try {
        auto library = PluginLibrary::open(info.path);
        info.description = library->descriptor().description != nullptr ? library->descriptor().description : "";
        info.presets = library->presets();
        if (library->name() != name) {
          info.error = "the plugin calls itself '" + library->name() + "'";
        }
      } catch (const UserError& e) {
        info.error = e.what();
      }
      by_name.emplace(name, std::move(info));
    }
  }
  std::vector<PluginInfo> out;
  out.reserve(by_name.size());
  for (auto& [name, info] : by_name) out.push_back(std::move(info));
  return out;
}

}  // namespace ftrain
