// Gradient clipping and the guarded optimizer step without host reads
// (op_list.hpp: sum_squares_accumulate, clip_coefficient; the guarded
// step is adamw_update_chunks_guarded, kernels/host/adamw.cpp). The scalars live in tensors so that on a device
// they stay there; the arithmetic is the host's former f64 arithmetic, so
// the golden curves do not move by a bit.
#include "base/error.hpp"
#include "kernels/host/float_spans.hpp"
#include "kernels/host/host_ops.hpp"
#include "kernels/math/adamw.hpp"
#include "kernels/math/pointwise.hpp"

namespace ftrain::host {

void sum_squares_accumulate(const Tensor& x, Tensor& acc) {
  spans::require_defined_host("sum_squares_accumulate", acc, "acc");
  // sum_squares itself: the partials are the numbers the host used to add.
  acc.data_as<double>()[0] += sum_squares(x);
}

void clip_coefficient(const Tensor& sum_sq, double max_norm, std::int64_t step, Tensor& norm, Tensor& scale,
                      Tensor& diverged_step) {
  constexpr const char* op = "clip_coefficient";
  spans::require_on_host(
      op, {{&sum_sq, "sum_sq"}, {&norm, "norm"}, {&scale, "scale"}, {&diverged_step, "diverged_step"}});
  // kernels/math/pointwise.hpp: the arithmetic the CUDA kernel runs too.
  const double n = math::norm_from_sum_squares(sum_sq.data_as<double>()[0]);
  norm.data_as<double>()[0] = n;
  scale.data_as<float>()[0] = math::clip_scale(n, max_norm);
  std::int64_t& flagged = diverged_step.data_as<std::int64_t>()[0];
  flagged = math::diverged_step_after(flagged, n, step);
}

}  // namespace ftrain::host
