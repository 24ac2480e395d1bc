// A run's health, as the stop messages say it: a diverged step (non-finite
// gradient norm), a loss beyond f32 range with finite gradients, a step with
// no trained target, and a stated peak the run itself disproves. Each
// message names the step, what was and was not written, and the fixes that
// apply to this deck (train/divergence_advice.hpp).
#pragma once

#include <cstdint>
#include <string>

#include "deck/config.hpp"

namespace ftrain {

// Step `step` (1-based, the first diverged one) had gradient norm `norm`
// and loss `loss`; `first_non_finite` is its first non-finite gradient in
// backward order ("" = none: the loss itself).
std::string divergence_message(const RunConfig& c, std::int64_t step, double norm, double loss,
                               const std::string& first_non_finite);

// Finite gradients but a non-finite loss (a loss sum beyond f32 range) at
// a log step: the update was applied (it is finite); the run stops before
// logging or saving it.
std::string non_finite_loss_message(const RunConfig& c, std::int64_t step, double loss, double norm);

// Masked instruction data can leave a step with nothing to learn (every
// response past seq_len): it would log loss 0 and look like training.
std::string untrained_step_message(const RunConfig& c, std::int64_t step, std::int64_t global_batch);

// The run reached more FLOP/s per rank than the stated peak: the peak is
// wrong, so MFU is shown as n/a.
std::string peak_disproved_warning(double achieved_per_rank, double peak_flops_per_second,
                                   const std::string& peak_description);

}  // namespace ftrain
