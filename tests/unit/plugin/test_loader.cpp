// Plugin loader: search path, every user-facing error, and a successful load
// with the model keeping its library alive. The test plugins live in
// FTRAIN_TEST_PLUGIN_DIR (see this folder's CMakeLists.txt).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <optional>
#include <string>

#include "base/error.hpp"
#include "ftrain_build_paths.hpp"
#include "plugin/loader.hpp"

using namespace ftrain;

namespace {

const std::string kPluginDir = FTRAIN_TEST_PLUGIN_DIR;

std::string plugin_path(const std::string& name) { return kPluginDir + "/" + plugin_file_name(name); }

// The message of the UserError that `fn` throws (fails the test otherwise).
template <class Fn>
std::string user_error_of(Fn&& fn) {
  try {
    fn();
  } catch (const UserError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected ftrain::UserError, got another exception: " << e.what();
    return {};
  }
  ADD_FAILURE() << "expected ftrain::UserError, nothing was thrown";
  return {};
}

// Restores FTRAIN_PLUGIN_PATH when a test that sets it ends.
class ScopedPluginPath {
 public:
  explicit ScopedPluginPath(const std::string& value) {
    if (const char* old = std::getenv("FTRAIN_PLUGIN_PATH")) old_ = old;
    setenv("FTRAIN_PLUGIN_PATH", value.c_str(), 1);
  }
  ~ScopedPluginPath() {
    if (old_) {
      setenv("FTRAIN_PLUGIN_PATH", old_->c_str(), 1);
    } else {
      unsetenv("FTRAIN_PLUGIN_PATH");
    }
  }

 private:
  std::optional<std::string> old_;
};

}  // namespace

TEST(PluginLoader, FileNameConvention) { EXPECT_EQ(plugin_file_name("llama"), "ftrain_llama.so"); }

TEST(PluginLoader, DefaultSearchPathOrder) {
  ScopedPluginPath env("/first/dir::/second/dir:");
  const auto path = default_plugin_search_path();
  // prefix = libftrain.so's directory minus the libdir components ("lib": one level).
  const std::filesystem::path subdir = FTRAIN_TEST_INSTALL_PLUGIN_SUBDIR;
  std::filesystem::path prefix = std::filesystem::canonical(FTRAIN_TEST_LIBFTRAIN_DIR);
  const auto libdir_components = std::distance(subdir.begin(), subdir.end()) - 2;  // minus "ftrain/plugins"
  for (std::ptrdiff_t i = 0; i < libdir_components; ++i) prefix = prefix.parent_path();
  const std::string install_dir = (prefix / subdir).lexically_normal().string();
  EXPECT_EQ(install_dir.substr(install_dir.size() - 14), "ftrain/plugins");
  ASSERT_EQ(path.size(), 4u) << "empty entries are dropped";
  EXPECT_EQ(path[0], "/first/dir");
  EXPECT_EQ(path[1], "/second/dir");
  EXPECT_EQ(path[2], install_dir) << "the install dir comes from where libftrain.so lives";
  EXPECT_EQ(path[3], FTRAIN_BUILD_PLUGIN_DIR);
}

TEST(PluginLoader, DefaultSearchPathWithoutEnvironment) {
  ScopedPluginPath env("");
  const auto path = default_plugin_search_path();
  ASSERT_EQ(path.size(), 2u);
  EXPECT_EQ(path.back(), FTRAIN_BUILD_PLUGIN_DIR);
}

TEST(PluginLoader, LoadsGoodPluginAndCreatesModel) {
  PluginLoader loader({"/nonexistent/ftrain/plugins", kPluginDir});
  EXPECT_EQ(loader.find("loader_test_good"), plugin_path("loader_test_good"));
  auto library = loader.load("loader_test_good");
  EXPECT_EQ(library->name(), "loader_test_good");
  EXPECT_EQ(library->presets(), (std::vector<std::string>{"small", "large"}));

  ModelHandle model = library->create_model("", {{"width", "3"}, {"depth", "2"}});
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(model->architecture(), "loader_test_good");
  const auto config = model->config();
  EXPECT_EQ(config.at("preset"), "small") << "empty preset = the first (default) preset";
  EXPECT_EQ(config.at("width"), "3");
  EXPECT_EQ(config.at("depth"), "2");
  ASSERT_EQ(model->num_units(), 1);
  EXPECT_EQ(model->unit(0).params().at(0).name, "shift.bias");

  ModelHandle large = loader.create_model("loader_test_good", "large", {});
  EXPECT_EQ(large->config().at("preset"), "large");
}

TEST(PluginLoader, LoadsThroughEnvironmentVariable) {
  ScopedPluginPath env("/nonexistent/a:" + kPluginDir);
  PluginLoader loader;
  ASSERT_GE(loader.search_path().size(), 3u);
  EXPECT_EQ(loader.search_path()[1], kPluginDir);
  ModelHandle model = loader.create_model("loader_test_good", "small", {});
  EXPECT_EQ(model->architecture(), "loader_test_good");
}

