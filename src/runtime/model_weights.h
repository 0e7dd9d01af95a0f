// ModelWeights: every weight of a llama-family model as F32, in one owned, 64-byte-aligned
// buffer, with typed views per tensor and layer.
//
// Storage order is llama2.c's checkpoint order (tensor-major, then layer): token_embedding,
// rms_att[L], wq[L], wk[L], wv[L], wo[L], rms_ffn[L], w1[L], w2[L], w3[L], rms_final, and, for
// ClassifierMode::kSeparate, the classifier. Every matrix is row-major (out, in):
//   token_embedding (vocab, dim)   wq (q_dim, dim)    wk, wv (kv_dim, dim)   wo (dim, q_dim)
//   w1, w3 (hidden, dim)           w2 (dim, hidden)   classifier (vocab, dim)
// The loaders fill it (a llama2.c file in one copy, GGUF tensor by tensor) and synthetic models
// generate into it.
//
// Thread safety: immutable after loading; concurrent readers are safe. Ownership: owns the
// buffer; move-only; spans returned must not outlive the object.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/aligned_buffer.h"
#include "kvtier/result.h"
#include "runtime/model_config.h"

namespace kvtier::runtime {

// One kind of weight tensor. Per-layer kinds exist once per layer. Order = storage order.
enum class WeightKind : uint8_t {
  kTokenEmbedding = 0,
  kRmsAtt,
  kWq,
  kWk,
  kWv,
  kWo,
  kRmsFfn,
  kW1,
  kW2,
  kW3,
  kRmsFinal,
  kClassifier,
};
inline constexpr size_t kWeightKindCount = 12;

// Rows and columns of one tensor of `kind` (vectors are rows = 1).
struct TensorShape {
  uint64_t rows = 0;
  uint64_t cols = 0;
  uint64_t Floats() const { return rows * cols; }
};

TensorShape ShapeOf(const ModelConfig& config, WeightKind kind);
bool IsPerLayer(WeightKind kind);
// "wq", "rms_att", ... for messages.
const char* WeightKindName(WeightKind kind);

class ModelWeights {
 public:
  ModelWeights() = default;
  ModelWeights(ModelWeights&&) noexcept = default;
  ModelWeights& operator=(ModelWeights&&) noexcept = default;

  // Allocates zeroed storage for a validated config. NoSpace when memory is exhausted.
  static Result<ModelWeights> Allocate(const ModelConfig& config);

  const ModelConfig& config() const { return config_; }

  // One tensor (layer is ignored for global kinds). For kClassifier under kShared, the token
  // embedding is returned.
  std::span<float> Mutable(WeightKind kind, uint32_t layer = 0);
  std::span<const float> Get(WeightKind kind, uint32_t layer = 0) const;

  // The whole buffer, in storage order; llama2.c checkpoints are copied into it directly.
  std::span<float> MutableAll();

 private:
  size_t OffsetOf(WeightKind kind, uint32_t layer) const;

  ModelConfig config_;
  AlignedBuffer storage_;
  std::array<size_t, kWeightKindCount> offset_floats_{};  // First layer's tensor of each kind.
};

}  // namespace kvtier::runtime
