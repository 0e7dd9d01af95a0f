// Synthetic models: deterministic random weights of any llama-family shape, and named presets
// that copy real models' geometry, so benchmarks and long-context experiments exercise the KV
// cache of a real model without its weights.
//
// Weights are uniform with variance 1 / fan_in (token embedding: variance 1; norms: 1.0; the
// residual projections wo and w2 are further scaled by 1 / sqrt(2 * n_layers)) so activations
// and logits stay O(1) at any depth. Each tensor has its own generator seeded from (seed, kind,
// layer), so cutting layers leaves the remaining layers' weights unchanged.
//
// Shrinking (SyntheticOptions): fewer layers, a smaller dim, hidden_dim or vocabulary, always
// keeping n_heads, n_kv_heads and head_dim — the KV geometry — so the KV bytes per token per
// layer match the real model. (Queries stay n_heads * head_dim wide even when dim shrinks.)
//
// Thread safety: free functions. Ownership: results owned by the caller.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/result.h"
#include "runtime/model_weights.h"

namespace kvtier::runtime {

// "llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b", "tinyllama-1.1b".
std::vector<std::string_view> SyntheticPresetNames();
// NotFound for an unknown name (the message lists the known ones).
Result<ModelConfig> SyntheticPreset(std::string_view name);

struct SyntheticOptions {
  uint32_t layers = 0;      // 0 keeps the preset's; else at most that many.
  uint32_t dim = 0;         // 0 keeps; else replaces dim.
  uint32_t hidden_dim = 0;  // 0 keeps.
  uint32_t vocab_size = 0;  // 0 keeps.
  uint32_t seq_len = 0;     // 0 keeps.
};

// Applies `options` and validates the result.
Result<ModelConfig> ShrinkConfig(ModelConfig config, const SyntheticOptions& options);

// Fills freshly allocated weights for `config` from `seed`.
Result<ModelWeights> MakeSyntheticWeights(const ModelConfig& config, uint64_t seed);

}  // namespace kvtier::runtime
