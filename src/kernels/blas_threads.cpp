#include "kernels/blas_threads.hpp"

#include <cblas.h>

#include <algorithm>
#include <cstdlib>

#include "kernels/host/gemm.hpp"

namespace ftrain {

int configure_blas_threads(int cores_per_rank) {
  if (std::getenv("OPENBLAS_NUM_THREADS") == nullptr && std::getenv("OMP_NUM_THREADS") == nullptr)
    openblas_set_num_threads(std::max(1, cores_per_rank));
  // oneDNN (bf16 GEMMs) threads with OpenMP: the same share, so BLAS and
  // oneDNN never oversubscribe the node between them.
  host::gemm::set_threads(openblas_get_num_threads());
  return openblas_get_num_threads();
}

std::string blas_kernel_description() {
  const char* core = openblas_get_corename();
  std::string d = std::string("OpenBLAS ") + (core != nullptr ? core : "?") + " kernels";
  if (const char* forced = std::getenv("OPENBLAS_CORETYPE")) d += std::string(" (forced by OPENBLAS_CORETYPE=") + forced + ")";
  return d;
}

}  // namespace ftrain
