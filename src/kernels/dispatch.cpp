#include "core/error.hpp"
#include "kernels/ops.hpp"

namespace ftrain::ops {

void throw_no_cuda(const char* op, const Tensor& t) {
  FT_THROW() << "op " << op << " got " << t.describe()
             << ", but this ftrain was built without the CUDA backend (configure with -DFTRAIN_CUDA=ON)";
}

}  // namespace ftrain::ops
