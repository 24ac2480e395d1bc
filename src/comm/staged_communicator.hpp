// The staged device communicator (deck `device_comm mpi`): collectives on
// buffers of any device, moved over MPI through host memory. Each
// collective copies its inputs to host staging buffers through the device's
// allocator (runtime/allocator.hpp: cudaMemcpyAsync on CUDA, memcpy on the host),
// runs the same MPI call the MPI communicator runs (comm/mpi_collectives.hpp)
// and copies the result back. On host buffers it runs exactly the same code
// (the copies are memcpys), which is how it is tested without a GPU
// (tests/mpi/test_staged_comm.cpp, np 1-4).
//
// Why it exists: NCCL refuses two ranks on one GPU, and the machines lent
// for GPU runs have one. With `device_comm mpi` several ranks share a GPU,
// so the multi-rank engine runs on one device. It is never chosen silently:
// the run header names the communicator.
//
// Ordering: the whole collective (copy in, MPI, copy out) is one job on the
// process's MPI progress thread (comm/mpi_progress.hpp): it starts after
// `after`, keeps issue order with every other collective of the process
// (stream order, communicator.hpp), and the Request completes once the
// result is back in the caller's buffer. Device buffers are copied with
// cudaMemcpyAsync on a non-blocking stream of the communicator's own
// ("staged.copies", made through the backend's stream factory): it waits
// for `after` on the device, the progress thread waits for that stream only
// (never for the device or the compute stream), and a compute stream that
// waits for the Request does so without a host function (runtime/stream.hpp):
// the job's synchronous cudaMemcpy on the legacy default stream, waiting for
// a compute stream that waited in a host function for the job, deadlocked
// every multi-rank `device_comm mpi` run on CUDA. The watchdog watches the job like
// any MPI collective. The blocking helpers (scalars, barrier, split) are the
// wrapped MPI communicator's.
#pragma once

#include <mpi.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/mpi_communicator.hpp"

namespace ftrain {

class MpiProgress;
struct CommClock;

class StagedCommunicator final : public Communicator {
 public:
  // Over comm; takes ownership (frees it) when owned is true.
  explicit StagedCommunicator(MPI_Comm comm, bool owned = false);
  explicit StagedCommunicator(std::unique_ptr<MpiCommunicator> mpi);
  ~StagedCommunicator() override;

  int rank() const override { return mpi_->rank(); }
  int size() const override { return mpi_->size(); }
  std::string describe() const override;
  Request all_gather(const Tensor& send, Tensor& recv, const Event& after = Event()) override;
  Request all_gather_v(const Tensor& send, Tensor& recv, const std::vector<std::int64_t>& counts,
                       const Event& after = Event()) override;
  Request reduce_scatter_sum(const Tensor& send, Tensor& recv, const Event& after = Event()) override;
  Request all_reduce_sum(Tensor& inout, const Event& after = Event()) override;
  Request all_reduce_max(Tensor& inout, const Event& after = Event()) override;
  Request send_recv(const Tensor& send, int to, Tensor& recv, int from, const Event& after = Event()) override;
  std::unique_ptr<Communicator> split(int color, int key) const override;
  std::unique_ptr<Communicator> split_node() const override;
  void barrier() override { mpi_->barrier(); }
  void set_unit_label(const std::string& unit) override { mpi_->set_unit_label(unit); }
  std::string unit_label() const override { return mpi_->unit_label(); }
  CommTimes times() const override;
  void reset_times() override;
  double all_reduce_sum(double value) override { return mpi_->all_reduce_sum(value); }
  double all_reduce_max(double value) override { return mpi_->all_reduce_max(value); }
  std::int64_t all_reduce_sum(std::int64_t value) override { return mpi_->all_reduce_sum(value); }

 private:
  // Queues copy-in of `inputs` into `host_inputs`, `call` on the host
  // buffers, copy-out of `host_outputs` into `outputs`, as one job.
  Request issue(const char* collective, const std::string& what, const Event& after, std::vector<Tensor> inputs,
                std::vector<Tensor> host_inputs, std::vector<Tensor> outputs, std::vector<Tensor> host_outputs,
                std::function<void(MPI_Comm, MPI_Request*)> call, int request_count = 1);

  // The copy stream for device buffers, made at the first device collective.
  std::shared_ptr<Stream> copy_stream(Device device);

  std::unique_ptr<MpiCommunicator> mpi_;
  std::shared_ptr<MpiProgress> progress_;
  std::mutex copies_mutex_;
  std::shared_ptr<Stream> copies_;
  std::shared_ptr<CommClock> clock_;
};

}  // namespace ftrain