TEST(PluginLoader, ModelKeepsLibraryLoaded) {
  ModelHandle model;
  {
    PluginLoader loader({kPluginDir});
    model = loader.load("loader_test_good")->create_model("small", {});
  }
  // Loader and library handle are gone; the model's deleter still holds the
  // library, so the plugin's code (vtable, destroy_model) is still mapped.
  void* probe = dlopen(plugin_path("loader_test_good").c_str(), RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(probe, nullptr) << "plugin was unloaded while a model from it lives";
  dlclose(probe);
  EXPECT_EQ(model->unit(0).name(), "shift");
  model.reset();  // destroy_model runs through the plugin, then the library may go
}

TEST(PluginLoader, NotFoundListsSearchedDirectoriesAndAvailableModels) {
  PluginLoader loader({"/nonexistent/ftrain/plugins", kPluginDir});
  const std::string message = user_error_of([&] { loader.load("lama"); });
  EXPECT_NE(message.find("unknown model 'lama'"), std::string::npos) << message;
  EXPECT_NE(message.find("ftrain_lama.so is in none of the plugin directories searched"), std::string::npos) << message;
  EXPECT_NE(message.find("FTRAIN_PLUGIN_PATH"), std::string::npos) << "says how to add a directory: " << message;
  EXPECT_NE(message.find("/nonexistent/ftrain/plugins"), std::string::npos) << message;
  EXPECT_NE(message.find(kPluginDir), std::string::npos) << message;
  EXPECT_NE(message.find("available models: loader_test_good"), std::string::npos) << message;
  EXPECT_EQ(message.find("loader_test_badabi"), std::string::npos) << "broken plugins are not offered: " << message;
}

TEST(PluginLoader, NotFoundWithNothingAvailable) {
  PluginLoader loader({"/nonexistent/ftrain/plugins"});
  const std::string message = user_error_of([&] { loader.load("llama"); });
  EXPECT_NE(message.find("no models are available"), std::string::npos) << message;
}

TEST(PluginLoader, DlopenFailureCarriesDlerror) {
  PluginLoader loader({kPluginDir});
  const std::string message = user_error_of([&] { loader.load("loader_test_corrupt"); });
  EXPECT_NE(message.find("cannot load model plugin " + plugin_path("loader_test_corrupt")), std::string::npos)
      << message;
  // glibc's dlerror() for a text file: "...: invalid ELF header" or "file too short".
  EXPECT_TRUE(message.find("ELF") != std::string::npos || message.find("too short") != std::string::npos) << message;
}

TEST(PluginLoader, MissingEntrySymbol) {
  PluginLoader loader({kPluginDir});
  const std::string message = user_error_of([&] { loader.load("loader_test_noentry"); });
  EXPECT_NE(message.find("does not export the entry point 'ftrain_plugin_entry'"), std::string::npos) << message;
  EXPECT_NE(message.find(plugin_path("loader_test_noentry")), std::string::npos) << message;
}

TEST(PluginLoader, AbiVersionMismatch) {
  PluginLoader loader({kPluginDir});
  const std::string message = user_error_of([&] { loader.load("loader_test_badabi"); });
  const std::string built_for = "built for plugin ABI version " + std::to_string(FTRAIN_PLUGIN_ABI_VERSION + 1);
  const std::string ours = "this ftrain uses ABI version " + std::to_string(FTRAIN_PLUGIN_ABI_VERSION);
  EXPECT_NE(message.find(built_for), std::string::npos) << message;
  EXPECT_NE(message.find(ours), std::string::npos) << message;
  EXPECT_NE(message.find("rebuild the plugin against this ftrain"), std::string::npos) << message;
}

// ABI 2 (issue 12: ops take an execution context) and later refuse plugins
// built with the ABI 1 SDK, and tell how to rebuild them.
TEST(PluginLoader, Abi1PluginIsRefused) {
  static_assert(FTRAIN_PLUGIN_ABI_VERSION == 8, "update this test when the ABI version moves on");
  PluginLoader loader({kPluginDir});
  const std::string message = user_error_of([&] { loader.load("loader_test_abi1"); });
  EXPECT_NE(message.find(plugin_path("loader_test_abi1")), std::string::npos) << message;
  EXPECT_NE(message.find("built for plugin ABI version 1,"), std::string::npos) << message;
  EXPECT_NE(message.find("this ftrain uses ABI version 8"), std::string::npos) << message;
  EXPECT_NE(message.find("rebuild the plugin against this ftrain"), std::string::npos) << message;
  EXPECT_NE(message.find("find_package(ftrain)"), std::string::npos) << message;
  EXPECT_NE(message.find("share/doc/plugin-sdk.md"), std::string::npos) << message;
}

TEST(PluginLoader, CreateModelFailureCarriesPluginMessage) {
  PluginLoader loader({kPluginDir});
  const std::string message = user_error_of([&] {
    loader.create_model("loader_test_good", "large", {{"fail", "width must be even"}});
  });
  EXPECT_EQ(message, "model 'loader_test_good' (preset 'large'): width must be even");
}

TEST(PluginLoader, UnknownPreset) {
  PluginLoader loader({kPluginDir});
  const std::string message = user_error_of([&] { loader.create_model("loader_test_good", "huge", {}); });
  EXPECT_NE(message.find("no preset 'huge'"), std::string::npos) << message;
  EXPECT_NE(message.find("small, large"), std::string::npos) << message;
}

TEST(PluginLoader, ListPlugins) {
  PluginLoader loader({"/nonexistent/ftrain/plugins", kPluginDir, kPluginDir});
  const auto plugins = loader.list_plugins();
  std::vector<std::string> names;
  for (const auto& p : plugins) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"loader_test_abi1", "loader_test_badabi", "loader_test_corrupt", "loader_test_good",
                                             "loader_test_noentry"}))
      << "sorted, each name once even though the directory is listed twice";
  for (const auto& p : plugins) {
    EXPECT_EQ(p.path, plugin_path(p.name));
    if (p.name == "loader_test_good") {
      EXPECT_TRUE(p.error.empty()) << p.error;
      EXPECT_EQ(p.description, "a loader test plugin");
      EXPECT_EQ(p.presets, (std::vector<std::string>{"small", "large"}));
    } else {
      EXPECT_FALSE(p.error.empty()) << p.name << " is broken and must say why";
    }
  }
}
