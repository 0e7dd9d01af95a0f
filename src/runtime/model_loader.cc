#include "runtime/model_loader.h"

#include <cstring>
#include <string>

#include "core/coding.h"
#include "runtime/gguf.h"
#include "runtime/mapped_file.h"
#include "runtime/runtime_limits.h"

namespace kvtier::runtime {
namespace {

// A header field must be positive and at most `max`.
Status CheckHeaderField(const char* name, int32_t value, uint32_t max) {
  if (value <= 0 || static_cast<uint32_t>(value) > max) {
    return Status::Corruption("llama2.c header field " + std::string(name) + " = " +
                              std::to_string(value) + " is outside [1, " + std::to_string(max) +
                              "]");
  }
  return Status::Ok();
}

}  // namespace

Result<ModelConfig> ParseLlama2cHeader(std::span<const std::byte> bytes) {
  if (bytes.size() < kLlama2cHeaderBytes) {
    return Status::Corruption("llama2.c checkpoint truncated: " + std::to_string(bytes.size()) +
                              " bytes, the header alone needs " +
                              std::to_string(kLlama2cHeaderBytes));
  }
  int32_t h[7];
  for (size_t i = 0; i < 7; ++i) h[i] = static_cast<int32_t>(DecodeFixed32(bytes.data() + 4 * i));
  KV_RETURN_IF_ERROR(CheckHeaderField("dim", h[0], kModelDimMax));
  KV_RETURN_IF_ERROR(CheckHeaderField("hidden_dim", h[1], kHiddenDimMax));
  KV_RETURN_IF_ERROR(CheckHeaderField("n_layers", h[2], kModelLayersMax));
  KV_RETURN_IF_ERROR(CheckHeaderField("n_heads", h[3], kHeadsMax));
  KV_RETURN_IF_ERROR(CheckHeaderField("n_kv_heads", h[4], kHeadsMax));
  const int32_t vocab_abs = h[5] == INT32_MIN ? 0 : (h[5] < 0 ? -h[5] : h[5]);
  KV_RETURN_IF_ERROR(CheckHeaderField("vocab_size", vocab_abs, kVocabMax));
  KV_RETURN_IF_ERROR(CheckHeaderField("seq_len", h[6], kContextTokensMax));
  ModelConfig c;
  c.dim = static_cast<uint32_t>(h[0]);
  c.hidden_dim = static_cast<uint32_t>(h[1]);
  c.n_layers = static_cast<uint32_t>(h[2]);
  c.n_heads = static_cast<uint32_t>(h[3]);
  c.n_kv_heads = static_cast<uint32_t>(h[4]);
  c.vocab_size = static_cast<uint32_t>(vocab_abs);
  c.seq_len = static_cast<uint32_t>(h[6]);
  c.classifier = h[5] > 0 ? ClassifierMode::kShared : ClassifierMode::kSeparate;
  if (c.dim % c.n_heads != 0) {
    return Status::Corruption("llama2.c header: dim " + std::to_string(c.dim) +
                              " is not divisible by n_heads " + std::to_string(c.n_heads));
  }
  c.head_dim = c.dim / c.n_heads;
  const Status valid = c.Validate();
  if (!valid.ok()) return Status::Corruption("llama2.c header: " + valid.message());
  return c;
}

Result<ModelWeights> ParseLlama2cCheckpoint(std::span<const std::byte> bytes) {
  KV_ASSIGN_OR_RETURN(const ModelConfig config, ParseLlama2cHeader(bytes));
  // Valid configs keep every count far below 2^63, so none of this can overflow.
  const uint64_t classifier_floats = uint64_t{config.vocab_size} * config.dim;
  const uint64_t body_floats =
      config.WeightFloats() -
      (config.classifier == ClassifierMode::kSeparate ? classifier_floats : 0);
  const uint64_t rope_floats = uint64_t{config.seq_len} * config.head_dim;  // real + imag.
  const uint64_t body_bytes = kLlama2cHeaderBytes + body_floats * 4;
  const uint64_t with_rope_bytes = body_bytes + rope_floats * 4;
  const uint64_t size = bytes.size();
  uint64_t expected = with_rope_bytes;
  if (config.classifier == ClassifierMode::kSeparate) {
    expected += classifier_floats * 4;
  } else if (size == body_bytes) {
    expected = body_bytes;  // The legacy RoPE tables may be left out.
  }
  if (size < expected) {
    return Status::Corruption("llama2.c checkpoint truncated: " + std::to_string(size) +
                              " bytes, the header (" + config.ToString() + ") needs " +
                              std::to_string(expected));
  }
  if (size > expected) {
    return Status::Corruption("llama2.c checkpoint has " + std::to_string(size - expected) +
                              " unexpected trailing bytes after " + std::to_string(expected));
  }
  KV_ASSIGN_OR_RETURN(ModelWeights weights, ModelWeights::Allocate(config));
  std::span<float> all = weights.MutableAll();
  // Storage order equals file order up to rms_final; the classifier comes after the tables.
  std::memcpy(all.data(), bytes.data() + kLlama2cHeaderBytes, body_floats * 4);
  if (config.classifier == ClassifierMode::kSeparate) {
    std::memcpy(all.data() + body_floats, bytes.data() + with_rope_bytes, classifier_floats * 4);
  }
  return weights;
}

Result<ModelWeights> LoadLlama2cCheckpoint(const std::string& path) {
  KV_ASSIGN_OR_RETURN(MappedFile file, MappedFile::Open(path));
  Result<ModelWeights> weights = ParseLlama2cCheckpoint(file.bytes());
  if (!weights.ok()) return weights.status().WithContext(path);
  return weights;
}

Result<LoadedModel> LoadModel(const std::string& model_path, const std::string& tokenizer_path) {
  KV_ASSIGN_OR_RETURN(MappedFile file, MappedFile::Open(model_path));
  if (IsGguf(file.bytes())) {
    if (!tokenizer_path.empty()) {
      return Status::InvalidArgument(model_path + " is a GGUF file, which carries its own "
                                     "tokenizer; the tokenizer " + tokenizer_path +
                                     " is for llama2.c checkpoints");
    }
    Result<GgufModel> model = ParseGgufModel(file.bytes());
    if (!model.ok()) return model.status().WithContext(model_path);
    return LoadedModel{std::move(model->weights), std::move(model->tokenizer)};
  }
  Result<ModelWeights> weights = ParseLlama2cCheckpoint(file.bytes());
  if (!weights.ok()) return weights.status().WithContext(model_path);
  LoadedModel loaded{std::move(*weights), std::nullopt};
  if (!tokenizer_path.empty()) {
    KV_ASSIGN_OR_RETURN(loaded.tokenizer,
                        Tokenizer::LoadLlama2c(tokenizer_path, loaded.weights.config().vocab_size));
  }
  return loaded;
}

}  // namespace kvtier::runtime
