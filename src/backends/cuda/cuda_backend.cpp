// libftrain_cuda.so's entry point and runtime pieces: the device probe, the
// stream-ordered allocator and the stream (runtime/ftrain_backend.h,
// share/doc/execution-model.md "Adding the CUDA backend").
//
// Nothing here runs at load time: dlopen only maps the library; CUDA is first
// called by register_all(), which ftrain calls when a CUDA device is asked
// for. Without a usable GPU register_all() returns why (no driver, no
// device, driver too old) and registers nothing. register_all() only asks
// about devices: no memory, stream or context is made before the rank is
// bound to its GPU (backends/cuda/device/cuda_device.hpp); every entry point below
// that calls CUDA first makes the rank's device current on its thread.
//
// Ordering (share/doc/execution-model.md, "Streams on CUDA"): every stream is
// created cudaStreamNonBlocking, and nothing uses the legacy default stream
// (which would order itself with every blocking stream of the device: a
// device-wide barrier at each use). The allocator takes blocks of its own
// cudaMemPool on the attached stream (the context's compute stream,
// runtime/allocator.hpp); zero and copies are enqueued there and do not
// wait. A block is released when its last owner goes, which the execution
// model allows right after ENQUEUEING the last op that reads it, on any
// stream: so the release stream first waits for an event recorded on every
// live stream, then cudaFreeAsync; no stream ever waits for the release.
// Stream::record() records a cudaEvent_t (CudaEvent, a NativeEvent of
// runtime/stream.hpp); wait() is cudaStreamWaitEvent, or for a host event
// a wait of the calling thread (cuda_device.hpp: never a blocking host
// function).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/cuda/device/cuda_check.hpp"
#include "backends/cuda/device/cuda_device.hpp"
#include "comm/device_communicator.hpp"
#include "kernels/backend_registry.hpp"
#include "kernels/cuda/cuda_ops.hpp"
#include "kernels/cuda/kernels.hpp"
#include "runtime/allocator.hpp"
#include "runtime/execution_context.hpp"
#include "runtime/ftrain_backend.h"
#include "runtime/pinned_host_blocks.hpp"
#ifdef FTRAIN_HAVE_NCCL
#include "comm/nccl/nccl_communicator.hpp"
#endif

namespace ftrain::cuda {

namespace {

// Throws naming the call, the rank's device and the stream.
#define FTRAIN_CUDA_CHECK_ON(call, stream)                                                                    \
  do {                                                                                                        \
    const cudaError_t ftrain_cuda_status_ = (call);                                                           \
    if (ftrain_cuda_status_ != cudaSuccess)                                                                   \
      FT_THROW() << "CUDA call " #call " on " << describe_device_stream(stream)                              \
                 << " failed: " << cudaGetErrorName(ftrain_cuda_status_) << " ("                              \
                 << cudaGetErrorString(ftrain_cuda_status_) << ")";                                          \
  } while (0)

cudaStream_t make_nonblocking_stream() {
  use_rank_device();
  cudaStream_t stream = nullptr;
  FTRAIN_CUDA_CHECK_ON(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), stream);
  return stream;
}

class CudaStream;

// Every live CudaStream, so that a release is ordered after the work
// enqueued so far on each of them (a few per rank: compute, communication,
// the staged communicator's). Each keeps one event for that purpose.
std::mutex& streams_mutex() {
  static std::mutex m;
  return m;
}
std::vector<CudaStream*>& live_streams() {
  static auto* streams = new std::vector<CudaStream*>();  // outlives static destruction
  return *streams;
}

// A recorded cudaEvent_t (timing off: cheapest to record and wait for).
// Destroying it while the GPU has not reached it is allowed (CUDA releases
// it on completion). Queried and waited for from any thread (the progress
// thread, the watchdog): each call makes the rank's device current first.
class CudaEvent final : public NativeEvent {
 public:
  CudaEvent() {
    use_rank_device();
    FTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  }
  ~CudaEvent() override {
    try {
      use_rank_device();
    } catch (...) {
    }
    cudaEventDestroy(event);
  }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  bool query() override {
    use_rank_device();
    const cudaError_t status = cudaEventQuery(event);
    if (status == cudaErrorNotReady) return false;  // "not an error" (CUDA's docs): still running
    FTRAIN_CUDA_CHECK(status);
    return true;
  }
  void synchronize() override {
    use_rank_device();
    FTRAIN_CUDA_CHECK(cudaEventSynchronize(event));
  }
  void* handle() const override { return event; }

