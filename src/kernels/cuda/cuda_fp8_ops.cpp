// The CUDA FP8 ops (cuda_fp8_ops.hpp).
//
// rmsnorm_forward_fp8 / swiglu_forward_fp8: one pass each (fp8_fusions.cu),
// the activation stored and cast with every consumer's scale.
//
// cast_to_fp8 is one fused kernel: cast, transposed copy (when the
// descriptor asks for data_t) and amax. The linear ops run cuBLASLt FP8 plans
// (TN only): the forward on x and w as cast, dgrad on w's transposed copy,
// wgrad on x's and dy's: fp8::linear_backward asks the casts for them on a
// device, and an op without them is refused naming the missing copy. Scales
// stay on the device: the GEMMs read the operands' scale_inv by pointer.
#include "kernels/cuda/cuda_fp8_ops.hpp"

#include <memory>
#include <string>
#include <utility>

#include "backends/cuda/device/cuda_check.hpp"
#include "base/error.hpp"
#include "kernels/cuda/cublaslt_fp8.hpp"
#include "kernels/cuda/fp8_kernels.hpp"
#include "kernels/math/fp8.hpp"
#include "runtime/execution_context.hpp"

namespace ftrain::cuda::fp8_ops {

namespace {

cudaStream_t stream_of(ExecutionContext& ctx) { return static_cast<cudaStream_t>(ctx.compute().native_handle()); }

void require_cuda(const char* op, const Tensor& t, const std::string& role) {
  FT_CHECK(t.defined()) << op << ": " << role << " is an undefined tensor";
  FT_CHECK(t.device() == Device::cuda) << op << ": " << role << " " << t.describe()
                                       << " is not on the CUDA device (CUDA backend)";
}

FloatSpan float_span(const char* op, const Tensor& t, const std::string& role) {
  require_cuda(op, t, role);
  return {t.data(), t.dtype() == DType::f32 ? Storage::f32 : Storage::bf16};
}

// Each defined tensor of a descriptor in CUDA memory; its shapes and dtypes:
// checked by ops::<op> (kernels/op_checks.hpp).
void require_cuda(const char* op, const Fp8Tensor& t, const std::string& role) {
  for (const auto& [part, name] : {std::pair<const Tensor*, const char*>{&t.data, ".data"}, {&t.scale, ".scale"},
                                   {&t.scale_inv, ".scale_inv"}, {&t.amax, ".amax"}, {&t.data_t, ".data_t"}})
    if (part->defined()) require_cuda(op, *part, role + name);
}

// The transposed copy a TN GEMM reads, or an error naming it.
const void* transposed(const char* op, const Fp8Tensor& t, const std::string& role) {
  FT_CHECK(t.data_t.defined()) << op << ": " << role << ".data_t is undefined: cuBLASLt's FP8 GEMMs take only the TN "
                               << "layout and read the transposed copy the cast writes (fp8::linear_backward asks "
                               << "for it on a device)";
  require_cuda(op, t.data_t, role + ".data_t");
  FT_CHECK(t.data_t.dtype() == t.data.dtype() && t.data_t.numel() == t.data.numel())
      << op << ": " << role << ".data_t " << t.data_t.describe() << " is not a copy of " << t.data.describe();
  return t.data_t.data();
}

GemmElement element(DType t) {
  switch (t) {
    case DType::f32: return GemmElement::f32;
    case DType::bf16: return GemmElement::bf16;
    case DType::fp8_e4m3: return GemmElement::fp8_e4m3;
    case DType::fp8_e5m2: return GemmElement::fp8_e5m2;
    default: FT_THROW() << "cuBLASLt FP8: dtype " << dtype_name(t) << " has no GEMM element type";
  }
}

// The device f32 a plan's scale pointer names, among the op's operands
// (nullptr for an operand the op does not have).
const float* scale_pointer(const Fp8ScalePointer& s, const Fp8Tensor* x, const Fp8Tensor* w, const Fp8Tensor* dy) {
  const Fp8Tensor* t = s.operand == kFp8Input ? x : s.operand == kFp8Weight ? w : dy;
  if (t == nullptr) return nullptr;
  return (s.inverse ? t->scale_inv : t->scale).data_as<float>();
}

// The plan, its refusals (a shape cuBLASLt's FP8 GEMMs do not take) naming the op.
Fp8GemmPlan plan_for(const char* op, LinearPass pass, const Fp8LinearShape& shape) {
  try {
    return plan_fp8_linear(pass, shape);
  } catch (const Error& e) {
    FT_THROW() << op << ": " << e.what();
  }
}

struct Dims {
  std::int64_t rows, in, out;
};

// Unchecked: ops::fp8_linear_* checked the shapes (kernels/op_checks.hpp).
Dims dims_of(const Fp8Tensor& x, const Fp8Tensor& w) {
  const std::int64_t in = w.data.dim(1), out = w.data.dim(0);
  return {in > 0 ? x.data.numel() / in : 0, in, out};
}

}  // namespace

void fp8_transpose(ExecutionContext& ctx, const Tensor& data, Tensor& data_t) {
  constexpr const char* op = "fp8_transpose";
  // Shapes and dtypes: checked by ops::fp8_transpose (kernels/op_checks.hpp).
  require_cuda(op, data, "data");
  require_cuda(op, data_t, "data_t");
  const std::int64_t cols = data.dim(-1), rows = cols > 0 ? data.numel() / cols : 0;
  launch_fp8_transpose(static_cast<const std::uint8_t*>(data.data()), rows, cols,
                       static_cast<std::uint8_t*>(data_t.data()), stream_of(ctx));
}

void cast_to_fp8(ExecutionContext& ctx, const Tensor& x, Fp8Tensor& out) {
  constexpr const char* op = "cast_to_fp8";
  // Shapes and dtypes: checked by ops::cast_to_fp8 (kernels/op_checks.hpp).
  const FloatSpan xs = float_span(op, x, "x");
  require_cuda(op, out, "out");
  const std::int64_t cols = x.ndim() >= 1 ? x.dim(-1) : 1;
  const std::int64_t rows = cols > 0 ? x.numel() / cols : 0;
  std::uint8_t* out_t = out.data_t.defined() ? static_cast<std::uint8_t*>(out.data_t.data()) : nullptr;
  std::shared_ptr<void> scratch;
  if (out.amax.defined()) scratch = ctx.allocator().allocate(sizeof(std::uint32_t));
  launch_fp8_cast_transpose(xs, rows, cols, out.scale.data_as<float>(), out.scale_inv.data_as<float>(),
                            out.amax.defined() ? out.amax.data_as<float>() : nullptr,
                            static_cast<std::uint32_t*>(scratch.get()), out.data.dtype() == DType::fp8_e4m3,
                            static_cast<std::uint8_t*>(out.data.data()), out_t, stream_of(ctx));
}

namespace {

static_assert(Fp8Casts::kMax == kMaxFp8Casts, "op_list's Fp8Casts and the kernels' Fp8CastTargets must agree");

// One fused cast's descriptor (checked by ops::<op>, kernels/op_checks.hpp)
// added to the kernel's targets.
void add_target(const char* op, const Fp8Tensor& t, const std::string& role, Fp8CastTargets& targets) {
  require_cuda(op, t, role);
  const int c = targets.count++;
  targets.scale[c] = t.scale.data_as<float>();
  targets.scale_inv[c] = t.scale_inv.data_as<float>();
  targets.amax[c] = t.amax.defined() ? t.amax.data_as<float>() : nullptr;
  targets.codes[c] = static_cast<std::uint8_t*>(t.data.data());
  targets.e4m3[c] = t.data.dtype() == DType::fp8_e4m3;
}

}  // namespace

void rmsnorm_forward_fp8(ExecutionContext& ctx, const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd,
                         Fp8Casts& casts) {
  constexpr const char* op = "rmsnorm_forward_fp8";
  const FloatSpan xs = float_span(op, x, "x"), ws = float_span(op, w, "w"), ys = float_span(op, y, "y");
  // Shapes, dtypes and the casts: checked by ops::rmsnorm_forward_fp8 (kernels/op_checks.hpp).
  const std::int64_t width = x.dim(-1), rows = x.numel() / width;
  require_cuda(op, rstd, "rstd");
  Fp8CastTargets targets;
  for (int c = 0; c < casts.count; ++c) add_target(op, casts.out[c], "casts.out[" + std::to_string(c) + "]", targets);
  const std::shared_ptr<void> scratch = ctx.allocator().allocate(sizeof(std::uint32_t));
  launch_rmsnorm_forward_fp8(xs, ws, eps, ys, rstd.data_as<float>(), rows, width, targets,
                             static_cast<std::uint32_t*>(scratch.get()), stream_of(ctx));
}

void swiglu_forward_fp8(ExecutionContext& ctx, const Tensor& gate, const Tensor& up, Tensor& out, Fp8Tensor& cast) {
  constexpr const char* op = "swiglu_forward_fp8";
  const FloatSpan gs = float_span(op, gate, "gate"), us = float_span(op, up, "up"), os = float_span(op, out, "out");
  // Shapes, dtypes and the cast: checked by ops::swiglu_forward_fp8 (kernels/op_checks.hpp).
  Fp8CastTargets targets;
  add_target(op, cast, "cast", targets);
  const std::shared_ptr<void> scratch = ctx.allocator().allocate(sizeof(std::uint32_t));
  launch_swiglu_forward_fp8(gs, us, os, gate.numel(), targets, static_cast<std::uint32_t*>(scratch.get()),
                            stream_of(ctx));
}

void fp8_linear_forward(ExecutionContext& ctx, const Fp8Tensor& x, const Fp8Tensor& w, const Tensor* b, Tensor& y) {
  constexpr const char* op = "fp8_linear_forward";
  // Shapes and dtypes: checked by ops::fp8_linear_forward (kernels/op_checks.hpp).
  require_cuda(op, x, "x");
  require_cuda(op, w, "w");
  const FloatSpan ys = float_span(op, y, "y");
  const Dims d = dims_of(x, w);
  // cuBLASLt's FP8 GEMM: both operands in one format (the host's decodes each).
  FT_CHECK(x.data.dtype() == w.data.dtype()) << op << ": x.data " << x.data.describe() << " and w.data "
                                             << w.data.describe() << " must have one FP8 format";
  const FloatSpan bs = b != nullptr ? float_span(op, *b, "b") : FloatSpan{nullptr, Storage::f32};
  if (d.rows == 0) return;
  Fp8LinearShape shape{d.rows, d.in, d.out, element(x.data.dtype()), GemmElement::fp8_e5m2, element(y.dtype()),
                       b != nullptr, b != nullptr ? element(b->dtype()) : GemmElement::bf16};
  const Fp8GemmPlan plan = plan_for(op, LinearPass::forward, shape);
  Fp8GemmOperands o;
  o.a = w.data.data();
  o.b = x.data.data();
  o.a_scale = scale_pointer(plan.a_scale, &x, &w, nullptr);
  o.b_scale = scale_pointer(plan.b_scale, &x, &w, nullptr);
  std::shared_ptr<void> f32_d;
  if (plan.bias == Fp8BiasStep::epilogue) o.bias = b->data();
  if (plan.bias == Fp8BiasStep::add_after && y.dtype() != DType::f32) {
    f32_d = ctx.allocator().allocate(static_cast<std::size_t>(y.numel()) * sizeof(float));
    o.d = f32_d.get();
  } else {
    o.d = y.data();
  }
  execute_fp8_gemm_plan(ctx, plan, o);
  if (plan.bias == Fp8BiasStep::add_after)
    launch_fp8_bias_store(static_cast<const float*>(o.d), bs, ys, d.rows, d.out, stream_of(ctx));
}

void fp8_linear_backward(ExecutionContext& ctx, const Fp8Tensor& x, const Fp8Tensor& w, const Fp8Tensor& dy,
                         const Tensor& dy_source, Tensor* dx, Tensor& dw, Tensor* db) {
  constexpr const char* op = "fp8_linear_backward";
  // Shapes and dtypes: checked by ops::fp8_linear_backward (kernels/op_checks.hpp).
  require_cuda(op, x, "x");
  require_cuda(op, w, "w");
  require_cuda(op, dy, "dy");
  require_cuda(op, dw, "dw");
  const Dims d = dims_of(x, w);
  if (d.rows == 0) return;
  Fp8LinearShape shape{d.rows, d.in, d.out, element(x.data.dtype()), element(dy.data.dtype()),
                       dx != nullptr ? element(dx->dtype()) : GemmElement::f32, false, GemmElement::bf16};
  if (dx != nullptr) {
    require_cuda(op, *dx, "dx");
    const Fp8GemmPlan dgrad = plan_for(op, LinearPass::dgrad, shape);
    Fp8GemmOperands o;
    o.a = transposed(op, w, "w");
    o.b = dy.data.data();
    o.d = dx->data();
    o.a_scale = scale_pointer(dgrad.a_scale, &x, &w, &dy);
    o.b_scale = scale_pointer(dgrad.b_scale, &x, &w, &dy);
    execute_fp8_gemm_plan(ctx, dgrad, o);
  }
  const Fp8GemmPlan wgrad = plan_for(op, LinearPass::wgrad, shape);
  Fp8GemmOperands o;
  o.a = transposed(op, x, "x");
  o.b = transposed(op, dy, "dy");
  o.d = dw.data();
  o.a_scale = scale_pointer(wgrad.a_scale, &x, &w, &dy);
  o.b_scale = scale_pointer(wgrad.b_scale, &x, &w, &dy);
  execute_fp8_gemm_plan(ctx, wgrad, o);
  if (db != nullptr) {
    const FloatSpan dbs = float_span(op, *db, "db");
    launch_column_sum_accumulate(float_span(op, dy_source, "dy_source"), d.rows, d.out, dbs, stream_of(ctx));
  }
}

void fp8_update_scales(ExecutionContext& ctx, Tensor& amax_history, Tensor& scale, Tensor& scale_inv,
                       DType forward_format, DType backward_format, std::int64_t margin, Fp8AmaxAlgo algo) {
  constexpr const char* op = "fp8_update_scales";
  // Shapes, dtypes, formats and margin: checked by ops::fp8_update_scales (kernels/op_checks.hpp).
  require_cuda(op, amax_history, "amax_history");
  require_cuda(op, scale, "scale");
  require_cuda(op, scale_inv, "scale_inv");
  auto max_of = [](DType t) { return t == DType::fp8_e4m3 ? math::kFp8E4m3MaxValue : math::kFp8E5m2MaxValue; };
  launch_fp8_update_scales(amax_history.data_as<float>(), amax_history.dim(0), scale.data_as<float>(),
                           scale_inv.data_as<float>(), max_of(forward_format), max_of(backward_format), static_cast<int>(margin),
                           algo == Fp8AmaxAlgo::most_recent, stream_of(ctx));
}

}  // namespace ftrain::cuda::fp8_ops
