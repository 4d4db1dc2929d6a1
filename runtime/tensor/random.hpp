// Small deterministic random numbers shared by the modules (initialisation,
// data shuffling): SplitMix64, Steele, Lea and Flood 2014.
#pragma once

#include <cstdint>

namespace troupe {

/// Advances `state` and returns the next well-mixed 64-bit value.
inline std::uint64_t splitmix64(std::uint64_t& state) noexcept {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

} // namespace troupe
