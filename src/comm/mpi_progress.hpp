// MpiProgress: the thread that runs every MPI call of the process's
// MpiCommunicators: the host backend's "communication stream". Internal to
// comm/: callers see only Communicator and Request.
//
// Why a thread: Open MPI progresses a non-blocking collective only while
// some thread is inside an MPI call. An MPI_Iallgather issued before a unit
// computes and waited for after it overlaps nothing: the data moves during
// the wait. The progress thread stays inside MPI (MPI_Test with short
// sleeps, so it does not take the computing core) while the caller computes,
// which is what makes prefetching hide communication.
//
// Why one per process, running jobs one at a time in issue order:
// - MPI_THREAD_SERIALIZED suffices (one thread calls MPI at a time); the
//   blocking helpers (scalar reductions, barrier, split, MPI_Comm_free) run
//   here too, so they never race a pending collective;
// - every rank issues the same collectives in the same program order, so
//   collectives on any communicator stay matched across ranks, and a
//   collective may consume the output of the one issued before it (stream
//   order, communicator.hpp).
// Code outside comm/ that calls MPI itself (HDF5 I/O, main's startup
// agreement) must do so with no request in flight.
//
// Without MPI_THREAD_SERIALIZED (MPI_Query_thread) jobs run inside submit():
// correct, just without overlap.
//
// The watchdog (comm/collective_watchdog.hpp) watches every job from the
// moment it starts running here (after its `after` event) until it returns:
// a collective or blocking helper that has not returned within
// collective_timeout ends the job with MPI_Abort, naming this rank, the
// collective and the FSDP unit that was labelled when it was issued.
//
// After a job fails, no later job calls MPI: each fails at once, naming the
// first failure. The other ranks still wait in the collective that failed
// here; posting this rank's later collectives would pair them with it
// (mismatched sizes, MPI_ERR_TRUNCATE, buffers written after their owners
// unwound) instead of leaving the job to end by the failing rank's abort.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "comm/collective_watchdog.hpp"
#include "comm/communicator.hpp"

namespace ftrain {

// Busy and exposed time of one communicator, shared with its requests.
struct CommClock {
  std::mutex mutex;
  CommTimes times;
  void add_busy(double s);
  void add_exposed(double s);
};

class MpiProgress {
 public:
  // The process's instance, started on first use (after MPI_Init). Every
  // MpiCommunicator holds a reference; the thread ends with the last one,
  // so communicators must be gone before MPI_Finalize.
  static std::shared_ptr<MpiProgress> acquire();

  MpiProgress(bool threaded, int world_rank);
  ~MpiProgress();
  MpiProgress(const MpiProgress&) = delete;
  MpiProgress& operator=(const MpiProgress&) = delete;

  // Queues `job`; it runs once `after` completed (the progress thread waits
  // for it: a compute-stream event, so the collective reads what compute
  // wrote without the caller blocking), and the Request completes when it
  // has run. An exception thrown by the job fails the Request (wait()/test()
  // rethrow it). Run time is added to clock->busy (the wait for `after` is
  // not), time a waiter blocks to clock->exposed.
  // `what` names the collective for the watchdog's message.
  Request submit(const Event& after, std::function<void()> job, std::shared_ptr<CommClock> clock,
                 std::string what);
  // Runs `job` after everything queued before it and returns when it has
  // run; rethrows its exception. Not timed (the blocking helpers), but watched.
  void run(std::function<void()> job, std::string what);

  // The FSDP unit whose collectives are issued next (Communicator::set_unit_label):
  // one label per process, as all its MPI communicators share this thread.
  void set_unit_label(const std::string& unit);
  std::string unit_label();
  int world_rank() const { return world_rank_; }
  CollectiveWatchdog& watchdog() { return watchdog_; }

  bool threaded() const { return threaded_; }
  // Test only (set_collective_fault_for_testing): forget an earlier failure.
  void clear_failure_for_testing();

 private:
  void worker();
  // Wraps a job: refuses it after a failure, records its own failure, and
  // is watched while it runs.
  std::function<void()> guarded(std::function<void()> job, std::string what);

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::packaged_task<void()>> queue_;
  bool stop_ = false;
  bool threaded_ = true;
  int world_rank_ = -1;
  std::mutex label_mutex_;
  std::string unit_label_;
  CollectiveWatchdog watchdog_;
  std::mutex failure_mutex_;
  std::string first_failure_;  // empty while every job has succeeded
  std::thread thread_;
};

}  // namespace ftrain
