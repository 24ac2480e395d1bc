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
// State of one linear layer (LinearState), as named tensors so that
// checkpoints can save and restore it exactly:
//   amax_history  f32 [L, 3]  columns: input, weight, grad_output; row 0 = the
//                             iteration in progress
//   scale         f32 [3]     the scales in use (start at 1, as TE)
// One iteration = one forward + backward of the layer: forward records the
// input and weight amaxes, backward records the output-gradient amax and then
// updates all three scales (update_scales). Between them the scales do not
// change, so backward uses exactly the forward's quantisation (and an
// activation-checkpointing recompute of the forward reproduces it).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.hpp"

namespace ftrain::fp8 {

enum class Format : std::uint8_t { hybrid, e4m3 };
enum class AmaxAlgo : std::uint8_t { max, most_recent };

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
bool parse_format(const std::string& text, Format& out);
bool parse_amax_algo(const std::string& text, AmaxAlgo& out);

// Largest finite value of an FP8 dtype (448 for E4M3, 57344 for E5M2).
float fp8_max(DType fp8);

// The TE scale rule above for one tensor.
float compute_scale(float amax, float previous_scale, float fp8_max, int margin);

enum Operand : int { kInput = 0, kWeight = 1, kGradOutput = 2, kNumOperands = 3 };

struct LinearState {
  Tensor amax_history;  // f32 [L, 3]
  Tensor scale;         // f32 [3]

  static LinearState create(std::int64_t history_len);
  bool defined() const { return scale.defined(); }
  float scale_of(Operand op) const { return scale.data_as<float>()[op]; }
  // history[0][op] = max(history[0][op], amax)
  void record(Operand op, float amax);
  // New scales from the histories, then roll them (see above).
  void update_scales(const Recipe& recipe);
  // "<prefix>.fp8.amax_history", "<prefix>.fp8.scale" (for checkpoints).
  std::vector<std::pair<std::string, Tensor>> named_tensors(const std::string& prefix) const;
};

}  // namespace ftrain::fp8
