// Where a NaN or an infinity sits in the sharded state, for a stop that
// names it (the trainer's divergence stop).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "fsdp/flat_parameter.hpp"
#include "runtime/execution_context.hpp"

namespace ftrain::fsdp {

enum class NonFiniteIn { gradient, master };

// The parameter whose gradient (or master weight) went non-finite first in
// backward order (the last unit holding one, its first such tensor) on any
// rank, as "unit 'U', tensor 'T'"; empty when all are finite. `base` holds
// one flat per unit, `adapters` the unit's LoRA adapters or null. Collective
// over `world`: every rank gets the same answer. Reads the host.
std::string first_non_finite(ExecutionContext& exec, Communicator& world,
                             const std::vector<std::unique_ptr<FlatParameter>>& base,
                             const std::vector<std::unique_ptr<FlatParameter>>& adapters, NonFiniteIn which);

}  // namespace ftrain::fsdp
