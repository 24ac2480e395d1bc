// OpenBLAS settings of one rank.
//
// Threads: with several ranks per node the default (all cores in every rank)
// oversubscribes the node, so the trainer gives each rank its share unless
// the user chose (OPENBLAS_NUM_THREADS or OMP_NUM_THREADS set).
// Kernels: OpenBLAS picks them from the CPU, unless OPENBLAS_CORETYPE forces
// a family; the run header names the kernels in use, because a forced older
// family (e.g. Haswell on an AVX-512 CPU) can halve GEMM speed.
#pragma once

#include <string>

namespace ftrain {

// Sets OpenBLAS's and oneDNN's threads alike. Returns the thread count in
// effect afterwards.
int configure_blas_threads(int cores_per_rank);
// "OpenBLAS 0.3.21 Cooperlake kernels" (+ "forced by OPENBLAS_CORETYPE=...").
std::string blas_kernel_description();

}  // namespace ftrain
