// Which LoRA adapters a unit gets: from the unit's declared parameters and
// the LoRA configuration, the adapter parameters (lora_A [r, in] and lora_B
// [out, r] for every targeted linear weight, in slot order) and the
// per-linear state the adapted forward and backward use. The FSDP engine
// puts the parameters in a trainable flat parameter of their own.
#pragma once

#include <string>
#include <vector>

#include "layers/lora.hpp"
#include "plugin/model.hpp"

namespace ftrain::lora {

struct UnitAdapterPlan {
  std::vector<ParamSpec> specs;        // lora_A then lora_B of each adapted linear, in slot order
  std::vector<AdaptedLinear> adapted;  // per adapted linear
  std::vector<int> slots;              // the unit's parameter slot of each adapted linear
};

// `adaptable_seen` gains the module name of every adaptable linear of the
// unit, targeted or not (for refuse_unmatched_targets). Error naming the
// unit when a parameter marked adaptable is not a linear weight
// '<module>.weight' [out, in].
UnitAdapterPlan plan_unit_adapters(const Config& config, const std::string& unit_name,
                                   const std::vector<ParamSpec>& specs, std::vector<std::string>& adaptable_seen);

// What StepContext::lora points to for a unit with `slots` declared
// parameters: no slot adapted yet (the caller points the adapted slots at
// their AdaptedLinear once those no longer move).
UnitAdapters unit_adapters_view(const Config& config, std::size_t slots, std::uint64_t seed);

// UserError: the targets match no linear of `architecture`, listing (up to
// twelve of) the adaptable linears it has.
void refuse_unmatched_targets(const Config& config, const std::string& architecture,
                                           const std::vector<std::string>& adaptable_seen);

}  // namespace ftrain::lora
