// The CUDA backend's FP8 ops (op_list.hpp: cast_to_fp8, fp8_linear_forward,
// fp8_linear_backward, fp8_update_scales), entered into the CUDA op table by
// cuda_ops.cpp. Checks mirror the host ops (kernels/host/fp8.cpp); the
// arithmetic is kernels/math/fp8.hpp's (through fp8.cu) and cuBLASLt's FP8
// GEMMs run the plans of cublaslt_plan.hpp (plan_fp8_linear).
#pragma once

#include "kernels/op_list.hpp"

namespace ftrain {
class ExecutionContext;
}

namespace ftrain::cuda::fp8_ops {

void cast_to_fp8(ExecutionContext& ctx, const Tensor& x, Fp8Tensor& out);
void fp8_transpose(ExecutionContext& ctx, const Tensor& data, Tensor& data_t);
void fp8_linear_forward(ExecutionContext& ctx, const Fp8Tensor& x, const Fp8Tensor& w, const Tensor* b, Tensor& y);
void fp8_linear_backward(ExecutionContext& ctx, const Fp8Tensor& x, const Fp8Tensor& w, const Fp8Tensor& dy,
                         const Tensor& dy_source, Tensor* dx, Tensor& dw, Tensor* db);
// The fused FP8 producers (op_list.hpp; kernels in fp8_fusions.cu).
void rmsnorm_forward_fp8(ExecutionContext& ctx, const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd,
                         Fp8Casts& casts);
void swiglu_forward_fp8(ExecutionContext& ctx, const Tensor& gate, const Tensor& up, Tensor& out, Fp8Tensor& cast);
void fp8_update_scales(ExecutionContext& ctx, Tensor& amax_history, Tensor& scale, Tensor& scale_inv, DType forward_format,
                       DType backward_format, std::int64_t margin, Fp8AmaxAlgo algo);

}  // namespace ftrain::cuda::fp8_ops