  cudaEvent_t event = nullptr;
};

class CudaStream final : public Stream {
 public:
  explicit CudaStream(const char* name) : name_(name != nullptr ? name : "cuda") {
    stream_ = make_nonblocking_stream();
    FTRAIN_CUDA_CHECK_ON(cudaEventCreateWithFlags(&release_marker_, cudaEventDisableTiming), stream_);
    std::lock_guard<std::mutex> lock(streams_mutex());
    live_streams().push_back(this);
  }
  ~CudaStream() override {
    {
      std::lock_guard<std::mutex> lock(streams_mutex());
      auto& live = live_streams();
      live.erase(std::remove(live.begin(), live.end(), this), live.end());
    }
    try {
      use_rank_device();
    } catch (...) {
    }
    cudaStreamSynchronize(stream_);  // its work may still read buffers whose release waited on it
    cudaEventDestroy(release_marker_);
    cudaStreamDestroy(stream_);
  }
  Device device() const override { return Device::cuda; }
  bool asynchronous() const override { return true; }
  const char* name() const override { return name_.c_str(); }

  // Host work in stream order (cudaLaunchHostFunc); its exception is kept
  // and rethrown by synchronize(), like a host stream's. The work must not
  // wait for another thread or call CUDA (runtime/stream.hpp).
  void enqueue(std::function<void()> work) override {
    use_rank_device();
    struct Call {
      CudaStream* stream;
      std::function<void()> work;
    };
    auto* call = new Call{this, std::move(work)};
    const cudaError_t status = cudaLaunchHostFunc(
        stream_,
        [](void* data) {
          std::unique_ptr<Call> c(static_cast<Call*>(data));
          try {
            c->work();
          } catch (...) {
            std::lock_guard<std::mutex> lock(c->stream->mutex_);
            if (!c->stream->error_) c->stream->error_ = std::current_exception();
          }
        },
        call);
    if (status != cudaSuccess) {
      delete call;
      FTRAIN_CUDA_CHECK_ON(status, stream_);
    }
  }
  // A cudaEvent_t recorded on this stream: the caller does not wait.
  Event record() override {
    auto event = std::make_shared<CudaEvent>();
    FTRAIN_CUDA_CHECK_ON(cudaEventRecord(event->event, stream_), stream_);
    return Event::from_native(std::move(event));
  }
  // A CUDA event on the device (cudaStreamWaitEvent: the host thread goes
  // on); a host event by the calling thread (cuda_device.hpp, wait_on_stream).
  void wait(const Event& event) override { wait_on_stream(stream_, event); }
  void synchronize() override {
    use_rank_device();
    FTRAIN_CUDA_CHECK_ON(cudaStreamSynchronize(stream_), stream_);
    // A bad token id or target an op's device range check recorded since the
    // last look (input_check_record.hpp): thrown here, where the host waits
    // anyway, instead of a round trip in every op.
    raise_input_check_errors(stream_);
    std::exception_ptr error;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::swap(error, error_);
    }
    if (error) std::rethrow_exception(error);
  }
  void* native_handle() const override { return stream_; }

  // With streams_mutex() held: `release` waits for the work enqueued so far here.
  cudaError_t order_release_after(cudaStream_t release) {
    const cudaError_t recorded = cudaEventRecord(release_marker_, stream_);
    if (recorded != cudaSuccess) return recorded;
    return cudaStreamWaitEvent(release, release_marker_, 0);
  }

 private:
  std::string name_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t release_marker_ = nullptr;
  std::mutex mutex_;
  std::exception_ptr error_;
};

