// Communicator: the collectives FSDP needs, asynchronous, behind one
// interface that both MPI (host buffers) and NCCL (device buffers on a
// communication stream) implement.
//
// Every collective returns a Request; the caller may compute meanwhile and
// must wait() (or test() until true) before touching the buffers. Nothing
// here blocks except wait() and the explicitly blocking helpers at the end.
// Reductions are sums. Supported element types: f32, bf16 (summed in f32 per
// element, then rounded), i64 (counts); the gathers also move fp8 bytes.
//
// Who makes progress: the communicator, never the caller. A Request
// completes on the communicator's own progress mechanism (MPI: one progress
// thread per process, comm/mpi_progress.hpp; NCCL: its stream), so a caller
// only issues and later waits or tests.
//
// Stream order: the collectives of a communicator and of every communicator
// split from it run one after another in the order they were issued, like
// kernels on one CUDA stream. A collective may therefore read the output of
// one issued before it without waiting for it (reduce-scatter on the shard
// group, then all-reduce of the result over the replica group).
//
// Ordering with compute: a collective that reads or writes what compute ops
// enqueued takes `after`, an Event recorded on the compute stream after
// those ops; it starts only once the event completed. The caller never
// blocks for it: the MPI communicator's progress thread waits for the
// event before its MPI call; NCCL makes its stream wait on it
// (cudaStreamWaitEvent). A default Event is complete (no ordering needed).
//
// Errors: a collective that fails on the progress mechanism fails its
// Request; wait(), or the test() that finds it complete, rethrows the error
// on the caller's thread. A request is finished exactly once, whichever of
// the two finishes it.
#pragma once

#include <memory>
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.hpp"
#include "runtime/stream.hpp"

namespace ftrain {

class Request {
 public:
  class Impl {
   public:
    virtual ~Impl() = default;
    // Blocks until complete, then rethrows the collective's error, if any.
    virtual void wait() = 0;
    // True when complete; never throws for the collective's own error
    // (Request::test() finishes a complete request through wait()).
    virtual bool test() = 0;
    // Completes when the collective has finished, failed or not (so a
    // stream waiting on it never hangs on a failure; the error still
    // surfaces only through wait()/test()).
    virtual Event completion() const = 0;
  };
  Request() = default;
  explicit Request(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
  bool pending() const { return impl_ != nullptr; }
  // An Event that completes with the collective: a stream that waits on it
  // (`compute().wait(request.completion())`) orders its later work after the
  // collective without blocking the caller, as cudaStreamWaitEvent on the
  // NCCL stream's event. Whoever does so still owes the request a wait() or
  // test() (its error). A finished or empty request gives a complete Event.
  Event completion() const { return impl_ ? impl_->completion() : Event(); }
  // Blocks until complete; rethrows the collective's error.
  void wait() {
    if (auto impl = std::move(impl_)) impl->wait();
  }
  // Returns true once complete (the buffers are then valid); a complete
  // request that failed rethrows its error here, so a failure can never be
  // mistaken for a finished collective.
  bool test() {
    if (impl_ && impl_->test()) wait();
    return impl_ == nullptr;
  }

 private:
  std::unique_ptr<Impl> impl_;
};

// Time of a communicator's non-blocking collectives since the last reset:
// busy = time they ran, exposed = the part of it a thread spent blocked in
// Request::wait() (communication compute did not hide). The blocking helpers
// (scalar reductions, barrier, split) are not counted.
struct CommTimes {
  double busy_seconds = 0;
  double exposed_seconds = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string describe() const = 0;

  // Each starts after `after` completed (see "Ordering with compute"); an
  // override repeats the default.
  // recv (size() * send.numel() elements) = concatenation of every rank's send.
  // In place: send may be recv's own block (recv's elements from
  // rank() * send.numel()), which is then not copied; any other overlap of
  // send and recv throws before anything is issued.
  virtual Request all_gather(const Tensor& send, Tensor& recv, const Event& after = Event()) = 0;
  // Variable counts (MPI_Allgatherv): rank r sends counts[r] elements
  // (send.numel() == counts[rank()]); recv (sum of counts) = their
  // concatenation in rank order. Also for raw bytes: fp8 tensors gather
  // (never reduce). The FP8 weight all-gather (fsdp/fp8_all_gather.hpp).
  // The default throws, naming the communicator: one without it stops a run
  // that needs it instead of gathering wrongly.
  virtual Request all_gather_v(const Tensor& send, Tensor& recv, const std::vector<std::int64_t>& counts,
                               const Event& after = Event());
  // Point to point (the ring of ring attention): sends `send` to rank `to`
  // and receives into `recv` what rank `from` sends this rank, as one
  // operation, so a ring where every rank sends to its successor and
  // receives from its predecessor cannot deadlock. `recv` must hold exactly
  // the elements `from` sends; same dtype on both sides (any type the
  // gathers move). send and recv must not overlap; to == from == rank()
  // copies. Like the collectives, every rank of a ring issues its exchanges
  // in the same order. The default throws, naming the communicator.
  virtual Request send_recv(const Tensor& send, int to, Tensor& recv, int from, const Event& after = Event());
  // recv (send.numel() / size() elements) = this rank's block of the sum of sends.
  virtual Request reduce_scatter_sum(const Tensor& send, Tensor& recv, const Event& after = Event()) = 0;
  // inout = sum over ranks of inout.
  virtual Request all_reduce_sum(Tensor& inout, const Event& after = Event()) = 0;
  // inout = element-wise max over ranks (f32: FP8 amaxes).
  virtual Request all_reduce_max(Tensor& inout, const Event& after = Event()) = 0;
  // Splits into sub-communicators; ranks with equal color form one, ordered by key.
  virtual std::unique_ptr<Communicator> split(int color, int key) const = 0;
  // The ranks that share this rank's node (MPI_COMM_TYPE_SHARED).
  virtual std::unique_ptr<Communicator> split_node() const = 0;
  virtual void barrier() = 0;

  // Names the FSDP unit whose collectives this rank issues next, so that the
  // collective watchdog (comm/collective_watchdog.hpp) can say which unit a
  // stuck collective belonged to; "" outside the units. The label applies to
  // this communicator and to every one split from the same parent (the MPI
  // communicators of a process share one; so do the NCCL communicators
  // split from one), since they share one stream order. UnitLabelScope sets
  // and restores it.
  virtual void set_unit_label(const std::string& unit) = 0;
  virtual std::string unit_label() const = 0;

  virtual CommTimes times() const = 0;
  virtual void reset_times() = 0;

  // Blocking scalar reductions (losses, norms, counts), in f64 / i64.
  virtual double all_reduce_sum(double value) = 0;
  virtual double all_reduce_max(double value) = 0;
  virtual std::int64_t all_reduce_sum(std::int64_t value) = 0;
};

// Labels the communicator's collectives with `unit` for the scope's lifetime.
class UnitLabelScope {
 public:
  UnitLabelScope(Communicator& comm, const std::string& unit) : comm_(comm), previous_(comm.unit_label()) {
    comm_.set_unit_label(unit);
  }
  ~UnitLabelScope() { comm_.set_unit_label(previous_); }
  UnitLabelScope(const UnitLabelScope&) = delete;
  UnitLabelScope& operator=(const UnitLabelScope&) = delete;

 private:
  Communicator& comm_;
  std::string previous_;
};

}  // namespace ftrain
