#include "runtime/synthetic.h"

#include <cmath>
#include <string>

namespace kvtier::runtime {
namespace {

struct Preset {
  std::string_view name;
  ModelConfig config;
};

ModelConfig Llama(uint32_t dim, uint32_t hidden, uint32_t layers, uint32_t heads, uint32_t kv_heads,
                  uint32_t vocab, uint32_t seq_len, float rope_base) {
  return ModelConfig{.dim = dim,
                     .hidden_dim = hidden,
                     .n_layers = layers,
                     .n_heads = heads,
                     .n_kv_heads = kv_heads,
                     .head_dim = dim / heads,
                     .vocab_size = vocab,
                     .seq_len = seq_len,
                     .rms_eps = 1e-5f,
                     .rope_base = rope_base,
                     .classifier = ClassifierMode::kSeparate};
}

const Preset kPresets[] = {
    {"llama2-7b", Llama(4096, 11008, 32, 32, 32, 32000, 4096, 10000.0f)},
    {"llama2-13b", Llama(5120, 13824, 40, 40, 40, 32000, 4096, 10000.0f)},
    {"llama2-70b", Llama(8192, 28672, 80, 64, 8, 32000, 4096, 10000.0f)},
    {"llama3-8b", Llama(4096, 14336, 32, 32, 8, 128256, 8192, 500000.0f)},
    {"tinyllama-1.1b", Llama(2048, 5632, 22, 32, 4, 32000, 2048, 10000.0f)},
};

// SplitMix64: a tiny, fast, well-mixed generator; one per tensor.
uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void FillUniform(std::span<float> out, float half_width, uint64_t seed) {
  uint64_t state = seed;
  for (float& v : out) {
    const float u = static_cast<float>(SplitMix64(&state) >> 40) * 0x1p-24f;  // [0, 1)
    v = half_width * (2.0f * u - 1.0f);
  }
}

}  // namespace

std::vector<std::string_view> SyntheticPresetNames() {
  std::vector<std::string_view> names;
  for (const Preset& p : kPresets) names.push_back(p.name);
  return names;
}

Result<ModelConfig> SyntheticPreset(std::string_view name) {
  std::string known;
  for (const Preset& p : kPresets) {
    if (p.name == name) return p.config;
    known += (known.empty() ? "" : ", ") + std::string(p.name);
  }
  return Status::NotFound("unknown synthetic preset '" + std::string(name) + "' (known: " + known +
                          ")");
}

Result<ModelConfig> ShrinkConfig(ModelConfig config, const SyntheticOptions& options) {
  if (options.layers != 0 && options.layers < config.n_layers) config.n_layers = options.layers;
  if (options.dim != 0) config.dim = options.dim;
  if (options.hidden_dim != 0) config.hidden_dim = options.hidden_dim;
  if (options.vocab_size != 0) config.vocab_size = options.vocab_size;
  if (options.seq_len != 0) config.seq_len = options.seq_len;
  KV_RETURN_IF_ERROR(config.Validate());
  return config;
}

Result<ModelWeights> MakeSyntheticWeights(const ModelConfig& config, uint64_t seed) {
  KV_ASSIGN_OR_RETURN(ModelWeights weights, ModelWeights::Allocate(config));
  const float residual_scale = 1.0f / std::sqrt(2.0f * static_cast<float>(config.n_layers));
  for (size_t k = 0; k < kWeightKindCount; ++k) {
    const auto kind = static_cast<WeightKind>(k);
    if (kind == WeightKind::kClassifier && config.classifier == ClassifierMode::kShared) continue;
    const uint32_t copies = IsPerLayer(kind) ? config.n_layers : 1;
    const TensorShape shape = ShapeOf(config, kind);
    for (uint32_t layer = 0; layer < copies; ++layer) {
      std::span<float> t = weights.Mutable(kind, layer);
      if (shape.rows == 1) {  // Norm weights.
        for (float& v : t) v = 1.0f;
        continue;
      }
      float half_width = std::sqrt(3.0f / static_cast<float>(shape.cols));
      if (kind == WeightKind::kTokenEmbedding) half_width = std::sqrt(3.0f);
      if (kind == WeightKind::kWo || kind == WeightKind::kW2) half_width *= residual_scale;
      uint64_t tensor_seed = seed ^ (uint64_t{k} << 56) ^ (uint64_t{layer} << 32);
      FillUniform(t, half_width, SplitMix64(&tensor_seed));
    }
  }
  return weights;
}

}  // namespace kvtier::runtime
