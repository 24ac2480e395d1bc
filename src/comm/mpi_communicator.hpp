// Communicator over MPI for host buffers: MPI_Iallgather,
// MPI_Ireduce_scatter_block, MPI_Iallreduce. bf16 travels as 16-bit words
// and is summed by a user-defined MPI_Op (f32 arithmetic, RNE rounding).
//
// Every MPI call runs on the process's progress thread (comm/mpi_progress.hpp),
// which is what makes non-blocking collectives progress while the caller
// computes. Arguments are checked on the caller's thread (a bad call throws
// at once); a collective keeps its tensors alive until it has run, so a
// caller may drop its handles early. MPI must be initialised with at least
// MPI_THREAD_SERIALIZED for overlap; with less, collectives run inside the
// call that issues them.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"

namespace ftrain {

class MpiProgress;
struct CommClock;

class MpiCommunicator final : public Communicator {
 public:
  // Wraps comm; takes ownership (frees it) when owned is true.
  explicit MpiCommunicator(MPI_Comm comm, bool owned = false);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string describe() const override;
  Request all_gather(const Tensor& send, Tensor& recv, const Event& after = Event()) override;
  Request all_gather_v(const Tensor& send, Tensor& recv, const std::vector<std::int64_t>& counts,
                       const Event& after = Event()) override;
  Request reduce_scatter_sum(const Tensor& send, Tensor& recv, const Event& after = Event()) override;
  Request all_reduce_sum(Tensor& inout, const Event& after = Event()) override;
  Request all_reduce_max(Tensor& inout, const Event& after = Event()) override;
  // MPI_Irecv + MPI_Isend on the progress thread.
  Request send_recv(const Tensor& send, int to, Tensor& recv, int from, const Event& after = Event()) override;
  std::unique_ptr<Communicator> split(int color, int key) const override;
  std::unique_ptr<Communicator> split_node() const override;
  void barrier() override;
  // One label per process: every MPI communicator shares the progress thread.
  void set_unit_label(const std::string& unit) override;
  std::string unit_label() const override;
  CommTimes times() const override;
  void reset_times() override;
  double all_reduce_sum(double value) override;
  double all_reduce_max(double value) override;
  std::int64_t all_reduce_sum(std::int64_t value) override;

  // True when collectives progress on a thread of their own (overlap).
  bool threaded_progress() const;
  MPI_Comm handle() const { return comm_; }

 private:
  // Queues one collective: the progress thread waits for `after`, then
  // `start` issues the MPI_I* call(s) into `request_count` requests and the
  // thread drives them to completion.
  // `what` names it in errors. `reads` and `writes` are the buffers MPI
  // reads and writes, told to ThreadSanitizer (core/thread_sanitizer.hpp):
  // reads before the call, writes once the collective completed.
  Request issue(const char* collective, const std::string& what, const Event& after,
                std::function<void(MPI_Request*)> start, std::vector<Tensor> reads, std::vector<Tensor> writes,
                int request_count = 1);

  std::shared_ptr<MpiProgress> progress_;
  std::shared_ptr<CommClock> clock_;
  MPI_Comm comm_;
  bool owned_;
  int rank_ = 0;
  int size_ = 1;
};

// Throws ftrain::Error naming the call and MPI's error string.
void check_mpi(int code, const char* call, const char* file, int line);
#define FT_MPI_CHECK(call) ::ftrain::check_mpi((call), #call, __FILE__, __LINE__)

// TEST ONLY: fault injection. The nth (1-based, counted per process over
// every communicator) non-blocking `collective` ("all_gather", "all_gather_v",
// "reduce_scatter_sum", "all_reduce_sum", "all_reduce_max", "send_recv") issued after this
// call fails on the progress thread with an ftrain::Error instead of running,
// as a broken network would; its Request rethrows the error. nth = 0 turns
// injection off. The environment variable
// FTRAIN_TEST_FAIL_COLLECTIVE=<collective>:<nth>[@<world rank>] sets the same
// from outside (read once, at the first collective), optionally on one rank
// only (the others then wait in the collective until the job is aborted).
// Tests use it to prove that a failed collective stops the job
// (tests/mpi/collective_fault_stops_job.sh, tests/mpi/test_comm.cpp).
void set_collective_fault_for_testing(const std::string& collective, std::int64_t nth);
// TEST ONLY: FTRAIN_TEST_STALL_COLLECTIVE=<collective>:<nth>[@<world rank>]
// makes that rank's nth issue of `collective` never return (the calling
// thread sleeps until the job is killed): the rank stops calling
// collectives while its peers wait in that one, which the watchdog must end
// within collective_timeout (tests/mpi/stalled_rank_times_out.sh).

}  // namespace ftrain
