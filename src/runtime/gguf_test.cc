// Goal: GGUF v3 llama files load exactly (F32 and F16 tensors, tied or separate classifier,
// SentencePiece vocabulary), the real stories260K.gguf equals its llama2.c original, and every
// malformed variant gives a Status naming the problem: bad magic, wrong version, truncation at
// any byte, absurd counts and lengths, overflowing dimensions, unsupported tensor types,
// tensors out of bounds / misaligned / overlapping, missing tensors, wrong shapes, bad
// hyper-parameters; names and strings of the file reach messages escaped (no control byte).
// Method: a small GGUF writer below builds images from synthetic weights; hostile variants are
// built with the writer or by patching bytes, and each is checked for its code and message.
// Every prefix of a valid image must fail to parse without crashing.
#include "runtime/gguf.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/coding.h"
#include "runtime/kernels.h"
#include "runtime/model_loader.h"
#include "runtime/synthetic.h"
#include "runtime/test_util.h"

namespace kvtier::runtime {
namespace {

// Builds GGUF v3 images field by field (test-only).
class GgufWriter {
 public:
  void Str(std::string* o, const std::string& s) {
    PutFixed64(o, s.size());
    *o += s;
  }
  void Key(const std::string& k, GgufValueType t) {
    Str(&kv_, k);
    PutFixed32(&kv_, static_cast<uint32_t>(t));
    ++kv_count_;
  }
  void U32(const std::string& k, uint32_t v) {
    Key(k, GgufValueType::kUint32);
    PutFixed32(&kv_, v);
  }
  void F32(const std::string& k, float v) {
    Key(k, GgufValueType::kFloat32);
    uint32_t b;
    std::memcpy(&b, &v, 4);
    PutFixed32(&kv_, b);
  }
  void String(const std::string& k, const std::string& v) {
    Key(k, GgufValueType::kString);
    Str(&kv_, v);
  }
  void RawU64(uint64_t v) { PutFixed64(&kv_, v); }
  void ArrayHeader(const std::string& k, GgufValueType elem, uint64_t count) {
    Key(k, GgufValueType::kArray);
    PutFixed32(&kv_, static_cast<uint32_t>(elem));
    PutFixed64(&kv_, count);
  }
  void Strings(const std::string& k, const std::vector<std::string>& v) {
    ArrayHeader(k, GgufValueType::kString, v.size());
    for (const auto& s : v) Str(&kv_, s);
  }
  void Floats(const std::string& k, const std::vector<float>& v) {
    ArrayHeader(k, GgufValueType::kFloat32, v.size());
    for (float f : v) {
      uint32_t b;
      std::memcpy(&b, &f, 4);
      PutFixed32(&kv_, b);
    }
  }
  // `ne` innermost first; `data` raw bytes; offset_override replaces the computed offset.
  void Tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, std::string data,
              uint64_t offset_override = UINT64_MAX) {
    tensors_.push_back({name, std::move(ne), type, std::move(data), offset_override});
  }
  std::string Finish(uint32_t version = 3, uint32_t alignment = 32) {
    std::string out, infos, data;
    PutFixed32(&out, kGgufMagic);
    PutFixed32(&out, version);
    PutFixed64(&out, tensors_.size());
    PutFixed64(&out, kv_count_);
    out += kv_;
    for (const auto& t : tensors_) {
      while (data.size() % alignment != 0) data.push_back('\0');
      Str(&infos, t.name);
      PutFixed32(&infos, static_cast<uint32_t>(t.ne.size()));
      for (uint64_t d : t.ne) PutFixed64(&infos, d);
      PutFixed32(&infos, t.type);
      PutFixed64(&infos, t.offset_override != UINT64_MAX ? t.offset_override : data.size());
      data += t.data;
    }
    out += infos;
    while (out.size() % alignment != 0) out.push_back('\0');
    return out + data;
  }

