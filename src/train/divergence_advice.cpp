#include "train/divergence_advice.hpp"

#include <algorithm>
#include <sstream>

#include "optim/lr_schedule.hpp"
#include "train/run_settings.hpp"

namespace ftrain {

std::string divergence_advice(const RunConfig& c, std::int64_t step) {
  std::ostringstream m;
  const double lr = optim::learning_rate(schedule_of(c), c.optimizer.lr, std::max<std::int64_t>(0, step - 1), c.max_steps);
  const bool clipping = c.clip_grad_norm > 0;
  if (!(lr > 0)) {
    // No update moved the weights: what diverged came in with them or the data.
    m << "The learning rate of step " << step << " is 0 (schedule " << c.schedule.kind
      << "), so no update moved the weights: the initial weights";
    if (c.init.kind != deck::InitKind::random)
      m << " (" << c.init.where.str() << ": init " << c.init.kind << " " << c.init.path << ")";
    m << ", the data or the model's arithmetic (precision " << c.precision << ") produce the non-finite value.";
    return m.str();
  }
  m << "Lower the learning rate (lr " << c.optimizer.lr << "; " << lr << " at step " << step << ")";
  if (clipping)
    m << " or lengthen the warm-up; clipping is on (clip_grad_norm " << c.clip_grad_norm << ").";
  else
    m << " or set clip_grad_norm (it is off).";
  return m.str();
}

}  // namespace ftrain
