// CUDA API discipline of the CUDA backend's host side (issue 33), checked on
// a machine without a GPU: libftrain_cuda's own objects, linked against the
// recording stand-in of the CUDA runtime, cuBLASLt, cuDNN and NCCL
// (cuda_api_standin.cpp), loaded as the CUDA backend (FTRAIN_CUDA_BACKEND).
// The engine's patterns are driven through the public API the engine uses
// (Tensor, ExecutionContext, streams and events, the staged and NCCL
// communicators); the kernels themselves do not run.
//
// Run under mpirun -np 2: each rank binds to its node-local GPU as the
// trainer does (bind_local_gpu), so rank 1 must see device 1 in every call
// of every thread; rank 0's device is CUDA's default, which is why np 2.
//
// The rules (share/doc/execution-model.md, "Streams on CUDA"):
//  * the rank's device is set before any allocation, handle or stream is
//    made, on every thread that calls CUDA;
//  * no legacy or per-thread default stream; every stream non-blocking;
//  * inside a step: no synchronous copy, memset, allocation, free or
//    device synchronize on any thread, and the step's thread waits for no
//    stream or event;
//  * no host function waits for another thread's work (the stand-in ends a
//    deadlocked process, exit 86, naming who waits for what).
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/device_communicator.hpp"
#include "comm/mpi_communicator.hpp"
#include "comm/staged_communicator.hpp"
#include "base/error.hpp"
#include "core/tensor.hpp"
#include "cuda_api/cuda_api_recorder.hpp"
#include "kernels/ops.hpp"
#include "runtime/allocator.hpp"
#include "runtime/execution_context.hpp"
#include "support/backend_parity.hpp"

