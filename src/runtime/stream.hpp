// Streams and events: the ordering rules every backend keeps (CUDA's).
//
// A Stream runs the work enqueued on it in order. An Event marks a point in
// a stream; it completes when all work enqueued before it has run. The host
// backend has two streams:
//  * synchronous (the default): enqueue runs the work at once on the calling
//    thread, so every event is complete when it is recorded and ordering
//    costs nothing;
//  * asynchronous (ExecutionOptions::asynchronous, FTRAIN_HOST_STREAM=async):
//    one worker thread runs the work in order, so the caller runs ahead of
//    the kernels exactly as a CUDA host thread runs ahead of the GPU. Events
//    are real completion points. This is how the engine's ordering and
//    buffer lifetimes are tested without a GPU.
//
// Errors: an exception thrown by enqueued work is kept (the first one) and
// the stream skips its later work until synchronize() rethrows it, as a CUDA
// error is sticky until observed. On a synchronous stream errors propagate
// at once.
//
// The CUDA backend implements Stream over cudaStream_t / cudaEvent_t
// (native_handle(); its events are NativeEvents: cudaEventRecord,
// cudaStreamWaitEvent, cudaEventQuery / cudaEventSynchronize); nothing above
// kernels/ depends on which one it gets. A host stream waiting for a CUDA
// event blocks its worker in cudaEventSynchronize. A CUDA stream waiting
// for a host event (an MPI collective's completion, Event::pending()) makes
// the CALLING thread wait for it, then returns: CUDA forbids a host function
// in a stream to wait for work not already ordered before it (one that
// waits for another thread, which waits for the device, deadlocks it), so
// such a wait has no device form. Stream::enqueue's work (a host function
// on CUDA) must therefore never wait for another thread either.
#pragma once

#include <functional>
#include <memory>

#include "base/device.hpp"

namespace ftrain {

struct EventState;

// A backend's own completion point (the CUDA backend's cudaEvent_t): an
// Event made from one answers query()/synchronize() by asking it, and a
// stream of the same backend can wait for it on the device (handle()).
class NativeEvent {
 public:
  virtual ~NativeEvent() = default;
  virtual bool query() = 0;          // never blocks; throws on a device error
  virtual void synchronize() = 0;    // blocks the calling thread
  virtual void* handle() const = 0;  // cudaEvent_t for the CUDA backend
};

// A completion point; cheap to copy (shared state). A default-constructed
// Event is complete.
class Event {
 public:
  Event() = default;
  explicit Event(std::shared_ptr<EventState> state) : state_(std::move(state)) {}
  // An event recorded by a backend on its own stream.
  static Event from_native(std::shared_ptr<NativeEvent> native);
  // True once the work before the event has run (never blocks).
  bool query() const;
  // Blocks the calling thread until the event completed.
  void synchronize() const;
  const std::shared_ptr<EventState>& state() const { return state_; }
  // The backend's event, or nullptr for a host event.
  NativeEvent* native() const;

  // An event that no stream records: it completes when its producer calls
  // complete() (the MPI progress thread when a collective finished, so a
  // Request can be waited for by a stream: Request::completion()).
  static Event pending();
  // Completes a pending() event (at most once; later calls do nothing).
  void complete() const;

 private:
  std::shared_ptr<EventState> state_;
};

class Stream {
 public:
  virtual ~Stream() = default;
  virtual Device device() const = 0;
  // False when enqueue runs the work before returning (synchronous host).
  virtual bool asynchronous() const = 0;
  virtual const char* name() const = 0;
  // Runs `work` after everything enqueued before it.
  virtual void enqueue(std::function<void()> work) = 0;
  // An event that completes when the work enqueued so far has run.
  virtual Event record() = 0;
  // Later work on this stream runs only after `event` completed (the other
  // stream's work is not waited for by the calling thread; a host event on
  // a CUDA stream is, see above).
  virtual void wait(const Event& event) = 0;
  // Blocks until all enqueued work ran; rethrows the first error of that work.
  virtual void synchronize() = 0;
  // cudaStream_t for the CUDA backend; nullptr on the host.
  virtual void* native_handle() const { return nullptr; }
};

// A host stream, synchronous or with its own worker thread (see above).
std::unique_ptr<Stream> make_host_stream(bool asynchronous, const char* name);

}  // namespace ftrain
