// Device communicators on a GPU [gpu] (issue 19): collectives on CUDA
// buffers through the communicator FTRAIN_TEST_DEVICE_COMM names, against
// a straightforward host reference: f32 and bf16, sizes 0, 1, 7, 1000 per
// rank, all_gather, reduce_scatter_sum, all_reduce_sum, all_reduce_max, and
// a split. Registered as np 1 with `nccl` (NCCL refuses two ranks on one
// GPU) and np 2 / 4 with `mpi` (the staged communicator: ranks share the
// lent machine's one GPU). The rank -> GPU binding is bind_local_gpu's.
// Without a usable GPU every test skips, saying why.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/device_communicator.hpp"
#include "comm/mpi_communicator.hpp"
#include "base/error.hpp"
#include "kernels/backend_registry.hpp"
#include "runtime/backend_library.hpp"
#include "runtime/execution_context.hpp"

using namespace ftrain;

namespace {

bool cuda_usable(std::string& why) {
  if (find_backend(Device::cuda) != nullptr) return true;
  why = "no usable CUDA GPU: " + describe_backend_search();
  return false;
}

DeviceComm requested_comm() {
  const char* v = std::getenv("FTRAIN_TEST_DEVICE_COMM");
  const std::string word = v != nullptr ? v : "nccl";
  if (word != "nccl" && word != "mpi") throw std::runtime_error("FTRAIN_TEST_DEVICE_COMM=" + word + ": expected nccl or mpi");
  return word == "mpi" ? DeviceComm::mpi : DeviceComm::nccl;
}

// Small integers: every sum is exact in f32 and in bf16 (below 256).
float value_of(int q, std::int64_t j) { return static_cast<float>((q + 1) + 2 * (j % 29)); }

Tensor on_device(const std::vector<float>& v, DType dt) {
  Tensor h = Tensor::empty({static_cast<std::int64_t>(v.size())}, DType::f32);
  std::copy(v.begin(), v.end(), h.data_as<float>());
  if (dt == DType::bf16) {
    Tensor b = Tensor::empty(h.shape(), DType::bf16);
    for (std::int64_t i = 0; i < h.numel(); ++i) b.data_as<bf16>()[i] = to_bf16(h.data_as<float>()[i]);
    h = b;
  }
  return to_device(h, Device::cuda);
}

std::vector<float> on_host(const Tensor& t) {
  Tensor h = to_device(t, Device::host);
  std::vector<float> out(static_cast<std::size_t>(h.numel()));
  for (std::int64_t i = 0; i < h.numel(); ++i)
    out[static_cast<std::size_t>(i)] = h.dtype() == DType::bf16 ? to_float(h.data_as<bf16>()[i]) : h.data_as<float>()[i];
  return out;
}

class DeviceComm_ : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda_usable(why)) GTEST_SKIP() << why;
    world_ = std::make_unique<MpiCommunicator>(MPI_COMM_WORLD);
    assignment_ = bind_local_gpu(*world_, requested_comm());
    ExecutionOptions o;
    o.device = Device::cuda;
    ctx_ = std::make_unique<ExecutionContext>(o);
    comm_ = make_device_communicator(requested_comm(), MPI_COMM_WORLD, *ctx_);
  }
  std::unique_ptr<MpiCommunicator> world_;
  GpuAssignment assignment_;
  std::unique_ptr<ExecutionContext> ctx_;
  std::unique_ptr<Communicator> comm_;
  // Uploads are stream-ordered on the context's compute stream
  // (allocator.hpp): a collective reading them takes an event recorded
  // after them, as the engine's do (communicator.hpp, "Ordering with
  // compute"). Without it the staged copies raced the uploads on the H100.
  Event uploaded() { return ctx_->compute().record(); }
};

