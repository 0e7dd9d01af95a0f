// Loaders for model files: llama2.c checkpoints (here) and GGUF (runtime/gguf.h), behind one
// LoadModel() that tells them apart by magic.
//
// llama2.c checkpoint (legacy, version 0): seven little-endian int32 — dim, hidden_dim,
// n_layers, n_heads, n_kv_heads, vocab_size (negative: the classifier is not shared and follows
// the other weights), seq_len — then float32 arrays in ModelWeights storage order
// (runtime/model_weights.h) up to rms_final, then the legacy RoPE tables freq_cis_real and
// freq_cis_imag (seq_len * head_dim / 2 floats each, ignored), then the classifier when not
// shared. A shared-classifier file may end right after rms_final. Anything else — a short file,
// trailing bytes, header fields out of runtime_limits.h — is rejected with a Status naming the
// problem, before any allocation.
//
// Thread safety: free functions; no shared state. Ownership: results are owned by the caller.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "kvtier/result.h"
#include "runtime/model_weights.h"
#include "runtime/tokenizer.h"

namespace kvtier::runtime {

inline constexpr size_t kLlama2cHeaderBytes = 28;

// Parses the header alone into a validated config (llama2.c defaults: eps 1e-5, base 10000).
Result<ModelConfig> ParseLlama2cHeader(std::span<const std::byte> bytes);
// Parses a whole checkpoint image.
Result<ModelWeights> ParseLlama2cCheckpoint(std::span<const std::byte> bytes);
Result<ModelWeights> LoadLlama2cCheckpoint(const std::string& path);

struct LoadedModel {
  ModelWeights weights;
  std::optional<Tokenizer> tokenizer;  // From the GGUF file or the tokenizer path, if any.
};

// Loads a GGUF file (tokenizer included) or a llama2.c checkpoint (tokenizer from
// `tokenizer_path`, when not empty), chosen by the file's magic. A tokenizer path with a GGUF
// file is InvalidArgument (it would be ignored).
Result<LoadedModel> LoadModel(const std::string& model_path,
                              const std::string& tokenizer_path = "");

}  // namespace kvtier::runtime
