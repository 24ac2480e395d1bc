// The deck resolved into typed settings, once: the FSDP engine's options, the
// learning-rate schedule, the attention and communication choices. Every
// rule that relates two deck lines lives here and names the deck file:line
// it is about; what comes out is valid, so the engine and the optimizer only
// assert (programming errors) instead of checking user input again.
#pragma once

#include <string>

#include "base/dtype.hpp"
#include "deck/config.hpp"
#include "fsdp/engine.hpp"
#include "optim/lr_schedule.hpp"

namespace ftrain {

// The FSDP options the deck asks for, on `device` (the device choice's).
// UserError "FILE:LINE: ..." for a combination the engine cannot run
// (no_sync with full_shard, LoRA with fp8, an adapter line without lora).
FsdpOptions resolve_fsdp_options(const RunConfig& config, Device device);

// Ranks per shard group for `world_size` ranks, `ranks_per_node` per node.
int shard_group_size_for(const FsdpOptions& options, int world_size, int ranks_per_node);
// The same, and UserError naming the fsdp line when it does not divide the ranks.
int resolve_shard_group_size(const RunConfig& config, const FsdpOptions& options, int world_size,
                             int ranks_per_node);

// The deck's schedule line as the schedule's own parameters.
optim::Schedule schedule_of(const RunConfig& config);
// schedule_of, checked against lr and max_steps (UserError naming "schedule").
optim::Schedule resolve_schedule(const RunConfig& config);

// save_final's stored type.
DType saved_dtype(const RunConfig& config);

// The run header's "fsdp: ..." and "training: ..." lines: the resolved
// values, defaults included (what the deck left out is where ftrain and
// Hugging Face differ). `shard_group_size` decides what fp8 all_gather does.
std::string describe_settings(const RunConfig& config, const FsdpOptions& options, int shard_group_size);

}  // namespace ftrain
