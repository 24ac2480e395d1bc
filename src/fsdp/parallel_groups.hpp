// ParallelGroup (plugin/parallel_group.hpp) over a Communicator: the tensor
// and context groups a unit's forward and backward talk to. Each collective
// is issued after an event recorded on the compute stream and the compute
// stream waits for its completion, so the caller never blocks for the data;
// the Requests are kept until drain(), which the engine calls once its
// stream work is done and which rethrows a failed collective naming the group.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/process_grid.hpp"
#include "plugin/parallel_group.hpp"

namespace ftrain {

class CommunicatorGroup final : public ParallelGroup {
 public:
  // `name` says which group in errors ("tensor group", "context group").
  CommunicatorGroup(std::unique_ptr<Communicator> comm, std::string name);
  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->size(); }
  void all_reduce_sum(ExecutionContext& ctx, Tensor& inout) override;
  void all_reduce_max(ExecutionContext& ctx, Tensor& inout) override;
  void all_gather(ExecutionContext& ctx, const Tensor& send, Tensor& recv) override;
  void reduce_scatter_sum(ExecutionContext& ctx, const Tensor& send, Tensor& recv) override;
  std::unique_ptr<RingStep> start_ring_step(ExecutionContext& ctx, const Tensor& send, Tensor& recv) override;
  void finish_ring_step(ExecutionContext& ctx, std::unique_ptr<RingStep> step) override;

  // Waits for every collective issued so far; rethrows the first failure.
  void drain();
  // Test and proof only (FTRAIN_DEBUG_DROP_WAIT=tensor or context): the compute stream
  // no longer waits for the group's collectives, a race ThreadSanitizer must
  // report (share/scripts/tsan-check.sh --prove-it-fails).
  void drop_stream_wait_for_test() { drop_stream_wait_ = true; }
  Communicator& communicator() { return *comm_; }

 private:
  void ordered(ExecutionContext& ctx, Request request);

  std::unique_ptr<Communicator> comm_;
  std::string name_;
  std::mutex mutex_;
  std::vector<Request> issued_;
  bool drop_stream_wait_ = false;
};

// A rank's groups for `grid`, split from `world` (collective over world:
// every rank calls it). Dimensions of size 1 get no group.
struct ModelParallelGroups {
  std::unique_ptr<CommunicatorGroup> tensor;
  std::unique_ptr<CommunicatorGroup> context;
  ModelParallel view() const { return ModelParallel{tensor.get(), context.get()}; }
  void drain();
};
ModelParallelGroups make_model_parallel_groups(const Communicator& world, const ProcessGrid& grid);

}  // namespace ftrain