// Device memory from a cudaMemPool of ftrain's own (not the device's default
// pool, whose settings other libraries in the process may change), made on
// the rank's device at the first allocation (never before the rank is bound
// to its GPU). Memory freed back to the pool is kept for the next
// allocation up to a release threshold that leaves kLibraryHeadroomBytes of
// the device to what cuDNN and NCCL allocate themselves (cudaMalloc, outside
// this pool): above it, the pool gives unused memory back to the driver at
// the next synchronisation. Stats: live and peak bytes handed out (counted
// here, requested sizes) and the pool's reserved bytes, current and peak
// (cudaMemPoolGetAttribute).
class CudaAllocator final : public DeviceAllocator {
 public:
  // No CUDA call here: this runs at registration, before the rank is bound.
  CudaAllocator() = default;
  // Never destroyed (static in register_all): tensors may outlive static
  // destruction, and the process's exit returns the pool to the driver.

  Device device() const override { return Device::cuda; }

  std::shared_ptr<void> allocate(std::size_t bytes) override {
    use_rank_device();
    void* p = nullptr;
    const std::size_t size = bytes == 0 ? 256 : bytes;
    const Ordering on = ordering();
    FTRAIN_CUDA_CHECK_ON(cudaMallocFromPoolAsync(&p, size, pool(), on.stream), on.stream);
    if (!on.attached) FTRAIN_CUDA_CHECK_ON(cudaStreamSynchronize(on.stream), on.stream);  // no context: valid everywhere
    const std::size_t live = live_.fetch_add(size) + size;
    std::size_t peak = peak_.load();
    while (live > peak && !peak_.compare_exchange_weak(peak, live)) {
    }
    fresh_.fetch_add(1);
    return std::shared_ptr<void>(p, [this, size](void* q) {
      live_.fetch_sub(size);
      release(q);
    });
  }
  void zero(void* dst, std::size_t bytes) override {
    use_rank_device();
    const Ordering on = ordering();
    FTRAIN_CUDA_CHECK_ON(cudaMemsetAsync(dst, 0, bytes, on.stream), on.stream);
    if (!on.attached) FTRAIN_CUDA_CHECK_ON(cudaStreamSynchronize(on.stream), on.stream);
  }
  void copy(void* dst, const void* src, std::size_t bytes) override {
    use_rank_device();
    const Ordering on = ordering();
    FTRAIN_CUDA_CHECK_ON(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, on.stream), on.stream);
    if (!on.attached) FTRAIN_CUDA_CHECK_ON(cudaStreamSynchronize(on.stream), on.stream);
  }
  // Small uploads (a micro-step's tokens) go through a pinned bounce block,
  // so the caller neither waits for the stream nor keeps host_src alive;
  // large ones (initial weights, checkpoints: outside the step) wait.
  void copy_from_host(void* dst, const void* src, std::size_t bytes) override {
    use_rank_device();
    const Ordering on = ordering();
    if (bytes <= kBounceMaxBytes && on.attached) {
      void* pinned = bounce_.take(bytes, on.stream);
      std::memcpy(pinned, src, bytes);
      FTRAIN_CUDA_CHECK_ON(cudaMemcpyAsync(dst, pinned, bytes, cudaMemcpyHostToDevice, on.stream), on.stream);
      bounce_.give_back(pinned, on.stream);
      return;
    }
    FTRAIN_CUDA_CHECK_ON(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, on.stream), on.stream);
    FTRAIN_CUDA_CHECK_ON(cudaStreamSynchronize(on.stream), on.stream);
  }
  // The host reads the data next: the caller waits for the stream (a log
  // interval's loss, a checkpoint).
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
    use_rank_device();
    const Ordering on = ordering();
    FTRAIN_CUDA_CHECK_ON(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, on.stream), on.stream);
    FTRAIN_CUDA_CHECK_ON(cudaStreamSynchronize(on.stream), on.stream);
  }
  void copy_to_host_on(Stream& stream, void* dst, const void* src, std::size_t bytes) override {
    use_rank_device();
    count_stream_copy(dst);
    auto s = static_cast<cudaStream_t>(stream.native_handle());
    FT_CHECK(s != nullptr) << "CUDA allocator: a copy on stream '" << stream.name() << "', which is not a CUDA stream";
    FTRAIN_CUDA_CHECK_ON(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s), s);
  }
  void copy_from_host_on(Stream& stream, void* dst, const void* src, std::size_t bytes) override {
    use_rank_device();
    count_stream_copy(src);
    auto s = static_cast<cudaStream_t>(stream.native_handle());
    FT_CHECK(s != nullptr) << "CUDA allocator: a copy on stream '" << stream.name() << "', which is not a CUDA stream";
    FTRAIN_CUDA_CHECK_ON(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s), s);
  }
  void attach_stream(Stream* stream) override {
    FT_CHECK(stream != nullptr && stream->native_handle() != nullptr)
        << "CUDA allocator: attach_stream needs a CUDA stream";
    use_rank_device();
    std::lock_guard<std::mutex> lock(mutex_);
    attached_.push_back(static_cast<cudaStream_t>(stream->native_handle()));
    // The pinned upload blocks now, while a context is made, not at the
    // first upload inside a training step: cudaHostAlloc is device-wide
    // synchronous (the cuda-api engine test counts it).
    bounce_.reserve(kBounceMaxBytes);
  }
  void detach_stream(Stream* stream) override {
    if (stream == nullptr) return;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = std::find(attached_.rbegin(), attached_.rend(), static_cast<cudaStream_t>(stream->native_handle()));
    if (it != attached_.rend()) attached_.erase(std::next(it).base());
  }
  // Page-locked host blocks (offloaded state): made once, outside a step,
  // since cudaHostAlloc and cudaFreeHost synchronise the device; a copy on
  // a stream to or from one returns at once (a pageable one is staged by
  // the driver and a device-to-host copy then returns only when done).
  std::shared_ptr<void> allocate_pinned_host(std::size_t bytes) override {
    use_rank_device();
    void* p = nullptr;
    FTRAIN_CUDA_CHECK(cudaHostAlloc(&p, bytes == 0 ? 64 : bytes, cudaHostAllocDefault));
    pinned_.add(p, bytes);
    return std::shared_ptr<void>(p, [this, bytes](void* q) {
      pinned_.remove(q, bytes);
      try {
        use_rank_device();
      } catch (...) {
        return;  // no device on this thread: leak the block rather than free it unordered
      }
      cudaFreeHost(q);  // a deleter cannot throw; it waits for the device's work
    });
  }
  bool is_pinned_host(const void* host_ptr) const override { return pinned_.contains(host_ptr); }
  AllocatorStats stats() const override {
    AllocatorStats s;
    s.live_bytes = live_.load();
    s.peak_live_bytes = peak_.load();
    s.fresh_blocks = fresh_.load();
    s.pinned_host_bytes = pinned_.live_bytes();
    s.peak_pinned_host_bytes = pinned_.peak_bytes();
    s.pinned_stream_copies = pinned_copies_.load();
    s.pageable_stream_copies = pageable_copies_.load();
    std::lock_guard<std::mutex> lock(mutex_);
    if (pool_ != nullptr) {
      s.reserved_bytes = pool_attribute(cudaMemPoolAttrReservedMemCurrent);
      s.peak_reserved_bytes = pool_attribute(cudaMemPoolAttrReservedMemHigh);
    }
    return s;
  }

 private:
  // What cuDNN (workspaces, plans) and NCCL (channels, proxy buffers) may
  // cudaMalloc for themselves beside the pool.
  static constexpr std::uint64_t kLibraryHeadroomBytes = std::uint64_t{4} << 30;
  static constexpr std::size_t kBounceMaxBytes = std::size_t{4} << 20;

  struct Ordering {
    cudaStream_t stream;
    bool attached;  // a context's compute stream; else the allocator's own (then waited for)
  };
  Ordering ordering() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!attached_.empty()) return {attached_.back(), true};
    if (own_ == nullptr) own_ = make_nonblocking_stream();
    return {own_, false};
  }

  cudaMemPool_t pool() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pool_ != nullptr) return pool_;
    const int device = rank_device();
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    FTRAIN_CUDA_CHECK(cudaMemPoolCreate(&pool_, &props));
    std::size_t free_bytes = 0, total_bytes = 0;
    FTRAIN_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    std::uint64_t keep = total_bytes > kLibraryHeadroomBytes ? total_bytes - kLibraryHeadroomBytes : total_bytes / 2;
    FTRAIN_CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep));
    // A block freed on the release stream is reused by a later allocation
    // on another stream through a dependency the driver adds (the
    // allocating stream waits for the free, and so for the work the free
    // waited for). Without it (ReuseAllowInternalDependencies 0) a block
    // is reused only once the GPU has run its free, which a host thread
    // running a step ahead of the GPU never sees: the first H100 run of
    // Llama 3.2 1B grew the pool past 80 GB by step 3. The cost: an
    // allocation may wait for collectives queued before the free.
    int yes = 1;
    FTRAIN_CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolReuseAllowInternalDependencies, &yes));
    return pool_;
  }

  // After every live stream's work enqueued so far, on the release stream.
  // A deleter cannot throw: a failure here shows at the next synchronisation.
  void release(void* block) noexcept {
    try {
      use_rank_device();
    } catch (...) {
      return;  // no device on this thread: leak the block rather than free it unordered
    }
    std::lock_guard<std::mutex> streams(streams_mutex());
    std::lock_guard<std::mutex> lock(mutex_);
    if (release_ == nullptr) {
      try {
        release_ = make_nonblocking_stream();
      } catch (...) {
        return;
      }
    }
    // (The allocator's own stream needs no event: each use of it is waited for.)
    for (CudaStream* s : live_streams()) s->order_release_after(release_);
    cudaFreeAsync(block, release_);
  }

  std::size_t pool_attribute(cudaMemPoolAttr attribute) const {
    std::uint64_t value = 0;
    FTRAIN_CUDA_CHECK(cudaMemPoolGetAttribute(pool_, attribute, &value));
    return static_cast<std::size_t>(value);
  }

  // Pinned host blocks for small uploads; one is reused once the copy out
  // of it has run (its event). At most kBlocks (more only while every one
  // is being filled by another thread): past that the least recently used
  // is waited for (the host is that many uploads ahead of the device).
  class Bounce {
   public:
    void* take(std::size_t bytes, cudaStream_t stream) {
      std::lock_guard<std::mutex> lock(mutex_);
      for (Block& b : blocks_) {
        if (b.busy || b.capacity < bytes) continue;
        if (cudaEventQuery(b.done) == cudaErrorNotReady) continue;
        b.busy = true;
        return b.data;
      }
      if (blocks_.size() >= kBlocks) {
        // The least recently used block not being filled by another thread
        // right now (blocks_ is in order of last use).
        for (auto it = blocks_.begin(); it != blocks_.end(); ++it) {
          if (it->busy) continue;
          Block b = *it;
          blocks_.erase(it);
          FTRAIN_CUDA_CHECK_ON(cudaEventSynchronize(b.done), stream);
          if (b.capacity < bytes) {
            FTRAIN_CUDA_CHECK_ON(cudaFreeHost(b.data), stream);
            b.data = nullptr;
            b.capacity = round(bytes);
            FTRAIN_CUDA_CHECK_ON(cudaHostAlloc(&b.data, b.capacity, cudaHostAllocDefault), stream);
          }
          b.busy = true;
          blocks_.push_back(b);
          return blocks_.back().data;
        }
      }
      Block b;
      b.capacity = round(bytes);
      FTRAIN_CUDA_CHECK_ON(cudaHostAlloc(&b.data, b.capacity, cudaHostAllocDefault), stream);
      FTRAIN_CUDA_CHECK_ON(cudaEventCreateWithFlags(&b.done, cudaEventDisableTiming), stream);
      b.busy = true;
      blocks_.push_back(b);
      return b.data;
    }
    // After the copy out of `data` was enqueued on `stream`: reusable once
    // it ran. Moves the block to the back (most recently used).
    void give_back(void* data, cudaStream_t stream) {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto it = blocks_.begin(); it != blocks_.end(); ++it) {
        if (it->data != data) continue;
        FTRAIN_CUDA_CHECK_ON(cudaEventRecord(it->done, stream), stream);
        Block b = *it;
        b.busy = false;
        blocks_.erase(it);
        blocks_.push_back(b);
        return;
      }
    }

    // kBlocks blocks of `capacity` bytes each, once: take() then never
    // allocates while at most kBlocks uploads are in flight.
    void reserve(std::size_t capacity) {
      std::lock_guard<std::mutex> lock(mutex_);
      while (blocks_.size() < kBlocks) {
        Block b;
        b.capacity = capacity;
        FTRAIN_CUDA_CHECK(cudaHostAlloc(&b.data, b.capacity, cudaHostAllocDefault));
        FTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&b.done, cudaEventDisableTiming));
        blocks_.push_back(b);
      }
    }

   private:
    static constexpr std::size_t kBlocks = 8;
    static std::size_t round(std::size_t bytes) { return std::max<std::size_t>(std::size_t{64} << 10, std::bit_ceil(bytes)); }
    struct Block {
      void* data = nullptr;
      std::size_t capacity = 0;
      cudaEvent_t done = nullptr;
      bool busy = false;
    };
    std::mutex mutex_;
    std::vector<Block> blocks_;
  };

  mutable std::mutex mutex_;
  cudaMemPool_t pool_ = nullptr;
  std::vector<cudaStream_t> attached_;
  cudaStream_t own_ = nullptr;
  cudaStream_t release_ = nullptr;
  Bounce bounce_;
  std::atomic<std::size_t> live_{0}, peak_{0};
  std::atomic<std::int64_t> fresh_{0};

  void count_stream_copy(const void* host_side) {
    (is_pinned_host(host_side) ? pinned_copies_ : pageable_copies_).fetch_add(1);
  }
  // allocate_pinned_host's blocks (addresses, live and peak bytes).
  PinnedHostBlocks pinned_;
  std::atomic<std::int64_t> pinned_copies_{0}, pageable_copies_{0};
};

