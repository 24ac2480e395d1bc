// ExecutionContext: everything an op needs besides its tensors.
//
// One context per rank (the engine owns it; tests make their own): the
// device, a compute stream (every op runs on it), a communication stream
// (collectives; the communicator orders itself after compute with events),
// a workspace for ops' scratch memory, slots for library handles (cuBLASLt,
// cuDNN: opaque here, owned by the backend that fills them) and the
// device's stream-ordered allocator (runtime/allocator.hpp). Every op takes
// the context explicitly (kernels/ops.hpp); nothing is global.
//
// Who may read tensor data on the host: only code that first synchronized
// the compute stream (synchronize()), because ops may still be running.
// share/doc/execution-model.md is the full story for a backend author.
#pragma once

#include <cstddef>
#include <memory>

#include "runtime/allocator.hpp"
#include "runtime/attention_backend.hpp"
#include "base/device.hpp"
#include "runtime/stream.hpp"

namespace ftrain {

struct ExecutionOptions {
  Device device = Device::host;
  // Host: run the compute and communication streams each on a worker thread
  // (events are real completion points) instead of inline. Results are the
  // same bit for bit; the ordering of the caller is what gets exercised.
  bool asynchronous = false;
  // Reads FTRAIN_HOST_STREAM: "sync" (default) or "async"; anything else is
  // an error naming the variable.
  static ExecutionOptions from_environment();
  // Deck `attention_backend`: which attention the CUDA backend runs (the host has one).
  AttentionBackend attention_backend = AttentionBackend::automatic;
};

// Library handles a backend keeps per context (cublasLtHandle_t,
// cudnnHandle_t). The backend that creates them sets `owner` to release them.
struct LibraryHandles {
  void* blas = nullptr;
  void* dnn = nullptr;
  std::shared_ptr<void> owner;
};

// Makes a stream of a non-host device; a backend library registers one.
using StreamFactory = std::unique_ptr<Stream> (*)(bool asynchronous, const char* name);
void register_stream_factory(Device device, StreamFactory factory);
// An extra stream of a non-host device, from its backend's factory (the
// staged communicator's copy stream); an error naming `name` when no
// backend for `device` is loaded.
std::unique_ptr<Stream> make_device_stream(Device device, const char* name);

class ExecutionContext {
 public:
  explicit ExecutionContext(const ExecutionOptions& options = {});
  // Waits for both streams (work still queued reads borrowed buffers).
  ~ExecutionContext();
  ExecutionContext(const ExecutionContext&) = delete;
  ExecutionContext& operator=(const ExecutionContext&) = delete;

  Device device() const { return options_.device; }
  bool asynchronous() const { return options_.asynchronous; }
  AttentionBackend attention_backend() const { return options_.attention_backend; }
  Stream& compute() { return *compute_; }
  Stream& communication() { return *communication_; }
  DeviceAllocator& allocator() { return *allocator_; }
  LibraryHandles& libraries() { return libraries_; }

  // Waits for all work on both streams; rethrows the first error of it.
  void synchronize();

  // `bytes` of scratch memory for the op being enqueued on the compute
  // stream, valid for that op only: the next call may reuse or replace it
  // (the old block is released in stream order, so an op still queued keeps
  // reading valid memory).
  void* workspace(std::size_t bytes);

 private:
  ExecutionOptions options_;
  DeviceAllocator* allocator_ = nullptr;
  std::unique_ptr<Stream> compute_;
  std::unique_ptr<Stream> communication_;
  std::shared_ptr<void> workspace_;
  std::size_t workspace_bytes_ = 0;
  LibraryHandles libraries_;
};

// A synchronous host context for code outside a training step (tools,
// checkpoint conversion, tests that need no particular stream).
ExecutionContext& host_context();

}  // namespace ftrain
