#include "comm/nccl/nccl_communicator.hpp"
#include "comm/mpi_collectives.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <iostream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "backends/cuda/device/cuda_check.hpp"
#include "backends/cuda/device/cuda_device.hpp"
#include "comm/collective_watchdog.hpp"
#include "comm/nccl/nccl_bootstrap.hpp"
#include "comm/nccl/nccl_check.hpp"
#include "base/error.hpp"
#include "runtime/execution_context.hpp"

namespace ftrain::nccl {

namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t nccl_type(const Tensor& t) {
  switch (t.dtype()) {
    case DType::f32: return ncclFloat32;
    case DType::bf16: return ncclBfloat16;
    case DType::f64: return ncclFloat64;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    default: FT_THROW() << "NCCL has no type for " << t.describe();
  }
}

// What the communicators split from one share: streams, label, watchdog,
// the live NCCL communicators (for ncclCommAbort), busy time.
struct Shared {
  cudaStream_t comm_stream = nullptr;
  cudaStream_t compute_stream = nullptr;
  int world_rank = -1;
  std::mutex mutex;
  std::string unit;
  std::set<ncclComm_t> live;
  CommTimes times;
  std::unique_ptr<CollectiveWatchdog> watchdog;

  // Aborts every live NCCL communicator, then the job (the watchdog's verdict).
  [[noreturn]] void abort_job(const std::string& message) {
    std::cerr << "ftrain: error: " << message << std::endl;
    try {
      cuda::use_rank_device();  // the watchdog's thread
    } catch (...) {
    }
    {
      std::lock_guard<std::mutex> lock(mutex);
      for (ncclComm_t c : live) ncclCommAbort(c);
    }
    std::thread([] {
      std::this_thread::sleep_for(std::chrono::seconds(10));
      std::_Exit(3);
    }).detach();
    MPI_Abort(MPI_COMM_WORLD, 3);
    std::_Exit(3);
  }
};

// Polls a non-blocking communicator until its last call finished; past the
// collective timeout the job is aborted naming `what`.
void wait_ready(ncclComm_t comm, Shared& shared, const std::string& what) {
  const auto start = Clock::now();
  for (int spins = 0;; ++spins) {
    ncclResult_t state = ncclSuccess;
    FTRAIN_NCCL_CHECK(ncclCommGetAsyncError(comm, &state), comm);
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) FTRAIN_NCCL_CHECK(state, comm);
    const double timeout = collective_timeout_seconds();
    if (timeout > 0 && std::chrono::duration<double>(Clock::now() - start).count() > timeout)
      shared.abort_job("rank " + std::to_string(shared.world_rank) + ": " + what + " " + describe_unit(shared.unit) +
                       " did not finish within collective_timeout " + describe_timeout(timeout) +
                       "; ncclCommAbort, aborting the job");
    if (spins > 64) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

ncclConfig_t nonblocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // every call returns at once: a hang stays abortable
  return config;
}

using CudaEvent = std::shared_ptr<CUevent_st>;
CudaEvent make_event(bool timing) {
  cudaEvent_t e = nullptr;
  FTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
  return CudaEvent(e, [](cudaEvent_t x) { cudaEventDestroy(x); });
}

// The collective's end as an Event the engine's streams can wait on
// (runtime/stream.hpp: a CUDA stream waits with cudaStreamWaitEvent).
class NcclDoneEvent final : public NativeEvent {
 public:
  explicit NcclDoneEvent(CudaEvent done) : done_(std::move(done)) {}
  bool query() override {
    cuda::use_rank_device();  // also asked from the progress thread and host stream workers
    const cudaError_t e = cudaEventQuery(done_.get());
    if (e == cudaErrorNotReady) return false;
    FTRAIN_CUDA_CHECK(e);
    return true;
  }
  void synchronize() override {
    cuda::use_rank_device();
    FTRAIN_CUDA_CHECK(cudaEventSynchronize(done_.get()));
  }
  void* handle() const override { return done_.get(); }

