// Error checks of CUDA runtime / cuBLASLt calls in the CUDA backend: a failed
// call throws ftrain::Error naming the call, the file:line and the library's
// own description (Transformer Engine's NVTE_CHECK_CUDA pattern).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "core/error.hpp"

#define FTRAIN_CUDA_CHECK(call)                                                                               \
  do {                                                                                                        \
    const cudaError_t ftrain_cuda_status_ = (call);                                                           \
    if (ftrain_cuda_status_ != cudaSuccess)                                                                   \
      FT_THROW() << "CUDA call " #call " failed: " << cudaGetErrorName(ftrain_cuda_status_) << " ("           \
                 << cudaGetErrorString(ftrain_cuda_status_) << ")";                                          \
  } while (0)

// After a kernel launch: the launch's own error (bad configuration), not the
// kernel's (that one surfaces at the next synchronisation).
#define FTRAIN_CUDA_CHECK_LAUNCH(what)                                                                        \
  do {                                                                                                        \
    const cudaError_t ftrain_cuda_status_ = cudaGetLastError();                                               \
    if (ftrain_cuda_status_ != cudaSuccess)                                                                   \
      FT_THROW() << "CUDA kernel " << (what) << " did not launch: " << cudaGetErrorName(ftrain_cuda_status_) \
                 << " (" << cudaGetErrorString(ftrain_cuda_status_) << ")";                                  \
  } while (0)

#define FTRAIN_CUBLAS_CHECK(call)                                                                             \
  do {                                                                                                        \
    const cublasStatus_t ftrain_cublas_status_ = (call);                                                      \
    if (ftrain_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                                       \
      FT_THROW() << "cuBLASLt call " #call " failed: " << cublasLtGetStatusName(ftrain_cublas_status_) << " (" \
                 << cublasLtGetStatusString(ftrain_cublas_status_) << ")";                                   \
  } while (0)
