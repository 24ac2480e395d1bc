// The cuda-api stand-in: a recording replacement for the CUDA runtime,
// cuBLASLt, cuDNN and NCCL entry points libftrain_cuda calls, so that the
// CUDA backend's host-side code (allocator, streams, events, copies, host
// functions, device binding, the communicators' issue paths) runs on a
// machine without a GPU and its use of the CUDA API can be checked
// (tests/cuda_api/, ctest -L cuda-api).
//
// libftrain_cuda_api_backend.so is libftrain_cuda built from the same
// objects (its .cpp and its nvcc-compiled .cu objects) but linked against
// this library instead of libcudart_static, cuBLASLt, cuDNN and NCCL. The
// production library has no test hook: the seam is the link.
//
// What it models, because the rules are about it:
//  * devices: set_device_count() of them, compute capability 9.0; the
//    current device is per host thread, and -1 (never set) is recorded as
//    such: real CUDA would silently use device 0 there.
//  * streams and the legacy default stream: each stream is a queue run in
//    order by a worker thread of its own (the "device"); events mark a
//    position in a queue. The legacy default stream (0, cudaStreamLegacy,
//    and what the synchronous calls use) waits for all work enqueued before
//    on every BLOCKING stream of the device and they wait for it, as CUDA
//    documents; non-blocking streams do not. cudaMemcpy, cudaMemset,
//    cudaMalloc, cudaFree are enqueued on the legacy stream and waited for.
//    So code that deadlocks on a GPU deadlocks here: a waiter that has not
//    been served after FTRAIN_CUDA_API_DEADLOCK_SECONDS (default 10) prints
//    every stream's state and what is waiting, and ends the process (exit
//    86): a test cannot hang.
//  * host functions run on the stream's worker, like CUDA's callback thread;
//    their duration is kept, and a CUDA call from inside one is recorded as
//    such (CUDA forbids both a CUDA call there and a wait on work not
//    already ordered before it).
//  * memory: device memory is host memory (so copies copy and collectives
//    move real bytes); cudaFreeAsync frees in stream order.
//  * kernels do not run: a launch is recorded (as cudaLaunchKernel) and
//    enqueued as an empty op, whichever entry point nvcc's launch stubs use
//    (__cudaPushCallConfiguration, __cudaPopCallConfiguration,
//    __cudaGetKernel, __cudaLaunchKernel, cudaLaunchKernel). cuBLASLt: handles, descriptors and one
//    heuristic result succeed, a matmul is an empty op on its stream. cuDNN:
//    handles and streams are recorded; descriptors, plans and execution
//    answer NOT_SUPPORTED (attention runs the reference kernel here). NCCL: one rank per
//    communicator; collectives copy send to recv in stream order.
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cuda_api/cuda_api_recorder.hpp"

namespace cuda_api {
namespace {

using Clock = std::chrono::steady_clock;

double deadlock_seconds() {
  static const double seconds = [] {
    const char* v = std::getenv("FTRAIN_CUDA_API_DEADLOCK_SECONDS");
    return v != nullptr && *v ? std::atof(v) : 10.0;
  }();
  return seconds;
}

// ---- the record -------------------------------------------------------------

std::mutex g_record_mutex;
std::vector<Call> g_calls;
std::uint64_t g_sequence = 0;
int g_step = -1;
std::string g_step_thread;
int g_expected_device = 0;
std::atomic<int> g_device_count{2};
std::atomic<std::uint64_t> g_release_threshold{0};
constexpr std::uint64_t kDeviceMemoryBytes = std::uint64_t{80} << 30;

std::map<int, std::pair<int, int>> g_capability;  // device -> (major, minor); absent: 9.0
std::pair<int, int> capability(int device) {
  std::lock_guard<std::mutex> lock(g_record_mutex);
  auto it = g_capability.find(device);
  return it == g_capability.end() ? std::pair<int, int>{9, 0} : it->second;
}

struct HostFunctionRun {
  std::uint64_t launch_sequence;
  std::string launched_by;
  int step;
  double seconds;
};
std::vector<HostFunctionRun> g_host_function_runs;

thread_local int t_device = -1;
thread_local bool t_in_host_function = false;
thread_local std::string t_name;

const std::string& thread_name() {
  if (t_name.empty()) {
    static std::atomic<int> next{1};
    t_name = syscall(SYS_gettid) == getpid() ? std::string("main") : "thread " + std::to_string(next++);
  }
  return t_name;
}

struct SimStream;
SimStream* resolve(cudaStream_t stream);

bool is_default_handle(cudaStream_t s) {
  return s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread;
}

// Records a call; returns its sequence number.
std::uint64_t record(const char* name, cudaStream_t stream = nullptr, bool has_stream = false,
                     Blocking blocking = Blocking::none, bool makes_resource = false, bool needs_device = true,
                     std::size_t bytes = 0, unsigned stream_flags = 0, bool implies_legacy = false) {
  Call c;
  c.name = name;
  c.thread = thread_name();
  c.device = t_device;
  c.needs_device = needs_device;
  c.makes_resource = makes_resource;
  c.stream = reinterpret_cast<std::uintptr_t>(stream);
  c.legacy_stream = implies_legacy || (has_stream && is_default_handle(stream));
  c.stream_flags = stream_flags;
  c.blocking = blocking;
  c.in_host_function = t_in_host_function;
  c.bytes = bytes;
  std::lock_guard<std::mutex> lock(g_record_mutex);
  c.sequence = ++g_sequence;
  c.step = g_step;
  g_calls.push_back(c);
  return c.sequence;
}

// ---- streams, events: the simulated device ----------------------------------

// Completion of any op; waiters wait on g_progress. Never destroyed: stream
// workers may still wait on them while the process exits.
std::mutex& g_progress_mutex = *new std::mutex;
std::condition_variable& g_progress = *new std::condition_variable;

struct Op {
  std::function<void()> run;  // null for a wait
  std::string what;
  SimStream* wait_for = nullptr;
  std::uint64_t wait_ticket = 0;
};

std::mutex g_state_mutex;  // enqueue order, the stream list, events
std::vector<SimStream*> g_streams;

[[noreturn]] void deadlock(const std::string& waiter);

struct SimStream {
  std::uint64_t id;
  unsigned flags;  // cudaStreamNonBlocking or 0
  bool legacy;
  int device;
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<Op> queue;
  std::uint64_t enqueued = 0;               // under g_state_mutex
  std::atomic<std::uint64_t> completed{0};  // ops done
  std::string running;                      // under mutex
  Clock::time_point running_since;
  bool stop = false;
  std::thread worker;

