#include "train/plan_budget.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "base/error.hpp"
#include "train/plan_fit.hpp"

namespace ftrain {

namespace {

std::string seconds_text(double s) {
  char buf[64];
  if (s < 1) std::snprintf(buf, sizeof buf, "%.2g s", s);
  else if (s < 90) std::snprintf(buf, sizeof buf, "%.1f s", s);
  else if (s < 5400) std::snprintf(buf, sizeof buf, "%.0f s (%.1f min)", s, s / 60);
  else std::snprintf(buf, sizeof buf, "%.0f s (%.1f h)", s, s / 3600);
  return buf;
}

std::string rate_text(double bytes_per_s) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3g GB/s", bytes_per_s / 1e9);
  return buf;
}

// Elements one rank checkpoints: its shard of every unit's slice, or under
// LoRA of every unit's adapters (the engine's rule, counted by make_plan).
std::int64_t checkpointed_shard_numel(const RunPlan& plan) {
  std::int64_t total = 0;
  for (const UnitPlan& u : plan.units) total += plan.lora ? u.adapter_shard_numel : u.shard_numel;
  return total;
}

}  // namespace

CheckpointSize checkpoint_size(const RunConfig& c, const RunPlan& plan) {
  CheckpointSize size;
  size.per_rank = 12 * checkpointed_shard_numel(plan);  // f32 master, exp_avg, exp_avg_sq
  if (c.checkpoint.consolidated) size.consolidated = 4 * plan.parameters;
  size.total = size.per_rank * plan.world_size + size.consolidated;
  return size;
}

double parse_bandwidth(const std::string& text, const std::string& option) {
  const auto slash = text.rfind("/s");
  if (slash == std::string::npos || slash + 2 != text.size())
    FT_USER_ERROR() << "command line: " << option << " expects a rate such as 2GB/s or 800MB/s, got '" << text << "'";
  return parse_memory_size(text.substr(0, slash), option);
}

std::string plan_budget_report(Model& /*model*/, const RunConfig& c, const FsdpOptions& o, const RunPlan& plan,
                               int ranks_per_node, const PlanBudgetInputs& in) {
  std::ostringstream r;
  const CheckpointSize size = checkpoint_size(c, plan);
  const int nodes = std::max(1, plan.world_size / std::max(1, ranks_per_node));
  double save_s = -1;
  if (c.checkpoint.dir.empty()) {
    r << "checkpoint: none (no checkpoint dir): a stop signal ends the run after its step, saving nothing\n";
  } else {
    r << "checkpoint: " << human_bytes(static_cast<double>(size.per_rank)) << " (" << size.per_rank
      << " bytes) per rank, "
      << human_bytes(static_cast<double>(size.total)) << " in all (" << plan.world_size << " rank file(s) of "
      << (o.lora.enabled ? "the LoRA adapters' " : "") << "f32 master + AdamW m, v per shard element"
      << (size.consolidated > 0 ? " + model.h5, every parameter in f32 (consolidated on)" : "")
      << "; HDF5 metadata on top)\n";
    const double per_node = static_cast<double>(size.per_rank) * std::min(ranks_per_node, plan.world_size) +
                            static_cast<double>(size.consolidated) / nodes;
    save_s = per_node / in.fs_bytes_per_s_per_node;
    r << "  save time ~" << seconds_text(save_s) << ": " << human_bytes(per_node) << " per node at "
      << rate_text(in.fs_bytes_per_s_per_node) << " per node ("
      << (in.fs_bandwidth_stated ? "--fs-bandwidth" : "assumed; --fs-bandwidth gives your file system's") << ", "
      << rate_text(in.fs_bytes_per_s_per_node * nodes) << " over " << nodes << " node(s))\n";
  }
  double step_s = -1;
  if (in.peak_flops_per_rank > 0 && plan.flops_per_step > 0) {
    step_s = plan.flops_per_step / (plan.world_size * in.peak_flops_per_rank * in.mfu);
    char flops[32];
    std::snprintf(flops, sizeof flops, "%.4g", plan.flops_per_step);
    r << "step time ~" << seconds_text(step_s) << ": " << flops << " FLOPs over " << plan.world_size << " x "
      << in.peak_flops_per_rank / 1e12 << " TFLOP/s (" << in.peak_source << ") at " << 100 * in.mfu << "% MFU ("
      << (in.mfu_stated ? "--mfu" : "assumed; --mfu changes it") << ")\n";
  } else {
    r << "step time: not estimated (no peak for the target device: give --gpu NAME or the deck's peak_tflops)\n";
  }
  if (!in.window) {
    r << "stop window: unknown (--job-script FILE reads `#SBATCH --signal=B:USR1@SECONDS`; a job without a warning "
         "signal is killed mid-step and resumes from its last periodic checkpoint)\n";
    return r.str();
  }
  r << "stop window: " << seconds_text(in.window->seconds) << " (" << in.window->source << ")";
  if (save_s < 0 || step_s < 0) {
    r << "; " << (save_s < 0 ? "nothing is saved at a stop" : "the step time is unknown") << "\n";
    return r.str();
  }
  const double need = step_s + save_s;
  r << "; a step plus a save needs ~" << seconds_text(need) << "\n";
  if (need > in.window->seconds)
    r << "warning: the stop window (" << seconds_text(in.window->seconds) << ") is shorter than a step plus a save (~"
      << seconds_text(need) << "): a stop signal would be followed by the kill before the checkpoint is committed, "
      << "and the job resumes from its last periodic checkpoint. Give the signal more lead time (e.g. "
      << "#SBATCH --signal=B:USR1@" << static_cast<long>(need * 1.5 + 59) / 60 * 60 << "), or write faster (more "
      << "nodes for the same state, a faster file system: --fs-bandwidth states yours)\n";
  return r.str();
}

}  // namespace ftrain
