// The in-place all-gather layout (comm/mpi_collectives.hpp,
// gathers_in_place): send at recv's own block is in place, disjoint buffers
// are not, and every other overlap is refused before MPI could see it.
#include <gtest/gtest.h>

#include "comm/mpi_collectives.hpp"
#include "base/error.hpp"

namespace ftrain {
namespace {

using mpi_collectives::gathers_in_place;

TEST(GatherLayout, OwnBlockOfRecvIsInPlace) {
  const int size = 4;
  for (DType dt : {DType::f32, DType::bf16}) {
    Tensor recv = Tensor::empty({5 * size}, dt, Device::host, "recv");
    for (int rank = 0; rank < size; ++rank)
      EXPECT_TRUE(gathers_in_place(recv.view({5}, 5 * rank, "own"), recv, rank)) << dtype_name(dt) << " rank " << rank;
  }
}

TEST(GatherLayout, DisjointBuffersAreNotInPlace) {
  Tensor storage = Tensor::empty({40}, DType::bf16, Device::host, "storage");
  Tensor recv = storage.view({20}, 0, "recv");
  EXPECT_FALSE(gathers_in_place(Tensor::empty({5}, DType::bf16, Device::host, "send"), recv, 1));
  EXPECT_FALSE(gathers_in_place(storage.view({5}, 20, "right after recv"), recv, 3));
  EXPECT_FALSE(gathers_in_place(Tensor::empty({0}, DType::bf16, Device::host, "empty"), recv, 0));
}

TEST(GatherLayout, AnyOtherOverlapIsRefusedNamingTheBlock) {
  Tensor recv = Tensor::empty({20}, DType::f32, Device::host, "recv");
  // Another rank's block, a block off by one element, and recv itself.
  EXPECT_THROW(gathers_in_place(recv.view({5}, 5, "rank 1's block"), recv, 2), Error);
  EXPECT_THROW(gathers_in_place(recv.view({5}, 11, "shifted"), recv, 2), Error);
  try {
    gathers_in_place(recv, recv, 1);
    FAIL() << "recv as rank 1's send was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not rank 1's block"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ftrain
