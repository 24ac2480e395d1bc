#include "train/device_choice.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <string>

#include "base/error.hpp"
#include "kernels/backend_registry.hpp"
#include "runtime/backend_library.hpp"

namespace ftrain {

namespace {
constexpr const char* kAutoStaysOnHost =
    "`auto` stays on the host until the CUDA backend has trained on a multi-GPU node (it has run on one GPU; "
    "NCCL inside the engine has not run on a GPU: share/doc/status.md, decisions.md); `device cuda` runs the "
    "engine on it";

// FTRAIN_CUDA_BACKEND naming a library: that library's registration decides
// whether a device is usable (the real one probes the GPU itself; the
// test-only simulated device needs no driver).
bool backend_named_explicitly() {
  const char* named = std::getenv("FTRAIN_CUDA_BACKEND");
  return named != nullptr && *named != '\0' && std::string(named) != "none";
}
}  // namespace

std::string probe_cuda_driver() {
  dlerror();
  // Kept loaded when present: the driver is process-wide and a CUDA run
  // needs it anyway.
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (driver == nullptr) {
    const char* why = dlerror();
    return std::string("no NVIDIA driver: ") + (why != nullptr ? why : "libcuda.so.1 cannot be loaded");
  }
  using Init = int (*)(unsigned int);
  using DeviceCount = int (*)(int*);
  auto init = reinterpret_cast<Init>(dlsym(driver, "cuInit"));
  auto device_count = reinterpret_cast<DeviceCount>(dlsym(driver, "cuDeviceGetCount"));
  if (init == nullptr || device_count == nullptr) return "libcuda.so.1 has no cuInit/cuDeviceGetCount";
  if (const int status = init(0); status != 0)
    return "cuInit failed with CUresult " + std::to_string(status) + " (100 = no device, 35 = driver too old)";
  int count = 0;
  if (const int status = device_count(&count); status != 0)
    return "cuDeviceGetCount failed with CUresult " + std::to_string(status);
  if (count == 0) return "the driver sees no CUDA device (CUDA_VISIBLE_DEVICES?)";
  return {};
}

std::string probe_cuda_backend() {
  try {
    if (find_backend(Device::cuda) != nullptr) return {};
  } catch (const Error& e) {
    return e.what();  // FTRAIN_CUDA_BACKEND named a library that did not load
  }
  return "no CUDA backend could be loaded: " + describe_backend_search();
}

DeviceChoice choose_device(deck::DeviceKind requested, const DeckLocation& where, const CudaProbes& probes) {
  const std::string at = where.line > 0 ? where.str() + ": " : std::string("deck: ");
  switch (requested) {
    case deck::DeviceKind::host: return {Device::host, "device host"};
    case deck::DeviceKind::cuda: {
      std::string why_not = backend_named_explicitly() ? std::string() : probes.driver();
      if (why_not.empty()) why_not = probes.backend();
      if (!why_not.empty()) FT_USER_ERROR() << at << "device cuda: no usable CUDA GPU: " << why_not;
      return {Device::cuda, "device cuda"};
    }
    case deck::DeviceKind::automatic: {
      const std::string why_not = probes.driver();
      if (!why_not.empty()) return {Device::host, "auto: no usable CUDA GPU (" + why_not + ")"};
      return {Device::host, std::string("auto: a CUDA GPU is usable, but ") + kAutoStaysOnHost};
    }
  }
  FT_THROW() << "unhandled deck device " << static_cast<int>(requested);
  return {};
}

DeviceChoice choose_device_for_check(deck::DeviceKind requested, const DeckLocation& where, const CudaProbes& probes) {
  if (requested != deck::DeviceKind::cuda) return choose_device(requested, where, probes);
  try {
    return choose_device(requested, where, probes);
  } catch (const UserError& e) {
    // "run.in:12: device cuda: no usable CUDA GPU: <why>": the cause is kept for the header.
    std::string why = e.what();
    const std::string head = "no usable CUDA GPU: ";
    if (const auto at = why.find(head); at != std::string::npos) why = why.substr(at + head.size());
    DeviceChoice planned{Device::cuda, "device cuda, planned: no usable CUDA GPU here (" + why + ")"};
    planned.planned_without_gpu = true;
    return planned;
  }
}

std::string unchecked_without_gpu() {
  return "not checked without a GPU: that libftrain_cuda.so loads and finds the driver and a device; the kernels' "
         "plans (cuBLASLt GEMMs, cuDNN attention), chosen at the first step; NCCL's start-up and transport "
         "(device_comm nccl); each rank's GPU binding (node-local rank, CUDA_VISIBLE_DEVICES); device memory as "
         "measured (the fit is a plan). A real run meets each of these before its first step ends";
}

}  // namespace ftrain
