// NCCL error checks with file:line, NCCL's error string and its last error
// message (ncclGetErrorString / ncclGetLastError). Part of libftrain_cuda.
#pragma once

#include <nccl.h>

#include <string>

#include "base/error.hpp"

namespace ftrain::nccl {

// Throws ftrain::Error unless `result` is ncclSuccess or (for a
// non-blocking communicator, where calls return before they finish)
// ncclInProgress.
inline void check(ncclResult_t result, ncclComm_t comm, const char* call, const char* file, int line) {
  if (result == ncclSuccess || result == ncclInProgress) return;
  const char* last = ncclGetLastError(comm);
  throw Error(std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: " +
              ncclGetErrorString(result) + (last != nullptr && *last != '\0' ? std::string(" (") + last + ")" : ""));
}

}  // namespace ftrain::nccl

#define FTRAIN_NCCL_CHECK(call, comm) ::ftrain::nccl::check((call), (comm), #call, __FILE__, __LINE__)
