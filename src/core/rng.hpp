// Counter-based random numbers: value = f(seed, stream, index).
//
// Why counter-based: FSDP ranks initialise only their own shard, and must get
// exactly the values a single rank would have produced for those elements
// (results must not depend on the rank count). With a pure function of (seed, stream, index) any slice of
// any tensor can be generated independently, in any order, on any rank.
// The mixer is SplitMix64's finaliser applied to a Weyl-sequence counter; the
// normal variate uses Box-Muller on two uniforms of the same index.
// mix64, bits and uniform are FTRAIN_HD (base/hd.hpp: integer and
// exact double arithmetic only) so the CUDA dropout kernel draws the very
// mask the host draws (kernels/math/dropout.hpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

#include "base/hd.hpp"

namespace ftrain::rng {

FTRAIN_HD std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Stable 64-bit FNV-1a hash of a name, to derive a stream per tensor name.
inline std::uint64_t hash_name(std::string_view name) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

FTRAIN_HD std::uint64_t bits(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  return mix64(mix64(seed ^ mix64(stream + 0x9e3779b97f4a7c15ull)) + index * 0x9e3779b97f4a7c15ull);
}

// Uniform in (0, 1): never exactly 0, so log() is safe.
FTRAIN_HD double uniform(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  return (static_cast<double>(bits(seed, stream, index) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

inline double normal(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  const double u1 = uniform(seed, stream, 2 * index);
  const double u2 = uniform(seed, stream, 2 * index + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace ftrain::rng
