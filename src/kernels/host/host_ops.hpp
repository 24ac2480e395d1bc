// The host backend's kernels (kernels/host/<op>.cpp): Kokkos loops +
// OpenBLAS, run on the calling thread. Only the host backend's table
// (kernels/host_backend.cpp) and host-only tools call these directly; every
// other caller goes through ftrain::ops, so no plugin ever links them.
#pragma once

#include "kernels/op_list.hpp"

namespace ftrain::host {

#define FTRAIN_DECLARE_HOST_OP(R, NAME, PARAMS, ARGS, DEVICE_TENSOR) R NAME PARAMS;
FTRAIN_OP_LIST(FTRAIN_DECLARE_HOST_OP)
#undef FTRAIN_DECLARE_HOST_OP

}  // namespace ftrain::host