 private:
  struct T {
    std::string name;
    std::vector<uint64_t> ne;
    uint32_t type;
    std::string data;
    uint64_t offset_override;
  };
  std::string kv_;
  uint64_t kv_count_ = 0;
  std::vector<T> tensors_;
};

ModelConfig TinyConfig() {
  return ModelConfig{.dim = 16,
                     .hidden_dim = 24,
                     .n_layers = 2,
                     .n_heads = 4,
                     .n_kv_heads = 2,
                     .head_dim = 4,
                     .vocab_size = 262,
                     .seq_len = 64,
                     .classifier = ClassifierMode::kSeparate};
}

std::vector<std::string> Pieces(uint32_t n) {
  std::vector<std::string> p = {"<unk>", "<s>", "</s>"};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    p.emplace_back(buf);
  }
  const char* extra[] = {"\xe2\x96\x81", "a", "\xe2\x96\x81\x61"};  // "▁", "a", "▁a".
  for (size_t i = 0; p.size() < n; ++i) p.emplace_back(extra[i % 3]);
  return p;
}

std::string FloatBytes(std::span<const float> v, bool f16) {
  if (!f16) return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
  std::string out(v.size() * 2, '\0');
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t h = ref::FloatToHalf(v[i]);
    std::memcpy(out.data() + 2 * i, &h, 2);
  }
  return out;
}

struct Variant {
  bool f16 = false;
  bool tied = false;
  std::string skip_tensor;         // Leave this tensor out.
  std::string wrong_shape_tensor;  // Give this tensor a transposed shape.
  uint32_t head_count = 4;
  std::string arch = "llama";
};

// A GGUF image of synthetic weights; hyper-parameters written into `w` by the caller first.
std::string Image(const ModelWeights& weights, const Variant& v, GgufWriter w = GgufWriter()) {
  const ModelConfig& c = weights.config();
  w.String("general.architecture", v.arch);
  w.U32("llama.embedding_length", c.dim);
  w.U32("llama.block_count", c.n_layers);
  w.U32("llama.feed_forward_length", c.hidden_dim);
  w.U32("llama.attention.head_count", v.head_count);
  w.U32("llama.attention.head_count_kv", c.n_kv_heads);
  w.U32("llama.context_length", c.seq_len);
  w.F32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.String("tokenizer.ggml.model", "llama");
  w.Strings("tokenizer.ggml.tokens", Pieces(c.vocab_size));
  w.Floats("tokenizer.ggml.scores", std::vector<float>(c.vocab_size, 0.0f));
  auto add = [&](const std::string& name, WeightKind kind, uint32_t layer) {
    if (name == v.skip_tensor) return;
    const TensorShape s = ShapeOf(c, kind);
    std::vector<uint64_t> ne =
        s.rows == 1 ? std::vector<uint64_t>{s.cols} : std::vector<uint64_t>{s.cols, s.rows};
    if (name == v.wrong_shape_tensor) std::swap(ne[0], ne[1]);
    w.Tensor(name, ne, v.f16 ? 1 : 0, FloatBytes(weights.Get(kind, layer), v.f16));
  };
  add("token_embd.weight", WeightKind::kTokenEmbedding, 0);
  add("output_norm.weight", WeightKind::kRmsFinal, 0);
  if (!v.tied) add("output.weight", WeightKind::kClassifier, 0);
  const std::pair<const char*, WeightKind> per_layer[] = {
      {"attn_norm", WeightKind::kRmsAtt}, {"attn_q", WeightKind::kWq},
      {"attn_k", WeightKind::kWk},        {"attn_v", WeightKind::kWv},
      {"attn_output", WeightKind::kWo},   {"ffn_norm", WeightKind::kRmsFfn},
      {"ffn_gate", WeightKind::kW1},      {"ffn_down", WeightKind::kW2},
      {"ffn_up", WeightKind::kW3}};
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    for (const auto& [n, kind] : per_layer) {
      add("blk." + std::to_string(l) + "." + n + ".weight", kind, l);
    }
  }
  return w.Finish();
}

std::span<const std::byte> Bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

