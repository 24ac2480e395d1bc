#include "train/plan.hpp"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <sstream>

#include <unistd.h>

#include "base/error.hpp"
#include "comm/process_grid.hpp"
#include "layers/lora.hpp"
#include "train/parallel_layout.hpp"
#include "train/plan_traffic.hpp"
#include "train/run_settings.hpp"

namespace ftrain {

namespace {

std::int64_t node_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return std::numeric_limits<std::int64_t>::max();
  return static_cast<std::int64_t>(pages) * page;
}

// Bytes one sample's inputs take in a micro-batch on the host: token ids and
// targets (int32 each) for text, f32 pixels and a label for images. Zero when
// the model does not say enough (no check then). Activations come on top.
std::int64_t input_bytes_per_sample(Model& model, const BatchSection& b) {
  if (model.data_kind() == DataKind::tokens) return b.seq_len > std::numeric_limits<std::int64_t>::max() / 8 ? -1 : 8 * b.seq_len;
  const std::vector<std::int64_t> image = model.image_shape();
  if (image.size() != 3) return 0;
  return 4 * image[0] * image[1] * image[2] + 4;
}

// A micro-batch whose inputs alone exceed the node's memory per rank can
// never run: say so now instead of failing an allocation at step 1.
void check_micro_batch_inputs(Model& model, const BatchSection& b, const std::string& batch_line, int ranks_per_node) {
  const std::int64_t sample_bytes = input_bytes_per_sample(model, b);
  std::int64_t micro_bytes = 0;
  const std::int64_t memory_per_rank = node_memory_bytes() / std::max(1, ranks_per_node);
  if (sample_bytes == 0 ||
      (sample_bytes > 0 && !__builtin_mul_overflow(b.micro_batch, sample_bytes, &micro_bytes) &&
       micro_bytes <= memory_per_rank))
    return;
  const bool tokens = model.data_kind() == DataKind::tokens;
  // In floating point for the message: the integer product may have wrapped.
  const double bytes = static_cast<double>(b.micro_batch) *
                       (tokens ? 8.0 * static_cast<double>(b.seq_len) : static_cast<double>(sample_bytes));
  FT_USER_ERROR() << batch_line << " micro " << b.micro_batch << (tokens ? " seq_len " + std::to_string(b.seq_len) : "")
                  << ": the inputs of one micro-batch alone (" << (tokens ? "token ids and targets of " : "")
                  << "micro " << b.micro_batch << (tokens ? " x seq_len " + std::to_string(b.seq_len) : " images")
                  << ") take " << human_bytes(bytes)
                  << ", more than this node's memory per rank (" << human_bytes(static_cast<double>(memory_per_rank))
                  << "); lower micro" << (tokens ? " or seq_len" : "");
}

// One LoRA adapter pair on a linear [out, in], as one tensor rank holds it:
// lora_A [r, in] and lora_B [out, r], the factor along the split dimension
// sliced with the linear (Megatron's LoRA: B follows a column-parallel
// linear's output rows, A a row-parallel linear's input columns).
std::int64_t adapter_slice_numel(TensorSplit split, const std::vector<std::int64_t>& shape, std::int64_t rank,
                                 std::int64_t tensor) {
  const std::int64_t out = split == TensorSplit::output ? shape[0] / tensor : shape[0];
  const std::int64_t in = split == TensorSplit::input ? shape[1] / tensor : shape[1];
  return rank * (out + in);
}

// The units of `model` as one rank of `p`'s grid holds them: every unit's
// tensor-rank slice sharded over the shard group, the state bytes, the
// largest unit and (LoRA) adapter. Returns the largest adapter slice.
std::int64_t plan_units(RunPlan& p, Model& model, const FsdpOptions& o) {
  const std::int64_t s = p.shard_group_size, t = p.tensor;
  const std::int64_t frozen_bytes = static_cast<std::int64_t>(dtype_size(p.frozen_base_dtype));
  const std::string architecture = model.architecture();
  std::int64_t largest_adapter = 0;
  for (int u = 0; u < model.num_units(); ++u) {
    UnitPlan up;
    up.name = model.unit(u).name();
    std::int64_t adapter_numel = 0, adapter_slice = 0;
    for (const auto& spec : model.unit(u).params()) {
      if (!spec.tied_to.empty()) continue;
      const std::int64_t numel = shape_numel(spec.shape);
      const TensorSplit split = tensor_split(architecture, spec.name, spec.shape);
      up.numel += numel;
      up.slice_numel += tensor_slice_numel(split, numel, t);
      if (split == TensorSplit::replicated) p.replicated_parameters += numel;
      // The engine's rule (fsdp/engine.cpp): lora_A [r, in] + lora_B [out, r] per targeted linear.
      if (p.lora && spec.adaptable && spec.shape.size() == 2 && o.lora.targets_module(lora::module_of_weight(spec.name))) {
        adapter_numel += o.lora.rank * (spec.shape[0] + spec.shape[1]);
        adapter_slice += adapter_slice_numel(split, spec.shape, o.lora.rank, t);
        ++p.adapted_linears;
      }
    }
    up.shard_numel = std::max<std::int64_t>(1, (up.slice_numel + s - 1) / s);
    p.parameters += up.numel;
    p.slice_parameters += up.slice_numel;
    p.largest_unit = std::max(p.largest_unit, up.numel);
    p.largest_unit_slice = std::max(p.largest_unit_slice, up.slice_numel);
    if (p.lora) {
      // frozen base: its shard only, in its storage dtype; adapters: f32 master + grad + AdamW m, v
      up.adapter_shard_numel = adapter_slice > 0 ? (adapter_slice + s - 1) / s : 0;
      p.state_bytes_per_rank += frozen_bytes * up.shard_numel + 16 * up.adapter_shard_numel;
      p.trainable_parameters += adapter_numel;
      largest_adapter = std::max(largest_adapter, adapter_slice);
    } else {
      p.state_bytes_per_rank += 16 * up.shard_numel;
    }
    p.units.push_back(up);
  }
  if (!p.lora) p.trainable_parameters = p.parameters;
  return largest_adapter;
}

// The grid of `parallel tensor T context C` over `world_size` ranks and the
// shard group inside its fsdp group: full_shard and shard_grad_op shard over
// the whole fsdp group, hybrid_shard over its ranks on one node (or the
// deck's shard_group_size), no_shard over none. Refuses a layout the model
// cannot take and a tensor group across nodes, naming the deck lines.
void plan_grid(RunPlan& p, const Model& model, const RunConfig& c, const FsdpOptions& o, int world_size,
               int ranks_per_node) {
  check_parallel_layout(model.architecture(), model.config(), c);
  const ProcessGrid grid(world_size, static_cast<int>(c.parallel.tensor), static_cast<int>(c.parallel.context),
                         ranks_per_node, c.parallel.where.str());
  p.world_size = world_size;
  p.tensor = grid.tensor_size();
  p.context = grid.context_size();
  p.data_parallel = grid.data_size();
  p.fsdp_group_size = grid.fsdp_size();
  p.grid = grid.describe();
  const int fsdp_per_node = std::max(1, std::min(ranks_per_node, world_size) / p.tensor);
  p.shard_group_size = shard_group_size_for(o, p.fsdp_group_size, fsdp_per_node);
  if (p.shard_group_size < 1 || p.fsdp_group_size % p.shard_group_size != 0)
    FT_USER_ERROR() << c.fsdp.where.str() << ": fsdp " << c.fsdp.strategy << " shard group of " << p.shard_group_size
                    << " ranks does not divide the fsdp group of " << p.fsdp_group_size << " ranks ("
                    << p.grid << ": the fsdp group is the data x context ranks of one tensor index)";
}

}  // namespace

