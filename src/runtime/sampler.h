// Sampler: picks the next token from logits. Temperature 0 is greedy (argmax, lowest id on
// ties); otherwise softmax(logits / temperature), optionally truncated to the smallest set of
// most likely tokens whose probability reaches top_p (nucleus sampling), sampled with a seeded
// std::mt19937_64. The uniform draw is built from the generator's raw 64-bit output (not from a
// std distribution, whose algorithm is implementation-defined), so a seed gives the same tokens
// with any standard library.
//
// Thread safety: a Sampler holds its generator and scratch; one thread at a time.
// Ownership: a value type.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::runtime {

struct SamplerOptions {
  float temperature = 0.0f;  // 0: greedy.
  float top_p = 1.0f;        // In (0, 1]; 1 disables truncation.
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplerOptions& options);

  // InvalidArgument for a negative or non-finite temperature or top_p outside (0, 1].
  static Status Validate(const SamplerOptions& options);

  // `logits` must be non-empty and finite (programmer error otherwise).
  uint32_t Sample(std::span<const float> logits);

 private:
  uint32_t SampleFromProbabilities();
  double NextUniform();  // In [0, 1).

  SamplerOptions options_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, uint32_t>> probs_;  // (probability, token), scratch.
};

// Index of the largest value (lowest index on ties); `values` non-empty.
uint32_t ArgMax(std::span<const float> values);

}  // namespace kvtier::runtime
