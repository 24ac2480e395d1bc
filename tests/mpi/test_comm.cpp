// Direct tests of src/comm against a straightforward reference (issue 22 s1;
// the tests parametrized by communicator also run the staged device
// communicator, comm/staged_communicator.hpp, on host buffers: issue 19):
// every collective of Communicator on f32 / bf16 / i64 with odd and zero
// sizes, split and split_node, requests in flight together, wait and test,
// the blocking scalar reductions, the timers, errors from the progress
// thread reaching the caller, and collectives gated on a compute-stream
// event. Run at np 1, 2, 3 and 4.
//
// Every element's value is an integer that depends on both the rank that
// contributes it and its index, small enough that every partial sum is exact
// in the element type: any rank or block placed wrongly, any element not
// written, and any rounding changes a value the reference predicts exactly.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "comm/mpi_communicator.hpp"
#include "comm/staged_communicator.hpp"
#include "base/error.hpp"
#include "runtime/allocator.hpp"
#include "runtime/stream.hpp"

using namespace ftrain;

namespace {

// The value rank q contributes at element j (an exact integer in every type).
std::int64_t value_of(DType dt, int q, std::int64_t j) {
  switch (dt) {
    case DType::f32: return q * 1000 + j % 997;                         // sums < 2^24
    case DType::bf16: return (q + 1) + 2 * (j % 29);                     // every partial sum < 256
    case DType::i64: return (std::int64_t{1} << 58) + q * 1000003 + j;  // beyond f64's 2^53
    default: ADD_FAILURE() << "no test values for " << dtype_name(dt); return 0;
  }
}

void store(Tensor& t, std::int64_t i, std::int64_t v) {
  switch (t.dtype()) {
    case DType::f32: t.data_as<float>()[i] = static_cast<float>(v); break;
    case DType::bf16: t.data_as<bf16>()[i] = to_bf16(static_cast<float>(v)); break;
    case DType::i64: t.data_as<std::int64_t>()[i] = v; break;
    default: FAIL() << "store: " << t.describe();
  }
}

std::int64_t load(const Tensor& t, std::int64_t i) {
  switch (t.dtype()) {
    case DType::f32: return std::llround(t.data_as<float>()[i]);
    case DType::bf16: return std::llround(to_float(t.data_as<bf16>()[i]));
    case DType::i64: return t.data_as<std::int64_t>()[i];
    default: ADD_FAILURE() << "load: " << t.describe(); return 0;
  }
}

// A tensor holding rank q's contribution at elements [first, first + n).
Tensor contribution(DType dt, int q, std::int64_t n, std::int64_t first = 0) {
  Tensor t = Tensor::empty({n}, dt, Device::host, "send");
  for (std::int64_t i = 0; i < n; ++i) store(t, i, value_of(dt, q, first + i));
  return t;
}

// A tensor filled with a value no collective result equals (unwritten output shows).
Tensor poisoned(DType dt, std::int64_t n) {
  Tensor t = Tensor::empty({n}, dt, Device::host, "recv");
  for (std::int64_t i = 0; i < n; ++i) store(t, i, dt == DType::i64 ? -7 : 255);
  return t;
}

std::int64_t sum_over_ranks(DType dt, int size, std::int64_t j) {
  std::int64_t s = 0;
  for (int q = 0; q < size; ++q) s += value_of(dt, q, j);
  return s;
}

// Element-wise max test values: the maximum sits on a different rank per element.
float max_value_of(int q, std::int64_t j, int size) {
  return static_cast<float>(((q + j) % size) * 10 - j % 5) - 0.25f * static_cast<float>(q);
}

const std::vector<std::int64_t> kCounts = {0, 1, 7, 1000};  // per-rank elements

// The communicators under test: MPI on host buffers, and the staged device
// communicator (device_comm mpi), which on host buffers runs its whole
// staging path (copies through the allocator, then the same MPI calls).
enum class Kind { mpi, staged };
std::unique_ptr<Communicator> make_world(Kind kind) {
  if (kind == Kind::staged) return std::make_unique<StagedCommunicator>(MPI_COMM_WORLD);
  return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD);
}
const char* kind_name(Kind k) { return k == Kind::mpi ? "mpi" : "staged"; }

class CommByDType : public ::testing::TestWithParam<std::tuple<DType, Kind>> {};
class CommByKind : public ::testing::TestWithParam<Kind> {};