RunPlan make_plan(Model& model, const RunConfig& c, const FsdpOptions& o, int world_size, int ranks_per_node) {
  RunPlan p;
  plan_grid(p, model, c, o, world_size, ranks_per_node);
  const std::int64_t s = p.shard_group_size;
  p.lora = o.lora.enabled;
  p.frozen_base_dtype = frozen_base_dtype(o);
  const std::int64_t largest_adapter = plan_units(p, model, o);
  if (p.lora && p.trainable_parameters == 0)
    FT_USER_ERROR() << c.lora.where.str() << ": 'lora' targets " << o.lora.targets_text() << " match no linear layer of model "
                    << model.architecture();
  // Sizes from the deck are multiplied with overflow checks: a wrapped count
  // would print as a plausible plan and fail far later (or never).
  const BatchSection& b = c.batch;
  const std::string batch_line = b.where.file.empty() ? std::string("batch") : b.where.str() + ": batch";
  // The T x C ranks of one data index read the same samples.
  const std::string readers = std::to_string(p.data_parallel) + " data-parallel rank(s)";
  std::int64_t per_rank = 0;
  if (__builtin_mul_overflow(b.micro_batch, b.grad_accum, &per_rank) ||
      __builtin_mul_overflow(per_rank, std::int64_t{p.data_parallel}, &p.global_batch))
    FT_USER_ERROR() << batch_line << " micro " << b.micro_batch << " accumulate " << b.grad_accum
                    << ": the global batch, micro x accumulate x " << readers
                    << ", does not fit in 64 bits; lower micro (or accumulate)";
  // Images have no sequence length from the deck (tokens per image are the
  // model's business, counted in its FLOPs): report samples only.
  if (model.data_kind() == DataKind::tokens && __builtin_mul_overflow(p.global_batch, b.seq_len, &p.tokens_per_step))
    FT_USER_ERROR() << batch_line << " micro " << b.micro_batch << " seq_len " << b.seq_len
                    << ": the tokens per step, micro x accumulate x " << readers
                    << " x seq_len, do not fit in 64 bits; lower seq_len (or micro)";
  check_micro_batch_inputs(model, b, batch_line, ranks_per_node);
  p.flops_per_step = model.training_flops_per_sample(c.batch.seq_len) * static_cast<double>(p.global_batch);
  const double param_bytes = static_cast<double>(dtype_size(o.param_dtype));
  // In flight at once: limit_all_gathers gathered units (one tensor rank's
  // slice each), plus one full f32 gradient buffer of the unit in backward.
  const std::int64_t in_flight = o.strategy == ShardingStrategy::no_shard || s == 1 ? 0 : o.limit_all_gathers;
  // Under LoRA the f32 gradient buffer is the adapters' only (the base has none).
  const std::int64_t grad_numel = p.lora ? largest_adapter : p.largest_unit_slice;
  p.gathered_bytes_peak = static_cast<std::int64_t>(in_flight * p.largest_unit_slice * param_bytes) + 4 * grad_numel;
  plan_offload(p, o);
  p.traffic = plan_traffic(model, c, o, p);
  return p;
}

