#include "backends/cuda/device/cuda_device.hpp"

#include <atomic>
#include <sstream>

#include "backends/cuda/device/cuda_check.hpp"
#include "base/error.hpp"

namespace ftrain::cuda {

namespace {
// -1 until bound (bind_rank_device) or first used (device 0 then).
std::atomic<int> g_rank_device{-1};
// Set once use_rank_device() ran: resources may exist on g_rank_device.
std::atomic<bool> g_device_in_use{false};
// The device this thread made current (-1: none yet; CUDA would use 0).
thread_local int t_current = -1;
}  // namespace

void bind_rank_device(int ordinal) {
  const int previous = g_rank_device.load();
  if (g_device_in_use.load() && previous != ordinal)
    FT_THROW() << "binding this rank to CUDA device " << ordinal << " comes too late: streams, memory or handles "
               << "already exist on device " << previous
               << " (the rank's device must be chosen before anything is made on it)";
  FTRAIN_CUDA_CHECK(cudaSetDevice(ordinal));
  g_rank_device.store(ordinal);
  t_current = ordinal;
}

int rank_device() {
  int expected = -1;
  g_rank_device.compare_exchange_strong(expected, 0);  // nothing bound: device 0, from now on
  return g_rank_device.load();
}

void use_rank_device() {
  const int device = rank_device();
  g_device_in_use.store(true);
  if (t_current == device) return;
  const cudaError_t status = cudaSetDevice(device);
  if (status != cudaSuccess)
    FT_THROW() << "cudaSetDevice(" << device << ") (the rank's device) failed on this thread: "
               << cudaGetErrorName(status) << " (" << cudaGetErrorString(status) << ")";
  t_current = device;
}

std::string describe_device_stream(cudaStream_t stream) {
  std::ostringstream s;
  s << "device " << g_rank_device.load() << ", stream " << static_cast<const void*>(stream);
  return s.str();
}

void wait_on_stream(cudaStream_t stream, const Event& event) {
  if (NativeEvent* native = event.native(); native != nullptr && native->handle() != nullptr) {
    use_rank_device();
    const cudaError_t status = cudaStreamWaitEvent(stream, static_cast<cudaEvent_t>(native->handle()), 0);
    if (status != cudaSuccess)
      FT_THROW() << "cudaStreamWaitEvent on " << describe_device_stream(stream) << " failed: " << cudaGetErrorName(status)
                 << " (" << cudaGetErrorString(status) << ")";
    return;
  }
  event.synchronize();  // a host event: see the header (never a host function that waits)
}

}  // namespace ftrain::cuda
