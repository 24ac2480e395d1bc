// NcclCommunicator: the Communicator interface over NCCL, for device
// buffers, in libftrain_cuda.so (registered through
// comm/device_communicator.hpp; libftrain never links NCCL).
//
// Bootstrap (collective over an MPI communicator): rank 0 ncclGetUniqueId,
// MPI_Bcast (comm/nccl/nccl_bootstrap.hpp), then ncclCommInitRankConfig on
// the current device (bind_local_gpu chose it) with blocking = 0, so that
// no NCCL call can hang the host: every call returns at once and the
// communicator is polled (ncclCommGetAsyncError) until ready, under the
// collective watchdog, which can then ncclCommAbort it.
//
// Collectives run on the context's communication stream, after `after`
// (the stream waits on it). A Request is a CUDA event recorded behind the
// collective: wait() makes the context's compute stream wait on it
// (cudaStreamWaitEvent) and returns without blocking the host, so compute
// enqueued afterwards reads the result in stream order (no host blocking
// in the step); test() asks cudaEventQuery. The tensors stay referenced
// until the event has completed (the watchdog's probe holds them), so a
// buffer is never reused while NCCL may still read or write it.
// split() is ncclCommSplit; the communicators split from one share its
// stream, unit label and watchdog. The blocking scalar helpers, barrier and
// the node split are the wrapped MPI communicator's (host values).
//
// Errors: every NCCL call is checked (ncclGetErrorString + ncclGetLastError);
// an asynchronous NCCL error (ncclCommGetAsyncError), found by wait() or
// the watchdog, fails the request or aborts the job with that text.
//
// Not yet run on a GPU (share/doc/status.md): compiled here with -Werror.
#pragma once

#include <memory>

#include "comm/communicator.hpp"
#include "comm/mpi_communicator.hpp"

namespace ftrain {
class ExecutionContext;
}

namespace ftrain::nccl {

// The NCCL communicator over `world`'s ranks on `context`'s streams
// (collective over world; the device must already be set).
std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm world, ExecutionContext& context);

}  // namespace ftrain::nccl
