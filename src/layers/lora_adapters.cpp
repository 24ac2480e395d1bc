#include "layers/lora_adapters.hpp"

#include <cmath>
#include <sstream>

#include "base/error.hpp"
#include "core/rng.hpp"

namespace ftrain::lora {

UnitAdapterPlan plan_unit_adapters(const Config& config, const std::string& unit_name,
                                   const std::vector<ParamSpec>& specs, std::vector<std::string>& adaptable_seen) {
  UnitAdapterPlan plan;
  const std::int64_t r = config.rank;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const ParamSpec& spec = specs[i];
    if (!spec.adaptable || !spec.tied_to.empty()) continue;
    const std::string module = module_of_weight(spec.name);
    FT_CHECK(!module.empty() && spec.shape.size() == 2)
        << "unit " << unit_name << " marks '" << spec.name << "' " << shape_string(spec.shape)
        << " adaptable; LoRA needs a linear weight '<module>.weight' [out, in]";
    adaptable_seen.push_back(module);
    if (!config.targets_module(module)) continue;
    const std::int64_t out = spec.shape[0], in = spec.shape[1];
    ParamSpec a;
    a.name = lora_a_name(module);
    a.shape = {r, in};
    if (config.init == AInit::kaiming) {
      // kaiming_uniform_(a=sqrt(5)): gain sqrt(2 / (1 + 5)), bound gain * sqrt(3 / fan_in) = 1 / sqrt(in)
      a.init = InitKind::uniform;
      a.init_bound = static_cast<float>(1.0 / std::sqrt(static_cast<double>(in)));
    } else {
      a.init = InitKind::normal;
      a.init_std = static_cast<float>(1.0 / static_cast<double>(r));
    }
    ParamSpec b;
    b.name = lora_b_name(module);
    b.shape = {out, r};
    b.init = InitKind::zeros;
    plan.specs.push_back(a);
    plan.specs.push_back(b);
    AdaptedLinear l;
    l.module = module;
    l.dropout_stream = rng::hash_name(module);
    plan.adapted.push_back(l);
    plan.slots.push_back(static_cast<int>(i));
  }
  return plan;
}

UnitAdapters unit_adapters_view(const Config& config, std::size_t slots, std::uint64_t seed) {
  UnitAdapters view;
  view.by_slot.assign(slots, nullptr);
  view.scale = static_cast<float>(config.scale());
  view.dropout = static_cast<float>(config.dropout);
  view.seed = seed;
  return view;
}

void refuse_unmatched_targets(const Config& config, const std::string& architecture,
                              const std::vector<std::string>& adaptable_seen) {
  std::ostringstream known;
  for (std::size_t i = 0; i < adaptable_seen.size() && i < 12; ++i) known << (i ? ", " : "") << adaptable_seen[i];
  if (adaptable_seen.size() > 12) known << ", ...";
  FT_USER_ERROR() << "lora targets " << config.targets_text() << " match no linear layer of model " << architecture
                  << (adaptable_seen.empty() ? " (it marks none adaptable)" : "; its adaptable linears are: ")
                  << known.str();
}

}  // namespace ftrain::lora