 private:
  CudaEvent done_;
};

class NcclRequest final : public Request::Impl {
 public:
  NcclRequest(CudaEvent done, ncclComm_t comm, std::shared_ptr<Shared> shared)
      : done_(std::move(done)), comm_(comm), shared_(std::move(shared)) {}
  // The compute stream waits; the host does not (communicator.hpp).
  void wait() override {
    cuda::use_rank_device();
    FTRAIN_CUDA_CHECK(cudaStreamWaitEvent(shared_->compute_stream, done_.get(), 0));
    ncclResult_t state = ncclSuccess;
    FTRAIN_NCCL_CHECK(ncclCommGetAsyncError(comm_, &state), comm_);
    if (state != ncclInProgress) FTRAIN_NCCL_CHECK(state, comm_);
  }
  bool test() override {
    cuda::use_rank_device();
    return cudaEventQuery(done_.get()) != cudaErrorNotReady;
  }
  Event completion() const override { return Event::from_native(std::make_shared<NcclDoneEvent>(done_)); }

 private:
  CudaEvent done_;
  ncclComm_t comm_;
  std::shared_ptr<Shared> shared_;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, std::unique_ptr<MpiCommunicator> mpi, std::shared_ptr<Shared> shared)
      : comm_(comm), mpi_(std::move(mpi)), shared_(std::move(shared)) {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    shared_->live.insert(comm_);
  }
  ~NcclCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(shared_->mutex);
      shared_->live.erase(comm_);
    }
    try {
      cuda::use_rank_device();
    } catch (...) {
    }
    // Flush, then free; a destructor cannot report, so a communicator that
    // does not finalize within 30 s is aborted instead.
    ncclResult_t state = ncclCommFinalize(comm_);
    const auto start = Clock::now();
    while ((state == ncclSuccess || state == ncclInProgress) &&
           ncclCommGetAsyncError(comm_, &state) == ncclSuccess && state == ncclInProgress &&
           Clock::now() - start < std::chrono::seconds(30))
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    if (state == ncclSuccess)
      ncclCommDestroy(comm_);
    else
      ncclCommAbort(comm_);
  }

  int rank() const override { return mpi_->rank(); }
  int size() const override { return mpi_->size(); }
  std::string describe() const override {
    std::ostringstream s;
    s << "NCCL communicator rank " << rank() << "/" << size();
    return s.str();
  }

  Request all_gather(const Tensor& send, Tensor& recv, const Event& after) override {
    FT_CHECK(send.dtype() == recv.dtype() && recv.numel() == send.numel() * size() && send.device() == Device::cuda &&
             recv.device() == Device::cuda)
        << "all_gather: send " << send.describe() << ", recv " << recv.describe() << ", " << size() << " ranks";
    // NCCL gathers in place when send is recv's own block (its documented
    // in-place layout); any other overlap is refused.
    mpi_collectives::gathers_in_place(send, recv, rank());
    return issue("all_gather", send.describe(), after, {send, recv}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclAllGather(send.data(), recv.data(), static_cast<size_t>(send.numel()), nccl_type(send), c, s);
    });
  }
  // NCCL has no Allgatherv: one broadcast per root in a group, each into its
  // displacement of recv, as raw bytes (FP8 codes gather, never reduce; the
  // counts and displacements are MPI's, mpi_collectives::gather_counts).
  Request all_gather_v(const Tensor& send, Tensor& recv, const std::vector<std::int64_t>& counts,
                       const Event& after) override {
    FT_CHECK(static_cast<int>(counts.size()) == size() && send.dtype() == recv.dtype() &&
             send.device() == Device::cuda && recv.device() == Device::cuda)
        << "all_gather_v: send " << send.describe() << ", recv " << recv.describe() << ", " << counts.size()
        << " counts for " << size() << " ranks";
    const mpi_collectives::GatherCounts g = mpi_collectives::gather_counts(counts);
    FT_CHECK(send.numel() == counts[static_cast<std::size_t>(rank())] && recv.numel() == g.total)
        << "all_gather_v: send " << send.describe() << " must hold counts[" << rank() << "] = "
        << counts[static_cast<std::size_t>(rank())] << " elements and recv " << recv.describe() << " their sum "
        << g.total;
    const std::size_t element = dtype_size(send.dtype());
    return issue("all_gather_v", send.describe(), after, {send, recv}, [&](ncclComm_t c, cudaStream_t s) {
      ncclResult_t result = ncclGroupStart();
      for (int root = 0; root < size() && result == ncclSuccess; ++root) {
        const auto r = static_cast<std::size_t>(root);
        auto* dst = static_cast<char*>(recv.data()) + static_cast<std::size_t>(g.displacements[r]) * element;
        result = ncclBroadcast(root == rank() ? send.data() : nullptr, dst,
                               static_cast<std::size_t>(g.counts[r]) * element, ncclUint8, root, c, s);
      }
      const ncclResult_t end = ncclGroupEnd();
      return result != ncclSuccess ? result : end;
    });
  }
  Request reduce_scatter_sum(const Tensor& send, Tensor& recv, const Event& after) override {
    FT_CHECK(send.dtype() == recv.dtype() && send.numel() == recv.numel() * size() && send.device() == Device::cuda &&
             recv.device() == Device::cuda)
        << "reduce_scatter: send " << send.describe() << ", recv " << recv.describe() << ", " << size() << " ranks";
    return issue("reduce_scatter_sum", send.describe(), after, {send, recv}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclReduceScatter(send.data(), recv.data(), static_cast<size_t>(recv.numel()), nccl_type(send), ncclSum,
                               c, s);
    });
  }
  Request all_reduce_sum(Tensor& inout, const Event& after) override {
    FT_CHECK(inout.device() == Device::cuda) << "all_reduce_sum: " << inout.describe() << " is not on the GPU";
    return issue("all_reduce_sum", inout.describe(), after, {inout}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclAllReduce(inout.data(), inout.data(), static_cast<size_t>(inout.numel()), nccl_type(inout), ncclSum,
                           c, s);
    });
  }
  Request all_reduce_max(Tensor& inout, const Event& after) override {
    FT_CHECK(inout.dtype() == DType::f32 && inout.device() == Device::cuda)
        << "all_reduce_max: " << inout.describe() << " (f32 on the GPU only)";
    return issue("all_reduce_max", inout.describe(), after, {inout}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclAllReduce(inout.data(), inout.data(), static_cast<size_t>(inout.numel()), ncclFloat32, ncclMax, c,
                           s);
    });
  }
  // ncclSend and ncclRecv in one group, so a ring cannot deadlock.
  Request send_recv(const Tensor& send, int to, Tensor& recv, int from, const Event& after) override {
    mpi_collectives::check_send_recv(send, to, recv, from, size(), describe());
    FT_CHECK(send.device() == Device::cuda && recv.device() == Device::cuda)
        << "send_recv: send " << send.describe() << ", recv " << recv.describe() << " (on the GPU only)";
    return issue("send_recv", send.describe() + " to rank " + std::to_string(to) + ", from rank " + std::to_string(from),
                 after, {send, recv}, [&](ncclComm_t c, cudaStream_t s) {
                   ncclResult_t result = ncclGroupStart();
                   if (result == ncclSuccess)
                     result = ncclSend(send.data(), static_cast<size_t>(send.numel()), nccl_type(send), to, c, s);
                   if (result == ncclSuccess)
                     result = ncclRecv(recv.data(), static_cast<size_t>(recv.numel()), nccl_type(recv), from, c, s);
                   const ncclResult_t end = ncclGroupEnd();
                   return result != ncclSuccess ? result : end;
                 });
  }

  std::unique_ptr<Communicator> split(int color, int key) const override {
    cuda::use_rank_device();
    auto sub_mpi = mpi_->split(color, key);
    ncclComm_t sub = nullptr;
    ncclConfig_t config = nonblocking_config();
    FTRAIN_NCCL_CHECK(ncclCommSplit(comm_, color, key, &sub, &config), comm_);
    wait_ready(comm_, *shared_, "ncclCommSplit(color " + std::to_string(color) + ") on " + describe());
    wait_ready(sub, *shared_, "ncclCommSplit(color " + std::to_string(color) + ") on " + describe());
    return std::make_unique<NcclCommunicator>(
        sub, std::unique_ptr<MpiCommunicator>(static_cast<MpiCommunicator*>(sub_mpi.release())), shared_);
  }
  std::unique_ptr<Communicator> split_node() const override {
    // The node's ranks, as MPI_COMM_TYPE_SHARED finds them; the color is the
    // lowest world rank of the node.
    auto node = mpi_->split_node();
    const double leader = node->all_reduce_max(node->rank() == 0 ? static_cast<double>(rank()) : -1.0);
    return split(static_cast<int>(leader), rank());
  }
  void barrier() override { mpi_->barrier(); }
  void set_unit_label(const std::string& unit) override {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    shared_->unit = unit;
  }
  std::string unit_label() const override {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    return shared_->unit;
  }
  CommTimes times() const override {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    return shared_->times;
  }
  void reset_times() override {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    shared_->times = CommTimes{};
  }
  double all_reduce_sum(double value) override { return mpi_->all_reduce_sum(value); }
  double all_reduce_max(double value) override { return mpi_->all_reduce_max(value); }
  std::int64_t all_reduce_sum(std::int64_t value) override { return mpi_->all_reduce_sum(value); }

 private:
  template <typename Call>
  Request issue(const char* collective, const std::string& what, const Event& after, std::vector<Tensor> tensors,
                Call call) {
    const std::string name = std::string(collective) + " of " + what + " on " + describe();
    cuda::use_rank_device();
    // Stream order with compute: the collective reads what ops before `after`
    // wrote. The communication stream waits on the device (cudaStreamWaitEvent);
    // the host goes on (only a host event, which has no device form, is
    // waited for here: cuda_device.hpp).
    cuda::wait_on_stream(shared_->comm_stream, after);
    CudaEvent start = make_event(/*timing=*/true), done = make_event(/*timing=*/true);
    FTRAIN_CUDA_CHECK(cudaEventRecord(start.get(), shared_->comm_stream));
    FTRAIN_NCCL_CHECK(call(comm_, shared_->comm_stream), comm_);
    wait_ready(comm_, *shared_, name);  // non-blocking: the enqueue itself may be in progress
    FTRAIN_CUDA_CHECK(cudaEventRecord(done.get(), shared_->comm_stream));
    // The watchdog polls the event; its probe keeps the tensors alive until
    // the collective completed, then books its busy time.
    std::weak_ptr<Shared> weak = shared_;
    auto probe = [start, done, tensors = std::move(tensors), weak]() {
      cuda::use_rank_device();  // the watchdog's thread: the rank's device, never device 0 by default
      if (cudaEventQuery(done.get()) == cudaErrorNotReady) return false;
      float ms = 0;
      if (auto s = weak.lock(); s && cudaEventElapsedTime(&ms, start.get(), done.get()) == cudaSuccess) {
        std::lock_guard<std::mutex> lock(s->mutex);
        s->times.busy_seconds += ms / 1000.0;
      }
      return true;
    };
    shared_->watchdog->begin({shared_->world_rank, name, unit_label(), std::move(probe)});
    return Request(std::make_unique<NcclRequest>(done, comm_, shared_));
  }

  ncclComm_t comm_;
  std::unique_ptr<MpiCommunicator> mpi_;
  std::shared_ptr<Shared> shared_;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm world, ExecutionContext& context) {
  FT_CHECK(context.device() == Device::cuda) << "the NCCL communicator needs a CUDA execution context";
  cuda::use_rank_device();  // NCCL binds its communicator to the current device
  auto shared = std::make_shared<Shared>();
  shared->comm_stream = static_cast<cudaStream_t>(context.communication().native_handle());
  shared->compute_stream = static_cast<cudaStream_t>(context.compute().native_handle());
  MPI_Comm_rank(MPI_COMM_WORLD, &shared->world_rank);
  Shared* raw = shared.get();
  shared->watchdog = std::make_unique<CollectiveWatchdog>([raw](const std::string& m) { raw->abort_job(m); });
  auto mpi = std::make_unique<MpiCommunicator>(world);
  const ncclUniqueId id = broadcast_unique_id(world, 0);
  ncclComm_t comm = nullptr;
  ncclConfig_t config = nonblocking_config();
  FTRAIN_NCCL_CHECK(ncclCommInitRankConfig(&comm, mpi->size(), id, mpi->rank(), &config), comm);
  wait_ready(comm, *shared, "ncclCommInitRankConfig (" + std::to_string(mpi->size()) + " ranks)");
  return std::make_unique<NcclCommunicator>(comm, std::move(mpi), std::move(shared));
}

}  // namespace ftrain::nccl