namespace {

using namespace ftrain;

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// Loads the backend and binds the rank before any test, as the trainer
// does before it makes the engine (train/trainer.cpp); the record of that
// phase stays for DeviceBinding.
class BindRank : public ::testing::Environment {
 public:
  void SetUp() override {
    cuda_api::set_device_count(2);
    cuda_api::set_expected_device(world_rank());
    ASSERT_NE(find_allocator(Device::cuda), nullptr) << "the cuda-api backend did not load (FTRAIN_CUDA_BACKEND?)";
    MpiCommunicator world(MPI_COMM_WORLD);
    const GpuAssignment a = bind_local_gpu(world, DeviceComm::mpi, Device::cuda);
    ASSERT_EQ(a.ordinal, world_rank()) << a.describe();
  }
};
const auto* const kBindRank = ::testing::AddGlobalTestEnvironment(new BindRank);


ExecutionOptions cuda_options() {
  ExecutionOptions o;
  o.device = Device::cuda;
  return o;
}

Tensor host_iota(std::int64_t n, float base, const char* name) {
  Tensor t = Tensor::empty({n}, DType::f32, Device::host, name);
  for (std::int64_t i = 0; i < n; ++i) t.data_as<float>()[i] = base + static_cast<float>(i);
  return t;
}

// Fault 3: every call of every thread (main, MPI progress, NCCL watchdog, a
// thread of the test's own) on the rank's device, set before anything is
// made; registration and binding included (the record starts at load).
TEST(DeviceBinding, EveryThreadCallsCudaOnTheRanksDevice) {
  {
    ExecutionContext ctx(cuda_options());
    Tensor x = to_device(host_iota(64, 1.0f, "x"), Device::cuda);
    Tensor y = x.clone();
    Tensor z = Tensor::zeros({64}, DType::f32, Device::cuda, "z");
    StagedCommunicator staged(MPI_COMM_WORLD);
    Tensor gathered = Tensor::empty({64 * staged.size()}, DType::f32, Device::cuda, "gathered");
    Request r = staged.all_gather(y, gathered, ctx.compute().record());  // copies on the progress thread
    ctx.compute().wait(r.completion());
    r.wait();
    auto nccl = make_device_communicator(DeviceComm::nccl, MPI_COMM_SELF, ctx);  // watchdog thread polls events
    Request n = nccl->all_reduce_sum(z, ctx.compute().record());
    n.wait();
    Event e = ctx.compute().record();
    std::thread([e] { e.synchronize(); }).join();  // a helper thread asks about a CUDA event
    ctx.synchronize();
    const Tensor back = host_readable(gathered);
    for (int r2 = 0; r2 < staged.size(); ++r2)
      EXPECT_EQ(back.data_as<float>()[r2 * 64 + 5], 6.0f) << "rank " << r2 << "'s block of the staged all_gather";
  }
  const auto off = cuda_api::calls_off_the_rank_device();
  EXPECT_TRUE(off.empty()) << "rank " << world_rank() << ": " << off.size()
                           << " CUDA calls were made on a thread whose device was not the rank's:\n"
                           << cuda_api::listing(off);
}

// Fault 6: no stream is blocking and nothing uses the legacy default stream
// (allocation, free, zero, copies, events, the communicators' streams).
TEST(Streams, NonBlockingAndNeverTheLegacyDefaultStream) {
  const std::uint64_t since = cuda_api::last_sequence();
  {
    ExecutionContext ctx(cuda_options());
    Tensor a = Tensor::zeros({256}, DType::f32, Device::cuda, "a");
    Tensor b = a.clone();
    Tensor h = host_readable(b);
    Tensor u = to_device(host_iota(16, 0.0f, "tokens"), Device::cuda);
    copy_tensor(u, u);
    StagedCommunicator staged(MPI_COMM_WORLD);
    Tensor sum = Tensor::zeros({16}, DType::f32, Device::cuda, "sum");
    Request r = staged.all_reduce_sum(sum, ctx.compute().record());
    ctx.compute().wait(r.completion());
    r.wait();
    ctx.synchronize();
  }
  const auto legacy = cuda_api::default_stream_uses(since);
  EXPECT_TRUE(legacy.empty()) << legacy.size() << " calls on the legacy default stream:\n" << cuda_api::listing(legacy);
  const auto blocking = cuda_api::blocking_streams_created(since);
  EXPECT_TRUE(blocking.empty()) << blocking.size() << " blocking streams:\n" << cuda_api::listing(blocking);
}

// Fault 10: the pool does not keep every freed byte (cuDNN and NCCL
// cudaMalloc outside it and need room).
TEST(Pool, ReleaseThresholdLeavesRoomForTheLibraries) {
  ExecutionContext ctx(cuda_options());
  Tensor t = Tensor::empty({16}, DType::f32, Device::cuda, "t");  // the pool exists from the first allocation
  const std::uint64_t threshold = cuda_api::pool_release_threshold();
  EXPECT_GT(threshold, 0u) << "no release threshold was set on the pool";
  EXPECT_LE(threshold, cuda_api::device_memory_bytes() - (std::uint64_t{1} << 30))
      << "the pool keeps up to " << threshold << " freed bytes of a " << cuda_api::device_memory_bytes()
      << "-byte device: nothing is left to cuDNN's and NCCL's own allocations";
}

// Faults 6 and 7, and 1's host function: a step's worth of the engine's
// patterns (engine.cpp: gathered buffers, full_grad zeros per unit and
// micro-step, the tokens' upload, casts/copies, collectives after a compute
// event, the compute stream waiting for them, buffers dropped right after
// enqueueing their last use), three steps. Nothing in them may block.
TEST(Step, NoSynchronousCallAndNoWaitOnTheStepsThread) {
  ExecutionContext ctx(cuda_options());
  StagedCommunicator staged(MPI_COMM_WORLD);
  auto nccl = make_device_communicator(DeviceComm::nccl, MPI_COMM_SELF, ctx);
  Tensor master = to_device(host_iota(128, 0.0f, "master"), Device::cuda);  // before the steps
  const Tensor tokens = host_iota(32, 0.0f, "tokens");
  ctx.synchronize();
  const std::uint64_t since = cuda_api::last_sequence();
  for (int step = 0; step < 3; ++step) {
    cuda_api::begin_step(step);
    std::vector<Request> deferred;
    for (int unit = 0; unit < 2; ++unit) {
      Tensor inputs = to_device(tokens, Device::cuda);  // the micro-step's batch (engine.cpp:753)
      Tensor gathered = Tensor::empty({128 * staged.size()}, DType::f32, Device::cuda, "gathered");
      Request g = staged.all_gather(master, gathered, ctx.compute().record());
      ctx.compute().wait(g.completion());  // ensure_gathered: an event wait
      deferred.push_back(std::move(g));
      Tensor full_grad = Tensor::zeros({128 * staged.size()}, DType::f32, Device::cuda, "full_grad");
      Tensor send = gathered.clone();
      Tensor shard = Tensor::empty({128}, DType::f32, Device::cuda, "grad_shard");
      Request rs = nccl->reduce_scatter_sum(send.view({128}), shard, ctx.compute().record());
      rs.wait();  // NCCL: the compute stream waits on the device
      Request ar = staged.all_reduce_sum(shard, ctx.compute().record());
      ctx.compute().wait(ar.completion());
      deferred.push_back(std::move(ar));
    }  // the unit's buffers go here, right after their last use was enqueued
    for (Request& r : deferred) r.test();
    cuda_api::end_step();
    ctx.compute().synchronize();  // the log interval: outside the step's window
    for (Request& r : deferred) r.wait();
  }
  // The first step may fill the allocator's pinned upload blocks (a cache,
  // like the memory pool's); after that, nothing.
  std::vector<std::string> blocking;
  for (const std::string& call : cuda_api::blocking_calls_in_steps(since))
    if (call.find("in step 0") == std::string::npos || call.find("cudaHostAlloc") == std::string::npos)
      blocking.push_back(call);
  EXPECT_TRUE(blocking.empty()) << blocking.size() << " blocking calls inside 3 steps (per step: "
                                << blocking.size() / 3.0 << "):\n"
                                << cuda_api::listing(blocking);
  const auto host_functions = cuda_api::host_functions_in_steps(since);
  EXPECT_TRUE(host_functions.empty()) << host_functions.size()
                                      << " host functions launched in the steps (a stream's wait for a collective "
                                         "must be an event wait):\n"
                                      << cuda_api::listing(host_functions);
}

// Fault 1, as it deadlocked: the compute stream is still busy when the
// staged collective is issued after it and the compute stream waits for the
// collective. A wait expressed as a host function that blocks, with the
// collective's copies on the legacy stream, deadlocks the device; the
// stand-in then ends the process naming it (exit 86).
TEST(HostFunctions, StagedCollectiveBehindBusyComputeDoesNotDeadlock) {
  const std::uint64_t since = cuda_api::last_sequence();
  ExecutionContext ctx(cuda_options());
  StagedCommunicator staged(MPI_COMM_WORLD);
  Tensor send = to_device(host_iota(32, 1.0f, "send"), Device::cuda);
  Tensor recv = Tensor::empty({32 * staged.size()}, DType::f32, Device::cuda, "recv");
  ctx.compute().enqueue([] { std::this_thread::sleep_for(std::chrono::milliseconds(300)); });  // a long kernel
  Request r = staged.all_gather(send, recv, ctx.compute().record());
  ctx.compute().wait(r.completion());
  Tensor after = recv.clone();  // compute work that reads the collective's result
  ctx.compute().synchronize();
  r.wait();
  const Tensor back = host_readable(after);
  EXPECT_EQ(back.data_as<float>()[31], 32.0f);
  const auto bad = cuda_api::host_function_violations(since);
  EXPECT_TRUE(bad.empty()) << cuda_api::listing(bad);
}

// Fault 7: NCCL's issue never blocks the host on the compute event; the
// communication stream waits for it on the device.
TEST(Nccl, IssueWaitsOnTheCommunicationStreamNotTheHost) {
  ExecutionContext ctx(cuda_options());
  auto nccl = make_device_communicator(DeviceComm::nccl, MPI_COMM_SELF, ctx);
  Tensor x = to_device(host_iota(64, 0.0f, "x"), Device::cuda);
  Tensor y = Tensor::empty({64}, DType::f32, Device::cuda, "y");
  ctx.synchronize();
  const std::uint64_t since = cuda_api::last_sequence();
  ctx.compute().enqueue([] { std::this_thread::sleep_for(std::chrono::milliseconds(300)); });  // compute still busy
  cuda_api::begin_step(0);
  Request r = nccl->all_gather(x, y, ctx.compute().record());
  r.wait();
  cuda_api::end_step();
  ctx.synchronize();
  const auto blocking = cuda_api::blocking_calls_in_steps(since);
  EXPECT_TRUE(blocking.empty()) << "the NCCL issue blocked the step's thread:\n" << cuda_api::listing(blocking);
  bool waited_on_device = false;
  for (const cuda_api::Call& c : cuda_api::calls())
    if (c.sequence > since && c.name == "cudaStreamWaitEvent" && c.stream == reinterpret_cast<std::uintptr_t>(ctx.communication().native_handle()))
      waited_on_device = true;
  EXPECT_TRUE(waited_on_device) << "no cudaStreamWaitEvent on the communication stream before the collective";
}

}  // namespace

