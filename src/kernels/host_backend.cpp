// The host backend's op table: each entry runs the host kernel
// (kernels/host/<op>.cpp) on the context's compute stream.
//
// Synchronous stream: the kernel runs at once, on the caller's thread (no
// copies, no allocation: this is the path CPU training takes). Asynchronous
// stream: the kernel is enqueued with BORROWED tensors (Tensor::borrow), the
// way a CUDA launch captures raw pointers: the task does not keep buffers
// alive, so a caller that frees a buffer too early is caught (the allocator
// poisons it in debug mode) instead of being rescued by a reference count.
// Ops that return a host value (sum_squares) wait for the stream first.
#include <tuple>
#include <type_traits>
#include <utility>

#include "kernels/backend_registry.hpp"
#include "kernels/host/host_ops.hpp"
#include "runtime/execution_context.hpp"

namespace ftrain {

namespace {

// What an enqueued task holds for each argument.
struct HeldOptional {
  Tensor tensor;
  bool present = false;
};
inline Tensor hold(const Tensor& t) { return t.borrow(); }
inline HeldOptional hold(const Tensor* t) { return t != nullptr ? HeldOptional{t->borrow(), true} : HeldOptional{}; }
inline Fp8Tensor hold(const Fp8Tensor& t) { return t.borrow(); }
inline Fp8Casts hold(const Fp8Casts& t) { return t.borrow(); }
template <class S>
  requires(std::is_arithmetic_v<S> || std::is_enum_v<S>)
S hold(S value) {
  return value;
}
inline Tensor& unhold(Tensor& t) { return t; }
inline Tensor* unhold(HeldOptional& h) { return h.present ? &h.tensor : nullptr; }
inline Fp8Tensor& unhold(Fp8Tensor& t) { return t; }
inline Fp8Casts& unhold(Fp8Casts& t) { return t; }
template <class S>
  requires(std::is_arithmetic_v<S> || std::is_enum_v<S>)
S unhold(S value) {
  return value;
}

template <auto Kernel, class... Args>
auto run_on_compute_stream(ExecutionContext& ctx, Args&&... args) {
  using Result = decltype(Kernel(std::forward<Args>(args)...));
  Stream& stream = ctx.compute();
  if constexpr (!std::is_void_v<Result>) {
    stream.synchronize();
    return Kernel(std::forward<Args>(args)...);
  } else {
    if (!stream.asynchronous()) return Kernel(std::forward<Args>(args)...);
    stream.enqueue([held = std::make_tuple(hold(args)...)]() mutable {
      std::apply([](auto&... h) { Kernel(unhold(h)...); }, held);
    });
  }
}

}  // namespace

namespace host_backend {
#define FTRAIN_HOST_ENTRY(R, NAME, PARAMS, ARGS, DEVICE_TENSOR)         \
  R NAME(ExecutionContext& ctx, FTRAIN_UNPAREN PARAMS) {                \
    return run_on_compute_stream<&host::NAME>(ctx, FTRAIN_UNPAREN ARGS); \
  }
FTRAIN_OP_LIST(FTRAIN_HOST_ENTRY)
#undef FTRAIN_HOST_ENTRY
}  // namespace host_backend

const OpTable& host_op_table() {
  static const OpTable table = [] {
    OpTable t;
    t.name = "host";
    t.device = Device::host;
#define FTRAIN_HOST_TABLE(R, NAME, PARAMS, ARGS, DEVICE_TENSOR) t.NAME = &host_backend::NAME;
    FTRAIN_OP_LIST(FTRAIN_HOST_TABLE)
#undef FTRAIN_HOST_TABLE
    return t;
  }();
  return table;
}

}  // namespace ftrain
