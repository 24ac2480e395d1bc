// Per-rank device memory gathered for the run header and metrics
// (train/device_memory.hpp): every rank ends up with every rank's sample, in
// rank order, whatever the rank count.
#include <gtest/gtest.h>

#include "comm/mpi_communicator.hpp"
#include "train/device_memory.hpp"

using namespace ftrain;

TEST(DeviceMemoryGather, EveryRankSeesEveryRankInOrder) {
  MpiCommunicator world(MPI_COMM_WORLD);
  const int rank = world.rank();
  const DeviceMemorySample mine{10.0 + rank, 100.0 + rank, 50.0 + 2 * rank};
  const std::vector<DeviceMemorySample> all = gather_device_memory(world, mine);
  ASSERT_EQ(static_cast<int>(all.size()), world.size());
  for (int r = 0; r < world.size(); ++r) {
    EXPECT_EQ(all[r].allocated_mib, 10.0 + r) << "rank " << r;
    EXPECT_EQ(all[r].reserved_mib, 100.0 + r) << "rank " << r;
    EXPECT_EQ(all[r].peak_mib, 50.0 + 2 * r) << "rank " << r;
  }
}
