// Learning-rate schedules, with Hugging Face transformers' semantics.
//
// learning_rate(schedule, base_lr, step, max_steps) is the rate the optimizer
// update of 0-based step `step` uses. It equals base_lr * lr_lambda(step) of
// transformers' get_{constant,linear,cosine}_schedule_with_warmup, because
// the HF Trainer steps its LambdaLR after each optimizer step: the first
// update uses lr_lambda(0), which is 0 when there is a warmup.
//
// With W warmup steps and N = max_steps:
//   W = ceil(warmup_ratio * N) if warmup_ratio is given (as
//       TrainingArguments.get_warmup_steps: math.ceil of the double product,
//       so 0.07 * 100 = 7.000000000000001 gives 8), else warmup_steps.
//   step < W:   lr = base_lr * step / max(1, W)         (all kinds)
//   constant:   lr = base_lr
//   linear:     f  = max(0, (N - step) / max(1, N - W))
//   cosine:     p  = min(1, (step - W) / max(1, N - W)),
//               f  = 0.5 * (1 + cos(pi * p))
//   linear, cosine: lr = min_lr + (base_lr - min_lr) * f
// With min_lr = 0 these are exactly HF's linear and cosine schedules; with
// min_lr > 0 the cosine one is get_cosine_with_min_lr_schedule_with_warmup
// (min_lr_rate = min_lr / base_lr); the linear one decays to min_lr the same
// way (HF has no linear-with-minimum). Warmup always starts from 0.
// Beyond N (never reached by a run of N steps) both stay at min_lr, where
// HF's cosine would climb back up.
#pragma once

#include <cstdint>
#include <optional>

namespace ftrain::optim {

enum class ScheduleKind : std::uint8_t { constant, linear, cosine };

struct Schedule {
  ScheduleKind kind = ScheduleKind::constant;
  std::int64_t warmup_steps = 0;
  std::optional<double> warmup_ratio;  // replaces warmup_steps when set (W above)
  double min_lr = 0.0;
};

// W above. UserError for a negative count or a ratio outside [0, 1].
std::int64_t warmup_steps(const Schedule& schedule, std::int64_t max_steps);

// Checks the schedule against base_lr once (UserError naming "schedule").
void validate_schedule(const Schedule& schedule, double base_lr, std::int64_t max_steps);

double learning_rate(const Schedule& schedule, double base_lr, std::int64_t step, std::int64_t max_steps);

}  // namespace ftrain::optim
