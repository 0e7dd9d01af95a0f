// The model half of the GGUF reader (runtime/gguf.h): llama.* hyper-parameters, tensors and
// the SentencePiece vocabulary of a parsed GgufFile.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/escape.h"
#include "runtime/gguf.h"
#include "runtime/kernels.h"
#include "runtime/mapped_file.h"
#include "runtime/runtime_limits.h"

namespace kvtier::runtime {
namespace {

bool IsIntegerType(GgufValueType t) {
  return t == GgufValueType::kUint8 || t == GgufValueType::kInt8 || t == GgufValueType::kUint16 ||
         t == GgufValueType::kInt16 || t == GgufValueType::kUint32 || t == GgufValueType::kInt32 ||
         t == GgufValueType::kUint64 || t == GgufValueType::kInt64;
}

// An integer key in [0, UINT32_MAX]; `fallback` when absent (Corruption when absent and none).
Result<uint32_t> GetU32(const GgufFile& file, std::string_view key,
                        std::optional<uint32_t> fallback = std::nullopt) {
  const GgufValue* v = file.FindValue(key);
  if (v == nullptr) {
    if (fallback.has_value()) return *fallback;
    return Status::Corruption("GGUF is missing the required key " + std::string(key));
  }
  const bool is_signed = v->type == GgufValueType::kInt8 || v->type == GgufValueType::kInt16 ||
                         v->type == GgufValueType::kInt32 || v->type == GgufValueType::kInt64;
  if (!IsIntegerType(v->type) || (is_signed && v->integer < 0) ||
      (!is_signed && v->unsigned_integer > UINT32_MAX) || (is_signed && v->integer > UINT32_MAX)) {
    return Status::Corruption("GGUF key " + std::string(key) + " must be an integer in [0, 2^32)");
  }
  return is_signed ? static_cast<uint32_t>(v->integer) : static_cast<uint32_t>(v->unsigned_integer);
}

Result<float> GetF32(const GgufFile& file, std::string_view key, float fallback) {
  const GgufValue* v = file.FindValue(key);
  if (v == nullptr) return fallback;
  if (v->type != GgufValueType::kFloat32 && v->type != GgufValueType::kFloat64) {
    return Status::Corruption("GGUF key " + std::string(key) + " must be a float");
  }
  return static_cast<float>(v->real);
}

Result<ModelConfig> ConfigFromGguf(const GgufFile& file) {
  const GgufValue* arch = file.FindValue("general.architecture");
  if (arch == nullptr || arch->type != GgufValueType::kString) {
    return Status::Corruption("GGUF is missing general.architecture");
  }
  if (arch->text != "llama") {
    return Status::NotSupported("GGUF architecture '" + EscapeForMessage(arch->text) +
                                "' is not supported (llama)");
  }
  ModelConfig c;
  KV_ASSIGN_OR_RETURN(c.dim, GetU32(file, "llama.embedding_length"));
  KV_ASSIGN_OR_RETURN(c.n_layers, GetU32(file, "llama.block_count"));
  KV_ASSIGN_OR_RETURN(c.hidden_dim, GetU32(file, "llama.feed_forward_length"));
  KV_ASSIGN_OR_RETURN(c.n_heads, GetU32(file, "llama.attention.head_count"));
  KV_ASSIGN_OR_RETURN(c.n_kv_heads, GetU32(file, "llama.attention.head_count_kv", c.n_heads));
  KV_ASSIGN_OR_RETURN(c.seq_len, GetU32(file, "llama.context_length", 2048u));
  KV_ASSIGN_OR_RETURN(c.rms_eps, GetF32(file, "llama.attention.layer_norm_rms_epsilon", 1e-5f));
  KV_ASSIGN_OR_RETURN(c.rope_base, GetF32(file, "llama.rope.freq_base", 10000.0f));
  if (c.n_heads == 0 || c.dim % c.n_heads != 0) {
    return Status::Corruption("GGUF llama.embedding_length " + std::to_string(c.dim) +
                              " is not divisible by llama.attention.head_count " +
                              std::to_string(c.n_heads));
  }
  c.head_dim = c.dim / c.n_heads;
  KV_ASSIGN_OR_RETURN(const uint32_t rope_dims,
                      GetU32(file, "llama.rope.dimension_count", c.head_dim));
  if (rope_dims != c.head_dim) {
    return Status::NotSupported("GGUF llama.rope.dimension_count " + std::to_string(rope_dims) +
                                " != head_dim " + std::to_string(c.head_dim) +
                                " (partial rotary is not supported)");
  }
  const GgufTensorInfo* embd = file.FindTensor("token_embd.weight");
  if (embd == nullptr) return Status::Corruption("GGUF is missing tensor token_embd.weight");
  if (embd->ne[1] > kVocabMax) {
    return Status::Corruption("GGUF vocabulary of " + std::to_string(embd->ne[1]) +
                              " tokens exceeds " + std::to_string(kVocabMax));
  }
  c.vocab_size = static_cast<uint32_t>(embd->ne[1]);
  c.classifier = file.FindTensor("output.weight") != nullptr ? ClassifierMode::kSeparate
                                                             : ClassifierMode::kShared;
  const Status valid = c.Validate();
  if (!valid.ok()) return Status::Corruption("GGUF hyper-parameters: " + valid.message());
  return c;
}

std::string TensorName(WeightKind kind, uint32_t layer) {
  const std::string blk = "blk." + std::to_string(layer) + ".";
  switch (kind) {
    case WeightKind::kTokenEmbedding:
      return "token_embd.weight";
    case WeightKind::kRmsAtt:
      return blk + "attn_norm.weight";
    case WeightKind::kWq:
      return blk + "attn_q.weight";
    case WeightKind::kWk:
      return blk + "attn_k.weight";
    case WeightKind::kWv:
      return blk + "attn_v.weight";
    case WeightKind::kWo:
      return blk + "attn_output.weight";
    case WeightKind::kRmsFfn:
      return blk + "ffn_norm.weight";
    case WeightKind::kW1:
      return blk + "ffn_gate.weight";
    case WeightKind::kW2:
      return blk + "ffn_down.weight";
    case WeightKind::kW3:
      return blk + "ffn_up.weight";
    case WeightKind::kRmsFinal:
      return "output_norm.weight";
    case WeightKind::kClassifier:
      return "output.weight";
  }
  return {};
}

std::string ShapeText(const GgufTensorInfo& t) {
  std::string s = "[";
  for (uint32_t d = 0; d < t.n_dims; ++d) s += (d ? ", " : "") + std::to_string(t.ne[d]);
  return s + "]";
}

// One weight tensor of the model, found in the file with the shape the config gives it.
struct WeightTensor {
  WeightKind kind = WeightKind::kTokenEmbedding;
  uint32_t layer = 0;
  const GgufTensorInfo* info = nullptr;  // Points into the GgufFile.
};

Result<WeightTensor> FindWeightTensor(const GgufFile& file, WeightKind kind, uint32_t layer,
                                      const TensorShape& shape) {
  const std::string name = TensorName(kind, layer);
  const GgufTensorInfo* t = file.FindTensor(name);
  if (t == nullptr) return Status::Corruption("GGUF is missing tensor " + name);
  if (t->ne[0] != shape.cols || t->ne[1] != shape.rows || t->ne[2] != 1 || t->ne[3] != 1) {
    return Status::Corruption("GGUF tensor " + name + " has shape " + ShapeText(*t) +
                              ", expected [" + std::to_string(shape.cols) + ", " +
                              std::to_string(shape.rows) + "]");
  }
  return WeightTensor{.kind = kind, .layer = layer, .info = t};
}

// Every weight tensor the config needs, each present with its shape. ParseGguf has placed each
// tensor inside the file, so together they bound the weights by the file's size.
Result<std::vector<WeightTensor>> FindWeightTensors(const GgufFile& file,
                                                    const ModelConfig& config) {
  std::vector<WeightTensor> found;
  for (size_t k = 0; k < kWeightKindCount; ++k) {
    const auto kind = static_cast<WeightKind>(k);
    if (kind == WeightKind::kClassifier && config.classifier == ClassifierMode::kShared) continue;
    const uint32_t copies = IsPerLayer(kind) ? config.n_layers : 1;
    for (uint32_t layer = 0; layer < copies; ++layer) {
      KV_ASSIGN_OR_RETURN(WeightTensor t,
                          FindWeightTensor(file, kind, layer, ShapeOf(config, kind)));
      found.push_back(t);
    }
  }
  return found;
}

// Copies (converting F16) a tensor FindWeightTensor checked into `dst`, its size in floats.
void CopyTensor(std::span<const std::byte> bytes, const GgufTensorInfo& t, std::span<float> dst) {
  const std::byte* src = bytes.data() + t.file_offset_bytes;
  if (t.type == GgmlType::kF32) {
    std::memcpy(dst.data(), src, dst.size() * sizeof(float));
    return;
  }
  // F16: convert in pieces through an aligned staging row (the file offset may be odd-aligned
  // for uint16_t only if general.alignment is 1; memcpy keeps that well-defined).
  const AttentionKernels& k = GetAttentionKernels();
  uint16_t staging[4096];
  for (size_t done = 0; done < dst.size();) {
    const size_t n = std::min<size_t>(std::size(staging), dst.size() - done);
    std::memcpy(staging, src + done * 2, n * 2);
    k.half_to_float(staging, n, dst.data() + done);
    done += n;
  }
}

// SentencePiece writes a space as U+2581 ("\xe2\x96\x81"); pieces here hold plain spaces.
std::string ReplaceSentencePieceSpaces(std::string_view piece) {
  constexpr std::string_view kSpaceMark = "\xe2\x96\x81";
  std::string out;
  out.reserve(piece.size());
  for (size_t i = 0; i < piece.size();) {
    if (piece.substr(i, kSpaceMark.size()) == kSpaceMark) {
      out.push_back(' ');
      i += kSpaceMark.size();
    } else {
      out.push_back(piece[i++]);
    }
  }
  return out;
}

Result<std::optional<Tokenizer>> TokenizerFromGguf(const GgufFile& file, uint32_t vocab_size) {
  const GgufValue* model = file.FindValue("tokenizer.ggml.model");
  const GgufValue* tokens = file.FindValue("tokenizer.ggml.tokens");
  if (model == nullptr || model->text != "llama" || tokens == nullptr) return std::nullopt;
  if (tokens->array_type != GgufValueType::kString || tokens->strings.size() != vocab_size) {
    return Status::Corruption("GGUF tokenizer.ggml.tokens must be " + std::to_string(vocab_size) +
                              " strings, like token_embd.weight");
  }
  Tokenizer::Vocabulary vocab;
  vocab.pieces = tokens->strings;
  for (std::string& piece : vocab.pieces) piece = ReplaceSentencePieceSpaces(piece);
  const GgufValue* scores = file.FindValue("tokenizer.ggml.scores");
  vocab.scores.assign(vocab_size, 0.0f);
  if (scores != nullptr) {
    if (scores->numbers.size() != vocab_size) {
      return Status::Corruption("GGUF tokenizer.ggml.scores has the wrong length");
    }
    for (size_t i = 0; i < vocab_size; ++i)
      vocab.scores[i] = static_cast<float>(scores->numbers[i]);
  }
  const GgufValue* types = file.FindValue("tokenizer.ggml.token_type");
  if (types != nullptr) {
    if (types->numbers.size() != vocab_size) {
      return Status::Corruption("GGUF tokenizer.ggml.token_type has the wrong length");
    }
    for (const double t : types->numbers) {
      vocab.types.push_back(static_cast<TokenType>(static_cast<int32_t>(t)));
    }
  }
  KV_ASSIGN_OR_RETURN(vocab.bos_id, GetU32(file, "tokenizer.ggml.bos_token_id", 1u));
  KV_ASSIGN_OR_RETURN(vocab.eos_id, GetU32(file, "tokenizer.ggml.eos_token_id", 2u));
  KV_ASSIGN_OR_RETURN(vocab.unk_id, GetU32(file, "tokenizer.ggml.unknown_token_id", 0u));
  Result<Tokenizer> tokenizer = Tokenizer::FromVocabulary(std::move(vocab));
  if (!tokenizer.ok()) return Status::Corruption("GGUF tokenizer: " + tokenizer.status().message());
  return std::optional<Tokenizer>(std::move(*tokenizer));
}

}  // namespace

Result<GgufModel> ParseGgufModel(std::span<const std::byte> bytes) {
  KV_ASSIGN_OR_RETURN(const GgufFile file, ParseGguf(bytes));
  KV_ASSIGN_OR_RETURN(const ModelConfig config, ConfigFromGguf(file));
  // Tensors first: hyper-parameters alone may claim a model of terabytes, which must fail on the
  // missing tensors rather than be allocated.
  KV_ASSIGN_OR_RETURN(const std::vector<WeightTensor> tensors, FindWeightTensors(file, config));
  KV_ASSIGN_OR_RETURN(ModelWeights weights, ModelWeights::Allocate(config));
  for (const WeightTensor& t : tensors) {
    CopyTensor(bytes, *t.info, weights.Mutable(t.kind, t.layer));
  }
  KV_ASSIGN_OR_RETURN(std::optional<Tokenizer> tokenizer,
                      TokenizerFromGguf(file, config.vocab_size));
  return GgufModel{std::move(weights), std::move(tokenizer)};
}

Result<GgufModel> LoadGgufModel(const std::string& path) {
  KV_ASSIGN_OR_RETURN(MappedFile file, MappedFile::Open(path));
  Result<GgufModel> model = ParseGgufModel(file.bytes());
  if (!model.ok()) return model.status().WithContext(path);
  return model;
}

}  // namespace kvtier::runtime