TEST_P(CommByDType, AllGatherConcatenatesInRankOrder) {
  const DType dt = std::get<0>(GetParam());
  auto world_ptr = make_world(std::get<1>(GetParam()));
  Communicator& world = *world_ptr;
  const int size = world.size();
  for (std::int64_t n : kCounts) {
    Tensor send = contribution(dt, world.rank(), n);
    Tensor recv = poisoned(dt, n * size);
    world.all_gather(send, recv).wait();
    for (int q = 0; q < size; ++q)
      for (std::int64_t j = 0; j < n; ++j)
        ASSERT_EQ(load(recv, q * n + j), value_of(dt, q, j)) << "n " << n << ": block of rank " << q << ", element " << j;
  }
}

// In place (the FSDP engine's gather: the cast writes this rank's block of
// the gathered buffer): send is a view of recv's own block.
TEST_P(CommByDType, AllGatherInPlaceSendsThisRanksBlockOfRecv) {
  const DType dt = std::get<0>(GetParam());
  auto world_ptr = make_world(std::get<1>(GetParam()));
  Communicator& world = *world_ptr;
  const int size = world.size(), rank = world.rank();
  for (std::int64_t n : kCounts) {
    Tensor recv = poisoned(dt, n * size);
    Tensor own = recv.view({n}, rank * n, "own block");
    Tensor mine = contribution(dt, rank, n);
    for (std::int64_t j = 0; j < n; ++j) store(own, j, load(mine, j));
    world.all_gather(own, recv).wait();
    for (int q = 0; q < size; ++q)
      for (std::int64_t j = 0; j < n; ++j)
        ASSERT_EQ(load(recv, q * n + j), value_of(dt, q, j)) << "n " << n << ": block of rank " << q << ", element " << j;
  }
}

TEST_P(CommByDType, ReduceScatterGivesThisRanksBlockOfTheSum) {
  const DType dt = std::get<0>(GetParam());
  auto world_ptr = make_world(std::get<1>(GetParam()));
  Communicator& world = *world_ptr;
  const int size = world.size(), rank = world.rank();
  for (std::int64_t k : kCounts) {
    Tensor send = contribution(dt, rank, k * size);
    Tensor recv = poisoned(dt, k);
    world.reduce_scatter_sum(send, recv).wait();
    for (std::int64_t i = 0; i < k; ++i)
      ASSERT_EQ(load(recv, i), sum_over_ranks(dt, size, rank * k + i)) << "block " << k << ", element " << i;
  }
}

TEST_P(CommByDType, AllReduceSumsEveryElement) {
  const DType dt = std::get<0>(GetParam());
  auto world_ptr = make_world(std::get<1>(GetParam()));
  Communicator& world = *world_ptr;
  for (std::int64_t n : kCounts) {
    Tensor inout = contribution(dt, world.rank(), n);
    world.all_reduce_sum(inout).wait();
    for (std::int64_t j = 0; j < n; ++j) ASSERT_EQ(load(inout, j), sum_over_ranks(dt, world.size(), j)) << "element " << j;
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, CommByDType,
                         ::testing::Combine(::testing::Values(DType::f32, DType::bf16, DType::i64),
                                            ::testing::Values(Kind::mpi, Kind::staged)),
                         [](const auto& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) + "_" +
                                  kind_name(std::get<1>(info.param));
                         });

TEST_P(CommByKind, AllReduceMaxTakesTheLargestPerElement) {
  auto world_ptr = make_world(GetParam());
  Communicator& world = *world_ptr;
  const int size = world.size();
  for (std::int64_t n : kCounts) {
    Tensor inout = Tensor::empty({n}, DType::f32);
    for (std::int64_t j = 0; j < n; ++j) inout.data_as<float>()[j] = max_value_of(world.rank(), j, size);
    world.all_reduce_max(inout).wait();
    for (std::int64_t j = 0; j < n; ++j) {
      float expected = max_value_of(0, j, size);
      for (int q = 1; q < size; ++q) expected = std::max(expected, max_value_of(q, j, size));
      ASSERT_EQ(inout.data_as<float>()[j], expected) << "element " << j;
    }
  }
  Tensor not_f32 = contribution(DType::bf16, 0, 4);
  EXPECT_THROW(world.all_reduce_max(not_f32), Error);
}