  SimStream(std::uint64_t i, unsigned f, bool l, int d) : id(i), flags(f), legacy(l), device(d) {
    worker = std::thread([this] { run(); });
  }
  std::string label() const {
    std::ostringstream s;
    s << (legacy ? "legacy default stream" : "stream #" + std::to_string(id)) << " (device " << device
      << (legacy ? "" : flags & cudaStreamNonBlocking ? ", non-blocking" : ", BLOCKING") << ")";
    return s.str();
  }
  void run() {
    t_name = "device worker of " + label();
    t_device = device;
    for (;;) {
      Op op;
      {
        std::unique_lock<std::mutex> lock(mutex);
        wake.wait(lock, [&] { return stop || !queue.empty(); });
        if (queue.empty()) return;
        op = std::move(queue.front());
        queue.pop_front();
        running = op.what;
        running_since = Clock::now();
      }
      if (op.wait_for != nullptr) {
        const auto start = Clock::now();
        std::unique_lock<std::mutex> lock(g_progress_mutex);
        while (op.wait_for->completed.load() < op.wait_ticket) {
          g_progress.wait_for(lock, std::chrono::milliseconds(50));
          if (std::chrono::duration<double>(Clock::now() - start).count() > deadlock_seconds()) {
            lock.unlock();
            deadlock(label() + " waiting for " + op.wait_for->label() + " to reach op " +
                     std::to_string(op.wait_ticket) + " (" + op.what + ")");
          }
        }
      } else if (op.run) {
        op.run();
      }
      {
        std::lock_guard<std::mutex> lock(mutex);
        running.clear();
      }
      {
        std::lock_guard<std::mutex> lock(g_progress_mutex);
        completed.fetch_add(1);
      }
      g_progress.notify_all();
    }
  }
  // With g_state_mutex held.
  std::uint64_t push(Op op) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      queue.push_back(std::move(op));
    }
    wake.notify_one();
    return ++enqueued;
  }
};

std::map<int, SimStream*>& legacy_streams() {
  static auto* m = new std::map<int, SimStream*>();
  return *m;
}
std::atomic<std::uint64_t> g_next_stream_id{1};

// With g_state_mutex held.
SimStream* legacy_of(int device) {
  auto& m = legacy_streams();
  auto it = m.find(device);
  if (it != m.end()) return it->second;
  auto* s = new SimStream(0, 0, true, device);  // never destroyed
  m[device] = s;
  g_streams.push_back(s);
  return s;
}

int device_or_zero() { return t_device < 0 ? 0 : t_device; }

SimStream* resolve(cudaStream_t stream) {
  if (is_default_handle(stream)) {
    std::lock_guard<std::mutex> lock(g_state_mutex);
    return legacy_of(device_or_zero());
  }
  return reinterpret_cast<SimStream*>(stream);
}

// Enqueues `op` on `s` with the legacy stream's implicit ordering; returns
// its ticket (the stream has run it once completed >= ticket).
std::uint64_t enqueue(SimStream* s, Op op) {
  std::lock_guard<std::mutex> lock(g_state_mutex);
  if (s->legacy) {
    for (SimStream* b : g_streams)
      if (!b->legacy && b->device == s->device && (b->flags & cudaStreamNonBlocking) == 0 && b->enqueued > 0)
        s->push(Op{nullptr, "the legacy stream's implicit wait for " + b->label(), b, b->enqueued});
  } else if ((s->flags & cudaStreamNonBlocking) == 0) {
    SimStream* l = legacy_of(s->device);
    if (l->enqueued > 0) s->push(Op{nullptr, "implicit wait for the legacy default stream", l, l->enqueued});
  }
  return s->push(std::move(op));
}

