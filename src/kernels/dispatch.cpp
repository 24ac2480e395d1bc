// ops::<op>: the op's shared argument checks, then the one dispatch.
// Compiled into libftrain (never inline in a plugin), so a plugin reaches
// every backend through these symbols.
#include "base/error.hpp"
#include "kernels/backend_registry.hpp"
#include "kernels/op_checks.hpp"
#include "kernels/ops.hpp"
#include "runtime/backend_library.hpp"

namespace ftrain::ops {

namespace {
const OpTable& backend_of(ExecutionContext& ctx, const Tensor& t, const char* op) {
  if (t.device() != ctx.device()) {
    FT_THROW() << "op " << op << " got " << t.describe() << ", but its execution context runs on "
               << device_name(ctx.device());
  }
  const OpTable* table = find_backend(t.device());
  if (table == nullptr) {
    FT_THROW() << "op " << op << " got " << t.describe() << ", but no " << device_name(t.device())
               << " backend is loaded (libftrain_cuda.so was not found; " << describe_backend_search() << ")";
  }
  return *table;
}
}  // namespace

// The op's argument checks (kernels/op_checks.hpp) run here, once, whatever
// backend runs it.
#define FTRAIN_DEFINE_OP(R, NAME, PARAMS, ARGS, DEVICE_TENSOR)            \
  R NAME(ExecutionContext& ctx, FTRAIN_UNPAREN PARAMS) {                  \
    const OpTable& backend = backend_of(ctx, DEVICE_TENSOR, #NAME);       \
    op_checks::NAME(FTRAIN_UNPAREN ARGS);                                 \
    return backend.NAME(ctx, FTRAIN_UNPAREN ARGS);                        \
  }
FTRAIN_OP_LIST(FTRAIN_DEFINE_OP)
#undef FTRAIN_DEFINE_OP

}  // namespace ftrain::ops
