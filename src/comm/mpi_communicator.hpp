// Communicator over MPI for host buffers: MPI_Iallgather,
// MPI_Ireduce_scatter_block, MPI_Iallreduce. bf16 travels as 16-bit words
// and is summed by a user-defined MPI_Op (f32 arithmetic, RNE rounding).
#pragma once

#include <mpi.h>

#include "comm/communicator.hpp"

namespace ftrain {

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
  Request all_gather(const Tensor& send, Tensor& recv) override;
  Request reduce_scatter_sum(const Tensor& send, Tensor& recv) override;
  Request all_reduce_sum(Tensor& inout) override;
  Request all_reduce_max(Tensor& inout) override;
  std::unique_ptr<Communicator> split(int color, int key) const override;
  std::unique_ptr<Communicator> split_node() const override;
  void barrier() override;
  bool supports_threaded_progress() const override;
  double all_reduce_sum(double value) override;
  double all_reduce_max(double value) override;
  std::int64_t all_reduce_sum(std::int64_t value) override;

  MPI_Comm handle() const { return comm_; }

 private:
  MPI_Comm comm_;
  bool owned_;
  int rank_ = 0;
  int size_ = 1;
};

// Throws ftrain::Error naming the call and MPI's error string.
void check_mpi(int code, const char* call, const char* file, int line);
#define FT_MPI_CHECK(call) ::ftrain::check_mpi((call), #call, __FILE__, __LINE__)

}  // namespace ftrain