// The calling host thread waits until `s` ran op `ticket`.
void host_wait(SimStream* s, std::uint64_t ticket, const std::string& what) {
  const auto start = Clock::now();
  std::unique_lock<std::mutex> lock(g_progress_mutex);
  while (s->completed.load() < ticket) {
    g_progress.wait_for(lock, std::chrono::milliseconds(50));
    if (std::chrono::duration<double>(Clock::now() - start).count() > deadlock_seconds()) {
      lock.unlock();
      deadlock(thread_name() + " in " + what + ", waiting for " + s->label() + " to reach op " +
               std::to_string(ticket));
    }
  }
}

void deadlock(const std::string& waiter) {
  std::ostringstream out;
  out << "cuda-api stand-in: DEADLOCK: " << waiter << " for more than " << deadlock_seconds() << " s.\n"
      << "Streams (ops enqueued / completed, what runs now):\n";
  if (g_state_mutex.try_lock()) {
    for (SimStream* s : g_streams) {
      std::lock_guard<std::mutex> lock(s->mutex);
      out << "  " << s->label() << ": " << s->enqueued << " / " << s->completed.load();
      if (!s->running.empty())
        out << ", running for "
            << std::chrono::duration<double>(Clock::now() - s->running_since).count() << " s: " << s->running;
      out << "\n";
    }
    g_state_mutex.unlock();
  }
  out << "A host function that waits for another thread, which waits for the device, is the classic cause "
         "(CUDA forbids a host function to wait for work not already ordered before it).\n";
  std::fputs(out.str().c_str(), stderr);
  std::fflush(stderr);
  std::_Exit(86);
}

struct SimEvent {
  SimStream* stream = nullptr;  // under g_state_mutex
  std::uint64_t ticket = 0;
  unsigned flags = 0;
};

// Zeroed: kernels do not run here, so what a run reads back (a loss, a
// norm) is what the memory held; zeros keep it finite, so that a whole
// training run gets past the divergence check (cuda_api_trainer_tensor_parallel).
void* device_alloc(std::size_t bytes) {
  void* p = nullptr;
  if (posix_memalign(&p, 256, bytes == 0 ? 1 : bytes) != 0) return nullptr;
  std::memset(p, 0, bytes == 0 ? 1 : bytes);
  return p;
}

struct CallConfiguration {
  dim3 grid, block;
  std::size_t shared = 0;
  cudaStream_t stream = nullptr;
};
thread_local std::vector<CallConfiguration> t_configurations;

cudaError_t g_last_error = cudaSuccess;

}  // namespace

// ---- the test-facing API ------------------------------------------------------

std::vector<Call> calls() {
  std::lock_guard<std::mutex> lock(g_record_mutex);
  return g_calls;
}
std::uint64_t last_sequence() {
  std::lock_guard<std::mutex> lock(g_record_mutex);
  return g_sequence;
}
void clear() {
  std::lock_guard<std::mutex> lock(g_record_mutex);
  g_calls.clear();
  g_host_function_runs.clear();
}
void begin_step(int step) {
  std::lock_guard<std::mutex> lock(g_record_mutex);
  g_step = step;
  g_step_thread = thread_name();
}
void end_step() {
  std::lock_guard<std::mutex> lock(g_record_mutex);
  g_step = -1;
}
void set_expected_device(int device) { g_expected_device = device; }
std::uint64_t pool_release_threshold() { return g_release_threshold.load(); }
std::uint64_t device_memory_bytes() { return kDeviceMemoryBytes; }
void set_device_count(int count) { g_device_count = count; }
void set_compute_capability(int device, int major, int minor) {
  std::lock_guard<std::mutex> lock(g_record_mutex);
  g_capability[device] = {major, minor};
}

std::string describe(const Call& c) {
  std::ostringstream s;
  s << "#" << c.sequence << " " << c.name << " on " << c.thread << ", device "
    << (c.device < 0 ? std::string("never set on this thread (CUDA: 0)") : std::to_string(c.device));
  if (c.stream != 0 || c.legacy_stream) s << ", stream " << reinterpret_cast<const void*>(c.stream);
  if (c.legacy_stream) s << " (the legacy default stream)";
  if (c.step >= 0) s << ", in step " << c.step;
  if (c.bytes) s << ", " << c.bytes << " bytes";
  return s.str();
}

static std::vector<Call> calls_after(std::uint64_t since) {
  std::vector<Call> out;
  for (Call& c : calls())
    if (c.sequence > since) out.push_back(std::move(c));
  return out;
}

std::vector<std::string> default_stream_uses(std::uint64_t since) {
  std::vector<std::string> out;
  for (const Call& c : calls_after(since))
    if (c.legacy_stream) out.push_back(describe(c));
  return out;
}

std::vector<std::string> blocking_streams_created(std::uint64_t since) {
  std::vector<std::string> out;
  for (const Call& c : calls_after(since))
    if (c.name.rfind("cudaStreamCreate", 0) == 0 && (c.stream_flags & cudaStreamNonBlocking) == 0)
      out.push_back(describe(c) + ": created without cudaStreamNonBlocking");
  return out;
}

std::vector<std::string> calls_off_the_rank_device(std::uint64_t since) {
  std::vector<std::string> out;
  for (const Call& c : calls_after(since)) {
    if (!c.needs_device || c.thread.rfind("device worker", 0) == 0) continue;
    if (c.device != g_expected_device)
      out.push_back(describe(c) + (c.makes_resource ? " (makes a resource)" : "") + ": the rank's device is " +
                    std::to_string(g_expected_device));
  }
  return out;
}

