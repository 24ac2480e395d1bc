#include "train/device_choice.hpp"

#include "core/error.hpp"
#include "kernels/backend_registry.hpp"
#include "runtime/backend_library.hpp"

namespace ftrain {

namespace {
constexpr const char* kEngineNotOnCuda =
    "the training engine does not run on the CUDA backend yet (its kernels are built and checked without a GPU; "
    "share/doc/status.md lists what a GPU run must confirm)";
}

std::string probe_cuda() {
  try {
    if (find_backend(Device::cuda) != nullptr) return {};
  } catch (const Error& e) {
    return e.what();  // FTRAIN_CUDA_BACKEND named a library that did not load
  }
  return "no CUDA backend could be loaded: " + describe_backend_search();
}

DeviceChoice choose_device(const std::string& requested, const DeckLocation& where, const CudaProbe& probe) {
  const std::string at = where.line > 0 ? where.str() + ": " : std::string("deck: ");
  if (requested == "host") return {Device::host, "device host"};
  if (requested == "cuda") {
    const std::string why_not = probe();
    if (!why_not.empty()) FT_USER_ERROR() << at << "device cuda: no usable CUDA GPU: " << why_not;
    FT_USER_ERROR() << at << "device cuda: a CUDA GPU is usable, but " << kEngineNotOnCuda
                    << "; use `device host` or `device auto`";
  }
  if (requested == "auto") {
    const std::string why_not = probe();
    if (!why_not.empty()) return {Device::host, "auto: no usable CUDA GPU (" + why_not + ")"};
    return {Device::host, std::string("auto: a CUDA GPU is usable, but ") + kEngineNotOnCuda};
  }
  FT_USER_ERROR() << at << "device '" << requested << "': expected auto, host or cuda";
  return {};
}

}  // namespace ftrain