void plan_offload(RunPlan& p, const FsdpOptions& o) {
  p.offload = o.offload;
  std::int64_t shard_numel = 0, largest_shard = 0;
  for (const UnitPlan& u : p.units) {
    shard_numel += u.shard_numel;
    largest_shard = std::max(largest_shard, u.shard_numel);
  }
  const std::int64_t param_bytes = static_cast<std::int64_t>(dtype_size(o.param_dtype));
  const std::int64_t staged = std::max(1, o.limit_all_gathers) * param_bytes * largest_shard;
  if (p.lora) {
    const std::int64_t base = static_cast<std::int64_t>(dtype_size(p.frozen_base_dtype)) * shard_numel;
    const std::int64_t adapters = p.state_bytes_per_rank - base;  // f32 master + grad + AdamW m, v
    const bool moved = o.offload != Offload::none, base_moved = o.offload == Offload::all;
    p.device_state_bytes_per_rank = (moved ? 0 : adapters) + (base_moved ? staged : base);
    p.host_state_bytes_per_rank = (moved ? adapters : 0) + (base_moved ? base : 0);
    return;
  }
  const std::int64_t compute_shard = param_bytes * shard_numel;
  // The reduce-scatter's f32 output of the unit whose backward just ended,
  // until its copy to the host completes.
  const std::int64_t reduced_grad_in_flight = 4 * largest_shard;
  switch (o.offload) {
    case Offload::none:
      p.device_state_bytes_per_rank = p.state_bytes_per_rank;
      p.host_state_bytes_per_rank = 0;
      break;
    case Offload::optimizer:
      p.device_state_bytes_per_rank = compute_shard + reduced_grad_in_flight;
      p.host_state_bytes_per_rank = p.state_bytes_per_rank;
      break;
    case Offload::all: {
      // Each unit's compute shard is staged on the device for its all-gather
      // (`staged`: as many as limit_all_gathers lets gather at once).
      p.device_state_bytes_per_rank = staged + reduced_grad_in_flight;
      p.host_state_bytes_per_rank = p.state_bytes_per_rank + compute_shard;
      break;
    }
  }
}