std::vector<std::string> blocking_calls_in_steps(std::uint64_t since) {
  std::string step_thread;
  {
    std::lock_guard<std::mutex> lock(g_record_mutex);
    step_thread = g_step_thread;
  }
  std::vector<std::string> out;
  for (const Call& c : calls_after(since)) {
    if (c.step < 0 || c.blocking == Blocking::none) continue;
    if (c.blocking == Blocking::host_wait && c.thread != step_thread) continue;
    out.push_back(describe(c) + (c.blocking == Blocking::device_wide ? ": synchronous (a device-wide barrier)"
                                                                      : ": the step's thread waits"));
  }
  return out;
}

std::vector<std::string> host_function_violations(std::uint64_t since, double seconds) {
  std::vector<std::string> out;
  for (const Call& c : calls_after(since))
    if (c.in_host_function) out.push_back(describe(c) + ": a CUDA call from inside a host function");
  std::lock_guard<std::mutex> lock(g_record_mutex);
  for (const HostFunctionRun& r : g_host_function_runs)
    if (r.launch_sequence > since && r.seconds > seconds)
      out.push_back("host function launched by call #" + std::to_string(r.launch_sequence) + " on " + r.launched_by +
                    " ran " + std::to_string(r.seconds) + " s: it waited for something (another thread's work?)");
  return out;
}

std::vector<std::string> host_functions_in_steps(std::uint64_t since) {
  std::vector<std::string> out;
  for (const Call& c : calls_after(since))
    if (c.step >= 0 && c.name == "cudaLaunchHostFunc") out.push_back(describe(c));
  return out;
}

}  // namespace cuda_api

// ---- the CUDA runtime --------------------------------------------------------

using namespace cuda_api;

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  record("cudaGetDeviceCount", nullptr, false, Blocking::none, false, /*needs_device=*/false);
  *count = g_device_count.load();
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  record("cudaGetDeviceProperties", nullptr, false, Blocking::none, false, false);
  if (device < 0 || device >= g_device_count.load()) return cudaErrorInvalidDevice;
  std::memset(prop, 0, sizeof *prop);
  std::snprintf(prop->name, sizeof prop->name, "cuda-api stand-in device %d", device);
  prop->major = capability(device).first;
  prop->minor = capability(device).second;
  prop->totalGlobalMem = kDeviceMemoryBytes;
  prop->multiProcessorCount = 132;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  record("cudaDeviceGetAttribute", nullptr, false, Blocking::none, false, false);
  if (device < 0 || device >= g_device_count.load()) return cudaErrorInvalidDevice;
  switch (attr) {
    case cudaDevAttrComputeCapabilityMajor: *value = capability(device).first; break;
    case cudaDevAttrComputeCapabilityMinor: *value = capability(device).second; break;
    case cudaDevAttrMultiProcessorCount: *value = 132; break;
    case cudaDevAttrMaxThreadsPerBlock: *value = 1024; break;
    case cudaDevAttrWarpSize: *value = 32; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = 232448; break;
    // What CUB's dispatch (the embedding backward's sort) sizes its kernels by.
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = 49152; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *value = 233472; break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *value = 2048; break;
    case cudaDevAttrMaxRegistersPerBlock: *value = 65536; break;
    case cudaDevAttrMaxRegistersPerMultiprocessor: *value = 65536; break;
    case cudaDevAttrL2CacheSize: *value = 50 << 20; break;
    case cudaDevAttrMaxGridDimX: *value = 2147483647; break;
    case cudaDevAttrMaxGridDimY: case cudaDevAttrMaxGridDimZ: *value = 65535; break;
    case cudaDevAttrMaxBlockDimX: case cudaDevAttrMaxBlockDimY: *value = 1024; break;
    case cudaDevAttrMaxBlockDimZ: *value = 64; break;
    default: *value = 0; break;
  }
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  record("cudaSetDevice", nullptr, false, Blocking::none, false, false);
  if (device < 0 || device >= g_device_count.load()) return cudaErrorInvalidDevice;
  t_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  record("cudaGetDevice", nullptr, false, Blocking::none, false, false);
  *device = t_device < 0 ? 0 : t_device;
  return cudaSuccess;
}

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    default: {
      static thread_local char name[64];
      std::snprintf(name, sizeof name, "cudaError %d (cuda-api stand-in)", static_cast<int>(error));
      return name;
    }
  }
}
const char* cudaGetErrorString(cudaError_t error) { return cudaGetErrorName(error); }

cudaError_t cudaGetLastError(void) {
  record("cudaGetLastError", nullptr, false, Blocking::none, false, false);
  const cudaError_t e = g_last_error;
  g_last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError(void) { return g_last_error; }

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  record("cudaMemGetInfo");
  *total_bytes = kDeviceMemoryBytes;
  *free_bytes = kDeviceMemoryBytes - (std::size_t{1} << 30);
  return cudaSuccess;
}

