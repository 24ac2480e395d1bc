// Threads OpenBLAS may use in one rank. With several ranks per node the
// default (all cores in every rank) oversubscribes the node, so the trainer
// gives each rank its share unless the user chose (OPENBLAS_NUM_THREADS or
// OMP_NUM_THREADS set).
#pragma once

namespace ftrain {

// Returns the thread count in effect afterwards.
int configure_blas_threads(int cores_per_rank);

}  // namespace ftrain