ModelWeights Synthetic(ClassifierMode mode = ClassifierMode::kSeparate) {
  ModelConfig c = TinyConfig();
  c.classifier = mode;
  return std::move(MakeSyntheticWeights(c, 11).value());
}

void ExpectModelError(const std::string& image, StatusCode code, const std::string& needle) {
  auto r = ParseGgufModel(Bytes(image));
  ASSERT_FALSE(r.ok()) << "expected an error mentioning '" << needle << "'";
  EXPECT_EQ(r.status().code(), code) << r.status().ToString();
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().ToString();
}

TEST(GgufTest, LoadsF32AndF16Exactly) {
  for (bool f16 : {false, true}) {
    for (bool tied : {false, true}) {
      const ModelWeights w = Synthetic(tied ? ClassifierMode::kShared : ClassifierMode::kSeparate);
      auto m = ParseGgufModel(Bytes(Image(w, {.f16 = f16, .tied = tied})));
      ASSERT_TRUE(m.ok()) << m.status().ToString();
      EXPECT_EQ(m->weights.config().classifier, w.config().classifier);
      EXPECT_EQ(m->weights.config().head_dim, 4u);
      ModelWeights& got = m->weights;
      const auto a = got.MutableAll();
      const auto b = const_cast<ModelWeights&>(w).MutableAll();
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i) {
        const float want = f16 ? ref::HalfToFloat(ref::FloatToHalf(b[i])) : b[i];
        ASSERT_EQ(a[i], want) << "element " << i;
      }
      ASSERT_TRUE(m->tokenizer.has_value());
      EXPECT_EQ(m->tokenizer->Piece(259), " ");  // U+2581 became a space.
    }
  }
}

TEST(GgufTest, EveryPrefixFailsCleanly) {
  const std::string image = Image(Synthetic(), {});
  for (size_t len = 0; len < image.size(); len += (len < 2000 ? 1 : 97)) {
    auto r = ParseGgufModel(Bytes(image.substr(0, len)));
    ASSERT_FALSE(r.ok()) << len;
    EXPECT_TRUE(r.status().IsCorruption()) << len << ": " << r.status().ToString();
  }
}

TEST(GgufTest, RejectsBadHeader) {
  std::string image = Image(Synthetic(), {});
  std::string bad_magic = image;
  bad_magic[0] = 'X';
  ExpectModelError(bad_magic, StatusCode::kCorruption, "bad magic");
  std::string v2 = image;
  EncodeFixed32(reinterpret_cast<std::byte*>(v2.data()) + 4, 2);
  ExpectModelError(v2, StatusCode::kNotSupported, "version 2");
  std::string many_tensors = image;
  EncodeFixed64(reinterpret_cast<std::byte*>(many_tensors.data()) + 8, uint64_t{1} << 40);
  ExpectModelError(many_tensors, StatusCode::kCorruption, "tensors");
  std::string many_keys = image;
  EncodeFixed64(reinterpret_cast<std::byte*>(many_keys.data()) + 16, uint64_t{1} << 40);
  ExpectModelError(many_keys, StatusCode::kCorruption, "metadata keys");
}

TEST(GgufTest, RejectsHostileMetadata) {
  const ModelWeights w = Synthetic();
  GgufWriter absurd_vocab;
  absurd_vocab.ArrayHeader("x.vocab", GgufValueType::kString, uint64_t{1} << 40);
  ExpectModelError(Image(w, {}, absurd_vocab), StatusCode::kCorruption, "array of");
  GgufWriter long_string;
  long_string.Key("x.name", GgufValueType::kString);
  long_string.RawU64(uint64_t{1} << 40);
  ExpectModelError(Image(w, {}, long_string), StatusCode::kCorruption, "metadata string length");
  GgufWriter nested;
  nested.ArrayHeader("x.nested", GgufValueType::kArray, 1);
  ExpectModelError(Image(w, {}, nested), StatusCode::kNotSupported, "nested");
  GgufWriter duplicate;
  duplicate.U32("llama.block_count", 2);
  ExpectModelError(Image(w, {}, duplicate), StatusCode::kCorruption, "duplicate");
  GgufWriter bad_type;
  bad_type.Key("x.t", static_cast<GgufValueType>(99));
  ExpectModelError(Image(w, {}, bad_type), StatusCode::kCorruption, "unknown value type");
  GgufWriter bad_align;
  bad_align.U32("general.alignment", 3);
  ExpectModelError(Image(w, {}, bad_align), StatusCode::kCorruption, "general.alignment");
}

