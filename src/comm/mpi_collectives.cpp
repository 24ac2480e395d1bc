#include "comm/mpi_collectives.hpp"

#include <chrono>
#include <thread>

#include "comm/mpi_communicator.hpp"
#include "base/error.hpp"

namespace ftrain::mpi_collectives {

namespace {

void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const bf16*>(in);
  auto* b = static_cast<bf16*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = to_bf16(to_float(a[i]) + to_float(b[i]));
}

struct MpiTypes {
  MPI_Datatype bf16_type = MPI_DATATYPE_NULL;
  MPI_Op bf16_sum_op = MPI_OP_NULL;
};

// Created on first use, on the progress thread; freed by MPI_Finalize.
const MpiTypes& mpi_types() {
  static MpiTypes types = [] {
    MpiTypes t;
    FT_MPI_CHECK(MPI_Type_contiguous(1, MPI_UINT16_T, &t.bf16_type));
    FT_MPI_CHECK(MPI_Type_commit(&t.bf16_type));
    FT_MPI_CHECK(MPI_Op_create(&bf16_sum, /*commute=*/1, &t.bf16_sum_op));
    return t;
  }();
  return types;
}

// Progress thread only (mpi_types() makes MPI calls on first use).
MPI_Datatype mpi_type(const Tensor& t) {
  switch (t.dtype()) {
    case DType::f32: return MPI_FLOAT;
    case DType::bf16: return mpi_types().bf16_type;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::f64: return MPI_DOUBLE;
    case DType::fp8_e4m3:
    case DType::fp8_e5m2: return MPI_BYTE;  // gathers only: has_mpi_type keeps fp8 out of the reductions
    default: FT_THROW() << "no MPI type for " << t.describe();
  }
}

MPI_Op mpi_sum(const Tensor& t) { return t.dtype() == DType::bf16 ? mpi_types().bf16_sum_op : MPI_SUM; }

}  // namespace

bool has_mpi_type(DType t) {
  return t == DType::f32 || t == DType::bf16 || t == DType::i32 || t == DType::i64 || t == DType::f64;
}

bool has_mpi_gather_type(DType t) { return has_mpi_type(t) || t == DType::fp8_e4m3 || t == DType::fp8_e5m2; }

GatherCounts gather_counts(const std::vector<std::int64_t>& counts) {
  GatherCounts g;
  g.counts.resize(counts.size());
  g.displacements.resize(counts.size());
  for (std::size_t r = 0; r < counts.size(); ++r) {
    FT_CHECK(counts[r] >= 0 && g.total + counts[r] <= 2147483647)
        << "all_gather_v: count " << counts[r] << " of rank " << r << " (or the total) does not fit one MPI call";
    g.counts[r] = static_cast<int>(counts[r]);
    g.displacements[r] = static_cast<int>(g.total);
    g.total += counts[r];
  }
  return g;
}

void start_all_gather_v(const Tensor& send, const Tensor& recv, const GatherCounts& counts, MPI_Comm comm,
                        MPI_Request* r) {
  FT_MPI_CHECK(MPI_Iallgatherv(send.data(), checked_count(send), mpi_type(send), recv.data(), counts.counts.data(),
                               counts.displacements.data(), mpi_type(recv), comm, r));
}

void drive(MPI_Request& request) {
  int done = 0;
  for (int spins = 0;; ++spins) {
    FT_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) return;
    if (spins > 64) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

void drive(MPI_Request* requests, int count) {
  for (int i = 0; i < count; ++i) drive(requests[i]);
}

void check_send_recv(const Tensor& send, int to, const Tensor& recv, int from, int size, const std::string& where) {
  FT_CHECK(send.dtype() == recv.dtype() && has_mpi_gather_type(send.dtype()))
      << "send_recv on " << where << ": send " << send.describe() << " and recv " << recv.describe()
      << " must have one dtype that MPI moves";
  FT_CHECK(to >= 0 && to < size && from >= 0 && from < size)
      << "send_recv on " << where << ": to rank " << to << ", from rank " << from << " outside the " << size
      << " ranks";
  const auto* s = static_cast<const char*>(send.data());
  const auto* r = static_cast<const char*>(recv.data());
  const auto send_bytes = static_cast<std::size_t>(send.nbytes()), recv_bytes = static_cast<std::size_t>(recv.nbytes());
  FT_CHECK(send_bytes == 0 || recv_bytes == 0 || s >= r + recv_bytes || r >= s + send_bytes)
      << "send_recv on " << where << ": send " << send.describe() << " overlaps recv " << recv.describe();
  checked_count(send);
  checked_count(recv);
}

void start_send_recv(const Tensor& send, int to, const Tensor& recv, int from, MPI_Comm comm, MPI_Request* requests) {
  // One tag: the progress thread runs one exchange at a time, in issue order.
  constexpr int kTag = 7;
  FT_MPI_CHECK(MPI_Irecv(recv.data(), checked_count(recv), mpi_type(recv), from, kTag, comm, &requests[0]));
  FT_MPI_CHECK(MPI_Isend(send.data(), checked_count(send), mpi_type(send), to, kTag, comm, &requests[1]));
}

int checked_count(const Tensor& t) {
  FT_CHECK(t.numel() <= 2147483647) << t.describe() << " is too large for one MPI call";
  return static_cast<int>(t.numel());
}

bool gathers_in_place(const Tensor& send, const Tensor& recv, int rank) {
  const auto* s = static_cast<const char*>(send.data());
  const auto* r = static_cast<const char*>(recv.data());
  const auto send_bytes = static_cast<std::size_t>(send.nbytes()), recv_bytes = static_cast<std::size_t>(recv.nbytes());
  const bool overlap = send_bytes > 0 && recv_bytes > 0 && s < r + recv_bytes && r < s + send_bytes;
  if (!overlap) return false;
  const bool own_block = s == r + static_cast<std::size_t>(rank) * send_bytes &&
                         static_cast<std::size_t>(rank + 1) * send_bytes <= recv_bytes;
  FT_CHECK(own_block) << "all_gather: send " << send.describe() << " overlaps recv " << recv.describe()
                      << " but is not rank " << rank << "'s block of it (an in-place gather sends recv's elements ["
                      << rank * send.numel() << ", " << (rank + 1) * send.numel() << "))";
  return true;
}

void start_all_gather(const Tensor& send, const Tensor& recv, bool in_place, MPI_Comm comm, MPI_Request* r) {
  // In place, MPI takes this rank's block from recv: no local copy of it.
  FT_MPI_CHECK(MPI_Iallgather(in_place ? MPI_IN_PLACE : send.data(), checked_count(send), mpi_type(send), recv.data(),
                              checked_count(send), mpi_type(recv), comm, r));
}

void start_reduce_scatter_sum(const Tensor& send, const Tensor& recv, MPI_Comm comm, MPI_Request* r) {
  FT_MPI_CHECK(MPI_Ireduce_scatter_block(send.data(), recv.data(), checked_count(recv), mpi_type(send), mpi_sum(send),
                                         comm, r));
}

void start_all_reduce_sum(const Tensor& inout, MPI_Comm comm, MPI_Request* r) {
  FT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, inout.data(), checked_count(inout), mpi_type(inout), mpi_sum(inout), comm,
                              r));
}

void start_all_reduce_max(const Tensor& inout, MPI_Comm comm, MPI_Request* r) {
  FT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, inout.data(), checked_count(inout), MPI_FLOAT, MPI_MAX, comm, r));
}

}  // namespace ftrain::mpi_collectives
