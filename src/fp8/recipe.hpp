// The FP8 delayed-scaling recipe (Transformer Engine's DelayedScaling) and the
// per-layer state it keeps.
//
// Every FP8 GEMM operand has a per-tensor scale s: the operand is stored as
// fp8(x * s) (round to nearest even, saturating at the format's max) and the
// GEMM result is multiplied by 1 / (s_a * s_b). The scale comes from the
// amax (max |x|) of the same tensor in EARLIER iterations, not the current
// one (delayed scaling: on a GPU the current amax is only known after the
// kernel that produced the tensor), following TE:
//     amax  = max(history)               amax_algo max
//           = history[0]                 amax_algo most_recent
//     scale = (fp8_max / amax) / 2^margin, kept unchanged when amax is 0 or
//             non-finite or the quotient is not finite
// then the history rolls by one (torch.roll(history, -1, 0), then
// history[0] <- 0: the oldest entry is dropped) and the next iteration's
// amaxes accumulate into history[0]; it always holds the last L iterations. A spike (an activation far above the recent amax) therefore
// saturates at fp8_max in the iteration where it appears (finite, never
// inf/NaN: the conversion saturates) and lowers the scale from the next
// iteration on, for as long as it stays in the history (algo max). The margin
// leaves 2^margin of headroom above the remembered amax.
//
// Formats: hybrid = E4M3 (more mantissa) for the forward tensors (input,
// weight) and E5M2 (more range) for the output gradient; e4m3 = E4M3 for all.
//
// State of one linear layer (LinearState), as tensors on the training device
// (checkpoints save and restore amax_history and scale exactly):
//   amax_history  f32 [L, 3]  columns: input, weight, grad_output (Fp8Operand);
//                             row 0 = the iteration in progress
//   scale         f32 [3]     the scales in use (start at 1, as TE)
//   scale_inv     f32 [3]     1 / scale, the GEMMs' dequantisation factor;
//                             derived, not checkpointed: written by every
//                             cast, every scale update (all three, on every
//                             rank) and a checkpoint load
// One iteration = one forward + backward of the layer: the forward's casts
// max-accumulate the input and weight amaxes into row 0 (ops::cast_to_fp8,
// on the device), the backward's cast the output gradient's; after the step
// the engine max-reduces row 0 over ranks and runs update_scales (the op
// ops::fp8_update_scales). Between them the scales do not change, so backward
// uses exactly the forward's quantisation (and an activation-checkpointing
// recompute of the forward reproduces it). No scale or amax is read on the
// host on the way.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.hpp"
#include "kernels/fp8_scaling.hpp"
#include "kernels/fp8_tensor.hpp"
#include "runtime/execution_context.hpp"

namespace ftrain::fp8 {

enum class Format : std::uint8_t { hybrid, e4m3 };
using AmaxAlgo = Fp8AmaxAlgo;

struct Recipe {
  Format format = Format::hybrid;
  std::int64_t amax_history_len = 1024;  // TE's default
  int margin = 0;
  AmaxAlgo amax_algo = AmaxAlgo::max;

  DType forward_dtype() const { return DType::fp8_e4m3; }
  DType backward_dtype() const { return format == Format::hybrid ? DType::fp8_e5m2 : DType::fp8_e4m3; }
};

const char* format_name(Format f);
const char* amax_algo_name(AmaxAlgo a);

// Largest finite value of an FP8 dtype (448 for E4M3, 57344 for E5M2).
float fp8_max(DType fp8);

// The TE scale rule above for one tensor (kernels/fp8_scaling.hpp, the
// arithmetic the update op runs).
inline float compute_scale(float amax, float previous_scale, float max_value, int margin) {
  return fp8_scaling::next_scale(amax, previous_scale, max_value, margin);
}

using Operand = Fp8Operand;
inline constexpr Fp8Operand kInput = kFp8Input;
inline constexpr Fp8Operand kWeight = kFp8Weight;
inline constexpr Fp8Operand kGradOutput = kFp8GradOutput;
inline constexpr int kNumOperands = kFp8NumOperands;

struct LinearState {
  Tensor amax_history;  // f32 [L, 3]
  Tensor scale;         // f32 [3]
  Tensor scale_inv;     // f32 [3]

  static LinearState create(std::int64_t history_len, Device device = Device::host);
  bool defined() const { return scale.defined(); }
  // The same state on `device` (a copy when it lives elsewhere).
  LinearState to(Device device) const;
  // The descriptor of operand `op` over FP8 `data`: its scale and scale_inv
  // slots, and (record) its amax slot in row 0 of the history.
  Fp8Tensor operand(Operand op, const Tensor& data, bool record) const;
  // Host reads for tests and tools (host tensors, stream synchronized).
  float scale_of(Operand op) const { return scale.data_as<float>()[op]; }
  // "<prefix>.fp8.amax_history", "<prefix>.fp8.scale" (for checkpoints).
  std::vector<std::pair<std::string, Tensor>> named_tensors(const std::string& prefix) const;
};

// New scales from the history, then the roll (above): ops::fp8_update_scales
// on the state's tensors, enqueued on ctx's compute stream.
void update_scales(ExecutionContext& ctx, const Recipe& recipe, LinearState& state);

}  // namespace ftrain::fp8
