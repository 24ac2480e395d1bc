// The ops a plugin or the engine calls: ftrain::ops::<op>(ctx, tensors...).
//
// One declaration per op (generated from kernels/op_list.hpp, where each op's
// contract is written), one dispatch: the functions are compiled into
// libftrain, look up the backend registered for the device of the op's
// tensors (kernels/backend_registry.hpp) and call its table entry with the
// execution context. A plugin therefore contains no backend code and runs on
// whichever backend its tensors live on. Ops are enqueued on
// ctx.compute(): on an asynchronous stream they may not have run when the
// call returns (runtime/execution_context.hpp says who may read data when).
#pragma once

#include "kernels/op_list.hpp"
#include "runtime/execution_context.hpp"

namespace ftrain::ops {

#define FTRAIN_DECLARE_OP(R, NAME, PARAMS, ARGS, DEVICE_TENSOR) R NAME(ExecutionContext& ctx, FTRAIN_UNPAREN PARAMS);
FTRAIN_OP_LIST(FTRAIN_DECLARE_OP)
#undef FTRAIN_DECLARE_OP

}  // namespace ftrain::ops
