// The deck's `device auto|host|cuda`, decided first thing in
// Trainer::prepare(): before the model loads, so `device cuda` on a machine
// without a usable GPU stops with the cause and nothing else happened.
//
// The probe asks the backend registry for a CUDA table, which loads
// libftrain_cuda.so when it is there; the library's registration answers
// whether a GPU is usable and, if not, why (no driver, no device, driver too
// old); without the library the answer is that this ftrain has none.
// `cuda` with a usable GPU runs the FSDP engine on the CUDA backend (ops it
// has no kernel for throw naming the op); `auto` stays on the host until the
// CUDA backend has trained on a multi-GPU node (decisions.md), and says so. FTRAIN_CUDA_BACKEND naming a
// library skips the driver probe: that library's registration decides (the
// test-only simulated device, tests/support/sim_device_backend.cpp).
#pragma once

#include <functional>
#include <string>

#include "deck/config.hpp"
#include "base/device.hpp"

namespace ftrain {

struct DeviceChoice {
  Device device = Device::host;
  std::string reason;  // for the run header: "auto: no usable CUDA GPU (...)"
  // `ftrain --check` of a `device cuda` deck where no GPU is usable (a login
  // node): the plan is made for the GPU the deck names; nothing that needs
  // one (the backend, its kernels, NCCL) was tried.
  bool planned_without_gpu = false;
};

// "" when a CUDA GPU is usable, else why not.
using CudaProbe = std::function<std::string()>;
struct CudaProbes {
  // Cheap: the driver alone (dlopen libcuda.so.1, cuInit, cuDeviceGetCount),
  // for `auto`, which every run asks: loading the backend (and cuBLASLt with
  // it) costs ~100 MiB of resident memory that a host run must not pay.
  CudaProbe driver;
  // Complete: loads libftrain_cuda.so and lets it register, for `cuda`.
  CudaProbe backend;
};
std::string probe_cuda_driver();
std::string probe_cuda_backend();
inline CudaProbes real_cuda_probes() { return {&probe_cuda_driver, &probe_cuda_backend}; }

// Throws UserError naming the deck line for `device cuda` that cannot run.
DeviceChoice choose_device(deck::DeviceKind requested, const DeckLocation& where, const CudaProbes& probes);

// For `ftrain --check`: as choose_device, except that `device cuda` without a
// usable GPU plans for the GPU (planned_without_gpu, the reason saying why
// none is usable here) instead of stopping: checking on a login node is the
// documented first step. A real run still calls choose_device.
DeviceChoice choose_device_for_check(deck::DeviceKind requested, const DeckLocation& where, const CudaProbes& probes);

// What `--check` could not check when planned_without_gpu (for the report).
std::string unchecked_without_gpu();

}  // namespace ftrain