TEST(GgufTest, RejectsHostileTensors) {
  const ModelWeights w = Synthetic();
  GgufWriter overflow;
  overflow.Tensor("x.big", {uint64_t{1} << 32, uint64_t{1} << 32, 16}, 0, "");
  ExpectModelError(Image(w, {}, overflow), StatusCode::kCorruption, "overflows");
  GgufWriter out_of_bounds;
  out_of_bounds.Tensor("x.oob", {8}, 0, "", uint64_t{1} << 40);
  ExpectModelError(Image(w, {}, out_of_bounds), StatusCode::kCorruption, "outside the file");
  GgufWriter wrapping;
  wrapping.Tensor("x.wrap", {8}, 0, "", UINT64_MAX - 31);
  ExpectModelError(Image(w, {}, wrapping), StatusCode::kCorruption, "outside the file");
  GgufWriter misaligned;
  misaligned.Tensor("x.mis", {1}, 0, std::string(4, '\0'), 4);
  ExpectModelError(Image(w, {}, misaligned), StatusCode::kCorruption, "not aligned");
  GgufWriter overlapping;
  overlapping.Tensor("x.a", {64}, 0, std::string(256, '\0'), 32);
  ExpectModelError(Image(w, {}, overlapping), StatusCode::kCorruption, "overlap");
  GgufWriter quantized;
  quantized.Tensor("x.q4", {32}, 2, std::string(18, '\0'));
  ExpectModelError(Image(w, {}, quantized), StatusCode::kNotSupported, "unsupported ggml type 2");
  GgufWriter five_dims;
  five_dims.Tensor("x.5d", {1, 1, 1, 1, 1}, 0, std::string(4, '\0'));
  ExpectModelError(Image(w, {}, five_dims), StatusCode::kCorruption, "dimensions");
  GgufWriter dup;
  dup.Tensor("output_norm.weight", {16}, 0, std::string(64, '\0'));
  ExpectModelError(Image(w, {}, dup), StatusCode::kCorruption, "duplicate tensor");
}

TEST(GgufTest, RejectsBadModel) {
  const ModelWeights w = Synthetic();
  ExpectModelError(Image(w, {.skip_tensor = "blk.1.ffn_up.weight"}), StatusCode::kCorruption,
                   "missing tensor blk.1.ffn_up.weight");
  ExpectModelError(Image(w, {.wrong_shape_tensor = "blk.0.attn_k.weight"}), StatusCode::kCorruption,
                   "blk.0.attn_k.weight has shape [8, 16]");
  ExpectModelError(Image(w, {.head_count = 3}), StatusCode::kCorruption, "not divisible");
  // 8 heads of 2: queries stay 16 wide, but K/V shrink to 2 kv heads * 2 = 4 rows.
  ExpectModelError(Image(w, {.head_count = 8}), StatusCode::kCorruption,
                   "blk.0.attn_k.weight has shape [16, 8], expected [16, 4]");
  ExpectModelError(Image(w, {.arch = "gpt2"}), StatusCode::kNotSupported, "architecture 'gpt2'");
}