std::string human_count(double n) {
  char buf[64];
  if (n >= 1e9) std::snprintf(buf, sizeof buf, "%.2fB", n / 1e9);
  else if (n >= 1e6) std::snprintf(buf, sizeof buf, "%.2fM", n / 1e6);
  else if (n >= 1e3) std::snprintf(buf, sizeof buf, "%.1fK", n / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f", n);
  return buf;
}

std::string human_bytes(double b) {
  char buf[64];
  if (b >= 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1024.0 * 1024 * 1024));
  else if (b >= 1024.0 * 1024) std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1024.0 * 1024));
  else std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  return buf;
}

std::string format_plan(const RunPlan& p) {
  std::ostringstream s;
  s << "plan:\n";
  s << "  parameters        " << p.parameters << " (" << human_count(static_cast<double>(p.parameters)) << ") in "
    << p.units.size() << " units; largest unit " << human_count(static_cast<double>(p.largest_unit)) << "\n";
  if (p.lora) {
    s << "  trainable         " << p.trainable_parameters << " (" << human_count(static_cast<double>(p.trainable_parameters))
      << ", " << p.adapted_linears << " LoRA-adapted linears; the base is frozen)\n";
  }
  s << "  ranks             " << p.world_size << ", shard group " << p.shard_group_size << ", replicas "
    << p.fsdp_group_size / p.shard_group_size << "\n";
  s << "  global batch      " << p.global_batch << " samples";
  if (p.tokens_per_step > 0) s << ", " << p.tokens_per_step << " tokens per step";
  s << "\n";
  char flops[64];
  std::snprintf(flops, sizeof flops, "%.4g", p.flops_per_step);
  s << "  FLOPs per step    " << flops << " (forward + backward, model FLOPs)\n";
  s << "  memory per rank   " << human_bytes(static_cast<double>(p.state_bytes_per_rank))
    << (p.lora ? " sharded state (frozen base: " + std::string(dtype_name(p.frozen_base_dtype)) +
                     " shards; adapters: f32 master + grad + AdamW m, v) + "
               : std::string(" sharded state (f32 master + grad + AdamW m, v) + "))
    << human_bytes(static_cast<double>(p.gathered_bytes_peak))
    << " gathered units in flight; activations are measured at run time\n";
  if (p.offload != Offload::none)
    s << "  offload           " << (p.offload == Offload::all ? "all" : "optimizer") << " on a device backend: "
      << human_bytes(static_cast<double>(p.device_state_bytes_per_rank)) << " of the state on the device ("
      << (p.offload == Offload::all ? "compute-dtype shards staged for their all-gathers"
                                    : "the compute-dtype shard")
      << " + one unit's reduced f32 gradient shard), "
      << human_bytes(static_cast<double>(p.host_state_bytes_per_rank)) << " in host memory per rank\n";
  s << format_parallel_plan(p);
  return s.str();
}

}  // namespace ftrain
