#include "fsdp/non_finite.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "base/error.hpp"
#include "kernels/ops.hpp"

namespace ftrain::fsdp {

std::string first_non_finite(ExecutionContext& exec, Communicator& world,
                             const std::vector<std::unique_ptr<FlatParameter>>& base,
                             const std::vector<std::unique_ptr<FlatParameter>>& adapters, NonFiniteIn which) {
  // Backward runs from the last unit to the first and a NaN spreads from
  // where it appears to every unit before it, so the place to name is the
  // LAST unit holding one (its first such tensor). Each rank proposes a key,
  // larger for later units and earlier tensors, and the world takes the max.
  constexpr double kNone = -1.0;
  constexpr std::int64_t kEntriesPerUnit = std::int64_t{1} << 24;
  double mine = kNone;
  for (std::size_t u = 0; u < base.size(); ++u) {
    for (const FlatParameter* f : {base[u].get(), adapters[u].get()}) {
      if (f == nullptr) continue;  // no adapters in this unit
      const Tensor& state = which == NonFiniteIn::gradient ? f->grad : f->master;
      if (!state.defined()) continue;  // frozen: no gradient
      // Offloaded state is host memory: scanned by a host context.
      ExecutionContext& on = state.device() == exec.device() ? exec : host_context();
      const std::int64_t unit = f->unit_index();
      // Adapter entries (LoRA) number after the unit's base entries.
      const std::int64_t first_entry = f == base[u].get() ? 0 : static_cast<std::int64_t>(base[u]->entries().size());
      f->for_each_shard_piece([&](int e, std::int64_t, std::int64_t count, std::int64_t at) {
        if (!std::isfinite(ops::sum_squares(on, state.view({count}, at))))
          mine = std::max(mine, static_cast<double>(unit * kEntriesPerUnit + (kEntriesPerUnit - 1 - (first_entry + e))));
      });
    }
  }
  const double found = world.all_reduce_max(mine);
  if (found == kNone) return "";
  const auto key = static_cast<std::int64_t>(found);
  const std::int64_t unit = key / kEntriesPerUnit, entry = kEntriesPerUnit - 1 - key % kEntriesPerUnit;
  if (unit >= 0 && unit < static_cast<std::int64_t>(base.size())) {
    const FlatParameter& flat = *base[static_cast<std::size_t>(unit)];
    const auto n_base = static_cast<std::int64_t>(flat.entries().size());
    const FlatParameter* adapter = adapters[static_cast<std::size_t>(unit)].get();
    if (entry < n_base)
      return "unit '" + flat.unit_name() + "', tensor '" + flat.entries()[static_cast<std::size_t>(entry)].name + "'";
    if (adapter && entry - n_base < static_cast<std::int64_t>(adapter->entries().size()))
      return "unit '" + flat.unit_name() + "', tensor '" +
             adapter->entries()[static_cast<std::size_t>(entry - n_base)].name + "'";
  }
  FT_THROW() << "non-finite state reported in unit " << unit << ", which this engine does not hold";
}

}  // namespace ftrain::fsdp
