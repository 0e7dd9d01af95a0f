// SplitMix64's finalizer (Steele, Lea and Flood, "Fast splittable pseudorandom number
// generators", 2014): a well-mixed 64-bit hash of a 64-bit value, for seeded sequences that
// must be the same on every machine and every build (the codecs' rotation signs, synthetic KV).
//
// Thread safety: a pure function.
#pragma once

#include <cstdint>

namespace kvtier {

constexpr uint64_t SplitMix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace kvtier