std::unique_ptr<Stream> make_cuda_stream(bool /*asynchronous*/, const char* name) {
  return std::make_unique<CudaStream>(name);
}

// Why no GPU can be used, or empty. Names the CUDA error (no driver:
// cudaErrorInsufficientDriver / cudaErrorNoDevice ...). Every visible device
// is checked (the rank may be bound to any of them later); properties only:
// no context is made here.
std::string unusable_reason() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    std::string why = std::string("cudaGetDeviceCount failed: ") + cudaGetErrorName(status) + " (" +
                      cudaGetErrorString(status) + ")";
    if (status == cudaErrorInsufficientDriver)
      why += "; no NVIDIA driver is loaded, or it is older than the CUDA " + std::to_string(CUDART_VERSION / 1000) +
             " runtime ftrain was built with";
    return why;
  }
  if (count == 0) return "no CUDA device is visible (CUDA_VISIBLE_DEVICES?)";
  for (int device = 0; device < count; ++device) {
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess)
      return "cannot read the compute capability of CUDA device " + std::to_string(device);
    if (major < 8)
      return "CUDA device " + std::to_string(device) + " of " + std::to_string(count) + " has compute capability " +
             std::to_string(major) + "." + std::to_string(minor) +
             "; ftrain's CUDA backend needs 8.0 or newer (CUDA_VISIBLE_DEVICES selects the devices a rank sees)";
  }
  return {};
}