// True when every byte of `s` is printable ASCII (no terminal escape, NUL or newline).
bool AllPrintable(const std::string& s) {
  for (char c : s) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

TEST(GgufTest, MessagesShowFileBytesEscaped) {
  const ModelWeights w = Synthetic();
  const std::string hostile("x\x1b[2J\0y", 8);  // Clear-screen escape and a NUL.
  const std::string shown = "x\\x1b[2J\\x00y";
  GgufWriter bad_type;
  bad_type.Key(hostile, static_cast<GgufValueType>(99));
  GgufWriter duplicate;
  duplicate.U32(hostile, 1);
  duplicate.U32(hostile, 2);
  GgufWriter nested;
  nested.ArrayHeader(hostile, GgufValueType::kArray, 1);
  GgufWriter tensor;
  tensor.Tensor(hostile, {32}, 2, std::string(18, '\0'));
  GgufWriter long_key;
  long_key.Key(std::string(100000, '\x1b'), static_cast<GgufValueType>(99));
  const std::string images[] = {Image(w, {}, bad_type), Image(w, {}, duplicate),
                                Image(w, {}, nested), Image(w, {}, tensor),
                                Image(w, {.arch = hostile})};
  for (const std::string& image : images) {
    auto r = ParseGgufModel(Bytes(image));
    ASSERT_FALSE(r.ok());
    const std::string message = r.status().ToString();
    EXPECT_TRUE(AllPrintable(message)) << message;
    EXPECT_NE(message.find(shown), std::string::npos) << message;
  }
  auto r = ParseGgufModel(Bytes(Image(w, {}, long_key)));
  ASSERT_FALSE(r.ok());
  const std::string message = r.status().ToString();
  EXPECT_TRUE(AllPrintable(message)) << message;
  EXPECT_NE(message.find("... (100000 bytes)"), std::string::npos) << message;
  EXPECT_LT(message.size(), 200u) << message;
}

// Hyper-parameters alone can claim a model of hundreds of terabytes in a file of a few hundred
// bytes (the GGUF fuzzer found one asking for 13 GB): the tensors the file lacks are reported
// before any weight is allocated, so the claim fails as Corruption instead of allocating.
TEST(GgufTest, HugeHyperParametersWithoutTheirTensorsFailBeforeAllocating) {
  GgufWriter w;
  w.String("general.architecture", "llama");
  w.U32("llama.embedding_length", 65536);
  w.U32("llama.block_count", 1024);
  w.U32("llama.feed_forward_length", 1u << 18);
  w.U32("llama.attention.head_count", 64);
  w.Tensor("token_embd.weight", {8, 8}, 0, std::string(8 * 8 * 4, '\0'));
  ExpectModelError(w.Finish(), StatusCode::kCorruption, "token_embd.weight has shape");
}

TEST(GgufTest, Stories260KEqualsLlama2cOriginal) {
  KV_SKIP_WITHOUT_MODEL("stories260K.gguf");
  KV_SKIP_WITHOUT_MODEL("stories260K.bin");
  auto gguf = LoadGgufModel(testing::SharedModelPath("stories260K.gguf"));
  ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
  auto bin = LoadLlama2cCheckpoint(testing::SharedModelPath("stories260K.bin"));
  ASSERT_TRUE(bin.ok());
  const ModelConfig& c = gguf->weights.config();
  EXPECT_EQ(c.dim, 64u);
  EXPECT_EQ(c.n_kv_heads, 4u);
  EXPECT_EQ(c.seq_len, 128u);  // The converter's hard-coded context_length.
  EXPECT_EQ(c.classifier, ClassifierMode::kSeparate);
  for (size_t k = 0; k + 1 < kWeightKindCount; ++k) {
    const auto kind = static_cast<WeightKind>(k);
    for (uint32_t l = 0; l < (IsPerLayer(kind) ? c.n_layers : 1); ++l) {
      const auto a = gguf->weights.Get(kind, l);
      const auto b = bin->Get(kind, l);
      ASSERT_EQ(a.size(), b.size());
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << WeightKindName(kind) << l;
    }
  }
  const auto cls = gguf->weights.Get(WeightKind::kClassifier);
  const auto emb = bin->Get(WeightKind::kTokenEmbedding);
  EXPECT_EQ(std::memcmp(cls.data(), emb.data(), cls.size() * 4), 0);
  ASSERT_TRUE(gguf->tokenizer.has_value());
  EXPECT_EQ(gguf->tokenizer->bos_id(), 1u);
}

}  // namespace
}  // namespace kvtier::runtime
