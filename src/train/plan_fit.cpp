#include "train/plan_fit.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <functional>
#include <sstream>
#include <vector>

#include "base/error.hpp"
#include "train/parallel_layout.hpp"
#include "train/plan_activations.hpp"

namespace ftrain {

namespace {

// What the plan puts in device memory: under offload, only the part of the
// sharded state the device keeps (RunPlan::device_state_bytes_per_rank).
double planned_bytes(const RunPlan& p) {
  return static_cast<double>(p.device_state_bytes_per_rank + p.gathered_bytes_peak);
}

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

GpuProcessAllowance gpu_process_allowance(const FsdpOptions& o, int world_size) {
  constexpr double kGiB = 1024.0 * 1024 * 1024;
  // Measured on an H100 80GB HBM3 (CUDA 12, CUDA_MODULE_LOADING=LAZY, as
  // nvidia-smi reports the process): the context 518 MiB, with a cuBLASLt
  // handle and a 32 MiB workspace 552 MiB, with a cuDNN handle 562 MiB;
  // ftrain's own kernel modules and the allocator's pool slack come on top.
  // NCCL keeps per-channel send/receive buffers (NCCL_BUFFSIZE 4 MiB x
  // channels x peers of its rings and trees): a few hundred MiB.
  GpuProcessAllowance a;
  a.context = 1.0 * kGiB;
  a.nccl = world_size > 1 && o.device_comm == DeviceComm::nccl ? 0.5 * kGiB : 0.0;
  return a;
}

namespace {

// Everything a rank of `plan` needs besides what changes with the plan.
struct FitTerms {
  double activations = 0;  // as the deck sets activation_checkpointing (0 when unknown)
  GpuProcessAllowance allowance;
  double fixed() const { return activations + allowance.total(); }
};

constexpr double kTight = 0.15;  // less than this fraction left: "tight"

const char* offload_word(Offload o) {
  switch (o) {
    case Offload::none: return "none";
    case Offload::optimizer: return "optimizer";
    case Offload::all: return "all";
  }
  return "?";
}

std::string verdict_line(const RunPlan& plan, const FitTerms& t, const ActivationEstimate& a, double device_bytes) {
  std::ostringstream r;
  const double planned = planned_bytes(plan), need = planned + t.fixed(), left = device_bytes - need;
  r << "fit on " << human_bytes(device_bytes) << " per device: " << human_bytes(planned) << " sharded state"
    << (plan.offload != Offload::none ? std::string(" (the device's part under offload ") + offload_word(plan.offload) + ")"
                                      : std::string())
    << " + gathered units";
  if (a.known) r << " + " << human_bytes(t.activations) << " activations (estimate)";
  r << " + " << human_bytes(t.allowance.context) << " CUDA context and workspaces";
  if (t.allowance.nccl > 0) r << " + " << human_bytes(t.allowance.nccl) << " NCCL buffers";
  r << " = " << human_bytes(need) << " per rank (" << percent(need, device_bytes) << ")";
  if (left < 0) {
    r << ": DOES NOT FIT, " << human_bytes(-left) << " over\n";
  } else {
    r << ", " << human_bytes(left) << " left for kernel temporaries and fragmentation"
      << (left < kTight * device_bytes ? ": tight" : "") << "\n";
  }
  if (!a.known) r << "  (no activation estimate for this model: they come on top)\n";
  return r.str();
}

// The fewest ranks (whole nodes) whose full_shard plan passes the verdict's
// own test: fits when over, not tight when tight.
void suggest_rank_count(const std::function<RunPlan(const FsdpOptions&, int)>& replan, const FsdpOptions& o,
                        const RunPlan& plan, int ranks_per_node, const FitTerms& t, double device_bytes, bool over,
                        const std::function<void(const std::string&, const RunPlan&)>& consider) {
  FsdpOptions f = o;
  f.strategy = ShardingStrategy::full_shard;
  const int step = std::max(1, ranks_per_node);
  const double limit = over ? device_bytes : (1.0 - kTight) * device_bytes;
  for (int world = step; world <= 65536; world += step) {
    if (world <= plan.world_size || world % (plan.tensor * plan.context) != 0) continue;
    const RunPlan more = replan(f, world);
    // The NCCL allowance is there from 2 ranks on; the plan above had them.
    if (planned_bytes(more) + t.activations + gpu_process_allowance(f, world).total() <= limit) {
      consider("--ranks " + std::to_string(world) + " (" + std::to_string(world / step) + " node(s) of " +
                   std::to_string(step) + ") with full_shard",
               more);
      return;
    }
  }
}

// The smallest tensor size above the deck's that the model's layout takes,
// that keeps tensor groups inside a node and that `consider` lists (it fits),
// re-planned with the activations it leaves (the split matrices and the
// activations both fall by T).
void suggest_tensor_size(Model& model, const RunConfig& c, const FsdpOptions& o, const RunPlan& plan, int ranks_per_node,
                         const std::function<bool(const std::string&, const RunPlan&, double)>& consider) {
  for (std::int64_t tensor = c.parallel.tensor * 2; tensor <= ranks_per_node; tensor *= 2) {
    if (ranks_per_node % tensor != 0 || plan.world_size % (tensor * c.parallel.context) != 0) continue;
    if (!parallel_layout_problems(model.architecture(), model.config(), tensor, c.parallel.context, c.batch.seq_len)
             .empty())
      continue;
    RunConfig changed = c;
    changed.parallel.tensor = tensor;
    const ActivationEstimate a = estimate_activations(model, changed);
    const std::string change = "parallel tensor " + std::to_string(tensor) + " (each block's matrices split over " +
                               std::to_string(tensor) + " ranks of a node, FSDP over " +
                               std::to_string(plan.world_size / tensor) + " ranks)";
    const RunPlan split = make_plan(model, changed, o, plan.world_size, std::min(ranks_per_node, plan.world_size));
    const bool listed = consider(change, split, a.known ? a.planned_bytes : 0.0);
    if (listed) return;
  }
}

// The changes that shrink the activations, with the estimate for each.
std::string activation_advice(Model& model, const RunConfig& c, const ActivationEstimate& a) {
  std::vector<std::string> ideas;
  auto with = [&](const std::string& change, const RunConfig& changed) {
    const ActivationEstimate e = estimate_activations(model, changed);
    ideas.push_back(change + (e.known ? " (" + human_bytes(e.planned_bytes) + ")" : ""));
  };
  if (c.activation_checkpointing != deck::ActivationCheckpointing::on) {
    RunConfig changed = c;
    changed.activation_checkpointing = deck::ActivationCheckpointing::on;
    with("activation_checkpointing on", changed);
  }
  if (c.batch.micro_batch > 1) {
    RunConfig changed = c;
    changed.batch.micro_batch = c.batch.micro_batch / 2;
    with("batch micro " + std::to_string(c.batch.micro_batch / 2) + " accumulate " +
             std::to_string(c.batch.grad_accum * 2) + " (same global batch)",
         changed);
  }
  if (c.precision != deck::Precision::fp8) ideas.push_back("precision fp8 (FP8 copies of the linears' inputs)");
  // Long sequences: each context rank holds seq_len / C of the tokens.
  if (const std::int64_t context = c.parallel.context * 2;
      parallel_layout_problems(model.architecture(), model.config(), c.parallel.tensor, context, c.batch.seq_len)
          .empty()) {
    RunConfig changed = c;
    changed.parallel.context = context;
    with("parallel context " + std::to_string(context) + " (needs " + std::to_string(c.parallel.tensor * context) +
             " ranks per data-parallel replica)",
         changed);
  }
  if (ideas.empty()) return "";
  std::string line = "activations (" + (a.known ? human_bytes(a.planned_bytes) + " estimated" : std::string("not estimated")) +
                     ") shrink with:";
  for (std::size_t i = 0; i < ideas.size(); ++i) line += (i == 0 ? " " : "; ") + ideas[i];
  return line + "\n";
}

// Each offload setting re-planned: device memory per rank against the
// device's, host memory per rank and per node against --host-memory, and
// the settings that fit both. Host bytes are the offloaded state alone
// (pinned buffers of the same size on a GPU); the process, the data loader
// and the MPI buffers come on top.
std::string offload_table(const std::function<RunPlan(const FsdpOptions&, int)>& replan, const FsdpOptions& o,
                          const RunPlan& plan, int ranks_per_node, const FitTerms& t, double device_bytes,
                          double host_bytes_per_node) {
  std::ostringstream r;
  const int per_node = std::max(1, std::min(ranks_per_node, plan.world_size));
  r << "offload (fsdp ... offload) on " << human_bytes(device_bytes) << " per device and "
    << (host_bytes_per_node > 0 ? human_bytes(host_bytes_per_node) + " of host memory per node (--host-memory)"
                                : std::string("host memory not checked (--host-memory S gives a node's)"))
    << ", " << per_node << " rank(s) per node:\n";
  std::vector<std::string> fitting, failing;
  for (const Offload setting : {Offload::none, Offload::optimizer, Offload::all}) {
    FsdpOptions f = o;
    f.offload = setting;
    const RunPlan changed = setting == o.offload ? plan : replan(f, plan.world_size);
    const double device = planned_bytes(changed) + t.fixed();
    const double host_rank = static_cast<double>(changed.host_state_bytes_per_rank), host_node = host_rank * per_node;
    const bool device_fits = device <= device_bytes;
    const bool host_fits = host_bytes_per_node <= 0 || host_node <= host_bytes_per_node;
    char name[16];
    std::snprintf(name, sizeof name, "%-10s", offload_word(setting));
    r << "  " << name << " device " << human_bytes(device) << " per rank (" << percent(device, device_bytes) << "): "
      << (!device_fits ? "DOES NOT FIT" : device_bytes - device < kTight * device_bytes ? "fits, tight" : "fits")
      << "; host ";
    if (host_rank <= 0) {
      r << "no offloaded state";
    } else {
      r << human_bytes(host_rank) << " per rank, " << human_bytes(host_node) << " per node";
      if (host_bytes_per_node > 0) r << (host_fits ? ": fits" : ": DOES NOT FIT");
    }
    r << (setting == o.offload ? "   <- this deck" : "") << "\n";
    (device_fits && host_fits ? fitting : failing).push_back(offload_word(setting));
  }
  auto joined = [](const std::vector<std::string>& words) {
    std::string text;
    for (std::size_t i = 0; i < words.size(); ++i) text += (i == 0 ? "" : ", ") + words[i];
    return text;
  };
  if (fitting.empty()) r << "  fits with no offload setting";
  else r << "  fits with offload " << joined(fitting);
  if (!failing.empty()) r << "; does not fit with offload " << joined(failing);
  r << (host_bytes_per_node > 0 ? "" : " (device memory only)") << "\n";
  return r.str();
}

}  // namespace

std::string plan_fit_report(Model& model, const RunConfig& c, const FsdpOptions& o, const RunPlan& plan,
                            int ranks_per_node, double device_bytes, double host_bytes_per_node) {
  const ActivationEstimate a = estimate_activations(model, c);
  FitTerms t;
  t.activations = a.known ? a.planned_bytes : 0.0;
  t.allowance = gpu_process_allowance(o, plan.world_size);
  std::ostringstream r;
  r << verdict_line(plan, t, a, device_bytes);
  auto replan = [&](const FsdpOptions& changed, int world) {
    return make_plan(model, c, changed, world, std::min(ranks_per_node, world));
  };
  r << offload_table(replan, o, plan, ranks_per_node, t, device_bytes, host_bytes_per_node);
  const double need = planned_bytes(plan) + t.fixed(), left = device_bytes - need;
  if (left >= kTight * device_bytes) return r.str();

  // Suggestions, each re-planned with one change; a change is listed when it
  // fits (or, when the plan fits tightly, when it frees memory).
  const bool over = left < 0;
  std::vector<std::string> ideas;
  auto consider = [&](const std::string& change, const RunPlan& changed, double activations) {
    const double bytes = planned_bytes(changed) + activations + gpu_process_allowance(o, changed.world_size).total();
    if (!(over ? bytes <= device_bytes : bytes < need)) return false;
    ideas.push_back(change + ": " + human_bytes(bytes) + " per rank (" + percent(bytes, device_bytes) + ")");
    return true;
  };
  if (o.strategy != ShardingStrategy::full_shard) {
    FsdpOptions f = o;
    f.strategy = ShardingStrategy::full_shard;
    consider("fsdp full_shard (shards everything over all " + std::to_string(plan.fsdp_group_size) + " ranks)",
             replan(f, plan.world_size), t.activations);
  }
  if (o.param_dtype == DType::f32) {
    FsdpOptions f = o;
    f.param_dtype = DType::bf16;
    consider("fsdp ... param_dtype bf16 (gathered units in bf16)", replan(f, plan.world_size), t.activations);
  }
  if (o.limit_all_gathers > 1) {
    FsdpOptions f = o;
    f.limit_all_gathers = 1;
    consider("fsdp ... limit_all_gathers 1 (less overlap)", replan(f, plan.world_size), t.activations);
  }
  if (o.offload == Offload::none) {
    FsdpOptions f = o;
    f.offload = Offload::optimizer;
    const RunPlan offloaded = replan(f, plan.world_size);
    consider("fsdp ... offload optimizer (f32 state and AdamW in host memory: " +
                 human_bytes(static_cast<double>(offloaded.host_state_bytes_per_rank)) + " per rank)",
             offloaded, t.activations);
  }
  suggest_tensor_size(model, c, o, plan, ranks_per_node, consider);
  suggest_rank_count(replan, o, plan, ranks_per_node, t, device_bytes, over,
                     [&](const std::string& change, const RunPlan& changed) { consider(change, changed, t.activations); });
  r << (over ? "to make it fit, one of:\n" : "to leave more room, one of:\n");
  for (const auto& idea : ideas) r << "  - " << idea << "\n";
  if (ideas.empty()) r << "  (no single change to strategy, dtype, gathers or rank count is enough)\n";
  r << activation_advice(model, c, a);
  return r.str();
}

}  // namespace ftrain
