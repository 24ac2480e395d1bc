// NCCL's bootstrap through MPI: rank `root` of the MPI communicator calls
// ncclGetUniqueId, MPI_Bcast sends its 128 bytes to every rank, and each
// rank then joins with ncclCommInitRankConfig (comm/nccl/nccl_communicator.cpp).
// ncclGetUniqueId needs no GPU (it opens a listening socket), so this part
// runs and is tested on machines without one (tests/mpi/test_nccl_bootstrap.cpp,
// np 2 and 4, which compiles this file and links NCCL directly).
//
// Called before the communicator's first collective, with no MPI request in
// flight on the progress thread (comm/mpi_progress.hpp), like the MPI calls
// of HDF5 I/O.
#pragma once

#include <mpi.h>
#include <nccl.h>

namespace ftrain::nccl {

// Collective over `comm`: every rank returns root's id. Throws ftrain::Error
// naming NCCL's or MPI's reason.
ncclUniqueId broadcast_unique_id(MPI_Comm comm, int root = 0);

}  // namespace ftrain::nccl
