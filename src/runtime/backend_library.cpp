#include "runtime/backend_library.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "base/error.hpp"
#include "runtime/ftrain_backend.h"

namespace ftrain {

namespace {
constexpr const char* kCudaLibrary = "libftrain_cuda.so";

// Why the library beside libftrain.so did not register (empty if it did or
// was not there): kept for messages, since its absence of a GPU is not an
// error until a CUDA device is actually asked for.
std::string& default_library_refusal() {
  static std::string reason;
  return reason;
}

std::string default_library_path() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&load_backend_library), &info) == 0 || info.dli_fname == nullptr) return {};
  std::error_code ec;
  std::filesystem::path self = std::filesystem::canonical(info.dli_fname, ec);
  if (ec) self = info.dli_fname;
  return (self.parent_path() / kCudaLibrary).string();
}
}  // namespace

void load_backend_library(const std::string& path) {
  dlerror();
  // RTLD_GLOBAL: the backend's symbols (its kernels, its registration) stay
  // resolvable for the process; it is never unloaded.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    FT_THROW() << "cannot load ops backend " << path << ": " << (why != nullptr ? why : "unknown dlopen error");
  }
  void* symbol = dlsym(handle, FTRAIN_BACKEND_ENTRY_SYMBOL);
  FT_CHECK(symbol != nullptr) << "ops backend " << path << " does not export '" FTRAIN_BACKEND_ENTRY_SYMBOL "'";
  const auto* descriptor = reinterpret_cast<ftrain_backend_entry_fn>(symbol)();
  FT_CHECK(descriptor != nullptr) << "ops backend " << path << ": " FTRAIN_BACKEND_ENTRY_SYMBOL "() returned no descriptor";
  if (descriptor->abi_version != FTRAIN_BACKEND_ABI_VERSION) {
    FT_THROW() << "ops backend " << path << " was built for backend ABI version " << descriptor->abi_version
               << ", but this ftrain uses version " << FTRAIN_BACKEND_ABI_VERSION
               << "; rebuild the backend against this ftrain";
  }
  FT_CHECK(descriptor->register_all != nullptr) << "ops backend " << path << " has no register_all";
  if (const char* refused = descriptor->register_all()) {
    FT_THROW() << "ops backend " << path << " (" << (descriptor->name ? descriptor->name : "?")
               << ") did not register: " << refused;
  }
}

void load_optional_backend_libraries() {
  // Re-entrant per thread: a backend's registration may ask for its own
  // device's allocator; that inner call must not wait for itself.
  static std::recursive_mutex mutex;
  static bool attempted = false;
  std::lock_guard<std::recursive_mutex> lock(mutex);
  if (attempted) return;
  attempted = true;
  if (const char* explicit_path = std::getenv("FTRAIN_CUDA_BACKEND"); explicit_path != nullptr && *explicit_path) {
    if (std::string(explicit_path) == "none") return;  // host only, even where a GPU and the library are
    load_backend_library(explicit_path);
    return;
  }
  const std::string path = default_library_path();
  std::error_code ec;
  if (path.empty() || !std::filesystem::is_regular_file(path, ec)) return;
  try {
    load_backend_library(path);
  } catch (const Error& e) {
    // Found but unusable here (no GPU, no driver): a host-only process.
    default_library_refusal() = e.what();
  }
}

std::string describe_backend_search() {
  const char* explicit_path = std::getenv("FTRAIN_CUDA_BACKEND");
  std::string out = "FTRAIN_CUDA_BACKEND is ";
  out += (explicit_path != nullptr && *explicit_path) ? std::string("'") + explicit_path + "'" : std::string("unset");
  out += "; looked for " + default_library_path();
  if (!default_library_refusal().empty()) out += ", which was found but did not load: " + default_library_refusal();
  return out;
}

}  // namespace ftrain