// Stream order with compute (communicator.hpp): a collective given an event
// recorded on an asynchronous compute stream starts only after the work
// before the event ran, and the caller does not block for it. The work here
// writes the collective's input after a delay: a collective that started
// at once would send the poison values still in the buffer.
TEST_P(CommByKind, CollectivesStartAfterTheComputeEventTheyAreGiven) {
  using Clock = std::chrono::steady_clock;
  constexpr auto kDelay = std::chrono::milliseconds(300);
  auto world_ptr = make_world(GetParam());
  Communicator& world = *world_ptr;
  const int size = world.size(), rank = world.rank();
  auto compute = make_host_stream(/*asynchronous=*/true, "test_compute");
  const std::int64_t k = 257;
  // Enqueues "sleep, then write `values` into t" and returns the event behind it.
  auto write_late = [&](Tensor t, std::vector<std::int64_t> values) {
    compute->enqueue([t, values = std::move(values), kDelay]() mutable {
      std::this_thread::sleep_for(kDelay);
      for (std::size_t i = 0; i < values.size(); ++i) store(t, static_cast<std::int64_t>(i), values[i]);
    });
    return compute->record();
  };
  auto contributions = [&](std::int64_t n) {
    std::vector<std::int64_t> v(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = value_of(DType::f32, rank, i);
    return v;
  };

  Tensor gather_send = poisoned(DType::f32, k), gathered = poisoned(DType::f32, k * size);
  const auto t0 = Clock::now();
  Request gather = world.all_gather(gather_send, gathered, write_late(gather_send, contributions(k)));
  const auto issue_time = Clock::now() - t0;
  if (MpiCommunicator(MPI_COMM_WORLD).threaded_progress())
    EXPECT_LT(issue_time, kDelay / 2) << "issuing waited for the compute stream; the progress thread should";
  gather.wait();
  for (int q = 0; q < size; ++q)
    for (std::int64_t j = 0; j < k; ++j)
      ASSERT_EQ(load(gathered, q * k + j), value_of(DType::f32, q, j)) << "all_gather: rank " << q << ", element " << j;

  Tensor scatter_send = poisoned(DType::f32, k * size), block = poisoned(DType::f32, k);
  Request scattered =
      world.reduce_scatter_sum(scatter_send, block, write_late(scatter_send, contributions(k * size)));
  // Queued behind the reduce-scatter (stream order) and gated on the same kind of event.
  Tensor summed = poisoned(DType::f32, k);
  Request reduced = world.all_reduce_sum(summed, write_late(summed, contributions(k)));
  Tensor maxed = poisoned(DType::f32, k);
  Request maxed_request = world.all_reduce_max(maxed, write_late(maxed, contributions(k)));
  scattered.wait();
  reduced.wait();
  maxed_request.wait();
  for (std::int64_t i = 0; i < k; ++i) {
    ASSERT_EQ(load(block, i), sum_over_ranks(DType::f32, size, rank * k + i)) << "reduce_scatter: element " << i;
    ASSERT_EQ(load(summed, i), sum_over_ranks(DType::f32, size, i)) << "all_reduce_sum: element " << i;
    ASSERT_EQ(load(maxed, i), value_of(DType::f32, size - 1, i)) << "all_reduce_max: element " << i;
  }
  compute->synchronize();
}

// Compute after a collective (issue 19): Request::completion() is an Event
// that completes when the collective has run, so a stream that waits on it
// reads the collective's output without the caller blocking. The collective
// here is held back by a late compute event; the consumer stream copies the
// gathered values as soon as its wait lets it: had it not waited, it would
// copy the poison still in the buffer.
TEST(Comm, AStreamWaitingOnACompletionEventSeesTheCollectivesOutput) {
  constexpr auto kDelay = std::chrono::milliseconds(200);
  MpiCommunicator world(MPI_COMM_WORLD);
  const int size = world.size(), rank = world.rank();
  auto producer = make_host_stream(/*asynchronous=*/true, "test_producer");
  auto consumer = make_host_stream(/*asynchronous=*/true, "test_consumer");
  const std::int64_t k = 65;
  Tensor send = poisoned(DType::f32, k), gathered = poisoned(DType::f32, k * size);
  producer->enqueue([send, rank, k, kDelay]() mutable {
    std::this_thread::sleep_for(kDelay);
    for (std::int64_t i = 0; i < k; ++i) store(send, i, value_of(DType::f32, rank, i));
  });
  Request gather = world.all_gather(send, gathered, producer->record());
  const Event done = gather.completion();
  if (world.threaded_progress()) EXPECT_FALSE(done.query()) << "complete before its input was written";
  std::vector<std::int64_t> seen(static_cast<std::size_t>(k * size), -1);
  consumer->wait(done);
  consumer->enqueue([&seen, gathered, k, size] {
    for (std::int64_t i = 0; i < k * size; ++i) seen[static_cast<std::size_t>(i)] = load(gathered, i);
  });
  consumer->synchronize();
  EXPECT_TRUE(done.query());
  for (int q = 0; q < size; ++q)
    for (std::int64_t j = 0; j < k; ++j)
      ASSERT_EQ(seen[static_cast<std::size_t>(q * k + j)], value_of(DType::f32, q, j)) << "rank " << q << ", element " << j;
  gather.wait();  // the request still owes its error check
  EXPECT_TRUE(Request().completion().query()) << "an empty request's event is complete";
  producer->synchronize();
}

// Bad arguments fail at once on the caller's thread, and queue nothing.
TEST_P(CommByKind, BadArgumentsThrowBeforeAnythingIsIssued) {
  auto world_ptr = make_world(GetParam());
  Communicator& world = *world_ptr;
  const int size = world.size();
  Tensor send = contribution(DType::f32, world.rank(), 3);
  Tensor wrong_size = poisoned(DType::f32, 3 * size + 1);
  Tensor wrong_dtype = poisoned(DType::bf16, 3 * size);
  EXPECT_THROW(world.all_gather(send, wrong_size), Error);
  EXPECT_THROW(world.all_gather(send, wrong_dtype), Error);
  // send overlapping recv anywhere but at this rank's own block.
  Tensor gathered = poisoned(DType::f32, 3 * size + 1);
  Tensor shifted = gathered.view({3}, 3 * world.rank() + 1, "shifted block");
  Tensor target = gathered.view({3 * size}, 0, "recv");
  EXPECT_THROW(world.all_gather(shifted, target), Error);
  Tensor big = contribution(DType::f32, world.rank(), 3 * size + 1);
  Tensor block = poisoned(DType::f32, 3);
  EXPECT_THROW(world.reduce_scatter_sum(big, block), Error);
  Tensor halves = Tensor::empty({4}, DType::f16);
  EXPECT_THROW(world.all_reduce_sum(halves), Error);
  // Still matched across ranks: nothing above reached MPI.
  Tensor inout = contribution(DType::f32, world.rank(), 5);
  world.all_reduce_sum(inout).wait();
  EXPECT_EQ(load(inout, 4), sum_over_ranks(DType::f32, size, 4));
}

TEST_P(CommByKind, SplitGroupsByColorAndOrdersByKey) {
  auto world_ptr = make_world(GetParam());
  Communicator& world = *world_ptr;
  const int rank = world.rank(), size = world.size();
  // Even and odd ranks, each group in descending world-rank order.
  auto sub = world.split(rank % 2, -rank);
  std::vector<std::int64_t> expected;
  for (int q = size - 1; q >= 0; --q)
    if (q % 2 == rank % 2) expected.push_back(q);
  ASSERT_EQ(sub->size(), static_cast<int>(expected.size()));
  EXPECT_EQ(sub->rank(), static_cast<int>(std::find(expected.begin(), expected.end(), rank) - expected.begin()));
  Tensor mine = Tensor::empty({1}, DType::i64);
  mine.data_as<std::int64_t>()[0] = rank;
  Tensor all = poisoned(DType::i64, sub->size());
  sub->all_gather(mine, all).wait();
  for (int i = 0; i < sub->size(); ++i) EXPECT_EQ(load(all, i), expected[static_cast<std::size_t>(i)]) << "sub rank " << i;
  EXPECT_EQ(sub->all_reduce_sum(std::int64_t{1}), sub->size());
}

TEST_P(CommByKind, SplitNodeHoldsExactlyTheRanksOfThisHost) {
  auto world_ptr = make_world(GetParam());
  Communicator& world = *world_ptr;
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  MPI_Get_processor_name(name, &length);
  Tensor mine = Tensor::empty({1}, DType::i64);
  mine.data_as<std::int64_t>()[0] = static_cast<std::int64_t>(std::hash<std::string>{}(std::string(name, length)) >> 1);
  Tensor hosts = poisoned(DType::i64, world.size());
  world.all_gather(mine, hosts).wait();
  std::vector<int> same_host;
  for (int q = 0; q < world.size(); ++q)
    if (load(hosts, q) == load(mine, 0)) same_host.push_back(q);
  auto node = world.split_node();
  ASSERT_EQ(node->size(), static_cast<int>(same_host.size()));
  EXPECT_EQ(node->rank(), static_cast<int>(std::find(same_host.begin(), same_host.end(), world.rank()) - same_host.begin()));
  Tensor ranks = poisoned(DType::i64, node->size());
  Tensor me = Tensor::empty({1}, DType::i64);
  me.data_as<std::int64_t>()[0] = world.rank();
  node->all_gather(me, ranks).wait();
  for (int i = 0; i < node->size(); ++i) EXPECT_EQ(load(ranks, i), same_host[static_cast<std::size_t>(i)]);
}

// Many requests on two communicators in flight at once, finished in an
// order other than the one they were issued in.
TEST_P(CommByKind, ConcurrentRequestsAllComplete) {
  auto world_ptr = make_world(GetParam());
  Communicator& world = *world_ptr;
  const int rank = world.rank(), size = world.size();
  auto sub = world.split(0, size - rank);  // every rank, reversed
  const std::int64_t n = 333;
  std::vector<Tensor> gather_send, gather_recv, sums, sub_sums;
  std::vector<Request> requests;
  for (int i = 0; i < 4; ++i) {
    gather_send.push_back(contribution(DType::f32, rank, n, i));
    gather_recv.push_back(poisoned(DType::f32, n * size));
    sums.push_back(contribution(DType::i64, rank, n, i));
    sub_sums.push_back(contribution(DType::bf16, sub->rank(), n, i));
    requests.push_back(world.all_gather(gather_send.back(), gather_recv.back()));
    requests.push_back(world.all_reduce_sum(sums.back()));
    requests.push_back(sub->all_reduce_sum(sub_sums.back()));
  }
  std::reverse(requests.begin(), requests.end());
  for (auto& r : requests) r.wait();
  for (int i = 0; i < 4; ++i) {
    for (int q = 0; q < size; ++q)
      for (std::int64_t j = 0; j < n; ++j)
        ASSERT_EQ(load(gather_recv[i], q * n + j), value_of(DType::f32, q, i + j)) << "gather " << i << " rank " << q;
    for (std::int64_t j = 0; j < n; ++j) {
      ASSERT_EQ(load(sums[i], j), sum_over_ranks(DType::i64, size, i + j)) << "sum " << i;
      ASSERT_EQ(load(sub_sums[i], j), sum_over_ranks(DType::bf16, size, i + j)) << "sub sum " << i;
    }
  }
}

// Stream order (communicator.hpp): a collective issued right behind another
// one, without waiting, sees its output, also across split communicators.
TEST_P(CommByKind, LaterCollectiveReadsTheOutputOfAnEarlierOne) {
  auto world_ptr = make_world(GetParam());
  Communicator& world = *world_ptr;
  const int rank = world.rank(), size = world.size();
  auto alone = world.split(rank, 0);    // each rank alone
  auto all = world.split(0, rank);      // every rank again
  const std::int64_t k = 64;
  Tensor send = contribution(DType::f32, rank, k * size);
  Tensor block = poisoned(DType::f32, k);
  Request scattered = all->reduce_scatter_sum(send, block);
  Request summed = world.all_reduce_sum(block);  // sum over ranks of every rank's block
  Request touched = alone->all_reduce_sum(block);  // a no-op sum of one rank, queued behind
  summed.wait();
  touched.wait();
  scattered.wait();
  for (std::int64_t i = 0; i < k; ++i) {
    std::int64_t expected = 0;
    for (int r = 0; r < size; ++r) expected += sum_over_ranks(DType::f32, size, r * k + i);
    ASSERT_EQ(load(block, i), expected) << "element " << i;
  }
}

// all_gather_v (the FP8 all-gather's collective): rank r sends r + 1
// elements but rank 1 none; recv is their concatenation in rank order;
// fp8 bytes gather as they are; reductions still refuse fp8.
TEST_P(CommByKind, AllGatherVConcatenatesVariableCountsInRankOrder) {
  auto world_ptr = make_world(GetParam());
  Communicator& world = *world_ptr;
  const int n = world.size();
  std::vector<std::int64_t> counts;
  for (int r = 0; r < n; ++r) counts.push_back(r == 1 ? 0 : r + 1);
  std::int64_t total = 0;
  for (auto c : counts) total += c;
  const std::int64_t mine = counts[static_cast<std::size_t>(world.rank())];
  Tensor send = Tensor::empty({mine}, DType::fp8_e4m3);
  for (std::int64_t j = 0; j < mine; ++j) static_cast<std::uint8_t*>(send.data())[j] = static_cast<std::uint8_t>(16 * world.rank() + j);
  Tensor recv = Tensor::empty({total}, DType::fp8_e4m3);
  world.all_gather_v(send, recv, counts).wait();
  std::int64_t at = 0;
  for (int r = 0; r < n; ++r)
    for (std::int64_t j = 0; j < counts[static_cast<std::size_t>(r)]; ++j, ++at)
      ASSERT_EQ(static_cast<const std::uint8_t*>(recv.data())[at], 16 * r + j) << "rank " << r << ", element " << j;
  Tensor wrong = Tensor::empty({mine + 1}, DType::fp8_e4m3);
  EXPECT_THROW(world.all_gather_v(wrong, recv, counts), Error);
  EXPECT_THROW(world.all_reduce_sum(recv), Error) << "fp8 bytes gather, they never reduce";
}

// send_recv (the ring of ring attention): every rank sends to one rank and
// receives from another, as one exchange. Three rings: to the successor
// (from the predecessor), the other way round, and two ranks on, so a
// swapped `to` and `from` or a fixed direction shows; odd and zero sizes.
TEST_P(CommByKind, SendRecvExchangesAroundARing) {
  auto world_ptr = make_world(GetParam());
  Communicator& world = *world_ptr;
  const int n = world.size(), r = world.rank();
  for (const DType dt : {DType::f32, DType::bf16, DType::i64}) {
    for (const int hop : {1, -1, 2}) {
      const int to = ((r + hop) % n + n) % n, from = ((r - hop) % n + n) % n;
      for (std::int64_t count : kCounts) {
        Tensor send = contribution(dt, r, count);
        Tensor recv = poisoned(dt, count);
        world.send_recv(send, to, recv, from).wait();
        for (std::int64_t j = 0; j < count; ++j)
          ASSERT_EQ(load(recv, j), value_of(dt, from, j))
              << dtype_name(dt) << ", hop " << hop << ", " << count << " elements: element " << j << " from rank "
              << from;
      }
    }
  }
}

// A ring of exchanges issued back to back before any is waited for (ring
// attention's K and V travel as two exchanges per step): stream order keeps
// them matched, each receives its own data.
TEST_P(CommByKind, SendRecvsInFlightTogetherStayMatched) {
  auto world_ptr = make_world(GetParam());
  Communicator& world = *world_ptr;
  const int n = world.size(), r = world.rank();
  const int to = (r + 1) % n, from = (r + n - 1) % n;
  std::vector<Tensor> sends, recvs;
  std::vector<Request> requests;
  for (int i = 0; i < 4; ++i) {
    sends.push_back(contribution(DType::f32, r, 100 + i, /*first=*/1000 * i));
    recvs.push_back(poisoned(DType::f32, 100 + i));
    requests.push_back(world.send_recv(sends.back(), to, recvs.back(), from));
  }
  for (int i = 0; i < 4; ++i) {
    requests[static_cast<std::size_t>(i)].wait();
    for (std::int64_t j = 0; j < 100 + i; ++j)
      ASSERT_EQ(load(recvs[static_cast<std::size_t>(i)], j), value_of(DType::f32, from, 1000 * i + j))
          << "exchange " << i << ", element " << j;
  }
}

// Gated on a compute event like the collectives: the sent buffer is written
// by a late compute job; an exchange that started at once would send poison.
TEST_P(CommByKind, SendRecvStartsAfterTheComputeEventItIsGiven) {
  auto world_ptr = make_world(GetParam());
  Communicator& world = *world_ptr;
  const int n = world.size(), r = world.rank();
  auto compute = make_host_stream(/*asynchronous=*/true, "test_compute");
  const std::int64_t count = 333;
  Tensor send = poisoned(DType::f32, count), recv = poisoned(DType::f32, count);
  compute->enqueue([send]() mutable {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    for (std::int64_t j = 0; j < send.numel(); ++j) store(send, j, value_of(DType::f32, 0, j) + 1);
  });
  world.send_recv(send, (r + 1) % n, recv, (r + n - 1) % n, compute->record()).wait();
  for (std::int64_t j = 0; j < count; ++j) ASSERT_EQ(load(recv, j), value_of(DType::f32, 0, j) + 1) << "element " << j;
  compute->synchronize();
}

TEST_P(CommByKind, SendRecvRefusesBadArgumentsBeforeIssuing) {
  auto world_ptr = make_world(GetParam());
  Communicator& world = *world_ptr;
  const int n = world.size();
  Tensor a = poisoned(DType::f32, 8), b = poisoned(DType::f32, 8), i64 = poisoned(DType::i64, 8);
  EXPECT_THROW(world.send_recv(a, n, b, 0), Error) << "to rank past the group";
  EXPECT_THROW(world.send_recv(a, 0, b, -1), Error) << "from a negative rank";
  EXPECT_THROW(world.send_recv(a, 0, i64, 0), Error) << "different dtypes";
  Tensor half = a.view({4}, 2, "overlapping");
  EXPECT_THROW(world.send_recv(a, 0, half, 0), Error) << "recv overlapping send";
  // Nothing was issued: the group still exchanges normally.
  Tensor ok = contribution(DType::f32, world.rank(), 8);
  world.send_recv(ok, world.rank(), b, world.rank()).wait();
  for (std::int64_t j = 0; j < 8; ++j) ASSERT_EQ(load(b, j), value_of(DType::f32, world.rank(), j));
}

INSTANTIATE_TEST_SUITE_P(Kinds, CommByKind, ::testing::Values(Kind::mpi, Kind::staged),
                         [](const auto& info) { return std::string(kind_name(info.param)); });

TEST(Comm, WaitAndTestFinishARequestOnce) {
  MpiCommunicator world(MPI_COMM_WORLD);
  Request empty;
  EXPECT_FALSE(empty.pending());
  EXPECT_TRUE(empty.test());
  empty.wait();

  Tensor inout = contribution(DType::f32, world.rank(), 1000);
  Request r = world.all_reduce_sum(inout);
  EXPECT_TRUE(r.pending());
  while (!r.test()) {
  }
  EXPECT_FALSE(r.pending());
  EXPECT_TRUE(r.test());
  r.wait();
  EXPECT_EQ(load(inout, 999), sum_over_ranks(DType::f32, world.size(), 999));

  Tensor again = contribution(DType::f32, world.rank(), 10);
  Request w = world.all_reduce_sum(again);
  w.wait();
  EXPECT_FALSE(w.pending());
  EXPECT_TRUE(w.test());
  EXPECT_EQ(load(again, 9), sum_over_ranks(DType::f32, world.size(), 9));
}

// Errors of the progress thread reach the caller through test() and wait()
// (issue 22 s3), and a communicator stays usable when every rank saw the
// same failure.
class CommFault : public ::testing::Test {
 protected:
  void TearDown() override { set_collective_fault_for_testing("", 0); }
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST_F(CommFault, TestRethrowsTheErrorOfACompleteRequest) {
  MpiCommunicator world(MPI_COMM_WORLD);
  set_collective_fault_for_testing("reduce_scatter_sum", 2);
  const int size = world.size();
  Tensor send = contribution(DType::f32, world.rank(), 4 * size);
  Tensor first = poisoned(DType::f32, 4), second = poisoned(DType::f32, 4);
  Request ok = world.reduce_scatter_sum(send, first);
  Request failing = world.reduce_scatter_sum(send, second);
  ok.wait();
  const std::string message = error_of([&] {
    while (!failing.test()) {
    }
  });
  EXPECT_NE(message.find("reduce_scatter_sum of"), std::string::npos) << message;
  EXPECT_NE(message.find("injected fault"), std::string::npos) << message;
  EXPECT_FALSE(failing.pending());  // finished once: its error is not raised again
  EXPECT_TRUE(failing.test());
  EXPECT_EQ(load(first, 3), sum_over_ranks(DType::f32, size, world.rank() * 4 + 3));
  EXPECT_EQ(load(second, 3), 255) << "the failed collective must not have run";
}

// A failed exchange (ring attention's) fails its Request like a collective,
// naming the exchange and both ranks.
TEST_F(CommFault, AFailedSendRecvRethrowsNamingTheExchange) {
  MpiCommunicator world(MPI_COMM_WORLD);
  set_collective_fault_for_testing("send_recv", 1);
  const int n = world.size(), r = world.rank();
  Tensor send = contribution(DType::f32, r, 5), recv = poisoned(DType::f32, 5);
  Request failing = world.send_recv(send, (r + 1) % n, recv, (r + n - 1) % n);
  const std::string message = error_of([&] { failing.wait(); });
  EXPECT_NE(message.find("send_recv of"), std::string::npos) << message;
  EXPECT_NE(message.find("to rank " + std::to_string((r + 1) % n)), std::string::npos) << message;
  EXPECT_NE(message.find("injected fault"), std::string::npos) << message;
  EXPECT_EQ(load(recv, 0), 255) << "the failed exchange must not have run";
}

TEST_F(CommFault, WaitRethrowsAndLaterCollectivesAreRefused) {
  MpiCommunicator world(MPI_COMM_WORLD);
  set_collective_fault_for_testing("all_gather", 1);
  Tensor send = contribution(DType::i64, world.rank(), 3);
  Tensor recv = poisoned(DType::i64, 3 * world.size());
  Request failing = world.all_gather(send, recv);
  const std::string message = error_of([&] { failing.wait(); });
  EXPECT_NE(message.find("all_gather of"), std::string::npos) << message;
  EXPECT_NE(message.find("rank " + std::to_string(world.rank())), std::string::npos) << message;
  // Nothing after a failure reaches MPI: on a rank that failed alone it would
  // pair with the other ranks' pending collective.
  const auto untouched = load(recv, 2);
  const std::string refused = error_of([&] { world.all_gather(send, recv).wait(); });
  EXPECT_NE(refused.find("not started: an earlier collective of this rank failed"), std::string::npos) << refused;
  EXPECT_NE(refused.find("injected fault"), std::string::npos) << refused;
  EXPECT_NE(error_of([&] { world.all_reduce_sum(1.0); }).find("not started"), std::string::npos);
  EXPECT_EQ(load(recv, 2), untouched) << "the refused collective must not have run";
  set_collective_fault_for_testing("", 0);  // test only: clean slate
  world.all_gather(send, recv).wait();
  for (int q = 0; q < world.size(); ++q) EXPECT_EQ(load(recv, q * 3 + 2), value_of(DType::i64, q, 2));
}

TEST(Comm, ScalarReductions) {
  MpiCommunicator world(MPI_COMM_WORLD);
  const int rank = world.rank(), size = world.size();
  double expected_sum = 0, expected_max = -1e300;
  std::int64_t expected_i64 = 0;
  for (int q = 0; q < size; ++q) {
    expected_sum += q + 0.5;
    expected_max = std::max(expected_max, -std::abs(q - 1.25));
    expected_i64 += (std::int64_t{1} << 60) / 8 + q;
  }
  EXPECT_EQ(world.all_reduce_sum(rank + 0.5), expected_sum);
  EXPECT_EQ(world.all_reduce_max(-std::abs(rank - 1.25)), expected_max);
  EXPECT_EQ(world.all_reduce_sum((std::int64_t{1} << 60) / 8 + rank), expected_i64);
  world.barrier();
}

TEST(Comm, TimesCountNonBlockingCollectivesUntilReset) {
  MpiCommunicator world(MPI_COMM_WORLD);
  auto sub = world.split(0, world.rank());
  EXPECT_EQ(sub->times().busy_seconds, 0.0);
  Tensor inout = contribution(DType::f32, world.rank(), 100000);
  sub->all_reduce_sum(inout).wait();
  const CommTimes after = sub->times();
  EXPECT_GT(after.busy_seconds, 0.0);
  EXPECT_GE(after.exposed_seconds, 0.0);
  sub->all_reduce_sum(1.0);  // blocking helpers are not counted
  EXPECT_EQ(sub->times().busy_seconds, after.busy_seconds);
  sub->reset_times();
  EXPECT_EQ(sub->times().busy_seconds, 0.0);
  EXPECT_EQ(sub->times().exposed_seconds, 0.0);
}

}  // namespace

// The staged communicator moves every buffer through the allocator of the
// tensor's device (cudaMemcpy on CUDA; here the host allocator, wrapped to
// count): one copy to host per input, one back per output, each of the
// tensor's size. Without staging (the MPI communicator) there are none.
namespace {
class CountingAllocator final : public DeviceAllocator {
 public:
  explicit CountingAllocator(DeviceAllocator* inner) : inner_(inner) {}
  Device device() const override { return inner_->device(); }
  std::shared_ptr<void> allocate(std::size_t bytes) override { return inner_->allocate(bytes); }
  void zero(void* dst, std::size_t bytes) override { inner_->zero(dst, bytes); }
  void copy(void* dst, const void* src, std::size_t bytes) override { inner_->copy(dst, src, bytes); }
  void copy_from_host(void* dst, const void* src, std::size_t bytes) override {
    from_host_bytes += bytes;
    ++from_host;
    inner_->copy_from_host(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
    to_host_bytes += bytes;
    ++to_host;
    inner_->copy_to_host(dst, src, bytes);
  }
  AllocatorStats stats() const override { return inner_->stats(); }
  std::atomic<int> to_host{0}, from_host{0};
  std::atomic<std::size_t> to_host_bytes{0}, from_host_bytes{0};

 private:
  DeviceAllocator* inner_;
};
}  // namespace

TEST(StagedComm, CopiesGoThroughTheDevicesAllocator) {
  CountingAllocator counting(find_allocator(Device::host));
  DeviceAllocator* previous = register_allocator(Device::host, &counting);
  {
    StagedCommunicator staged(MPI_COMM_WORLD);
    const int size = staged.size();
    Tensor send = contribution(DType::bf16, staged.rank(), 7), recv = poisoned(DType::bf16, 7 * size);
    staged.all_gather(send, recv).wait();
    EXPECT_EQ(counting.to_host.load(), 1);
    EXPECT_EQ(counting.from_host.load(), 1);
    EXPECT_EQ(counting.to_host_bytes.load(), send.nbytes());
    EXPECT_EQ(counting.from_host_bytes.load(), recv.nbytes());
    Tensor inout = contribution(DType::f32, staged.rank(), 5);
    staged.all_reduce_sum(inout).wait();
    EXPECT_EQ(counting.to_host.load(), 2);
    EXPECT_EQ(counting.from_host.load(), 2);
    EXPECT_EQ(load(inout, 4), sum_over_ranks(DType::f32, size, 4));

    MpiCommunicator mpi(MPI_COMM_WORLD);
    mpi.all_reduce_sum(inout).wait();
    EXPECT_EQ(counting.to_host.load(), 2) << "the MPI communicator stages nothing";
    EXPECT_NE(staged.describe().find("staged"), std::string::npos);
  }
  register_allocator(Device::host, previous);
}