int visible_device_count() {
  int count = 0;
  FTRAIN_CUDA_CHECK(cudaGetDeviceCount(&count));
  return count;
}
void set_rank_device(int ordinal) { bind_rank_device(ordinal); }
// Multi-rank runs: the rank -> GPU binding (comm/device_communicator.hpp)
// exists with or without NCCL (device_comm mpi binds too); the NCCL
// communicator (src/comm/nccl/) only where NCCL was found.
#ifdef FTRAIN_HAVE_NCCL
const DeviceCommBackend kDeviceCommBackend = {"nccl", &visible_device_count, &set_rank_device,
                                              &nccl::make_nccl_communicator};
#else
const DeviceCommBackend kDeviceCommBackend = {"cuda (no NCCL)", &visible_device_count, &set_rank_device, nullptr};
#endif

const char* register_all() {
  static std::string refusal;
  refusal = unusable_reason();
  if (!refusal.empty()) return refusal.c_str();
  static CudaAllocator allocator;  // makes nothing on a device until the first allocation
  register_allocator(Device::cuda, &allocator);
  register_stream_factory(Device::cuda, &make_cuda_stream);
  register_backend(cuda_op_table());
  register_device_comm_backend(Device::cuda, &kDeviceCommBackend);
  return nullptr;
}

const ftrain_backend_descriptor kDescriptor = {FTRAIN_BACKEND_ABI_VERSION, "cuda", &register_all};

}  // namespace

}  // namespace ftrain::cuda

extern "C" __attribute__((visibility("default"))) const ftrain_backend_descriptor* ftrain_backend_entry(void) {
  return &ftrain::cuda::kDescriptor;
}
