// Which GPU a rank uses: a pure function of what the rank can see, so every
// case (node-local ranks, CUDA_VISIBLE_DEVICES lists, per-rank binding by the
// launcher, oversubscription) is a table test on a machine without a GPU
// (tests/unit/comm/test_gpu_assignment.cpp).
//
// Inputs (gathered by the caller, comm/nccl/ on the CUDA backend):
//  * this rank's node-local rank (Communicator::split_node(): the ranks of
//    MPI_COMM_TYPE_SHARED), and every node-local rank's CUDA_VISIBLE_DEVICES
//    (unset is not the same as empty: empty hides every GPU);
//  * the device count the CUDA runtime reports on this rank (it already
//    honours CUDA_VISIBLE_DEVICES and stops at the first invalid entry);
//  * device_comm: nccl needs a GPU of its own per rank (NCCL refuses two
//    ranks on one device); mpi (the staged communicator) lets ranks share.
//
// The rule: ranks with the same CUDA_VISIBLE_DEVICES value form a group and
// take that list's devices in node-local-rank order (the group's i-th rank
// gets ordinal i). Usually every rank has the same value (or none), so local
// rank r gets device r; a launcher that binds one GPU per rank
// (CUDA_VISIBLE_DEVICES=0, =1, ... per rank) gives every rank its own group
// and ordinal 0. Two ranks on one physical GPU (more ranks than devices in a
// group, or two lists naming the same device) is an error that says how
// many ranks and devices there are, unless device_comm is mpi: then the
// group's ranks share its devices round robin and the assignment says so.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ftrain {

enum class DeviceComm { nccl, mpi };
const char* device_comm_name(DeviceComm c);

struct GpuAssignmentInput {
  int local_rank = 0;
  // CUDA_VISIBLE_DEVICES of every node-local rank, indexed by local rank
  // (its size is the node-local size); nullopt where unset.
  std::vector<std::optional<std::string>> visible_devices;
  int device_count = 0;  // cudaGetDeviceCount on this rank
  DeviceComm device_comm = DeviceComm::nccl;
};

struct GpuAssignment {
  int ordinal = -1;          // for cudaSetDevice; -1 when error is set
  std::string physical;      // the device as the node knows it: the CUDA_VISIBLE_DEVICES entry, or the ordinal
  int ranks_sharing = 1;     // ranks of this node on the same physical device (> 1 only with device_comm mpi)
  std::string error;         // empty on success; else why no device can be chosen
  std::string describe() const;  // "device 1 (CUDA_VISIBLE_DEVICES entry 3)", "... shared by 2 ranks"
};

GpuAssignment assign_gpu(const GpuAssignmentInput& input);

// CUDA_VISIBLE_DEVICES split at commas, blanks trimmed; "" gives no entries.
std::vector<std::string> split_visible_devices(const std::string& value);

}  // namespace ftrain