static cudaError_t create_stream(const char* name, cudaStream_t* stream, unsigned flags) {
  record(name, nullptr, false, Blocking::none, /*makes_resource=*/true, true, 0, flags);
  auto* s = new SimStream(g_next_stream_id++, flags, false, device_or_zero());
  {
    std::lock_guard<std::mutex> lock(g_state_mutex);
    g_streams.push_back(s);
  }
  *stream = reinterpret_cast<cudaStream_t>(s);
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* stream) { return create_stream("cudaStreamCreate", stream, 0); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  return create_stream("cudaStreamCreateWithFlags", stream, flags);
}
cudaError_t cudaStreamCreateWithPriority(cudaStream_t* stream, unsigned int flags, int) {
  return create_stream("cudaStreamCreateWithPriority", stream, flags);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  record("cudaStreamDestroy", stream, true);
  if (is_default_handle(stream)) return cudaErrorInvalidValue;
  // Kept (never freed): events may still name it; its worker is stopped
  // once its queue ran dry.
  SimStream* s = resolve(stream);
  {
    std::lock_guard<std::mutex> lock(s->mutex);
    s->stop = true;
  }
  s->wake.notify_all();
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  record("cudaStreamSynchronize", stream, true, Blocking::host_wait);
  SimStream* s = resolve(stream);
  std::uint64_t ticket;
  {
    std::lock_guard<std::mutex> lock(g_state_mutex);
    ticket = s->enqueued;
  }
  host_wait(s, ticket, "cudaStreamSynchronize");
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  record("cudaStreamQuery", stream, true);
  SimStream* s = resolve(stream);
  std::lock_guard<std::mutex> lock(g_state_mutex);
  return s->completed.load() >= s->enqueued ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaDeviceSynchronize(void) {
  record("cudaDeviceSynchronize", nullptr, false, Blocking::device_wide, false, true, 0, 0, true);
  std::vector<std::pair<SimStream*, std::uint64_t>> all;
  {
    std::lock_guard<std::mutex> lock(g_state_mutex);
    for (SimStream* s : g_streams)
      if (s->device == device_or_zero()) all.emplace_back(s, s->enqueued);
  }
  for (auto& [s, t] : all) host_wait(s, t, "cudaDeviceSynchronize");
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  record("cudaEventCreate", nullptr, false, Blocking::none, true);
  *event = reinterpret_cast<cudaEvent_t>(new SimEvent{});
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  record("cudaEventCreateWithFlags", nullptr, false, Blocking::none, true);
  *event = reinterpret_cast<cudaEvent_t>(new SimEvent{nullptr, 0, flags});
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  record("cudaEventDestroy");
  // Kept: a stream wait snapshot may still refer to its stream (never to it).
  (void)event;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  record("cudaEventRecord", stream, true);
  SimStream* s = resolve(stream);
  auto* e = reinterpret_cast<SimEvent*>(event);
  const std::uint64_t ticket = enqueue(s, Op{[] {}, "event record"});
  std::lock_guard<std::mutex> lock(g_state_mutex);
  e->stream = s;
  e->ticket = ticket;
  return cudaSuccess;
}
static std::pair<SimStream*, std::uint64_t> snapshot(cudaEvent_t event) {
  auto* e = reinterpret_cast<SimEvent*>(event);
  std::lock_guard<std::mutex> lock(g_state_mutex);
  return {e->stream, e->ticket};
}
cudaError_t cudaEventQuery(cudaEvent_t event) {
  record("cudaEventQuery");
  auto [s, t] = snapshot(event);
  return s == nullptr || s->completed.load() >= t ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  record("cudaEventSynchronize", nullptr, false, Blocking::host_wait);
  auto [s, t] = snapshot(event);
  if (s != nullptr) host_wait(s, t, "cudaEventSynchronize");
  return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t, cudaEvent_t) {
  record("cudaEventElapsedTime");
  *ms = 0.0f;
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  record("cudaStreamWaitEvent", stream, true);
  SimStream* s = resolve(stream);
  auto [on, t] = snapshot(event);
  if (on != nullptr && on != s) enqueue(s, Op{nullptr, "cudaStreamWaitEvent", on, t});
  return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* data) {
  const std::uint64_t sequence = record("cudaLaunchHostFunc", stream, true);
  const std::string by = thread_name();
  SimStream* s = resolve(stream);
  enqueue(s, Op{[fn, data, sequence, by] {
                  const auto start = Clock::now();
                  t_in_host_function = true;
                  fn(data);
                  t_in_host_function = false;
                  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
                  std::lock_guard<std::mutex> lock(g_record_mutex);
                  g_host_function_runs.push_back({sequence, by, g_step, seconds});
                },
                "host function launched by call #" + std::to_string(sequence) + " on " + by});
  return cudaSuccess;
}

// Synchronous calls: enqueued on the legacy default stream and waited for.
static void legacy_and_wait(const char* what, std::function<void()> run) {
  SimStream* l = resolve(nullptr);
  const std::uint64_t ticket = enqueue(l, Op{std::move(run), what});
  host_wait(l, ticket, what);
}

cudaError_t cudaMalloc(void** ptr, size_t size) {
  record("cudaMalloc", nullptr, false, Blocking::device_wide, true, true, size, 0, true);
  *ptr = device_alloc(size);
  legacy_and_wait("cudaMalloc", [] {});
  return *ptr ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void* ptr) {
  record("cudaFree", nullptr, false, Blocking::device_wide, false, true, 0, 0, true);
  legacy_and_wait("cudaFree", [ptr] { std::free(ptr); });
  return cudaSuccess;
}
cudaError_t cudaMallocAsync(void** ptr, size_t size, cudaStream_t stream) {
  record("cudaMallocAsync", stream, true, Blocking::none, true, true, size);
  *ptr = device_alloc(size);
  return *ptr ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream) {
  record("cudaFreeAsync", stream, true);
  enqueue(resolve(stream), Op{[ptr] { std::free(ptr); }, "cudaFreeAsync"});
  return cudaSuccess;
}
cudaError_t cudaMemPoolCreate(cudaMemPool_t* pool, const cudaMemPoolProps* props) {
  record("cudaMemPoolCreate", nullptr, false, Blocking::none, true);
  *pool = reinterpret_cast<cudaMemPool_t>(new int(props->location.id));
  return cudaSuccess;
}
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t, cudaMemPoolAttr attribute, void* value) {
  record("cudaMemPoolSetAttribute");
  if (attribute == cudaMemPoolAttrReleaseThreshold) g_release_threshold = *static_cast<std::uint64_t*>(value);
  return cudaSuccess;
}
cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t, cudaMemPoolAttr, void* value) {
  record("cudaMemPoolGetAttribute");
  *static_cast<std::uint64_t*>(value) = 0;
  return cudaSuccess;
}
cudaError_t cudaMemPoolTrimTo(cudaMemPool_t, size_t) {
  record("cudaMemPoolTrimTo");
  return cudaSuccess;
}
cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t, cudaStream_t stream) {
  record("cudaMallocFromPoolAsync", stream, true, Blocking::none, true, true, size);
  *ptr = device_alloc(size);
  return *ptr ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned int) {
  record("cudaHostAlloc", nullptr, false, Blocking::device_wide, true, true, size);
  *ptr = device_alloc(size);
  return *ptr ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaMallocHost(void** ptr, size_t size) {
  record("cudaMallocHost", nullptr, false, Blocking::device_wide, true, true, size);
  *ptr = device_alloc(size);
  return *ptr ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFreeHost(void* ptr) {
  record("cudaFreeHost", nullptr, false, Blocking::device_wide, false, true, 0, 0, true);
  legacy_and_wait("cudaFreeHost", [ptr] { std::free(ptr); });
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind) {
  record("cudaMemcpy", nullptr, false, Blocking::device_wide, false, true, count, 0, true);
  legacy_and_wait("cudaMemcpy", [dst, src, count] { std::memmove(dst, src, count); });
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind, cudaStream_t stream) {
  record("cudaMemcpyAsync", stream, true, Blocking::none, false, true, count);
  enqueue(resolve(stream), Op{[dst, src, count] { std::memmove(dst, src, count); }, "cudaMemcpyAsync"});
  return cudaSuccess;
}
cudaError_t cudaMemset(void* dst, int value, size_t count) {
  record("cudaMemset", nullptr, false, Blocking::device_wide, false, true, count, 0, true);
  legacy_and_wait("cudaMemset", [dst, value, count] { std::memset(dst, value, count); });
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* dst, int value, size_t count, cudaStream_t stream) {
  record("cudaMemsetAsync", stream, true, Blocking::none, false, true, count);
  enqueue(resolve(stream), Op{[dst, value, count] { std::memset(dst, value, count); }, "cudaMemsetAsync"});
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void*, cudaFuncAttribute, int) {
  record("cudaFuncSetAttribute");
  return cudaSuccess;
}
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attributes, const void*) {
  record("cudaFuncGetAttributes");
  std::memset(attributes, 0, sizeof *attributes);
  attributes->maxThreadsPerBlock = 1024;
  attributes->ptxVersion = 90;  // CUB picks its tuning policy by these
  attributes->binaryVersion = 90;
  return cudaSuccess;
}
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, const void*, int, size_t) {
  record("cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  *blocks = 2;
  return cudaSuccess;
}
// CUB's device-wide sorts (the embedding backward) size their grids with it.
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* blocks, const void*, int, size_t, unsigned int) {
  record("cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags");
  *blocks = 2;
  return cudaSuccess;
}

