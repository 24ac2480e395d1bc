#include "fsdp/parallel_groups.hpp"

#include "base/error.hpp"

namespace ftrain {

CommunicatorGroup::CommunicatorGroup(std::unique_ptr<Communicator> comm, std::string name)
    : comm_(std::move(comm)), name_(std::move(name)) {
  FT_CHECK(comm_ != nullptr) << name_ << " without a communicator";
}

void CommunicatorGroup::ordered(ExecutionContext& ctx, Request request) {
  if (!drop_stream_wait_) ctx.compute().wait(request.completion());
  std::lock_guard<std::mutex> lock(mutex_);
  issued_.push_back(std::move(request));
}

void CommunicatorGroup::all_reduce_sum(ExecutionContext& ctx, Tensor& inout) {
  ordered(ctx, comm_->all_reduce_sum(inout, ctx.compute().record()));
}

void CommunicatorGroup::all_reduce_max(ExecutionContext& ctx, Tensor& inout) {
  ordered(ctx, comm_->all_reduce_max(inout, ctx.compute().record()));
}

void CommunicatorGroup::all_gather(ExecutionContext& ctx, const Tensor& send, Tensor& recv) {
  ordered(ctx, comm_->all_gather(send, recv, ctx.compute().record()));
}

void CommunicatorGroup::reduce_scatter_sum(ExecutionContext& ctx, const Tensor& send, Tensor& recv) {
  ordered(ctx, comm_->reduce_scatter_sum(send, recv, ctx.compute().record()));
}

namespace {
// A ring step in flight: the exchange's Request, kept until the compute
// stream is ordered after it (finish_ring_step).
struct CommunicatorRingStep final : ParallelGroup::RingStep {
  Request request;
  const CommunicatorGroup* group = nullptr;
};
}  // namespace

std::unique_ptr<ParallelGroup::RingStep> CommunicatorGroup::start_ring_step(ExecutionContext& ctx, const Tensor& send,
                                                                            Tensor& recv) {
  const int n = comm_->size(), r = comm_->rank();
  FT_CHECK(send.numel() == recv.numel() && send.dtype() == recv.dtype())
      << name_ << " (" << comm_->describe() << "): a ring step passes send " << send.describe()
      << " on and receives the same shape into recv " << recv.describe();
  auto step = std::make_unique<CommunicatorRingStep>();
  step->group = this;
  // Issued after the compute stream's work so far (it wrote `send`); the
  // stream waits only in finish_ring_step, so compute enqueued meanwhile
  // overlaps the transfer.
  step->request = comm_->send_recv(send, (r + 1) % n, recv, (r + n - 1) % n, ctx.compute().record());
  return step;
}

void CommunicatorGroup::finish_ring_step(ExecutionContext& ctx, std::unique_ptr<RingStep> step) {
  auto* mine = dynamic_cast<CommunicatorRingStep*>(step.get());
  FT_CHECK(mine != nullptr && mine->group == this) << name_ << ": finish_ring_step of a step this group did not start";
  ordered(ctx, std::move(mine->request));
}

void CommunicatorGroup::drain() {
  std::vector<Request> issued;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    issued.swap(issued_);
  }
  for (Request& r : issued) {
    try {
      r.wait();
    } catch (const std::exception& e) {
      FT_CHECK(false) << name_ << " (" << comm_->describe() << "): " << e.what();
    }
  }
}

void ModelParallelGroups::drain() {
  if (tensor) tensor->drain();
  if (context) context->drain();
}

ModelParallelGroups make_model_parallel_groups(const Communicator& world, const ProcessGrid& grid) {
  FT_CHECK(world.size() == grid.world_size())
      << "process grid " << grid.describe() << " over a communicator of " << world.size() << " ranks";
  const int rank = world.rank();
  const GridCoordinates at = grid.coordinates(rank);
  // Every rank takes part in every split (MPI_Comm_split is collective), also
  // for a dimension of size 1, whose group it then drops.
  std::unique_ptr<Communicator> tensor = world.split(grid.tensor_group_color(rank), at.tensor);
  std::unique_ptr<Communicator> context = world.split(grid.context_group_color(rank), at.context);
  ModelParallelGroups groups;
  if (grid.tensor_size() > 1) groups.tensor = std::make_unique<CommunicatorGroup>(std::move(tensor), "tensor group");
  if (grid.context_size() > 1)
    groups.context = std::make_unique<CommunicatorGroup>(std::move(context), "context group");
  return groups;
}

}  // namespace ftrain
