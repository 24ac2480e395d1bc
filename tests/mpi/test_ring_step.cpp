// Ring steps of a ParallelGroup over a communicator (fsdp/parallel_groups.hpp),
// the exchange ring attention passes K and V around with: each rank sends
// its block to its successor and receives its predecessor's, stream-ordered
// with the compute stream (issued after the work that wrote `send`, seen by
// the work enqueued after finish_ring_step), on synchronous and
// asynchronous host streams, over the MPI and the staged communicator.
// Run at np 1, 2, 3 and 4.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "base/error.hpp"
#include "comm/mpi_communicator.hpp"
#include "comm/staged_communicator.hpp"
#include "fsdp/parallel_groups.hpp"
#include "runtime/execution_context.hpp"

using namespace ftrain;

namespace {

// The value rank q's block holds at element j (exact in f32).
float block_value(int q, std::int64_t j) { return static_cast<float>(q * 10000 + j); }

Tensor filled(std::int64_t count, float value, const char* name) {
  Tensor t = Tensor::empty({count}, DType::f32, Device::host, name);
  for (std::int64_t j = 0; j < count; ++j) t.data_as<float>()[j] = value;
  return t;
}

std::unique_ptr<CommunicatorGroup> make_group(bool staged) {
  std::unique_ptr<Communicator> comm;
  if (staged)
    comm = std::make_unique<StagedCommunicator>(MPI_COMM_WORLD);
  else
    comm = std::make_unique<MpiCommunicator>(MPI_COMM_WORLD);
  return std::make_unique<CommunicatorGroup>(std::move(comm), "context group");
}

// (asynchronous host streams, staged communicator)
class RingStep : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

// One step: the block arrives from the predecessor. The block is written by
// a compute job that sleeps first, and the result is read by a compute job
// enqueued after finish_ring_step: on an asynchronous stream a step that
// did not wait for the compute stream sends poison, and one whose finish did
// not order the stream after the transfer reads poison.
TEST_P(RingStep, OneStepDeliversThePredecessorsBlock) {
  ExecutionContext ctx(ExecutionOptions{Device::host, std::get<0>(GetParam())});
  auto group = make_group(std::get<1>(GetParam()));
  const int n = group->size(), r = group->rank(), predecessor = (r + n - 1) % n;
  const std::int64_t count = 1000;
  Tensor send = filled(count, -1.0f, "send");
  Tensor recv = filled(count, -2.0f, "recv");
  Tensor seen = filled(count, -3.0f, "seen");
  ctx.compute().enqueue([send, r]() mutable {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    for (std::int64_t j = 0; j < send.numel(); ++j) send.data_as<float>()[j] = block_value(r, j);
  });
  auto step = group->start_ring_step(ctx, send, recv);
  group->finish_ring_step(ctx, std::move(step));
  ctx.compute().enqueue([recv, seen]() mutable {
    for (std::int64_t j = 0; j < recv.numel(); ++j) seen.data_as<float>()[j] = recv.data_as<float>()[j];
  });
  ctx.synchronize();
  group->drain();
  for (std::int64_t j = 0; j < count; ++j)
    ASSERT_EQ(seen.data_as<float>()[j], block_value(predecessor, j)) << "rank " << r << ", element " << j;
}

// The whole ring, as ring attention runs it: n - 1 steps, each passing on
// the block received in the step before (double buffered), with compute
// enqueued between start and finish (the overlap). Every rank sees every
// other rank's block once, in the order predecessor, its predecessor, ...
TEST_P(RingStep, NMinusOneStepsShowEveryRanksBlockInRingOrder) {
  ExecutionContext ctx(ExecutionOptions{Device::host, std::get<0>(GetParam())});
  auto group = make_group(std::get<1>(GetParam()));
  const int n = group->size(), r = group->rank();
  const std::int64_t count = 77;
  Tensor buffers[2] = {Tensor::empty({count}, DType::f32, Device::host, "ring.a"),
                       filled(count, -2.0f, "ring.b")};
  for (std::int64_t j = 0; j < count; ++j) buffers[0].data_as<float>()[j] = block_value(r, j);
  std::vector<Tensor> seen;
  for (int step = 0; step < n - 1; ++step) {
    Tensor& current = buffers[step % 2];
    Tensor& next = buffers[(step + 1) % 2];
    auto exchange = group->start_ring_step(ctx, current, next);
    // The step's "attention": reads only `current`, overlapping the transfer.
    Tensor copy = Tensor::empty({count}, DType::f32, Device::host, "seen");
    ctx.compute().enqueue([current, copy]() mutable {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      for (std::int64_t j = 0; j < copy.numel(); ++j) copy.data_as<float>()[j] = current.data_as<float>()[j];
    });
    seen.push_back(copy);
    group->finish_ring_step(ctx, std::move(exchange));
  }
  Tensor last = Tensor::empty({count}, DType::f32, Device::host, "seen.last");
  Tensor final_block = buffers[(n - 1) % 2];
  ctx.compute().enqueue([final_block, last]() mutable {
    for (std::int64_t j = 0; j < last.numel(); ++j) last.data_as<float>()[j] = final_block.data_as<float>()[j];
  });
  seen.push_back(last);
  ctx.synchronize();
  group->drain();
  ASSERT_EQ(static_cast<int>(seen.size()), n);
  for (int step = 0; step < n; ++step) {
    const int owner = (r - step + n) % n;
    for (std::int64_t j = 0; j < count; ++j)
      ASSERT_EQ(seen[static_cast<std::size_t>(step)].data_as<float>()[j], block_value(owner, j))
          << "rank " << r << ", after " << step << " steps: element " << j << " should be rank " << owner << "'s";
  }
}

TEST_P(RingStep, MismatchedBuffersAreRefusedNamingTheGroup) {
  ExecutionContext ctx(ExecutionOptions{Device::host, std::get<0>(GetParam())});
  auto group = make_group(std::get<1>(GetParam()));
  Tensor a = Tensor::zeros({8}, DType::f32, Device::host, "a"), b = Tensor::zeros({9}, DType::f32, Device::host, "b");
  try {
    group->start_ring_step(ctx, a, b);
    FAIL() << "a ring step into a buffer of another size was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("context group"), std::string::npos) << e.what();
  }
}

// A ring step that fails on the progress thread surfaces from drain(),
// naming the group, as the engine reports a failed collective.
TEST(RingStepFault, AFailedStepSurfacesFromDrainNamingTheGroup) {
  ExecutionContext ctx(ExecutionOptions{Device::host, false});
  auto group = make_group(false);
  set_collective_fault_for_testing("send_recv", 1);
  Tensor a = filled(8, 1.0f, "a"), b = filled(8, -2.0f, "b");
  try {
    group->finish_ring_step(ctx, group->start_ring_step(ctx, a, b));
    ctx.synchronize();
    group->drain();
    ADD_FAILURE() << "the failed ring step was not reported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("context group"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("send_recv of"), std::string::npos) << e.what();
  }
  set_collective_fault_for_testing("", 0);
}

INSTANTIATE_TEST_SUITE_P(Streams, RingStep,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()), [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "async" : "sync") +
                                  (std::get<1>(info.param) ? "_staged" : "_mpi");
                         });

}  // namespace
