#include "train/plan_fit.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <vector>

#include "base/error.hpp"

namespace ftrain {

namespace {

double planned_bytes(const RunPlan& p) { return static_cast<double>(p.state_bytes_per_rank + p.gathered_bytes_peak); }

std::string percent(double part, double whole) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f%%", 100.0 * part / whole);
  return buf;
}

}  // namespace

double parse_memory_size(const std::string& text, const std::string& option) {
  double value = 0;
  const char* begin = text.data();
  const char* end = begin + text.size();
  const auto [ptr, ec] = std::from_chars(begin, end, value);
  const std::string unit(ptr, end);
  double scale = 0;
  for (const auto& [name, factor] : std::vector<std::pair<std::string, double>>{
           {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"MiB", 1024.0 * 1024}, {"GiB", 1024.0 * 1024 * 1024},
           {"TiB", 1024.0 * 1024 * 1024 * 1024}}) {
    if (unit == name) scale = factor;
  }
  if (ec != std::errc() || ptr == begin || !std::isfinite(value) || value <= 0 || scale == 0)
    FT_USER_ERROR() << "command line: " << option << " expects a size with a unit, e.g. 80GB or 80GiB, got '" << text
                    << "'";
  return value * scale;
}

std::string plan_fit_report(Model& model, const RunConfig& c, const FsdpOptions& o, const RunPlan& plan,
                            int ranks_per_node, double device_bytes) {
  std::ostringstream r;
  const double need = planned_bytes(plan);
  const double left = device_bytes - need;
  r << "fit on " << human_bytes(device_bytes) << " per device: " << human_bytes(need)
    << " planned per rank (sharded state + gathered units, " << percent(need, device_bytes) << ")";
  if (left < 0) {
    r << ": DOES NOT FIT, " << human_bytes(-left) << " over before any activation\n";
  } else {
    r << ", " << human_bytes(left) << " left for activations and workspace"
      << (left < 0.15 * device_bytes ? ": tight" : "") << "\n";
  }
  if (left >= 0.15 * device_bytes) return r.str();

  // Suggestions, each re-planned with one change; a change is listed when it
  // fits (or, when the plan fits tightly, when it frees memory).
  const bool over = left < 0;
  std::vector<std::string> ideas;
  auto consider = [&](const std::string& change, const RunPlan& changed) {
    const double bytes = planned_bytes(changed);
    if (over ? bytes <= device_bytes : bytes < need)
      ideas.push_back(change + ": " + human_bytes(bytes) + " per rank (" + percent(bytes, device_bytes) + ")");
  };
  auto replan = [&](const FsdpOptions& changed, int world) {
    return make_plan(model, c, changed, world, std::min(ranks_per_node, world));
  };
  if (o.strategy != ShardingStrategy::full_shard) {
    FsdpOptions f = o;
    f.strategy = ShardingStrategy::full_shard;
    consider("fsdp full_shard (shards everything over all " + std::to_string(plan.world_size) + " ranks)",
             replan(f, plan.world_size));
  }
  if (o.param_dtype == DType::f32) {
    FsdpOptions f = o;
    f.param_dtype = DType::bf16;
    consider("fsdp ... param_dtype bf16 (gathered units in bf16)", replan(f, plan.world_size));
  }
  if (o.limit_all_gathers > 1) {
    FsdpOptions f = o;
    f.limit_all_gathers = 1;
    consider("fsdp ... limit_all_gathers 1 (less overlap)", replan(f, plan.world_size));
  }
  {
    // The fewest ranks (whole nodes) whose full_shard plan leaves a quarter
    // of the device for activations.
    FsdpOptions f = o;
    f.strategy = ShardingStrategy::full_shard;
    const int step = std::max(1, ranks_per_node);
    for (int world = step; world <= 65536; world += step) {
      if (world <= plan.world_size) continue;
      const RunPlan more = replan(f, world);
      if (planned_bytes(more) <= 0.75 * device_bytes) {
        consider("--ranks " + std::to_string(world) + " (" + std::to_string(world / step) + " node(s) of " +
                     std::to_string(step) + ") with full_shard",
                 more);
        break;
      }
    }
  }
  r << (over ? "to make it fit, one of:\n" : "to leave more room, one of:\n");
  for (const auto& idea : ideas) r << "  - " << idea << "\n";
  if (ideas.empty()) r << "  (no single change to strategy, dtype, gathers or rank count is enough)\n";
  // Activations are not in the numbers above; these shrink them.
  std::vector<std::string> activations;
  if (c.activation_checkpointing != deck::ActivationCheckpointing::on) activations.push_back("activation_checkpointing on");
  if (c.batch.micro_batch > 1)
    activations.push_back("batch micro " + std::to_string(c.batch.micro_batch / 2) + " accumulate " +
                          std::to_string(c.batch.grad_accum * 2) + " (same global batch)");
  if (c.precision != deck::Precision::fp8) activations.push_back("precision fp8 (FP8 copies of the linears' inputs)");
  if (!activations.empty()) {
    r << "activations (measured at run time, not above) shrink with:";
    for (std::size_t i = 0; i < activations.size(); ++i) r << (i == 0 ? " " : "; ") << activations[i];
    r << "\n";
  }
  return r.str();
}

}  // namespace ftrain
