// libftrain_cuda.so's entry point and runtime pieces: the device probe, the
// stream-ordered allocator and the stream (runtime/ftrain_backend.h,
// share/doc/execution-model.md "Adding the CUDA backend").
//
// Nothing here runs at load time: dlopen only maps the library; CUDA is first
// called by register_all(), which ftrain calls when a CUDA device is asked
// for. Without a usable GPU register_all() returns why (no driver, no
// device, driver too old) and registers nothing.
//
// Ordering: ftrain's CUDA streams are created blocking (cudaStreamCreate), so
// the legacy default stream orders itself with them. The allocator takes and
// returns blocks of its own cudaMemPool (cudaMallocFromPoolAsync /
// cudaFreeAsync) on that default stream:
// a block freed after the last op that reads it was enqueued (the execution
// model's rule) is reused only after that op ran, on any stream.
// Stream::record() records a cudaEvent_t (CudaEvent, a NativeEvent of
// runtime/stream.hpp); wait() is cudaStreamWaitEvent.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "comm/device_communicator.hpp"
#include "kernels/backend_registry.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/cuda_ops.hpp"
#include "kernels/cuda/kernels.hpp"
#include "runtime/allocator.hpp"
#include "runtime/execution_context.hpp"
#include "runtime/ftrain_backend.h"
#ifdef FTRAIN_HAVE_NCCL
#include "comm/nccl/nccl_communicator.hpp"
#endif

namespace ftrain::cuda {

namespace {

// Device memory from a cudaMemPool of ftrain's own (not the device's default
// pool, whose settings other libraries in the process may change), with the
// release threshold at "never": memory freed back to the pool stays reserved
// for the next allocation instead of going back to the driver at every
// synchronisation (PyTorch's caching allocator keeps it too). Stats: live
// and peak bytes handed out (counted here, requested sizes) and the pool's
// reserved bytes, current and peak (cudaMemPoolGetAttribute).
class CudaAllocator final : public DeviceAllocator {
 public:
  CudaAllocator() {
    int device = 0;
    FTRAIN_CUDA_CHECK(cudaGetDevice(&device));
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    FTRAIN_CUDA_CHECK(cudaMemPoolCreate(&pool_, &props));
    std::uint64_t keep_everything = ~std::uint64_t{0};
    FTRAIN_CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep_everything));
  }
  // Never destroyed (static in register_all): tensors may outlive static
  // destruction, and the process's exit returns the pool to the driver.

  Device device() const override { return Device::cuda; }

  std::shared_ptr<void> allocate(std::size_t bytes) override {
    void* p = nullptr;
    const std::size_t size = bytes == 0 ? 256 : bytes;
    FTRAIN_CUDA_CHECK(cudaMallocFromPoolAsync(&p, size, pool_, cudaStreamLegacy));
    const std::size_t live = live_.fetch_add(size) + size;
    std::size_t peak = peak_.load();
    while (live > peak && !peak_.compare_exchange_weak(peak, live)) {
    }
    fresh_.fetch_add(1);
    return std::shared_ptr<void>(p, [this, size](void* q) {
      live_.fetch_sub(size);
      cudaFreeAsync(q, cudaStreamLegacy);  // a deleter cannot throw; a failure here shows at the next sync
    });
  }
  void zero(void* dst, std::size_t bytes) override {
    FTRAIN_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, cudaStreamLegacy));
    FTRAIN_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
  }
  void copy(void* dst, const void* src, std::size_t bytes) override {
    FTRAIN_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
  }
  void copy_from_host(void* dst, const void* src, std::size_t bytes) override {
    FTRAIN_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
    FTRAIN_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
  }
  AllocatorStats stats() const override {
    AllocatorStats s;
    s.live_bytes = live_.load();
    s.peak_live_bytes = peak_.load();
    s.fresh_blocks = fresh_.load();
    s.reserved_bytes = pool_attribute(cudaMemPoolAttrReservedMemCurrent);
    s.peak_reserved_bytes = pool_attribute(cudaMemPoolAttrReservedMemHigh);
    return s;
  }

 private:
  std::size_t pool_attribute(cudaMemPoolAttr attribute) const {
    std::uint64_t value = 0;
    FTRAIN_CUDA_CHECK(cudaMemPoolGetAttribute(pool_, attribute, &value));
    return static_cast<std::size_t>(value);
  }

  cudaMemPool_t pool_ = nullptr;
  std::atomic<std::size_t> live_{0}, peak_{0};
  std::atomic<std::int64_t> fresh_{0};
};

