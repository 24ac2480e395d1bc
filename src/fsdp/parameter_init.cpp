#include "fsdp/parameter_init.hpp"

#include <algorithm>

#include "core/rng.hpp"

namespace ftrain {

void random_init_values(std::uint64_t seed, const FlatEntry& e, std::int64_t first, std::int64_t count, float* dst) {
  switch (e.init) {
    case InitKind::zeros: std::fill(dst, dst + count, 0.0f); break;
    case InitKind::ones: std::fill(dst, dst + count, 1.0f); break;
    case InitKind::normal: {
      const std::uint64_t stream = rng::hash_name(e.name);
      for (std::int64_t i = 0; i < count; ++i)
        dst[i] = static_cast<float>(e.init_std * rng::normal(seed, stream, static_cast<std::uint64_t>(first + i)));
      break;
    }
    case InitKind::uniform: {
      const std::uint64_t stream = rng::hash_name(e.name);
      for (std::int64_t i = 0; i < count; ++i)
        dst[i] = static_cast<float>(e.init_bound *
                                    (2.0 * rng::uniform(seed, stream, static_cast<std::uint64_t>(first + i)) - 1.0));
      break;
    }
  }
}

void perturb_init_by_rank(std::uint64_t seed, int rank, double scale, const FlatEntry& e, std::int64_t first,
                          std::int64_t count, float* dst) {
  // Another stream than the initialiser's, so the noise is not the init itself.
  const std::uint64_t stream = rng::hash_name(e.name) ^ 0x7e57'7e57'7e57'7e57ull;
  const double amplitude = scale * rank;
  for (std::int64_t i = 0; i < count; ++i)
    dst[i] += static_cast<float>(amplitude * rng::normal(seed, stream, static_cast<std::uint64_t>(first + i)));
}

ParameterSource tensor_slice_source(ParameterSource source) {
  return [source = std::move(source)](const FlatEntry& e, std::int64_t first, std::int64_t count, float* dst) {
    if (!e.tensor_split()) {
      source(e, first, count, dst);
      return;
    }
    const FlatEntry full = full_entry(e);
    for_each_full_run(e, first, count, [&](std::int64_t full_first, std::int64_t n, std::int64_t at) {
      source(full, full_first, n, dst + at);
    });
  };
}

}  // namespace ftrain
