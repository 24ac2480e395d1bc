#include "comm/nccl/nccl_bootstrap.hpp"

#include <cstring>
#include <string>

#include "comm/nccl/nccl_check.hpp"
#include "base/error.hpp"

namespace ftrain::nccl {

ncclUniqueId broadcast_unique_id(MPI_Comm comm, int root) {
  int rank = -1;
  MPI_Comm_rank(comm, &rank);
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  // Rank root's failure must not leave the others in MPI_Bcast: it sends a
  // status word first, so every rank throws together.
  int status = 0;
  std::string why;
  if (rank == root) {
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) {
      status = static_cast<int>(r);
      const char* last = ncclGetLastError(nullptr);
      why = std::string("ncclGetUniqueId failed on rank ") + std::to_string(root) + ": " + ncclGetErrorString(r) +
            (last != nullptr && *last != '\0' ? std::string(" (") + last + ")" : "");
    }
  }
  int code = MPI_Bcast(&status, 1, MPI_INT, root, comm);
  FT_CHECK(code == MPI_SUCCESS) << "MPI_Bcast of the NCCL bootstrap status failed (MPI error " << code << ")";
  if (status != 0)
    FT_THROW() << (rank == root ? why
                                : "rank " + std::to_string(rank) + ": NCCL bootstrap: rank " + std::to_string(root) +
                                      " could not create the NCCL unique id (" +
                                      ncclGetErrorString(static_cast<ncclResult_t>(status)) + ")");
  static_assert(sizeof(ncclUniqueId) == NCCL_UNIQUE_ID_BYTES, "ncclUniqueId is its 128 bytes");
  code = MPI_Bcast(&id, static_cast<int>(sizeof id), MPI_BYTE, root, comm);
  FT_CHECK(code == MPI_SUCCESS) << "MPI_Bcast of the NCCL unique id failed (MPI error " << code << ")";
  return id;
}

}  // namespace ftrain::nccl
