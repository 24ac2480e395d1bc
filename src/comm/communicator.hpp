// Communicator: the collectives FSDP needs, asynchronous, behind one
// interface that both MPI (host buffers) and NCCL (device buffers on a
// communication stream) implement (DESIGN.md §3).
//
// Every collective returns a Request; the caller may compute meanwhile and
// must wait() before touching the buffers. Nothing here blocks except wait()
// and the explicitly blocking helpers at the end. Reductions are sums.
// Supported element types: f32, bf16 (summed in f32 per element, then
// rounded), i64 (counts).
#pragma once

#include <memory>
#include <string>

#include "core/tensor.hpp"

namespace ftrain {

class Request {
 public:
  class Impl {
   public:
    virtual ~Impl() = default;
    virtual void wait() = 0;
    virtual bool test() = 0;  // true when complete (drives progress)
  };
  Request() = default;
  explicit Request(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
  bool pending() const { return impl_ != nullptr; }
  void wait() {
    if (impl_) {
      impl_->wait();
      impl_.reset();
    }
  }
  // Lets the library make progress; returns true once complete.
  bool test() {
    if (impl_ && impl_->test()) impl_.reset();
    return impl_ == nullptr;
  }

 private:
  std::unique_ptr<Impl> impl_;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string describe() const = 0;

  // recv (size() * send.numel() elements) = concatenation of every rank's send.
  virtual Request all_gather(const Tensor& send, Tensor& recv) = 0;
  // recv (send.numel() / size() elements) = this rank's block of the sum of sends.
  virtual Request reduce_scatter_sum(const Tensor& send, Tensor& recv) = 0;
  // inout = sum over ranks of inout.
  virtual Request all_reduce_sum(Tensor& inout) = 0;
  // inout = element-wise max over ranks (f32: FP8 amaxes).
  virtual Request all_reduce_max(Tensor& inout) = 0;
  // Splits into sub-communicators; ranks with equal color form one, ordered by key.
  virtual std::unique_ptr<Communicator> split(int color, int key) const = 0;
  // The ranks that share this rank's node (MPI_COMM_TYPE_SHARED).
  virtual std::unique_ptr<Communicator> split_node() const = 0;
  virtual void barrier() = 0;
  // True when collectives may be run from a communication thread
  // (the MPI library provides at least MPI_THREAD_SERIALIZED).
  virtual bool supports_threaded_progress() const = 0;

  // Blocking scalar reductions (losses, norms, counts), in f64 / i64.
  virtual double all_reduce_sum(double value) = 0;
  virtual double all_reduce_max(double value) = 0;
  virtual std::int64_t all_reduce_sum(std::int64_t value) = 0;
};

}  // namespace ftrain