// A recorded cudaEvent_t (timing off: cheapest to record and wait for).
// Destroying it while the GPU has not reached it is allowed (CUDA releases
// it on completion).
class CudaEvent final : public NativeEvent {
 public:
  CudaEvent() { FTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming)); }
  ~CudaEvent() override { cudaEventDestroy(event); }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  bool query() override {
    const cudaError_t status = cudaEventQuery(event);
    if (status == cudaErrorNotReady) return false;  // "not an error" (CUDA's docs): still running
    FTRAIN_CUDA_CHECK(status);
    return true;
  }
  void synchronize() override { FTRAIN_CUDA_CHECK(cudaEventSynchronize(event)); }
  void* handle() const override { return event; }

  cudaEvent_t event = nullptr;
};

class CudaStream final : public Stream {
 public:
  explicit CudaStream(const char* name) : name_(name != nullptr ? name : "cuda") {
    FTRAIN_CUDA_CHECK(cudaStreamCreate(&stream_));
  }
  ~CudaStream() override {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
  Device device() const override { return Device::cuda; }
  bool asynchronous() const override { return true; }
  const char* name() const override { return name_.c_str(); }

  // Host work in stream order (cudaLaunchHostFunc); its exception is kept
  // and rethrown by synchronize(), like a host stream's.
  void enqueue(std::function<void()> work) override {
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
      FTRAIN_CUDA_CHECK(status);
    }
  }
  // A cudaEvent_t recorded on this stream: the caller does not wait.
  Event record() override {
    auto event = std::make_shared<CudaEvent>();
    FTRAIN_CUDA_CHECK(cudaEventRecord(event->event, stream_));
    return Event::from_native(std::move(event));
  }
  // On the device for a CUDA event (cudaStreamWaitEvent: the host thread
  // goes on); a host event not yet complete is waited for by a host function
  // in stream order.
  void wait(const Event& event) override {
    if (NativeEvent* native = event.native(); native != nullptr && native->handle() != nullptr) {
      FTRAIN_CUDA_CHECK(cudaStreamWaitEvent(stream_, static_cast<cudaEvent_t>(native->handle()), 0));
      return;
    }
    if (event.query()) return;
    enqueue([event] { event.synchronize(); });
  }
  void synchronize() override {
    FTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream_));
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

 private:
  std::string name_;
  cudaStream_t stream_ = nullptr;
  std::mutex mutex_;
  std::exception_ptr error_;
};

std::unique_ptr<Stream> make_cuda_stream(bool /*asynchronous*/, const char* name) {
  return std::make_unique<CudaStream>(name);
}

// Why no GPU can be used, or empty. Names the CUDA error (no driver:
// cudaErrorInsufficientDriver / cudaErrorNoDevice ...).
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
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess && prop.major < 8)
    return std::string("device 0 (") + prop.name + ") has compute capability " + std::to_string(prop.major) + "." +
           std::to_string(prop.minor) + "; ftrain's CUDA backend needs 8.0 or newer";
  return {};
}

#ifdef FTRAIN_HAVE_NCCL
int visible_device_count() {
  int count = 0;
  FTRAIN_CUDA_CHECK(cudaGetDeviceCount(&count));
  return count;
}
void set_device(int ordinal) { FTRAIN_CUDA_CHECK(cudaSetDevice(ordinal)); }
// Multi-rank runs: the rank -> GPU binding and the NCCL communicator
// (comm/device_communicator.hpp, src/comm/nccl/).
const DeviceCommBackend kNcclBackend = {"nccl", &visible_device_count, &set_device, &nccl::make_nccl_communicator};
#endif

const char* register_all() {
  static std::string refusal;
  refusal = unusable_reason();
  if (!refusal.empty()) return refusal.c_str();
  static CudaAllocator allocator;
  register_allocator(Device::cuda, &allocator);
  register_stream_factory(Device::cuda, &make_cuda_stream);
  register_backend(cuda_op_table());
#ifdef FTRAIN_HAVE_NCCL
  register_device_comm_backend(Device::cuda, &kNcclBackend);
#endif
  return nullptr;
}

const ftrain_backend_descriptor kDescriptor = {FTRAIN_BACKEND_ABI_VERSION, "cuda", &register_all};

}  // namespace

}  // namespace ftrain::cuda

extern "C" __attribute__((visibility("default"))) const ftrain_backend_descriptor* ftrain_backend_entry(void) {
  return &ftrain::cuda::kDescriptor;
}