// The attention document mask's host side on the CUDA backend: the op no
// longer refuses the ids; it reads them back (real bytes here) and splits
// them into documents, so ids that make no packed window stop the op naming
// the row before any kernel; under auto the ragged cuDNN plan (which the
// stand-in's cuDNN refuses) falls back to the reference kernel, and the log
// line names the document mask's plan bucket.
TEST(Attention, DocumentIdsAreReadBackSplitAndCheckedOnTheCudaBackend) {
  ExecutionContext ctx(cuda_options());
  const std::int64_t B = 1, T = 64, H = 4, D = 64;
  Tensor q = Tensor::zeros({B, T, H, D}, DType::bf16, Device::cuda, "q");
  Tensor out = Tensor::zeros({B, T, H, D}, DType::bf16, Device::cuda, "out");
  Tensor lse = Tensor::zeros({B, H, T}, DType::f32, Device::cuda, "lse");
  auto ids_on_device = [&](const std::vector<std::int32_t>& values) {
    Tensor ids = Tensor::empty({B, T}, DType::i32, Device::host, "ids");
    for (std::int64_t t = 0; t < T; ++t) ids.data_as<std::int32_t>()[t] = values[static_cast<std::size_t>(t)];
    return to_device(ids, Device::cuda);
  };
  std::vector<std::int32_t> three(T, 2);  // documents of 16, 16 and 32 tokens
  for (std::int64_t t = 0; t < 32; ++t) three[static_cast<std::size_t>(t)] = t < 16 ? 0 : 1;
  const Tensor good = ids_on_device(three);
  ::testing::internal::CaptureStderr();
  EXPECT_NO_THROW(ops::attention_forward(ctx, q, q, q, true, &good, 0.125f, out, lse));
  ctx.synchronize();
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("document mask: 4 sequences of <= 32 tokens)"), std::string::npos) << log;
  std::vector<std::int32_t> decreasing = three;
  decreasing[40] = 1;
  const Tensor bad = ids_on_device(decreasing);
  try {
    ops::attention_forward(ctx, q, q, q, true, &bad, 0.125f, out, lse);
    ADD_FAILURE() << "decreasing document ids were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attention_forward: documents ids i32[1, 64] cuda: row 0 decreases at token 40 (2 then 1)"), std::string::npos) << e.what();
  }
  ctx.synchronize();
}

// Every op of op_list.hpp has a CUDA kernel: each op's parity case
// (tests/support/backend_parity.hpp, one per op) runs its host side on the
// CUDA backend, and none is refused as having no kernel yet (the kernels are
// recorded, not run: no number is read). The FP8 GEMMs' cases are refused
// by their kernel's own rule (cuBLASLt's FP8 multiples of 16; the GPU test
// checks them on shapes that fit), which shows that the kernel is there.
TEST(OpTable, EveryOpHasACudaKernel) {
  for (const auto& c : ftrain::testing::parity_cases()) {
    SCOPED_TRACE(c.op);
    ExecutionContext ctx(cuda_options());
    try {
      c.run(ctx, 1);
      ctx.synchronize();
    } catch (const Error& e) {
      const std::string what = e.what();
      const bool fp8_gemm_shape = (c.op == "fp8_linear_forward" || c.op == "fp8_linear_backward") &&
                                  what.find("cuBLASLt's FP8 leading-dimension rule") != std::string::npos;
      if (!fp8_gemm_shape) ADD_FAILURE() << c.op << " on the CUDA backend: " << what;
    }
  }
}
