// NCCL's bootstrap through MPI without a GPU (issue 19, must-show 1): rank 0
// calls ncclGetUniqueId (which needs no GPU), MPI_Bcast sends it, and every
// rank ends with the same 128 bytes. Run at np 2 and 4. This test compiles
// src/comm/nccl/nccl_bootstrap.cpp itself and links NCCL directly, since
// the NCCL code lives in libftrain_cuda.so, whose registration needs a GPU.
// Also: every node-local rank's CUDA_VISIBLE_DEVICES reaches every rank
// (comm/device_communicator.hpp), and the GPU choice made from it.
#include <gtest/gtest.h>
#include <mpi.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "comm/device_communicator.hpp"
#include "comm/mpi_communicator.hpp"
#include "comm/nccl/nccl_bootstrap.hpp"

using namespace ftrain;

namespace {

std::vector<ncclUniqueId> gather_ids(const ncclUniqueId& mine) {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<ncclUniqueId> all(static_cast<std::size_t>(size));
  MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, MPI_COMM_WORLD);
  return all;
}

bool all_zero(const ncclUniqueId& id) {
  for (char c : id.internal)
    if (c != 0) return false;
  return true;
}

TEST(NcclBootstrap, EveryRankHoldsRankZerosUniqueId) {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const ncclUniqueId id = nccl::broadcast_unique_id(MPI_COMM_WORLD, 0);
  EXPECT_FALSE(all_zero(id)) << "ncclGetUniqueId returned nothing";
  const auto all = gather_ids(id);
  for (int q = 1; q < size; ++q)
    EXPECT_EQ(std::memcmp(&all[0], &all[static_cast<std::size_t>(q)], sizeof(ncclUniqueId)), 0)
        << "rank " << q << " holds another id than rank 0";
}

TEST(NcclBootstrap, EachBootstrapMakesAFreshIdFromItsRoot) {
  int size = 0, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const ncclUniqueId first = nccl::broadcast_unique_id(MPI_COMM_WORLD, 0);
  const ncclUniqueId second = nccl::broadcast_unique_id(MPI_COMM_WORLD, size - 1);
  EXPECT_NE(std::memcmp(&first, &second, sizeof first), 0) << "two communicators would share one id";
  const auto all = gather_ids(second);
  for (int q = 0; q < size; ++q)
    EXPECT_EQ(std::memcmp(&all[static_cast<std::size_t>(size - 1)], &all[static_cast<std::size_t>(q)], sizeof second), 0)
        << "rank " << q;
}

// Rank r sets CUDA_VISIBLE_DEVICES to its own value (rank 0: unset), as a
// launcher binding GPUs per rank would; every rank sees everyone's.
TEST(NodeVisibility, EveryNodeLocalRanksSettingIsGathered) {
  MpiCommunicator world(MPI_COMM_WORLD);
  const int rank = world.rank(), size = world.size();
  const char* saved = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string saved_value = saved != nullptr ? saved : "";
  auto value_of = [](int q) { return q == 1 ? std::string() : std::to_string(q) + ",GPU-" + std::to_string(q); };
  if (rank == 0)
    unsetenv("CUDA_VISIBLE_DEVICES");
  else
    setenv("CUDA_VISIBLE_DEVICES", value_of(rank).c_str(), 1);
  const NodeVisibility v = gather_node_visibility(world);
  if (saved != nullptr)
    setenv("CUDA_VISIBLE_DEVICES", saved_value.c_str(), 1);
  else
    unsetenv("CUDA_VISIBLE_DEVICES");
  // mpirun here starts every rank on this host: node-local = world.
  ASSERT_EQ(static_cast<int>(v.visible_devices.size()), size);
  EXPECT_EQ(v.local_rank, rank);
  EXPECT_FALSE(v.visible_devices[0].has_value());
  for (int q = 1; q < size; ++q) {
    ASSERT_TRUE(v.visible_devices[static_cast<std::size_t>(q)].has_value()) << "rank " << q;
    EXPECT_EQ(*v.visible_devices[static_cast<std::size_t>(q)], value_of(q)) << "rank " << q;
  }
  // Each rank bound to its own list: ordinal 0 of it (rank 1's empty list
  // hides every GPU: an error on that rank only).
  const GpuAssignment a = assign_gpu({v.local_rank, v.visible_devices, rank == 1 ? 0 : 2, DeviceComm::nccl});
  if (rank == 1) {
    EXPECT_NE(a.error.find("no CUDA device is visible"), std::string::npos) << a.error;
  } else if (rank == 0) {
    EXPECT_EQ(a.ordinal, 0) << a.error;  // unset: the whole node's list, alone in its group
  } else {
    EXPECT_EQ(a.ordinal, 0) << a.error;
    EXPECT_EQ(a.physical, std::to_string(rank));
  }
}

}  // namespace
