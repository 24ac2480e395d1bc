// The cuda-api stand-in's record, for the tests (tests/cuda_api/README in
// the header of cuda_api_standin.cpp says what the stand-in is).
//
// Every CUDA runtime, cuBLASLt, cuDNN and NCCL entry point that
// libftrain_cuda calls is defined by the stand-in; each call is recorded with
// the calling thread, the device current on that thread (-1: the thread
// never called cudaSetDevice, so real CUDA would use device 0), the stream,
// and what kind of call it is. The rules of share/doc/execution-model.md
// ("Streams on CUDA") are checked on that record by the functions below.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace cuda_api {

enum class Blocking : std::uint8_t {
  none,         // enqueued, the caller goes on
  host_wait,    // the caller waits for one stream or event (cudaStreamSynchronize, cudaEventSynchronize)
  device_wide,  // a synchronous copy/memset/allocation/free or cudaDeviceSynchronize: the legacy stream's barrier
};

struct Call {
  std::uint64_t sequence = 0;
  std::string name;             // "cudaMemcpyAsync"
  std::string thread;           // "main", "thread 3" (stand-in numbering, in order of first call)
  int device = -1;              // current device of the thread at the call; -1: never set there
  bool needs_device = true;     // false for the device queries (count, attributes), cudaSetDevice, error strings
  bool makes_resource = false;  // stream, event, pool, memory, library handle, NCCL communicator
  std::uintptr_t stream = 0;    // the stream argument (0: none / the legacy default stream by 0)
  bool legacy_stream = false;   // the legacy (0, cudaStreamLegacy) or per-thread default stream, explicit or implied
  unsigned stream_flags = 0;    // flags of a created stream (cudaStreamNonBlocking = 1)
  Blocking blocking = Blocking::none;
  bool in_host_function = false;  // made from inside a host function (CUDA forbids it)
  int step = -1;                // begin_step(n) .. end_step(); -1 outside
  std::size_t bytes = 0;
};

// Everything recorded since the last clear().
std::vector<Call> calls();
void clear();
// The sequence number of the last call recorded (a test's starting mark).
std::uint64_t last_sequence();

// Marks the calls of one training step (the tests' own windows).
void begin_step(int step);
void end_step();

// The rank's device the tests expect every device-bound call on.
void set_expected_device(int device);
// Devices the stand-in reports (cudaGetDeviceCount); 2 by default, all of
// compute capability 9.0 unless set otherwise.
void set_device_count(int count);
void set_compute_capability(int device, int major, int minor);

// The rules; each returns one line per violating call (empty: kept),
// looking at the calls recorded after `since` (a last_sequence() mark).
// No call on the legacy or per-thread default stream, explicit or implied.
std::vector<std::string> default_stream_uses(std::uint64_t since = 0);
// Every stream created non-blocking.
std::vector<std::string> blocking_streams_created(std::uint64_t since = 0);
// Every device-bound call made on a thread whose current device was set to
// the expected device (so nothing is created on, or touches, device 0 by
// default).
std::vector<std::string> calls_off_the_rank_device(std::uint64_t since = 0);
// Calls inside a step (begin_step .. end_step) that are synchronous (a
// device-wide barrier, on any thread), or that make the step's own thread
// wait for a stream or an event. (A helper thread that waits for its own
// stream, as the staged communicator's progress thread does, is not the
// step waiting.)
std::vector<std::string> blocking_calls_in_steps(std::uint64_t since = 0);
// CUDA calls from inside a host function, and host functions that ran for
// longer than `seconds` (one that waits for another thread's work).
std::vector<std::string> host_function_violations(std::uint64_t since = 0, double seconds = 1.0);
// Host functions launched inside steps.
std::vector<std::string> host_functions_in_steps(std::uint64_t since = 0);

// The last cudaMemPoolAttrReleaseThreshold set on a pool (0: never set),
// and the device memory the stand-in reports (cudaMemGetInfo's total).
std::uint64_t pool_release_threshold();
std::uint64_t device_memory_bytes();

// "name thread device stream ..." of one call, for messages.
std::string describe(const Call& call);

// Findings for a test's failure message: one per line, the first `shown`,
// then how many more.
inline std::string listing(const std::vector<std::string>& findings, std::size_t shown = 30) {
  std::string out;
  for (std::size_t i = 0; i < findings.size() && i < shown; ++i) out += "  " + findings[i] + "\n";
  if (findings.size() > shown) out += "  ... and " + std::to_string(findings.size() - shown) + " more\n";
  return out;
}

}  // namespace cuda_api
