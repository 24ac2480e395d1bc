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
// returns blocks with cudaMallocAsync / cudaFreeAsync on that default stream:
// a block freed after the last op that reads it was enqueued (the execution
// model's rule) is reused only after that op ran, on any stream.
// Stream::record() waits for the stream (an Event over cudaEvent_t is the
// next step, see share/doc/status.md).
#include <cuda_runtime.h>

#include <atomic>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "comm/device_communicator.hpp"
#include "kernels/backend_registry.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/cuda_ops.hpp"
#include "runtime/allocator.hpp"
#include "runtime/execution_context.hpp"
#include "runtime/ftrain_backend.h"
#ifdef FTRAIN_HAVE_NCCL
#include "comm/nccl/nccl_communicator.hpp"
#endif

namespace ftrain::cuda {

namespace {

class CudaAllocator final : public DeviceAllocator {
 public:
  Device device() const override { return Device::cuda; }

  std::shared_ptr<void> allocate(std::size_t bytes) override {
    void* p = nullptr;
    const std::size_t size = bytes == 0 ? 256 : bytes;
    FTRAIN_CUDA_CHECK(cudaMallocAsync(&p, size, cudaStreamLegacy));
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
    return s;
  }

 private:
  std::atomic<std::size_t> live_{0}, peak_{0};
  std::atomic<std::int64_t> fresh_{0};
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
  Event record() override {
    synchronize();
    return Event();  // complete: everything before it ran
  }
  void wait(const Event& event) override { event.synchronize(); }
  void synchronize() override {
    FTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream_));
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
