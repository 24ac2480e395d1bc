#include "train/run_header.hpp"

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "comm/collective_watchdog.hpp"
#include "fsdp/fp8_all_gather.hpp"
#include "ftrain_build_paths.hpp"
#include "kernels/backend_registry.hpp"
#include "kernels/blas_threads.hpp"
#include "kernels/host/gemm.hpp"
#include "kernels/host_isa.hpp"
#include "optim/lr_schedule.hpp"
#include "runtime/attention_backend.hpp"
#include "runtime/execution_context.hpp"
#include "train/gpu_sized_deck.hpp"
#include "train/plan_activations.hpp"
#include "train/plan_fit.hpp"
#include "train/run_settings.hpp"

namespace ftrain {

namespace {

// The run header's device part: where the engine runs and why.
std::string device_header(const DeviceChoice& choice, AttentionBackend attention_backend, int blas_threads) {
  std::ostringstream h;
  if (choice.device == Device::host) {
    h << "host [" << choice.reason << "; " << describe_attention_choice(attention_backend, Device::host)
      << "] (Kokkos; " << blas_kernel_description() << ", " << blas_threads
      << " thread(s) per rank)";
  } else if (choice.planned_without_gpu) {
    h << device_name(choice.device) << " [" << choice.reason << "; "
      << describe_attention_choice(attention_backend, choice.device) << "] (ops backend: not loaded, planned only)";
  } else {
    const OpTable* table = find_backend(choice.device);
    h << device_name(choice.device) << " [" << choice.reason << "; "
      << describe_attention_choice(attention_backend, choice.device) << "] (ops backend: " << (table != nullptr && table->name != nullptr ? table->name : "?") << ")";
  }
  return h.str();
}

// Which host stream mode runs and what chose it (deck `host_streams`, else
// FTRAIN_HOST_STREAM, else the default), for the run header.
std::string describe_host_streams(const RunConfig& c) {
  std::string mode, why;
  if (!c.host_streams_where.file.empty()) {
    mode = std::string(deck::word(c.host_streams));
    why = c.host_streams_where.str() + ": host_streams " + mode;
    const char* env = std::getenv("FTRAIN_HOST_STREAM");
    if (env != nullptr && *env != '\0' && std::string(env) != mode)
      why += std::string("; FTRAIN_HOST_STREAM=") + env + " is overridden by the deck";
  } else {
    const bool async = ExecutionOptions::from_environment().asynchronous;
    mode = async ? "async" : "sync";
    why = std::getenv("FTRAIN_HOST_STREAM") != nullptr && *std::getenv("FTRAIN_HOST_STREAM") != '\0'
              ? std::string("FTRAIN_HOST_STREAM=") + std::getenv("FTRAIN_HOST_STREAM")
              : "default; `host_streams async` or FTRAIN_HOST_STREAM=async changes it";
  }
  const char* what = mode == "async" ? "compute and communication streams on worker threads, events are real "
                                       "completion points"
                                     : "ops run inline on the rank's thread";
  return mode + " (" + why + "): " + what;
}

// The nodes (MPI's shared-memory groups, labelled by host name) and, under
// hybrid_shard, which ranks shard together and which replicate: what a
// multi-node launch placed where, before any collective depends on it. With
// parallel tensor T each tensor rank's fsdp group (its data x context ranks,
// every T-th rank) is split into the plan's shard groups: tensor rank 0's are
// listed, tensor rank t's are the same ranks + t.
std::string describe_nodes(const NodeLayout& nodes, const FsdpOptions& fsdp, const RunPlan& plan) {
  std::ostringstream h;
  h << "nodes: " << nodes.node_count() << (nodes.planned ? " planned" : "") << " (" << nodes.describe() << ")\n";
  if (fsdp.strategy != ShardingStrategy::hybrid_shard) return h.str();
  const int size = plan.shard_group_size, tensor = std::max(1, plan.tensor), fsdp_ranks = plan.fsdp_group_size;
  if (size < 1 || fsdp_ranks % size != 0 || fsdp_ranks * tensor != plan.world_size ||
      static_cast<int>(nodes.node_of_rank.size()) != plan.world_size)
    return h.str();  // refused at start-up with its reason
  h << "hybrid_shard: shard groups " << (tensor > 1 ? "of tensor rank 0 " : "")
    << describe_rank_groups(fsdp_ranks, size, false, tensor);
  // Shard groups (of every tensor rank) whose all-gathers and reduce-scatters cross the network.
  int spanning = 0, groups = 0;
  for (int t = 0; t < tensor; ++t)
    for (int g = 0; g * size < fsdp_ranks; ++g) {
      const auto node = [&](int k) {
        return nodes.node_of_rank[static_cast<std::size_t>((g * size + k) * tensor + t)];
      };
      bool spans = false;
      for (int k = 1; k < size; ++k) spans = spans || node(k) != node(0);
      spanning += spans ? 1 : 0;
      ++groups;
    }
  if (spanning == 0)
    h << " (each within one node)";
  else
    h << " (" << spanning
      << (tensor > 1 ? " of the " + std::to_string(groups) + " shard groups of all tensor ranks" : "")
      << " span nodes: their all-gathers and reduce-scatters cross the network)";
  h << ", replicas " << describe_rank_groups(fsdp_ranks, size, true, tensor);
  if (tensor > 1)
    h << "; tensor rank t's are these ranks + t (parallel tensor " << tensor
      << ": each tensor rank's fsdp group of " << fsdp_ranks << " ranks shards and replicates its own slices)";
  h << "\n";
  return h.str();
}

// Where the run computes, on what threads and kernels, and how it communicates.
void write_host_part(std::ostream& h, const RunHeaderFacts& f) {
  const RunConfig& c = f.config;
  h << "ftrain " << FTRAIN_VERSION_STRING << " | " << f.plan.world_size << " rank(s), "
    << (f.nodes != nullptr ? f.nodes->ranks_per_node_text() : std::to_string(f.ranks_per_node)) << " per node" << (f.planned_ranks ? " (planned with --ranks, not started)" : "") << " | device: " << device_header(f.device_choice, f.fsdp.attention_backend, f.blas_threads) << " | peak " << f.peak.flops_per_second / 1e9 << " GFLOP/s per rank: "
    << f.peak.description << "\n";
  if (f.nodes != nullptr) h << describe_nodes(*f.nodes, f.fsdp, f.plan);
  h << "host GEMM: " << host::gemm::describe() << "\n";
  h << "host threads: " << f.blas_threads << " per rank, " << f.cpu_binding_text << "\n";
  if (!f.cpu_binding_warning.empty()) h << "warning: " << f.cpu_binding_warning << "\n";
  h << "host kernels: built for " << host_isa::describe() << " (FTRAIN_HOST_ISA: every choice computes the same bits)\n";
  // What the results depend on (share/doc/reproducibility.md): the GEMM
  // libraries pick their kernels for the CPU, and those round differently.
  h << "reproducibility: bit for bit when rerun with this build and these GEMM kernels; another CPU's kernels "
       "differ in the last bits (share/doc/reproducibility.md)\n";
  // Which communicator moves the buffers, never left implicit (device_comm).
  if (f.device_choice.device == Device::host)
    h << "comm: MPI on host buffers [device_comm " << c.device_comm << ": no effect on the host backend]";
  else if (f.fsdp.device_comm == DeviceComm::mpi)
    h << "comm: device buffers staged through host memory over MPI [device_comm mpi]";
  else
    h << "comm: NCCL on device buffers [device_comm nccl]";
  h << " | collective_timeout "
    << describe_timeout(c.collective_timeout_seconds) << "\n";
  h << "host streams: " << describe_host_streams(c) << "\n";
}

// The model, FSDP, training and LoRA settings in effect. Effective values,
// defaults included: what the deck left out is where ftrain and Hugging Face
// differ (beta2, clipping, schedule; deck.md).
void write_settings_part(std::ostream& h, const RunHeaderFacts& f) {
  const RunConfig& c = f.config;
  h << "model: " << c.model.name << " (" << (c.model.preset.empty() ? "default preset" : c.model.preset) << ")";
  for (const auto& [k, v] : f.model.config()) h << " " << k << "=" << v;
  h << "\n";
  h << describe_settings(c, f.fsdp, f.plan.shard_group_size);  // inside the fsdp group under parallel tensor T
  if (c.lora.enabled) {
    const auto& l = f.fsdp.lora;
    h << "lora: rank " << l.rank << " alpha " << l.alpha << " (scale " << l.scale() << (l.rslora ? ", rslora" : "")
      << ") dropout " << l.dropout << " targets " << l.targets_text() << " init "
      << c.lora.init << "; trainable parameters "
      << f.plan.trainable_parameters << " of " << f.plan.parameters + f.plan.trainable_parameters
      << " (base frozen in " << dtype_name(frozen_base_dtype(f.fsdp)) << ": no gradients, no optimizer state)\n";
  }
}

}  // namespace

std::string run_header(const RunHeaderFacts& f) {
  const RunConfig& c = f.config;
  std::ostringstream h;
  write_host_part(h, f);
  h << "deck: " << c.deck_path << "\n";
  for (const auto& w : c.warnings) h << "warning: " << w << "\n";
  if (!f.check_only) {
    h << "progress line: " << (f.progress_line.show ? "on" : "off") << " (" << f.progress_line.reason
      << "; `progress auto|on|off` or FTRAIN_PROGRESS changes it)\n";
    h << stop_instructions(process_environment, !c.checkpoint.dir.empty()) << "\n";
  }
  write_settings_part(h, f);
  h << format_plan(f.plan) << format_activation_estimate(estimate_activations(f.model, c), c);
  // A planned cluster's nodes are not this one: only its own rules apply.
  const double node_bytes = f.planned_ranks ? 0.0 : node_memory_bytes();
  if (f.device_choice.device == Device::host)
    h << gpu_sized_deck_warning(f.plan, c.precision, HostFacts{node_bytes, f.ranks_per_node, f.peak.flops_per_second});
  if (f.device_memory_bytes > 0)
    h << plan_fit_report(f.model, c, f.fsdp, f.plan, f.ranks_per_node, f.device_memory_bytes, f.host_memory_bytes);
  h << f.check_report;
  h << "resolved deck:\n";
  for (const auto& line : c.resolved_lines) h << "  " << line << "\n";
  return h.str();
}

}  // namespace ftrain
