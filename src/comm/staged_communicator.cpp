#include "comm/staged_communicator.hpp"

#include <sstream>

#include "comm/mpi_collectives.hpp"
#include "comm/mpi_progress.hpp"
#include "base/error.hpp"
#include "runtime/allocator.hpp"
#include "runtime/execution_context.hpp"

namespace ftrain {

namespace mc = mpi_collectives;

namespace {

DeviceAllocator& allocator_of(const Tensor& t) {
  DeviceAllocator* a = find_allocator(t.device());
  FT_CHECK(a != nullptr) << "staged communicator: no allocator for the device of " << t.describe();
  return *a;
}

// A host buffer shaped like `t`, for the MPI call.
Tensor host_stage(const Tensor& t, const char* role) {
  return Tensor::empty(t.shape(), t.dtype(), Device::host, t.name() + "." + role);
}

}  // namespace

StagedCommunicator::StagedCommunicator(MPI_Comm comm, bool owned)
    : StagedCommunicator(std::make_unique<MpiCommunicator>(comm, owned)) {}

StagedCommunicator::StagedCommunicator(std::unique_ptr<MpiCommunicator> mpi)
    : mpi_(std::move(mpi)), progress_(MpiProgress::acquire()), clock_(std::make_shared<CommClock>()) {
  FT_CHECK(mpi_ != nullptr) << "staged communicator over no MPI communicator";
}

StagedCommunicator::~StagedCommunicator() = default;

std::string StagedCommunicator::describe() const {
  std::ostringstream s;
  s << "staged MPI communicator (device buffers through host memory) rank " << rank() << "/" << size();
  return s.str();
}

CommTimes StagedCommunicator::times() const {
  std::lock_guard<std::mutex> lock(clock_->mutex);
  return clock_->times;
}

void StagedCommunicator::reset_times() {
  std::lock_guard<std::mutex> lock(clock_->mutex);
  clock_->times = CommTimes{};
}

std::shared_ptr<Stream> StagedCommunicator::copy_stream(Device device) {
  std::lock_guard<std::mutex> lock(copies_mutex_);
  if (!copies_) copies_ = make_device_stream(device, "staged.copies");
  return copies_;
}

Request StagedCommunicator::issue(const char* collective, const std::string& what, const Event& after,
                                  std::vector<Tensor> inputs, std::vector<Tensor> host_inputs,
                                  std::vector<Tensor> outputs, std::vector<Tensor> host_outputs,
                                  std::function<void(MPI_Comm, MPI_Request*)> call, int request_count) {
  std::string watched = std::string(collective) + " of " + what + " on " + describe();
  Device device = Device::host;
  for (const auto* list : {&inputs, &outputs})
    for (const Tensor& t : *list)
      if (t.device() != Device::host) device = t.device();
  // Device buffers: the copies run on a stream of this communicator's own,
  // on the progress thread, and the job returns only once the result is back
  // in `outputs`; the Request's completion is then a plain host event, which
  // a CUDA stream waits for without a host function (runtime/stream.hpp).
  std::shared_ptr<Stream> copies = device != Device::host ? copy_stream(device) : nullptr;
  // The job holds every tensor (shared storage) until it has run.
  return progress_->submit(
      after,
      [inputs = std::move(inputs), host_inputs = std::move(host_inputs), outputs = std::move(outputs),
       host_outputs = std::move(host_outputs), call = std::move(call), comm = mpi_->handle(), copies, after,
       request_count]() mutable {
        if (copies) {
          copies->wait(after);  // the inputs were written by compute before `after`
          for (std::size_t i = 0; i < inputs.size(); ++i)
            allocator_of(inputs[i]).copy_to_host_on(*copies, host_inputs[i].data(), inputs[i].data(),
                                                     inputs[i].nbytes());
          copies->synchronize();  // the host stages hold the inputs
        } else {
          for (std::size_t i = 0; i < inputs.size(); ++i)
            allocator_of(inputs[i]).copy_to_host(host_inputs[i].data(), inputs[i].data(), inputs[i].nbytes());
        }
        MPI_Request requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
        call(comm, requests);
        mc::drive(requests, request_count);
        if (copies) {
          for (std::size_t i = 0; i < outputs.size(); ++i)
            allocator_of(outputs[i]).copy_from_host_on(*copies, outputs[i].data(), host_outputs[i].data(),
                                                        outputs[i].nbytes());
          copies->synchronize();  // the result is in place when the Request completes
        } else {
          for (std::size_t i = 0; i < outputs.size(); ++i)
            allocator_of(outputs[i]).copy_from_host(outputs[i].data(), host_outputs[i].data(), outputs[i].nbytes());
        }
        // Done with the buffers: drop them now, not when the request goes (a
        // unit's tensor and context groups keep a step's requests to its end),
        // as the MPI communicator does.
        inputs.clear();
        host_inputs.clear();
        outputs.clear();
        host_outputs.clear();
        call = nullptr;
      },
      clock_, std::move(watched));
}

Request StagedCommunicator::all_gather(const Tensor& send, Tensor& recv, const Event& after) {
  FT_CHECK(send.dtype() == recv.dtype() && recv.numel() == send.numel() * size() && mc::has_mpi_gather_type(send.dtype()))
      << "all_gather: send " << send.describe() << ", recv " << recv.describe() << ", " << size() << " ranks";
  mc::checked_count(recv);
  // In place on the device (send is recv's own block) is fine here: send is
  // staged before the gather writes, and the staging buffers are disjoint.
  mc::gathers_in_place(send, recv, rank());
  Tensor hs = host_stage(send, "staged"), hr = host_stage(recv, "staged");
  return issue("all_gather", send.describe(), after, {send}, {hs}, {recv}, {hr},
               [hs, hr](MPI_Comm comm, MPI_Request* r) { mc::start_all_gather(hs, hr, /*in_place=*/false, comm, r); });
}

Request StagedCommunicator::all_gather_v(const Tensor& send, Tensor& recv, const std::vector<std::int64_t>& counts,
                                          const Event& after) {
  FT_CHECK(static_cast<int>(counts.size()) == size())
      << "all_gather_v: " << counts.size() << " counts for " << size() << " ranks";
  auto g = std::make_shared<const mc::GatherCounts>(mc::gather_counts(counts));
  FT_CHECK(send.dtype() == recv.dtype() && mc::has_mpi_gather_type(send.dtype()) &&
           send.numel() == counts[static_cast<std::size_t>(rank())] && recv.numel() == g->total)
      << "all_gather_v: send " << send.describe() << " (rank " << rank() << " count "
      << counts[static_cast<std::size_t>(rank())] << "), recv " << recv.describe() << " (total " << g->total << ")";
  Tensor hs = host_stage(send, "staged"), hr = host_stage(recv, "staged");
  return issue("all_gather_v", send.describe(), after, {send}, {hs}, {recv}, {hr},
               [hs, hr, g](MPI_Comm comm, MPI_Request* r) { mc::start_all_gather_v(hs, hr, *g, comm, r); });
}

Request StagedCommunicator::reduce_scatter_sum(const Tensor& send, Tensor& recv, const Event& after) {
  FT_CHECK(send.dtype() == recv.dtype() && send.numel() == recv.numel() * size() && mc::has_mpi_type(send.dtype()))
      << "reduce_scatter: send " << send.describe() << ", recv " << recv.describe() << ", " << size() << " ranks";
  mc::checked_count(send);
  Tensor hs = host_stage(send, "staged"), hr = host_stage(recv, "staged");
  return issue("reduce_scatter_sum", send.describe(), after, {send}, {hs}, {recv}, {hr},
               [hs, hr](MPI_Comm comm, MPI_Request* r) { mc::start_reduce_scatter_sum(hs, hr, comm, r); });
}

Request StagedCommunicator::all_reduce_sum(Tensor& inout, const Event& after) {
  FT_CHECK(mc::has_mpi_type(inout.dtype())) << "all_reduce_sum: no MPI type for " << inout.describe();
  mc::checked_count(inout);
  Tensor h = host_stage(inout, "staged");
  return issue("all_reduce_sum", inout.describe(), after, {inout}, {h}, {inout}, {h},
               [h](MPI_Comm comm, MPI_Request* r) { mc::start_all_reduce_sum(h, comm, r); });
}

Request StagedCommunicator::all_reduce_max(Tensor& inout, const Event& after) {
  FT_CHECK(inout.dtype() == DType::f32) << "all_reduce_max: " << inout.describe() << " (f32 only)";
  mc::checked_count(inout);
  Tensor h = host_stage(inout, "staged");
  return issue("all_reduce_max", inout.describe(), after, {inout}, {h}, {inout}, {h},
               [h](MPI_Comm comm, MPI_Request* r) { mc::start_all_reduce_max(h, comm, r); });
}

Request StagedCommunicator::send_recv(const Tensor& send, int to, Tensor& recv, int from, const Event& after) {
  mc::check_send_recv(send, to, recv, from, size(), describe());
  Tensor hs = host_stage(send, "staged"), hr = host_stage(recv, "staged");
  return issue("send_recv", send.describe() + " to rank " + std::to_string(to) + ", from rank " + std::to_string(from),
               after, {send}, {hs}, {recv}, {hr},
               [hs, to, hr, from](MPI_Comm comm, MPI_Request* r) { mc::start_send_recv(hs, to, hr, from, comm, r); },
               /*request_count=*/2);
}

namespace {
std::unique_ptr<MpiCommunicator> as_mpi(std::unique_ptr<Communicator> c) {
  return std::unique_ptr<MpiCommunicator>(static_cast<MpiCommunicator*>(c.release()));
}
}  // namespace

std::unique_ptr<Communicator> StagedCommunicator::split(int color, int key) const {
  return std::make_unique<StagedCommunicator>(as_mpi(mpi_->split(color, key)));
}

std::unique_ptr<Communicator> StagedCommunicator::split_node() const {
  return std::make_unique<StagedCommunicator>(as_mpi(mpi_->split_node()));
}

}  // namespace ftrain
