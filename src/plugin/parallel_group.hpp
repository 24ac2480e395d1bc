// The ranks a unit talks to inside its own forward and backward: the tensor
// group (parallel tensor T: Megatron's column/row-parallel linears, the
// vocabulary-parallel embedding and cross entropy, sequence parallelism) and
// the context group (parallel context C: ring attention). The engine makes
// them from the process grid (comm/process_grid.hpp) and hands them to units
// through StepContext::parallel; a plugin never sees a communicator.
//
// Stream order, as NCCL on the compute stream: every call starts after the
// work enqueued so far on `ctx`'s compute stream and the compute stream's
// later work sees its result. The calling thread does not wait for the data
// (it may block only to issue). Tensors live on ctx's device; reductions are
// sums in f32 per element (bf16 rounded once at the end), like
// comm/communicator.hpp's.
//
// A failed collective surfaces from the engine's next wait on the stream,
// naming the group and the unit.
#pragma once

#include <memory>

#include "core/tensor.hpp"
#include "runtime/execution_context.hpp"

namespace ftrain {

class ParallelGroup {
 public:
  virtual ~ParallelGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // inout = sum over the group of inout.
  virtual void all_reduce_sum(ExecutionContext& ctx, Tensor& inout) = 0;
  // inout = element-wise max over the group (f32).
  virtual void all_reduce_max(ExecutionContext& ctx, Tensor& inout) = 0;
  // recv (size() x send's elements) = every rank's send, in rank order.
  virtual void all_gather(ExecutionContext& ctx, const Tensor& send, Tensor& recv) = 0;
  // recv (send's elements / size()) = this rank's block of the sum of sends.
  virtual void reduce_scatter_sum(ExecutionContext& ctx, const Tensor& send, Tensor& recv) = 0;

  // One step of a ring (ring attention): sends `send` to rank (rank() + 1) %
  // size() and receives the same number of elements from (rank() - 1) into
  // `recv`, while the caller goes on enqueueing compute (the transfer
  // overlaps it). The compute stream sees `recv` only after finish_ring_step
  // of the returned step; `send` must stay unchanged until then.
  class RingStep {
   public:
    virtual ~RingStep() = default;
  };
  virtual std::unique_ptr<RingStep> start_ring_step(ExecutionContext& ctx, const Tensor& send, Tensor& recv) = 0;
  // Orders the compute stream's later work after the step's transfer.
  virtual void finish_ring_step(ExecutionContext& ctx, std::unique_ptr<RingStep> step) = 0;
};

// The groups of this rank; a null group is a dimension of size 1.
struct ModelParallel {
  ParallelGroup* tensor = nullptr;
  ParallelGroup* context = nullptr;
  int tensor_size() const { return tensor ? tensor->size() : 1; }
  int tensor_rank() const { return tensor ? tensor->rank() : 0; }
  int context_size() const { return context ? context->size() : 1; }
  int context_rank() const { return context ? context->rank() : 0; }
};

}  // namespace ftrain