TEST_P(DeviceComm_, EveryCollectiveMatchesTheHostReference) {
  const DType dt = GetParam();
  const int size = comm_->size(), rank = comm_->rank();
  for (std::int64_t n : {0, 1, 7, 1000}) {
    SCOPED_TRACE("n " + std::to_string(n) + ", " + comm_->describe() + ", " + assignment_.describe());
    std::vector<float> mine(static_cast<std::size_t>(n)), mine_block(static_cast<std::size_t>(n * size));
    for (std::int64_t j = 0; j < n; ++j) mine[static_cast<std::size_t>(j)] = value_of(rank, j);
    for (std::int64_t j = 0; j < n * size; ++j) mine_block[static_cast<std::size_t>(j)] = value_of(rank, j);

    Tensor send = on_device(mine, dt), gathered = on_device(std::vector<float>(mine_block.size(), -1), dt);
    comm_->all_gather(send, gathered, uploaded()).wait();
    Tensor scatter_send = on_device(mine_block, dt), block = on_device(std::vector<float>(mine.size(), -1), dt);
    comm_->reduce_scatter_sum(scatter_send, block, uploaded()).wait();
    Tensor summed = on_device(mine, dt);
    comm_->all_reduce_sum(summed, uploaded()).wait();
    ctx_->synchronize();
    const auto g = on_host(gathered), b = on_host(block), s = on_host(summed);
    for (int q = 0; q < size; ++q)
      for (std::int64_t j = 0; j < n; ++j) ASSERT_EQ(g[static_cast<std::size_t>(q * n + j)], value_of(q, j));
    for (std::int64_t j = 0; j < n; ++j) {
      float block_sum = 0, sum = 0;
      for (int q = 0; q < size; ++q) {
        block_sum += value_of(q, rank * n + j);
        sum += value_of(q, j);
      }
      ASSERT_EQ(b[static_cast<std::size_t>(j)], block_sum) << "reduce_scatter element " << j;
      ASSERT_EQ(s[static_cast<std::size_t>(j)], sum) << "all_reduce_sum element " << j;
    }
    if (dt == DType::f32) {
      std::vector<float> m(static_cast<std::size_t>(n));
      for (std::int64_t j = 0; j < n; ++j) m[static_cast<std::size_t>(j)] = static_cast<float>((rank + j) % size);
      Tensor maxed = on_device(m, dt);
      comm_->all_reduce_max(maxed, uploaded()).wait();
      ctx_->synchronize();
      const auto mx = on_host(maxed);
      // (q + j) % size takes every residue over the ranks: the max is size - 1.
      for (std::int64_t j = 0; j < n; ++j) ASSERT_EQ(mx[static_cast<std::size_t>(j)], static_cast<float>(size - 1));
    }
  }
}

// Variable counts (the FP8 weight all-gather's; NCCL builds it from one
// broadcast per root): rank q sends q + 2 elements, and one rank none.
TEST_P(DeviceComm_, AllGatherVConcatenatesVariableCountsInRankOrder) {
  const DType dt = GetParam();
  const int size = comm_->size(), rank = comm_->rank();
  std::vector<std::int64_t> counts(static_cast<std::size_t>(size));
  std::int64_t total = 0;
  for (int q = 0; q < size; ++q) total += counts[static_cast<std::size_t>(q)] = (q == 1 ? 0 : q + 2);
  std::vector<float> mine(static_cast<std::size_t>(counts[static_cast<std::size_t>(rank)]));
  for (std::size_t j = 0; j < mine.size(); ++j) mine[j] = value_of(rank, static_cast<std::int64_t>(j));
  Tensor send = on_device(mine, dt), recv = on_device(std::vector<float>(static_cast<std::size_t>(total), -1), dt);
  comm_->all_gather_v(send, recv, counts, uploaded()).wait();
  ctx_->synchronize();
  const auto g = on_host(recv);
  std::size_t at = 0;
  for (int q = 0; q < size; ++q)
    for (std::int64_t j = 0; j < counts[static_cast<std::size_t>(q)]; ++j, ++at)
      ASSERT_EQ(g[at], value_of(q, j)) << "from rank " << q << " element " << j << " on " << comm_->describe();
}

// The context ring's step (ring attention): each rank sends to the next and
// receives from the previous in one exchange (NCCL: ncclSend + ncclRecv in
// one group; at np 1 a rank's ring is itself).
TEST_P(DeviceComm_, SendRecvShiftsAroundTheRing) {
  const DType dt = GetParam();
  const int size = comm_->size(), rank = comm_->rank();
  const int next = (rank + 1) % size, previous = (rank + size - 1) % size;
  for (std::int64_t n : {1, 7, 1000}) {
    std::vector<float> mine(static_cast<std::size_t>(n));
    for (std::int64_t j = 0; j < n; ++j) mine[static_cast<std::size_t>(j)] = value_of(rank, j);
    Tensor send = on_device(mine, dt), recv = on_device(std::vector<float>(mine.size(), -1), dt);
    comm_->send_recv(send, next, recv, previous, uploaded()).wait();
    ctx_->synchronize();
    const auto got = on_host(recv);
    for (std::int64_t j = 0; j < n; ++j)
      ASSERT_EQ(got[static_cast<std::size_t>(j)], value_of(previous, j))
          << "element " << j << " of " << n << " from rank " << previous << " on " << comm_->describe();
  }
}

TEST_P(DeviceComm_, SplitIntoEvenAndOddRanks) {
  const DType dt = GetParam();
  auto sub = comm_->split(comm_->rank() % 2, comm_->rank());
  Tensor mine = on_device({static_cast<float>(comm_->rank())}, dt);
  sub->all_reduce_sum(mine, uploaded()).wait();
  ctx_->synchronize();
  float expected = 0;
  for (int q = comm_->rank() % 2; q < comm_->size(); q += 2) expected += static_cast<float>(q);
  EXPECT_EQ(on_host(mine)[0], expected);
}

INSTANTIATE_TEST_SUITE_P(DTypes, DeviceComm_, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
