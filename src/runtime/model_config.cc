#include "runtime/model_config.h"

#include <cmath>
#include <string>

#include "runtime/runtime_limits.h"

namespace kvtier::runtime {
namespace {

Status CheckRange(const char* field, uint32_t value, uint32_t max) {
  if (value == 0 || value > max) {
    return Status::InvalidArgument(std::string(field) + " = " + std::to_string(value) +
                                   " is outside [1, " + std::to_string(max) + "]");
  }
  return Status::Ok();
}

}  // namespace

Status ModelConfig::Validate() const {
  KV_RETURN_IF_ERROR(CheckRange("dim", dim, kModelDimMax));
  KV_RETURN_IF_ERROR(CheckRange("hidden_dim", hidden_dim, kHiddenDimMax));
  KV_RETURN_IF_ERROR(CheckRange("n_layers", n_layers, kModelLayersMax));
  KV_RETURN_IF_ERROR(CheckRange("n_heads", n_heads, kHeadsMax));
  KV_RETURN_IF_ERROR(CheckRange("n_kv_heads", n_kv_heads, kHeadsMax));
  KV_RETURN_IF_ERROR(CheckRange("head_dim", head_dim, kModelHeadDimMax));
  KV_RETURN_IF_ERROR(CheckRange("vocab_size", vocab_size, kVocabMax));
  KV_RETURN_IF_ERROR(CheckRange("seq_len", seq_len, kContextTokensMax));
  if (n_heads % n_kv_heads != 0) {
    return Status::InvalidArgument("n_heads " + std::to_string(n_heads) +
                                   " is not divisible by n_kv_heads " + std::to_string(n_kv_heads));
  }
  if (head_dim % 2 != 0) {
    return Status::InvalidArgument("head_dim " + std::to_string(head_dim) +
                                   " is odd; RoPE rotates pairs");
  }
  if (uint64_t{n_heads} * head_dim > kModelDimMax) {
    return Status::InvalidArgument("n_heads * head_dim exceeds " + std::to_string(kModelDimMax));
  }
  if (!std::isfinite(rms_eps) || rms_eps <= 0.0f || rms_eps > 1.0f) {
    return Status::InvalidArgument("rms_eps " + std::to_string(rms_eps) + " is outside (0, 1]");
  }
  if (!std::isfinite(rope_base) || rope_base <= 1.0f) {
    return Status::InvalidArgument("rope_base " + std::to_string(rope_base) + " must exceed 1");
  }
  if (classifier != ClassifierMode::kShared && classifier != ClassifierMode::kSeparate) {
    return Status::InvalidArgument("classifier mode is invalid");
  }
  return Status::Ok();
}

uint64_t ModelConfig::WeightFloats() const {
  const uint64_t d = dim;
  const uint64_t per_layer = 2 * d                            // rms_att, rms_ffn
                             + 2 * d * q_dim()                // wq, wo
                             + 2 * d * kv_dim()               // wk, wv
                             + 3 * d * uint64_t{hidden_dim};  // w1, w2, w3
  uint64_t total = uint64_t{vocab_size} * d + per_layer * n_layers + d;
  if (classifier == ClassifierMode::kSeparate) total += uint64_t{vocab_size} * d;
  return total;
}

KvLayout ModelConfig::KvLayoutFor(uint32_t block_tokens) const {
  return KvLayout{.layers = n_layers,
                  .kv_heads = n_kv_heads,
                  .head_dim = head_dim,
                  .dtype = DType::kF16,
                  .block_tokens = block_tokens};
}

std::string ModelConfig::ToString() const {
  return "dim=" + std::to_string(dim) + ",hidden_dim=" + std::to_string(hidden_dim) +
         ",layers=" + std::to_string(n_layers) + ",heads=" + std::to_string(n_heads) +
         ",kv_heads=" + std::to_string(n_kv_heads) + ",head_dim=" + std::to_string(head_dim) +
         ",vocab=" + std::to_string(vocab_size) + ",seq_len=" + std::to_string(seq_len) +
         ",rms_eps=" + std::to_string(rms_eps) + ",rope_base=" + std::to_string(rope_base) +
         (classifier == ClassifierMode::kShared ? ",classifier=shared" : ",classifier=separate");
}

}  // namespace kvtier::runtime
