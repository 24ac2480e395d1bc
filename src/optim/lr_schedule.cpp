// Learning-rate schedules; the formulas (and why they match HF) are in the header.
#include "optim/lr_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "base/error.hpp"

namespace ftrain::optim {

std::int64_t warmup_steps(const Schedule& schedule, std::int64_t max_steps) {
  if (schedule.warmup_ratio.has_value()) {
    const double ratio = *schedule.warmup_ratio;
    if (!(ratio >= 0.0 && ratio <= 1.0))
      FT_USER_ERROR() << "schedule: warmup_ratio must be in [0, 1], not " << ratio;
    return static_cast<std::int64_t>(std::ceil(static_cast<double>(max_steps) * ratio));
  }
  if (schedule.warmup_steps < 0)
    FT_USER_ERROR() << "schedule: warmup_steps must not be negative, not " << schedule.warmup_steps;
  return schedule.warmup_steps;
}

void validate_schedule(const Schedule& schedule, double base_lr, std::int64_t max_steps) {
  if (!(base_lr >= 0.0) || !std::isfinite(base_lr))
    FT_USER_ERROR() << "schedule: the learning rate must be a non-negative number, not " << base_lr;
  if (!(schedule.min_lr >= 0.0 && schedule.min_lr <= base_lr))
    FT_USER_ERROR() << "schedule: min_lr " << schedule.min_lr << " must be in [0, lr = " << base_lr << "]";
  if (max_steps < 1) FT_USER_ERROR() << "schedule: max_steps must be at least 1, not " << max_steps;
  (void)warmup_steps(schedule, max_steps);
}

double learning_rate(const Schedule& schedule, double base_lr, std::int64_t step, std::int64_t max_steps) {
  validate_schedule(schedule, base_lr, max_steps);
  FT_CHECK(step >= 0) << "optimizer step " << step;
  const std::int64_t warmup = warmup_steps(schedule, max_steps);
  if (step < warmup) return base_lr * static_cast<double>(step) / static_cast<double>(std::max<std::int64_t>(1, warmup));
  if (schedule.kind == ScheduleKind::constant) return base_lr;

  const auto decay_steps = static_cast<double>(std::max<std::int64_t>(1, max_steps - warmup));
  double factor = 0.0;
  if (schedule.kind == ScheduleKind::linear) {
    factor = std::max(0.0, static_cast<double>(max_steps - step) / decay_steps);
  } else {
    const double progress = std::min(1.0, static_cast<double>(step - warmup) / decay_steps);
    factor = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  }
  return schedule.min_lr + (base_lr - schedule.min_lr) * factor;
}

}  // namespace ftrain::optim
