// Error checks of CUDA runtime / cuBLASLt calls in the CUDA backend: a failed
// call throws ftrain::Error naming the call, the file:line and the library's
// own description (Transformer Engine's NVTE_CHECK_CUDA pattern).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "base/error.hpp"

#define FTRAIN_CUDA_CHECK(call)                                                                               \
  do {                                                                                                        \
    const cudaError_t ftrain_cuda_status_ = (call);                                                           \
    if (ftrain_cuda_status_ != cudaSuccess)                                                                   \
      FT_THROW() << "CUDA call " #call " failed: " << cudaGetErrorName(ftrain_cuda_status_) << " ("           \
                 << cudaGetErrorString(ftrain_cuda_status_) << ")";                                          \
  } while (0)

// After a kernel launch. cudaGetLastError returns the launch's own error
// (bad configuration) but also a sticky error of any kernel that faulted
// earlier, asynchronously: the kernel named here is only the first to ask.
// The message says so; CUDA_LAUNCH_BLOCKING=1 (every launch waits for its
// kernel) or compute-sanitizer names the kernel that really faulted
// (share/doc/execution-model.md, "Finding the kernel that faulted").
#define FTRAIN_CUDA_CHECK_LAUNCH(what)                                                                        \
  do {                                                                                                        \
    const cudaError_t ftrain_cuda_status_ = cudaGetLastError();                                               \
    if (ftrain_cuda_status_ != cudaSuccess)                                                                   \
      FT_THROW() << "CUDA error at the launch of kernel " << (what) << ": "                                   \
                 << cudaGetErrorName(ftrain_cuda_status_) << " (" << cudaGetErrorString(ftrain_cuda_status_)  \
                 << "); either this launch was refused, or an earlier kernel faulted asynchronously and this "\
                    "is the first check to see it: rerun with CUDA_LAUNCH_BLOCKING=1 (or under "              \
                    "compute-sanitizer) to name the kernel that faulted";                                     \
  } while (0)

#define FTRAIN_CUBLAS_CHECK(call)                                                                             \
  do {                                                                                                        \
    const cublasStatus_t ftrain_cublas_status_ = (call);                                                      \
    if (ftrain_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                                       \
      FT_THROW() << "cuBLASLt call " #call " failed: " << cublasLtGetStatusName(ftrain_cublas_status_) << " (" \
                 << cublasLtGetStatusString(ftrain_cublas_status_) << ")";                                   \
  } while (0)
