// The CUDA backend's op table (kernels/backend_registry.hpp): every op of
// kernels/op_list.hpp, checked like the host kernel (names the op and the
// tensor), then launched on the context's compute stream (kernels.hpp).
#pragma once

#include "kernels/backend_registry.hpp"

namespace ftrain::cuda {

const OpTable& cuda_op_table();

}  // namespace ftrain::cuda
