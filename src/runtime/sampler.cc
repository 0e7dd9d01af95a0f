#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/assert.h"

namespace kvtier::runtime {

Sampler::Sampler(const SamplerOptions& options) : options_(options), rng_(options.seed) {}

Status Sampler::Validate(const SamplerOptions& options) {
  if (!std::isfinite(options.temperature) || options.temperature < 0.0f) {
    return Status::InvalidArgument("temperature " + std::to_string(options.temperature) +
                                   " must be finite and >= 0");
  }
  if (!(options.top_p > 0.0f && options.top_p <= 1.0f)) {
    return Status::InvalidArgument("top_p " + std::to_string(options.top_p) + " must be in (0, 1]");
  }
  return Status::Ok();
}

uint32_t ArgMax(std::span<const float> values) {
  KV_CHECK(!values.empty());
  return static_cast<uint32_t>(std::max_element(values.begin(), values.end()) - values.begin());
}

double Sampler::NextUniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

uint32_t Sampler::Sample(std::span<const float> logits) {
  if (options_.temperature == 0.0f) return ArgMax(logits);
  const float max_logit = logits[ArgMax(logits)];
  probs_.resize(logits.size());
  double sum = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float p = std::exp((logits[i] - max_logit) / options_.temperature);
    probs_[i] = {p, static_cast<uint32_t>(i)};
    sum += p;
  }
  const auto inv = static_cast<float>(1.0 / sum);
  for (auto& entry : probs_) entry.first *= inv;
  return SampleFromProbabilities();
}

uint32_t Sampler::SampleFromProbabilities() {
  size_t n = probs_.size();
  if (options_.top_p < 1.0f) {
    // Most likely first; ties by token id so the order is fully determined.
    std::sort(probs_.begin(), probs_.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    double cumulative = 0.0;
    for (size_t i = 0; i < probs_.size(); ++i) {
      cumulative += probs_[i].first;
      if (cumulative >= options_.top_p) {
        n = i + 1;
        break;
      }
    }
  }
  double mass = 0.0;
  for (size_t i = 0; i < n; ++i) mass += probs_[i].first;
  const double target = NextUniform() * mass;
  double cumulative = 0.0;
  for (size_t i = 0; i < n; ++i) {
    cumulative += probs_[i].first;
    if (target < cumulative) return probs_[i].second;
  }
  return probs_[n - 1].second;  // Rounding left the target at the very top.
}

}  // namespace kvtier::runtime
