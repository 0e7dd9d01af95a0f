#include "runtime/model_weights.h"

#include "core/assert.h"

namespace kvtier::runtime {

TensorShape ShapeOf(const ModelConfig& c, WeightKind kind) {
  switch (kind) {
    case WeightKind::kTokenEmbedding:
    case WeightKind::kClassifier:
      return {c.vocab_size, c.dim};
    case WeightKind::kRmsAtt:
    case WeightKind::kRmsFfn:
    case WeightKind::kRmsFinal:
      return {1, c.dim};
    case WeightKind::kWq:
      return {c.q_dim(), c.dim};
    case WeightKind::kWk:
    case WeightKind::kWv:
      return {c.kv_dim(), c.dim};
    case WeightKind::kWo:
      return {c.dim, c.q_dim()};
    case WeightKind::kW1:
    case WeightKind::kW3:
      return {c.hidden_dim, c.dim};
    case WeightKind::kW2:
      return {c.dim, c.hidden_dim};
  }
  return {};
}

bool IsPerLayer(WeightKind kind) {
  return kind != WeightKind::kTokenEmbedding && kind != WeightKind::kRmsFinal &&
         kind != WeightKind::kClassifier;
}

const char* WeightKindName(WeightKind kind) {
  static constexpr const char* kNames[kWeightKindCount] = {
      "token_embedding", "rms_att", "wq", "wk", "wv",        "wo",
      "rms_ffn",         "w1",      "w2", "w3", "rms_final", "classifier"};
  return kNames[static_cast<size_t>(kind)];
}

Result<ModelWeights> ModelWeights::Allocate(const ModelConfig& config) {
  KV_RETURN_IF_ERROR(config.Validate());
  ModelWeights w;
  w.config_ = config;
  size_t offset = 0;
  for (size_t k = 0; k < kWeightKindCount; ++k) {
    const auto kind = static_cast<WeightKind>(k);
    w.offset_floats_[k] = offset;
    if (kind == WeightKind::kClassifier && config.classifier == ClassifierMode::kShared) break;
    const uint64_t copies = IsPerLayer(kind) ? config.n_layers : 1;
    offset += static_cast<size_t>(ShapeOf(config, kind).Floats() * copies);
  }
  KV_CHECK(offset == config.WeightFloats());
  if (offset > SIZE_MAX / sizeof(float)) return Status::NoSpace("model too large for memory");
  KV_ASSIGN_OR_RETURN(w.storage_, AlignedBuffer::Allocate(offset * sizeof(float), 64));
  return w;
}

size_t ModelWeights::OffsetOf(WeightKind kind, uint32_t layer) const {
  if (kind == WeightKind::kClassifier && config_.classifier == ClassifierMode::kShared) {
    kind = WeightKind::kTokenEmbedding;
  }
  if (!IsPerLayer(kind)) return offset_floats_[static_cast<size_t>(kind)];
  KV_DCHECK(layer < config_.n_layers);
  return offset_floats_[static_cast<size_t>(kind)] +
         static_cast<size_t>(ShapeOf(config_, kind).Floats()) * layer;
}

std::span<float> ModelWeights::Mutable(WeightKind kind, uint32_t layer) {
  float* base = reinterpret_cast<float*>(storage_.data());
  return {base + OffsetOf(kind, layer), static_cast<size_t>(ShapeOf(config_, kind).Floats())};
}

std::span<const float> ModelWeights::Get(WeightKind kind, uint32_t layer) const {
  const float* base = reinterpret_cast<const float*>(storage_.data());
  return {base + OffsetOf(kind, layer), static_cast<size_t>(ShapeOf(config_, kind).Floats())};
}

std::span<float> ModelWeights::MutableAll() {
  return {reinterpret_cast<float*>(storage_.data()), storage_.size() / sizeof(float)};
}

}  // namespace kvtier::runtime
