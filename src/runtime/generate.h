// Generate: prefill a prompt, then decode token by token with a Sampler until a stop token or
// the token budget. The glue between Model, KvBlockSource and Sampler used by tests and tools.
//
// Thread safety: uses the model and the KV source exclusively for the call.
// Ownership: borrows everything; returns the generated tokens by value.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvtier/result.h"
#include "runtime/kv_blocks.h"
#include "runtime/model.h"
#include "runtime/sampler.h"

namespace kvtier::runtime {

struct GenerateOptions {
  uint32_t max_new_tokens = 128;
  SamplerOptions sampler;
  std::vector<uint32_t> stop_tokens;  // Generation ends (exclusive) at any of these.
  uint32_t chunk_tokens = kPrefillChunkTokensDefault;  // Prefill chunk.
};

// `prompt` (non-empty) is processed at positions [0, prompt.size()) of an empty `kv`. Returns
// the tokens generated after it, without the stop token.
Result<std::vector<uint32_t>> Generate(Model& model, KvBlockSource& kv,
                                       std::span<const uint32_t> prompt,
                                       const GenerateOptions& options);

}  // namespace kvtier::runtime
