// The rank -> GPU mapping as a table (comm/gpu_assignment.hpp): node-local
// ranks, CUDA_VISIBLE_DEVICES lists, launchers that bind a GPU per rank, and
// oversubscription (an error for NCCL, round robin for device_comm mpi).
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "comm/gpu_assignment.hpp"

namespace ftrain {
namespace {

using Visible = std::vector<std::optional<std::string>>;
const std::optional<std::string> unset;

struct Case {
  const char* name;
  int local_rank;
  Visible visible;
  int device_count;
  DeviceComm comm;
  int ordinal;             // -1: an error is expected
  const char* physical;    // or a substring of the error
  int ranks_sharing = 1;
};

TEST(GpuAssignment, Table) {
  const std::vector<Case> cases = {
      // One rank per GPU, nothing set: local rank r -> device r.
      {"4 ranks, 4 GPUs, rank 0", 0, {unset, unset, unset, unset}, 4, DeviceComm::nccl, 0, "0"},
      {"4 ranks, 4 GPUs, rank 3", 3, {unset, unset, unset, unset}, 4, DeviceComm::nccl, 3, "3"},
      {"2 ranks, 8 GPUs", 1, {unset, unset}, 8, DeviceComm::nccl, 1, "1"},
      {"1 rank, 1 GPU", 0, {unset}, 1, DeviceComm::nccl, 0, "0"},
      // The same list on every rank: ordinals index it, the entry names the GPU.
      {"shared list 2,3: rank 1", 1, {"2,3", "2,3"}, 2, DeviceComm::nccl, 1, "3"},
      {"shared list with blanks", 0, {" 5 , 7", " 5 , 7"}, 2, DeviceComm::nccl, 0, "5"},
      {"shared UUID list", 1, {"GPU-aa,GPU-bb", "GPU-aa,GPU-bb"}, 2, DeviceComm::nccl, 1, "GPU-bb"},
      // A launcher binding one GPU per rank (srun --gpus-per-task=1).
      {"bound per rank: rank 2", 2, {"0", "1", "2", "3"}, 1, DeviceComm::nccl, 0, "2"},
      {"bound pairs: rank 3", 3, {"0,1", "0,1", "2,3", "2,3"}, 2, DeviceComm::nccl, 1, "3"},
      // Oversubscription: an error for NCCL, round robin for the staged communicator.
      {"3 ranks, 2 GPUs, nccl", 2, {unset, unset, unset}, 2, DeviceComm::nccl, -1,
       "3 ranks on this node use CUDA_VISIBLE_DEVICES unset but only 2 GPUs are visible"},
      {"2 ranks, 1 GPU, nccl", 0, {unset, unset}, 1, DeviceComm::nccl, -1, "`device_comm mpi`"},
      {"2 ranks, 1 GPU, mpi, rank 1", 1, {unset, unset}, 1, DeviceComm::mpi, 0, "0", 2},
      {"4 ranks, 1 GPU, mpi, rank 3", 3, {unset, unset, unset, unset}, 1, DeviceComm::mpi, 0, "0", 4},
      {"3 ranks, 2 GPUs, mpi, rank 2", 2, {unset, unset, unset}, 2, DeviceComm::mpi, 0, "0", 2},
      {"3 ranks, 2 GPUs, mpi, rank 1", 1, {unset, unset, unset}, 2, DeviceComm::mpi, 1, "1", 1},
      {"shared list 4, two ranks, mpi", 1, {"4", "4"}, 1, DeviceComm::mpi, 0, "4", 2},
      // Different lists naming the same GPU.
      {"lists overlap on GPU 1", 0, {"1,0", "1"}, 2, DeviceComm::nccl, -1, "all land on GPU 1"},
      {"unset and bound collide", 1, {unset, "0"}, 1, DeviceComm::nccl, -1, "all land on GPU 0"},
      {"lists overlap, mpi", 0, {"1,0", "1"}, 2, DeviceComm::mpi, 0, "1", 2},
      {"disjoint lists", 1, {"0,1", "2"}, 1, DeviceComm::nccl, 0, "2"},
      {"a rank with an empty list uses no GPU", 0, {unset, ""}, 1, DeviceComm::nccl, 0, "0"},
      // Nothing visible.
      {"no device", 0, {unset}, 0, DeviceComm::nccl, -1, "no CUDA device is visible (CUDA_VISIBLE_DEVICES unset)"},
      {"empty list hides all", 0, {""}, 0, DeviceComm::mpi, -1, "CUDA_VISIBLE_DEVICES=''"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const GpuAssignment a = assign_gpu({c.local_rank, c.visible, c.device_count, c.comm});
    EXPECT_EQ(a.ordinal, c.ordinal) << a.error;
    if (c.ordinal < 0) {
      EXPECT_NE(a.error.find(c.physical), std::string::npos) << a.error;
      EXPECT_NE(a.error.find("node-local rank " + std::to_string(c.local_rank)), std::string::npos) << a.error;
    } else {
      EXPECT_EQ(a.error, "");
      EXPECT_EQ(a.physical, c.physical);
      EXPECT_EQ(a.ranks_sharing, c.ranks_sharing);
    }
  }
}

TEST(GpuAssignment, DescribeSaysWhatWasChosen) {
  EXPECT_EQ(assign_gpu({1, {"2,3", "2,3"}, 2, DeviceComm::nccl}).describe(), "device 1 (CUDA_VISIBLE_DEVICES entry 3)");
  EXPECT_EQ(assign_gpu({0, {unset}, 1, DeviceComm::nccl}).describe(), "device 0");
  EXPECT_EQ(assign_gpu({1, {unset, unset}, 1, DeviceComm::mpi}).describe(),
            "device 0, shared by 2 ranks of this node (device_comm mpi)");
}

TEST(GpuAssignment, SplitVisibleDevices) {
  EXPECT_TRUE(split_visible_devices("").empty());
  EXPECT_TRUE(split_visible_devices("  ").empty());
  EXPECT_EQ(split_visible_devices("0"), std::vector<std::string>{"0"});
  EXPECT_EQ(split_visible_devices("0, 2 ,3"), (std::vector<std::string>{"0", "2", "3"}));
}

}  // namespace
}  // namespace ftrain
