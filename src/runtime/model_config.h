// ModelConfig: the hyper-parameters of a llama-family transformer (RMSNorm, RoPE on adjacent
// pairs, grouped-query attention, SwiGLU FFN, no biases), whichever file or preset they came
// from, and the KV geometry they imply.
//
// head_dim is explicit rather than dim / n_heads so that synthetic models can shrink `dim` while
// keeping a real model's KV geometry (kv_heads, head_dim); loaded models have
// head_dim == dim / n_heads.
//
// Thread safety: a value type. Ownership: none.
#pragma once

#include <cstdint>
#include <string>

#include "core/kv_layout.h"
#include "kvtier/status.h"

namespace kvtier::runtime {

// Whether the classifier (logits projection) reuses the token embedding.
enum class ClassifierMode : uint8_t {
  kShared = 0,
  kSeparate = 1,
};

struct ModelConfig {
  uint32_t dim = 0;         // Residual stream width.
  uint32_t hidden_dim = 0;  // SwiGLU inner width.
  uint32_t n_layers = 0;
  uint32_t n_heads = 0;     // Query heads.
  uint32_t n_kv_heads = 0;  // Key/value heads; divides n_heads.
  uint32_t head_dim = 0;    // Even; queries are n_heads * head_dim wide.
  uint32_t vocab_size = 0;
  uint32_t seq_len = 0;  // Training context from the file; informative only.
  float rms_eps = 1e-5f;
  float rope_base = 10000.0f;
  ClassifierMode classifier = ClassifierMode::kShared;

  uint32_t q_dim() const { return n_heads * head_dim; }
  uint32_t kv_dim() const { return n_kv_heads * head_dim; }

  // OK when every field is inside runtime_limits.h and the heads divide evenly. The message
  // names the offending field.
  Status Validate() const;

  // Number of weight floats, computed in 64 bits (valid configs cannot overflow).
  uint64_t WeightFloats() const;

  // The FP16 KvLayout of this model's cache with `block_tokens` tokens per block.
  KvLayout KvLayoutFor(uint32_t block_tokens) const;

  // "dim=64,hidden_dim=172,layers=5,heads=8,kv_heads=4,head_dim=8,vocab=512,..." for logs.
  std::string ToString() const;
};

}  // namespace kvtier::runtime
