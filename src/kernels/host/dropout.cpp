// Host dropout (ops.hpp): y = x * mask, mask and product from kernels/math/dropout.hpp
// (the CUDA kernel calls the same functions).
//
// Conventions: x and y are [..., C] float tensors (f32 or bf16) with the same
// numel; element e of the tensor has mask index first_row * C + e, so a rank
// holding rows [r0, r1) of a global batch passes first_row = r0 and draws
// exactly those rows of the mask. y may alias x.
#include <Kokkos_Core.hpp>

#include "base/error.hpp"
#include "kernels/math/dropout.hpp"
#include "kernels/host/float_spans.hpp"
#include "kernels/host/host_ops.hpp"

namespace ftrain::host {

void dropout(const Tensor& x, float p, std::uint64_t seed, std::uint64_t stream, std::int64_t first_row, Tensor& y) {
  constexpr const char* op = "dropout";
  spans::require_on_host(op, {{&x, "x"}, {&y, "y"}});  // the rest: ops::dropout (kernels/op_checks.hpp)
  const std::int64_t width = x.dim(x.ndim() - 1);
  const Tensor tx = x, ty = y;
  spans::for_each_chunk("ftrain::dropout", x.numel(), [=](std::int64_t begin, std::int64_t n) {
    const float* in = spans::read_f32(tx, begin, n, spans::thread_scratch(0, n));
    float* o = spans::write_f32_begin(ty, begin, spans::thread_scratch(1, n));
    for (std::int64_t i = 0; i < n; ++i)
      o[i] = math::dropout_value(in[i], seed, stream, math::dropout_mask_index(first_row, width, begin + i), p);
    spans::write_f32_end(ty, begin, n, o);
  });
}

}  // namespace ftrain::host
