// The collective watchdog: a collective that has not completed within the
// deck's `collective_timeout` ends the job, with a message naming the rank,
// the collective and the FSDP unit it was issued for, instead of leaving
// every rank hanging (a peer that stopped calling collectives, a dead
// network link, an NCCL hang).
//
// Who uses it: the MPI progress thread watches each job it runs, from the
// moment it starts the MPI call (comm/mpi_progress.hpp); the NCCL
// communicator watches each collective from its issue until its CUDA event
// completes (a `done` probe the watchdog polls). Its own thread polls the
// in-flight collectives (default every 100 ms) and calls the expiry handler
// once, for the oldest expired collective; the handler aborts the job
// (MPI_Abort; ncclCommAbort first on NCCL) and does not return in a run.
// A rank that dies (SIGKILL) is the launcher's business: mpirun ends the job
// when a rank exits without MPI_Finalize (tests/mpi/dead_rank_aborts.sh).
//
// The timeout is process-wide (set_collective_timeout, from the deck); it is
// read at every poll, so setting it after communicators exist takes effect.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace ftrain {

inline constexpr double kDefaultCollectiveTimeoutSeconds = 600;  // 10 minutes, PyTorch's NCCL default
// <= 0 turns the watchdog off.
void set_collective_timeout(double seconds);
double collective_timeout_seconds();
// "90 s", "10 min": how the deck would spell it.
std::string describe_timeout(double seconds);

class CollectiveWatchdog {
 public:
  using Clock = std::chrono::steady_clock;
  struct Watch {
    int rank = -1;           // world rank, for the message
    std::string collective;  // "all_gather of bf16[4096] 'layers.0.gathered' on MPI communicator rank 0/2"
    std::string unit;        // FSDP unit label at issue ("" outside any unit)
    // Polled by the watchdog thread: true once complete (NCCL: cudaEventQuery).
    // Empty: complete only when end() is called.
    std::function<bool()> done;
  };
  // Called once, on the watchdog thread, with the message; a run's handler aborts.
  using OnExpiry = std::function<void(const std::string& message)>;

  explicit CollectiveWatchdog(OnExpiry on_expiry, std::chrono::milliseconds poll = std::chrono::milliseconds(100));
  ~CollectiveWatchdog();
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  // Starts watching (the thread starts with the first watch).
  std::uint64_t begin(Watch watch, Clock::time_point now = Clock::now());
  void end(std::uint64_t id);
  std::size_t in_flight();
  // One poll: drops watches whose probe says done, then returns the message
  // for the oldest one older than `timeout_seconds` at `now` ("" if none, or
  // timeout <= 0). What the thread does; tests call it with their own clock.
  std::string check(Clock::time_point now, double timeout_seconds);

 private:
  void loop();

  OnExpiry on_expiry_;
  std::chrono::milliseconds poll_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::map<std::uint64_t, std::pair<Watch, Clock::time_point>> watches_;
  std::uint64_t next_id_ = 1;
  bool stop_ = false;
  bool fired_ = false;
  std::thread thread_;
};

// The message's wording, shared by both communicators.
std::string describe_unit(const std::string& unit);

}  // namespace ftrain
