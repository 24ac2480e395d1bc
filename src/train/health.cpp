#include "train/health.hpp"

#include <sstream>

#include "train/divergence_advice.hpp"

namespace ftrain {

std::string divergence_message(const RunConfig& c, std::int64_t step, double norm, double loss,
                               const std::string& first_non_finite) {
  std::ostringstream m;
  m << "step " << step << " diverged: ";
  m << "the gradient norm is " << norm << " (loss " << loss << ")";
  m << "; first non-finite gradient (backward order): "
    << (first_non_finite.empty() ? "none (the loss itself)" : first_non_finite)
    << ". The update was not applied and no checkpoint was written or pruned";
  if (!c.checkpoint.dir.empty()) m << " (`resume auto` continues from the newest one in " << c.checkpoint.dir << ")";
  m << ". " << divergence_advice(c, step);
  return m.str();
}

std::string non_finite_loss_message(const RunConfig& c, std::int64_t step, double loss, double norm) {
  return "step " + std::to_string(step) + ": the loss is " + std::to_string(loss) + " with a finite gradient norm " +
         std::to_string(norm) + "; no checkpoint was written. " + divergence_advice(c, step);
}

std::string untrained_step_message(const RunConfig& c, std::int64_t step, std::int64_t global_batch) {
  return "step " + std::to_string(step) + " has no trained target token: every target of its " +
         std::to_string(global_batch) + " samples is masked (prompt or padding) in " + c.data.path + " (" +
         c.data.where.str() + "). Responses cut off by seq_len " + std::to_string(c.batch.seq_len) +
         " train nothing: `ftrain --check` counts them; raise seq_len, use packing on, or add "
         "`allow_untrained_steps on` to the data line to run such steps";
}

std::string peak_disproved_warning(double achieved_per_rank, double peak_flops_per_second,
                                   const std::string& peak_description) {
  std::ostringstream w;
  w << "warning: this run reaches " << achieved_per_rank / 1e9 << " GFLOP/s per rank, more than the stated peak "
    << peak_flops_per_second / 1e9 << " (" << peak_description
    << "): the peak is wrong, so MFU is shown as n/a; state the right one with peak_tflops or FTRAIN_PEAK_TFLOPS\n";
  return w.str();
}

}  // namespace ftrain
