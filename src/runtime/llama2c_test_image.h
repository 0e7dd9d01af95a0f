// Test-only images of small llama2.c files (not part of kvtier_runtime): a checkpoint of
// synthetic weights of any shape and a tokenizer of any size, for tests that need a model file
// on disk, e.g. one that declares a 1M-token context.
//
// Thread safety: pure functions. Ownership: the images are returned by value.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <string>

#include "core/coding.h"
#include "runtime/synthetic.h"

namespace kvtier::runtime::testing {

// A llama2.c checkpoint of synthetic weights for `config` (whose classifier must be kShared):
// the header, then the weights, without the legacy RoPE tables (seq_len * head_dim floats), so
// a checkpoint declaring a 1M-token context stays as small as its weights.
inline std::string Llama2cCheckpointImage(const ModelConfig& config) {
  EXPECT_EQ(config.classifier, ClassifierMode::kShared);
  Result<ModelWeights> weights = MakeSyntheticWeights(config, 3);
  EXPECT_TRUE(weights.ok()) << weights.status().ToString();
  if (!weights.ok()) return {};
  std::string out;
  for (uint32_t field : {config.dim, config.hidden_dim, config.n_layers, config.n_heads,
                         config.n_kv_heads, config.vocab_size, config.seq_len}) {
    PutFixed32(&out, field);
  }
  const std::span<const float> all = weights->MutableAll();
  out.append(reinterpret_cast<const char*>(all.data()), all.size() * sizeof(float));
  return out;
}

// A llama2.c tokenizer of `vocab_size` (>= 3) pieces: <unk>, <s>, </s>, then "t3", "t4"...
inline std::string Llama2cTokenizerImage(uint32_t vocab_size) {
  std::string out;
  PutFixed32(&out, 16);  // max_token_length
  for (uint32_t i = 0; i < vocab_size; ++i) {
    const std::string piece =
        i == 0 ? "<unk>" : (i == 1 ? "<s>" : (i == 2 ? "</s>" : "t" + std::to_string(i)));
    PutFixed32(&out, 0);  // The score, 0.0f.
    PutFixed32(&out, static_cast<uint32_t>(piece.size()));
    out += piece;
  }
  return out;
}

}  // namespace kvtier::runtime::testing
