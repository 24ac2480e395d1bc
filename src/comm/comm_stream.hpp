// CommStream: the host backend's "communication stream".
//
// One worker thread runs communication tasks in submission order, like a
// CUDA stream runs kernels. Every rank submits the same collectives in the
// same program order, so collectives on any communicator stay matched across
// ranks. Open MPI progresses non-blocking collectives only inside MPI calls;
// a thread that keeps calling into MPI while the main thread computes is what
// makes the overlap real. The main thread makes no MPI call while tasks are
// pending (the engine drains the stream before returning), so MPI needs only
// MPI_THREAD_SERIALIZED.
//
// The stream also measures itself: busy time (communication time) and the
// time the main thread spent blocked waiting for it (exposed communication).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include "comm/communicator.hpp"

namespace ftrain {

class CommStream {
 public:
  // threaded = false runs each task inside submit() (for MPI libraries
  // without thread support): correct, just without overlap.
  explicit CommStream(bool threaded = true);
  ~CommStream();
  CommStream(const CommStream&) = delete;
  CommStream& operator=(const CommStream&) = delete;

  // Queues `task`; the Request completes when it has run. An exception in the
  // task is rethrown by Request::wait().
  Request submit(std::function<void()> task);
  // Blocks until every submitted task has run.
  void synchronize();

  double busy_seconds() const;
  double exposed_seconds() const;  // main-thread time blocked in wait()
  void reset_timers();

 private:
  void worker();
  friend class StreamRequest;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable idle_;
  std::deque<std::packaged_task<void()>> queue_;
  bool running_task_ = false;
  bool stop_ = false;
  bool threaded_ = true;
  double busy_seconds_ = 0;
  double exposed_seconds_ = 0;
  std::thread thread_;
};

}  // namespace ftrain