cudaError_t cudaLaunchKernel(const void*, dim3, dim3, void**, size_t, cudaStream_t stream) {
  record("cudaLaunchKernel", stream, true);
  enqueue(resolve(stream), Op{[] {}, "a kernel (not run by the stand-in)"});
  return cudaSuccess;
}

// CUDA 13's launch path from nvcc's stubs (declared in crt/device_functions.h):
// __cudaGetKernel gives the kernel's handle, __cudaLaunchKernel launches it
// on the stream of the <<<>>> configuration.
cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* function) {
  *kernel = reinterpret_cast<cudaKernel_t>(const_cast<void*>(function));
  return cudaSuccess;
}
cudaError_t __cudaLaunchKernel(cudaKernel_t, dim3, dim3, void**, size_t, cudaStream_t stream) {
  record("cudaLaunchKernel", stream, true);
  enqueue(resolve(stream), Op{[] {}, "a kernel (not run by the stand-in)"});
  return cudaSuccess;
}

// Module registration and the <<<>>> configuration stack that nvcc's launch
// stubs call (declared in crt/host_runtime.h); registration records nothing.
void** __cudaRegisterFatBinary(void*) {
  static void* handle = nullptr;
  return &handle;
}
void __cudaRegisterFatBinaryEnd(void**) {}
void __cudaUnregisterFatBinary(void**) {}
void __cudaRegisterFunction(void**, const char*, char*, const char*, int, uint3*, uint3*, dim3*, dim3*, int*) {}
void __cudaRegisterVar(void**, char*, char*, const char*, int, size_t, int, int) {}
unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shared, struct CUstream_st* stream) {
  t_configurations.push_back({grid, block, shared, stream});
  return 0;
}
cudaError_t __cudaPopCallConfiguration(dim3* grid, dim3* block, size_t* shared, void* stream) {
  if (t_configurations.empty()) return cudaErrorInvalidValue;
  const CallConfiguration c = t_configurations.back();
  t_configurations.pop_back();
  *grid = c.grid;
  *block = c.block;
  *shared = c.shared;
  *static_cast<cudaStream_t*>(stream) = c.stream;
  return cudaSuccess;
}

