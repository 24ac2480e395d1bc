// Communicators for device (GPU) buffers, and binding a rank to its GPU.
//
// libftrain never links CUDA or NCCL (share/doc/decisions.md, "NCCL lives in
// the CUDA backend library"): the NCCL communicator is compiled into
// libftrain_cuda.so (src/comm/nccl/) and registered here by the backend's
// entry point, the way its allocator, streams and op table are
// (runtime/ftrain_backend.h). What stays in libftrain is everything that
// can be tested without a GPU: the rank -> GPU rule (comm/gpu_assignment.hpp),
// gathering what it needs over Communicator::split_node(), and the staged
// communicator that `device_comm mpi` selects (comm/staged_communicator.hpp).
#pragma once

#include <mpi.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/gpu_assignment.hpp"
#include "base/device.hpp"

namespace ftrain {

class ExecutionContext;

// What a device backend registers for multi-rank runs (libftrain_cuda: CUDA + NCCL).
struct DeviceCommBackend {
  const char* name;            // "nccl"
  int (*device_count)();       // devices this rank sees (cudaGetDeviceCount; honours CUDA_VISIBLE_DEVICES)
  void (*set_device)(int);     // cudaSetDevice: before the context's streams are made
  // The backend's communicator over `world`'s ranks (collective: every rank
  // calls it), on `context`'s communication stream.
  std::unique_ptr<Communicator> (*make_communicator)(MPI_Comm world, ExecutionContext& context);
};
// The backend's entry point calls this; nullptr unregisters.
void register_device_comm_backend(Device device, const DeviceCommBackend* backend);
const DeviceCommBackend* find_device_comm_backend(Device device);

// Every node-local rank's CUDA_VISIBLE_DEVICES (nullopt where unset), by
// node-local rank, and this rank's node-local rank: collective over `world`
// (split_node, then two all-gathers on the node communicator).
struct NodeVisibility {
  int local_rank = 0;
  std::vector<std::optional<std::string>> visible_devices;
};
NodeVisibility gather_node_visibility(Communicator& world);

// Picks this rank's GPU (assign_gpu) and binds the process to it through
// the registered backend; collective over `world`. Throws ftrain::Error
// naming the world rank and the reason (oversubscription with device_comm
// nccl, no device, no backend). Call before creating the ExecutionContext.
GpuAssignment bind_local_gpu(Communicator& world, DeviceComm kind, Device device = Device::cuda);

// device_comm nccl: the registered backend's communicator (an error naming
// why when none is registered); mpi: the staged communicator over `world`.
std::unique_ptr<Communicator> make_device_communicator(DeviceComm kind, MPI_Comm world, ExecutionContext& context);


}  // namespace ftrain
