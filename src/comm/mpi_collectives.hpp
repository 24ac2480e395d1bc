// The MPI calls behind the non-blocking collectives, shared by the MPI
// communicator (host buffers) and the staged communicator (device buffers
// copied through host memory): one place maps dtypes to MPI types, sums bf16
// (f32 arithmetic, RNE rounding) and drives a request. Internal to comm/;
// every function here runs on the MPI progress thread (comm/mpi_progress.hpp).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.hpp"

namespace ftrain::mpi_collectives {

// f32, bf16, i32, i64, f64 travel over MPI (and reduce).
bool has_mpi_type(DType t);
// What the gathers move: the types above and raw fp8 bytes (never reduced).
bool has_mpi_gather_type(DType t);
// MPI_Allgatherv's counts and displacements for per-rank element counts;
// throws naming the rank whose count (or the total) does not fit one call.
struct GatherCounts {
  std::vector<int> counts, displacements;
  std::int64_t total = 0;
};
GatherCounts gather_counts(const std::vector<std::int64_t>& counts);
// numel as an MPI count; throws naming the tensor when it does not fit.
int checked_count(const Tensor& t);

// An all-gather may run in place: send is then recv's own block (the
// elements [rank * n, (rank + 1) * n) of recv, n = send.numel()), as with
// MPI_IN_PLACE and NCCL's in-place all-gather, and no copy of it is made.
// True for that layout, false for disjoint buffers; any other overlap
// throws naming both tensors (no collective reads a buffer it also writes).
// Pure pointer arithmetic, callable on any thread.
bool gathers_in_place(const Tensor& send, const Tensor& recv, int rank);

// Post the non-blocking call into *request (sizes checked by the caller;
// in_place from gathers_in_place).
void start_all_gather(const Tensor& send, const Tensor& recv, bool in_place, MPI_Comm comm, MPI_Request* request);
// `counts` must outlive the request (the caller keeps it in its closure).
void start_all_gather_v(const Tensor& send, const Tensor& recv, const GatherCounts& counts, MPI_Comm comm,
                        MPI_Request* request);
void start_reduce_scatter_sum(const Tensor& send, const Tensor& recv, MPI_Comm comm, MPI_Request* request);
void start_all_reduce_sum(const Tensor& inout, MPI_Comm comm, MPI_Request* request);
void start_all_reduce_max(const Tensor& inout, MPI_Comm comm, MPI_Request* request);  // f32

// Point to point: the checks of Communicator::send_recv (same dtype, a type
// the gathers move, ranks within `size`, no overlap), naming `where`; then
// posting the receive from `from` into requests[0] and the send to `to` into
// requests[1] (both posted before either is driven: a ring cannot deadlock).
void check_send_recv(const Tensor& send, int to, const Tensor& recv, int from, int size, const std::string& where);
void start_send_recv(const Tensor& send, int to, const Tensor& recv, int from, MPI_Comm comm, MPI_Request* requests);

// Drives `count` requests to completion (drive, for each).
void drive(MPI_Request* requests, int count);

// Drives one request to completion. Polls with a short sleep instead of
// MPI_Wait's busy loop: the progress thread must not take the core away from
// the computing thread while its peers catch up.
void drive(MPI_Request& request);

}  // namespace ftrain::mpi_collectives