// ---- cuBLASLt -------------------------------------------------------------------

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  record("cublasLtCreate", nullptr, false, Blocking::none, true);
  *handle = reinterpret_cast<cublasLtHandle_t>(new int(t_device));
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t) {
  record("cublasLtDestroy");
  return CUBLAS_STATUS_SUCCESS;
}
const char* cublasLtGetStatusName(cublasStatus_t status) {
  return status == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : "CUBLAS_STATUS_NOT_SUPPORTED";
}
const char* cublasLtGetStatusString(cublasStatus_t) { return "cuBLASLt error (cuda-api stand-in)"; }
// Descriptors and heuristics succeed (one algorithm, no workspace) and a
// matmul is enqueued as an empty op: the linears' stream and handle use is
// what is checked here, never their numbers.
}  // extern "C"
template <class T>
static cublasStatus_t make_descriptor(const char* name, T* out) {
  record(name, nullptr, false, Blocking::none, false, false);
  *out = reinterpret_cast<T>(new std::uint64_t[32]());
  return CUBLAS_STATUS_SUCCESS;
}
extern "C" {
#define FTRAIN_STANDIN_LT_OK(name, ...)                      \
  cublasStatus_t name(__VA_ARGS__) {                         \
    record(#name, nullptr, false, Blocking::none, false, false); \
    return CUBLAS_STATUS_SUCCESS;                            \
  }
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t, cudaDataType_t) {
  return make_descriptor("cublasLtMatmulDescCreate", d);
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* d, cudaDataType, uint64_t, uint64_t, int64_t) {
  return make_descriptor("cublasLtMatrixLayoutCreate", d);
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* d) {
  return make_descriptor("cublasLtMatmulPreferenceCreate", d);
}
FTRAIN_STANDIN_LT_OK(cublasLtMatmulDescDestroy, cublasLtMatmulDesc_t)
FTRAIN_STANDIN_LT_OK(cublasLtMatmulDescSetAttribute, cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t, const void*,
                     size_t)
FTRAIN_STANDIN_LT_OK(cublasLtMatrixLayoutDestroy, cublasLtMatrixLayout_t)
FTRAIN_STANDIN_LT_OK(cublasLtMatrixLayoutSetAttribute, cublasLtMatrixLayout_t, cublasLtMatrixLayoutAttribute_t,
                     const void*, size_t)
FTRAIN_STANDIN_LT_OK(cublasLtMatmulPreferenceDestroy, cublasLtMatmulPreference_t)
FTRAIN_STANDIN_LT_OK(cublasLtMatmulPreferenceSetAttribute, cublasLtMatmulPreference_t,
                     cublasLtMatmulPreferenceAttributes_t, const void*, size_t)
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t,
                                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                              cublasLtMatmulPreference_t, int requested,
                                              cublasLtMatmulHeuristicResult_t* results, int* returned) {
  record("cublasLtMatmulAlgoGetHeuristic");
  if (requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
  std::memset(&results[0], 0, sizeof results[0]);
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t, const void*, const void*, cublasLtMatrixLayout_t,
                              const void*, cublasLtMatrixLayout_t, const void*, const void*, cublasLtMatrixLayout_t,
                              void*, cublasLtMatrixLayout_t, const cublasLtMatmulAlgo_t*, void*, size_t,
                              cudaStream_t stream) {
  record("cublasLtMatmul", stream, true);
  enqueue(resolve(stream), Op{[] {}, "a cuBLASLt matmul (not run by the stand-in)"});
  return CUBLAS_STATUS_SUCCESS;
}

// ---- cuDNN -------------------------------------------------------------------------

cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
  record("cudnnCreate", nullptr, false, Blocking::none, true);
  *handle = reinterpret_cast<cudnnHandle_t>(new int(t_device));
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroy(cudnnHandle_t) {
  record("cudnnDestroy");
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetStream(cudnnHandle_t, cudaStream_t stream) {
  record("cudnnSetStream", stream, true);
  return CUDNN_STATUS_SUCCESS;
}
size_t cudnnGetVersion(void) { return CUDNN_VERSION; }
const char* cudnnGetErrorString(cudnnStatus_t status) {
  return status == CUDNN_STATUS_SUCCESS ? "CUDNN_STATUS_SUCCESS" : "CUDNN_STATUS_NOT_SUPPORTED (cuda-api stand-in)";
}
void cudnnGetLastErrorString(char* message, size_t max_size) {
  if (max_size > 0) std::snprintf(message, max_size, "%s", "cuDNN is not run by the cuda-api stand-in");
}
#define FTRAIN_STANDIN_UNSUPPORTED_DNN(name, ...) \
  cudnnStatus_t name(__VA_ARGS__) {               \
    record(#name, nullptr, false, Blocking::none, false, false); \
    return CUDNN_STATUS_NOT_SUPPORTED;            \
  }
FTRAIN_STANDIN_UNSUPPORTED_DNN(cudnnBackendCreateDescriptor, cudnnBackendDescriptorType_t, cudnnBackendDescriptor_t*)
FTRAIN_STANDIN_UNSUPPORTED_DNN(cudnnBackendDestroyDescriptor, cudnnBackendDescriptor_t)
FTRAIN_STANDIN_UNSUPPORTED_DNN(cudnnBackendSetAttribute, cudnnBackendDescriptor_t, cudnnBackendAttributeName_t,
                               cudnnBackendAttributeType_t, int64_t, const void*)
FTRAIN_STANDIN_UNSUPPORTED_DNN(cudnnBackendGetAttribute, cudnnBackendDescriptor_t const, cudnnBackendAttributeName_t,
                               cudnnBackendAttributeType_t, int64_t, int64_t*, void*)
FTRAIN_STANDIN_UNSUPPORTED_DNN(cudnnBackendFinalize, cudnnBackendDescriptor_t)
cudnnStatus_t cudnnBackendExecute(cudnnHandle_t, cudnnBackendDescriptor_t, cudnnBackendDescriptor_t) {
  record("cudnnBackendExecute");
  return CUDNN_STATUS_NOT_SUPPORTED;
}

// ---- NCCL (one rank per communicator) --------------------------------------------

namespace {
struct SimComm {
  int device;
  // One rank per communicator: a ncclSend goes to this rank itself, and the
  // ncclRecv of the same group reads it.
  const void* pending_send = nullptr;
};
std::size_t nccl_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
  }
}
ncclResult_t nccl_copy(const char* name, const void* send, void* recv, std::size_t bytes, cudaStream_t stream) {
  record(name, stream, true, Blocking::none, false, true, bytes);
  enqueue(resolve(stream), Op{[send, recv, bytes] {
                                if (send != nullptr && send != recv) std::memmove(recv, send, bytes);
                              },
                              name});
  return ncclSuccess;
}
}  // namespace

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  record("ncclGetUniqueId", nullptr, false, Blocking::none, false, false);
  std::memset(id, 0, sizeof *id);
  return ncclSuccess;
}
ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId, int, ncclConfig_t*) {
  record("ncclCommInitRankConfig", nullptr, false, Blocking::none, true);
  if (nranks != 1) return ncclInvalidUsage;  // one rank per process here
  *comm = reinterpret_cast<ncclComm_t>(new SimComm{t_device});
  return ncclSuccess;
}
ncclResult_t ncclCommSplit(ncclComm_t, int, int, ncclComm_t* newcomm, ncclConfig_t*) {
  record("ncclCommSplit", nullptr, false, Blocking::none, true);
  *newcomm = reinterpret_cast<ncclComm_t>(new SimComm{t_device});
  return ncclSuccess;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t* state) {
  record("ncclCommGetAsyncError", nullptr, false, Blocking::none, false, false);
  *state = ncclSuccess;
  return ncclSuccess;
}
ncclResult_t ncclCommFinalize(ncclComm_t) {
  record("ncclCommFinalize");
  return ncclSuccess;
}
ncclResult_t ncclCommDestroy(ncclComm_t) {
  record("ncclCommDestroy");
  return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t) {
  record("ncclCommAbort");
  return ncclSuccess;
}
const char* ncclGetErrorString(ncclResult_t) { return "NCCL error (cuda-api stand-in)"; }
const char* ncclGetLastError(ncclComm_t) { return "NCCL: the cuda-api stand-in runs one rank per communicator"; }
ncclResult_t ncclGroupStart() { return ncclSuccess; }
ncclResult_t ncclGroupEnd() { return ncclSuccess; }
ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t type, ncclComm_t,
                           cudaStream_t stream) {
  return nccl_copy("ncclAllGather", send, recv, count * nccl_size(type), stream);
}
ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t,
                               ncclComm_t, cudaStream_t stream) {
  return nccl_copy("ncclReduceScatter", send, recv, count * nccl_size(type), stream);
}
ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t, ncclComm_t,
                           cudaStream_t stream) {
  return nccl_copy("ncclAllReduce", send, recv, count * nccl_size(type), stream);
}
ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  record("ncclSend", stream, true, Blocking::none, false, true, count * nccl_size(type));
  if (peer != 0) return ncclInvalidUsage;
  reinterpret_cast<SimComm*>(comm)->pending_send = send;
  return ncclSuccess;
}
ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t stream) {
  auto* sim = reinterpret_cast<SimComm*>(comm);
  if (peer != 0 || sim->pending_send == nullptr) return ncclInvalidUsage;
  const void* send = sim->pending_send;
  sim->pending_send = nullptr;
  return nccl_copy("ncclRecv", send, recv, count * nccl_size(type), stream);
}
ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type, int, ncclComm_t,
                           cudaStream_t stream) {
  return nccl_copy("ncclBroadcast", send, recv, count * nccl_size(type), stream);
}

}  // extern "C"
