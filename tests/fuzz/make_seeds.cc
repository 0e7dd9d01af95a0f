// Writes the seed corpora of the fuzz harnesses (tests/fuzz/corpus/<harness>/): for each
// decoder, a few small valid inputs made with the project's own encoders, and near-valid ones
// (truncated, one field off, a checksum left stale) that stop at different checks. Seeds carry
// the leading mode byte of the harnesses that take one (see each harness's comment).
//
// Usage: kvtier_fuzz_make_seeds <corpus dir>   (built by the fuzz preset; run after a format
// change, then commit what changed). Output is deterministic, except sealed remote values (each
// seal draws a fresh nonce).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "codecs/codec.h"
#include "core/coding.h"
#include "runtime/gguf.h"
#include "runtime/kernels.h"
#include "runtime/model_config.h"
#include "runtime/model_weights.h"
#include "tiers/fs/fs_store.h"
#include "tiers/fs/fuzz/fs_fuzz_block.h"
#include "tiers/remote_crypto.h"
#include "tiers/remote_store.h"
#include "tiers/ssd/ssd_checkpoint.h"
#include "tiers/ssd/ssd_manifest.h"
#include "tiers/ssd_record.h"

namespace kvtier::fuzz {
namespace {

namespace fs = std::filesystem;

std::string AsString(std::span<const std::byte> b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

void Write(const fs::path& dir, const std::string& harness, const std::string& name,
           const std::string& bytes) {
  fs::create_directories(dir / harness);
  std::ofstream(dir / harness / name, std::ios::binary) << bytes;
}

// A mode byte followed by the bytes.
std::string Mode(uint8_t mode, const std::string& bytes) {
  return std::string(1, static_cast<char>(mode)) + bytes;
}

BlockKey Key(uint8_t fill, uint32_t layer) {
  BlockKey key;
  key.chunk_hash.fill(fill);
  key.layer = layer;
  return key;
}

std::string Payload(size_t n) {
  std::string p(n, '\0');
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<char>(i * 7 + 3);
  return p;
}

std::span<const std::byte> Bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

void SsdSeeds(const fs::path& dir) {
  ssd::RecordHeader h{.codec_id = 2, .key = Key(0xab, 5), .raw_bytes = 256, .payload_bytes = 64,
                      .sequence = 9, .segment_id = 3, .segment_offset = 4096};
  h.layout_digest.fill(0x11);
  const std::string payload = Payload(64);
  std::vector<std::byte> record(ssd::RecordBytesForPayload(64));
  ssd::EncodeRecord(h, Bytes(payload), record);
  const std::string whole = AsString(std::span(record).first(ssd::kRecordHeaderBytes + 64));
  Write(dir, "ssd_record_fuzzer", "valid", Mode(0, whole));
  Write(dir, "ssd_record_fuzzer", "valid_small_segment", Mode(2, whole));
  Write(dir, "ssd_record_fuzzer", "truncated_payload", Mode(1, whole.substr(0, 150)));
  std::string flipped = whole;
  flipped[ssd::kRecordHeaderBytes + 3] ^= 1;
  Write(dir, "ssd_record_fuzzer", "payload_crc_stale", Mode(0, flipped));
  ssd::RecordHeader t{.flags = ssd::kRecordFlagTombstone, .key = Key(0xab, 5), .sequence = 10,
                      .segment_id = 3, .segment_offset = 8192};
  std::vector<std::byte> tomb(ssd::RecordBytesForPayload(0));
  ssd::EncodeRecord(t, {}, tomb);
  Write(dir, "ssd_record_fuzzer", "tombstone",
        Mode(0, AsString(std::span(tomb).first(ssd::kRecordHeaderBytes))));

  std::vector<std::byte> seg(ssd::kSegmentHeaderBytes);
  ssd::EncodeSegmentHeader({.segment_id = 7, .segment_bytes = ssd::kSegmentBytesDefault,
                            .created_wall_us = 1234567},
                           seg);
  const std::string header = AsString(std::span(seg).first(64));
  Write(dir, "ssd_segment_header_fuzzer", "valid", Mode(0, header));
  std::string reserved = header;
  reserved[6] = 1;
  Write(dir, "ssd_segment_header_fuzzer", "reserved_set", Mode(1, reserved));
  Write(dir, "ssd_segment_header_fuzzer", "short", Mode(0, header.substr(0, 20)));
  Write(dir, "ssd_segment_header_fuzzer", "name", Mode(0, ssd::SegmentFileName(0xff)));
}

void CheckpointSeeds(const fs::path& dir) {
  ssd::Checkpoint c{.dir_count = 2, .segment_bytes = ssd::kSegmentBytesDefault,
                    .next_sequence = 40, .next_segment_id = 9, .written_wall_us = 77};
  c.segments = {{.segment_id = 3, .dir_index = 0, .scan_from = 16384},
                {.segment_id = 8, .dir_index = 1, .scan_from = 8192}};
  c.entries.push_back({Key(1, 0), {.segment_id = 3, .segment_offset = 4096, .payload_bytes = 64,
                                   .raw_bytes = 256, .codec_id = 2, .sequence = 5}});
  c.entries.push_back({Key(2, 1), {.segment_id = 8, .segment_offset = 4096, .payload_bytes = 9,
                                   .raw_bytes = 9, .codec_id = 1, .referenced = true,
                                   .sequence = 30, .expiry_wall_us = 99}});
  c.tombstones.push_back({Key(3, 0), {.segment_id = 8, .sequence = 31}});
  const std::string full = ssd::EncodeCheckpoint(c);
  Write(dir, "ssd_checkpoint_fuzzer", "valid", Mode(0, full));
  const ssd::Checkpoint empty{.dir_count = 1, .segment_bytes = ssd::kSegmentBytesMin};
  Write(dir, "ssd_checkpoint_fuzzer", "empty", Mode(0, ssd::EncodeCheckpoint(empty)));
  Write(dir, "ssd_checkpoint_fuzzer", "truncated", Mode(1, full.substr(0, full.size() - 30)));
  // Version 1: no tombstones, the tombstone count reserved.
  ssd::Checkpoint v1 = c;
  v1.tombstones.clear();
  std::string old = ssd::EncodeCheckpoint(v1);
  old[4] = 1;
  Write(dir, "ssd_checkpoint_fuzzer", "version1", Mode(1, old));
}

void ManifestSeeds(const fs::path& dir) {
  ssd::Manifest m{.format_version = ssd::kManifestVersion, .stripe_index = 1, .stripe_count = 3,
                  .segment_bytes = ssd::kSegmentBytesDefault,
                  .format_digest = ssd::ManifestFormatDigest()};
  for (size_t i = 0; i < m.cache_id.size(); ++i) m.cache_id[i] = static_cast<uint8_t>(i * 17);
  const std::string file = ssd::EncodeManifest(m);
  Write(dir, "ssd_manifest_fuzzer", "valid", Mode(0, file));
  std::string stripe = file;
  stripe[24] = 3;  // stripe_index == stripe_count.
  Write(dir, "ssd_manifest_fuzzer", "stripe_out_of_range", Mode(1, stripe));
  std::string digest = file;
  digest[40] ^= 1;
  Write(dir, "ssd_manifest_fuzzer", "other_format", Mode(1, digest));
  Write(dir, "ssd_manifest_fuzzer", "short", Mode(1, file.substr(0, 40)));
}

void RemoteSeeds(const fs::path& dir) {
  RemoteValueInfo info{.key = Key(0x5a, 3), .codec_id = 1, .raw_bytes = 32};
  info.layout_digest.fill(0x22);
  std::vector<std::byte> value;
  EncodeRemoteValue(info, Bytes(Payload(32)), &value);
  const std::string v = AsString(value);
  Write(dir, "remote_value_fuzzer", "valid_own_key", Mode(2, v));
  Write(dir, "remote_value_fuzzer", "foreign_key", Mode(0, v));
  Write(dir, "remote_value_fuzzer", "long", Mode(3, v + "xx"));
  Write(dir, "remote_value_fuzzer", "header_only", Mode(3, v.substr(0, 128)));
  Write(dir, "remote_value_fuzzer", "seal_and_open", Mode(6, v));
  // Sealed with the harness's key (id 7), for the key name the harness opens it under.
  Result<RemoteKeyring> keyring = RemoteKeyring::Parse(
      "7 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n");
  std::vector<std::byte> sealed;
  if (keyring.ok() && SealRemoteValue(*keyring, "kvtier:{fuzz}:0", value, &sealed).ok()) {
    Write(dir, "remote_value_fuzzer", "sealed", Mode(10, AsString(sealed)));
    std::string other_key = AsString(sealed);
    other_key[8] = 9;
    Write(dir, "remote_value_fuzzer", "sealed_unknown_key_id", Mode(8, other_key));
  }

  const std::string slots =
      "*2\r\n"
      "*3\r\n:0\r\n:8191\r\n*3\r\n$9\r\n127.0.0.1\r\n:7000\r\n$4\r\nnode\r\n"
      "*4\r\n:8192\r\n:16383\r\n*2\r\n$1\r\n?\r\n:7001\r\n*2\r\n$0\r\n\r\n:7002\r\n";
  Write(dir, "redis_reply_fuzzer", "cluster_slots", slots);
  Write(dir, "redis_reply_fuzzer", "moved", "-MOVED 3999 127.0.0.1:6381\r\n");
  Write(dir, "redis_reply_fuzzer", "ask", "-ASK 12 redis-node-2:7000\r\n");
  Write(dir, "redis_reply_fuzzer", "bad_slot", "*1\r\n*3\r\n:9\r\n:3\r\n*2\r\n$1\r\nh\r\n:1\r\n");
  Write(dir, "redis_reply_fuzzer", "bulk_value", "$5\r\nhello\r\n+OK\r\n:42\r\n");
}

// The fs tier's files for fs_file_fuzzer's block (tiers/fs/fuzz/fs_fuzz_block.h), written by an
// FsStore in a temporary directory, plaintext and sealed with the harness's key.
std::string FsFile(bool sealed) {
  char tmpl[] = "/tmp/kvtier-fs-seeds-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return {};
  Result<std::unique_ptr<FsStore>> store =
      FsStore::Open(FsFuzzOptions(std::string(tmpl) + "/store", sealed));
  if (!store.ok()) return {};
  std::string bytes;
  if (PutFsFuzzValue(**store).ok()) {
    std::ifstream in(std::string(tmpl) + "/store/" + (*store)->RelativePath(FsFuzzKey()),
                     std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  store->reset();
  fs::remove_all(tmpl);
  return bytes;
}

void FsSeeds(const fs::path& dir) {
  const std::string plain = FsFile(false);
  const std::string sealed = FsFile(true);
  if (plain.size() < 200 || sealed.size() < 200) {
    std::fprintf(stderr, "make_seeds: the fs tier's files could not be written\n");
    std::exit(1);
  }
  Write(dir, "fs_file_fuzzer", "plain_whole", Mode(0, plain));
  Write(dir, "fs_file_fuzzer", "sealed_whole", Mode(1, sealed));
  Write(dir, "fs_file_fuzzer", "plain_own_prefix", Mode(2, plain.substr(0, 160)));
  Write(dir, "fs_file_fuzzer", "sealed_own_prefix", Mode(3, sealed.substr(0, 40)));
  std::string expired = plain.substr(0, 16);
  expired[8] = 1;  // Expiry: one second after the epoch.
  Write(dir, "fs_file_fuzzer", "plain_expired", Mode(2, expired));
  std::string flipped = plain.substr(0, 200);
  flipped[190] = static_cast<char>(flipped[190] ^ 1);  // A payload byte: the CRC fails.
  Write(dir, "fs_file_fuzzer", "plain_payload_flipped", Mode(2, flipped));
  Write(dir, "fs_file_fuzzer", "sealed_truncated", Mode(1, sealed.substr(0, sealed.size() - 9)));
  Write(dir, "fs_file_fuzzer", "foreign", Mode(0, "not a kvtier value\n"));
}

// Builds GGUF v3 images field by field.
class GgufWriter {
 public:
  void U32(const std::string& k, uint32_t v) {
    Key(k, runtime::GgufValueType::kUint32);
    PutFixed32(&kv_, v);
  }
  void F32(const std::string& k, float v) {
    Key(k, runtime::GgufValueType::kFloat32);
    PutFixed32(&kv_, FloatBits(v));
  }
  void String(const std::string& k, const std::string& v) {
    Key(k, runtime::GgufValueType::kString);
    Str(&kv_, v);
  }
  void Strings(const std::string& k, const std::vector<std::string>& v) {
    Array(k, runtime::GgufValueType::kString, v.size());
    for (const std::string& s : v) Str(&kv_, s);
  }
  void Floats(const std::string& k, const std::vector<float>& v) {
    Array(k, runtime::GgufValueType::kFloat32, v.size());
    for (float f : v) PutFixed32(&kv_, FloatBits(f));
  }
  // `ne` innermost first; `data` raw bytes of ggml type `type` (0 = F32, 1 = F16).
  void Tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, std::string data) {
    tensors_.push_back({name, std::move(ne), type, std::move(data)});
  }
  std::string Finish() const {
    constexpr size_t kAlignment = 32;
    std::string out, data;
    PutFixed32(&out, runtime::kGgufMagic);
    PutFixed32(&out, runtime::kGgufVersion);
    PutFixed64(&out, tensors_.size());
    PutFixed64(&out, kv_count_);
    out += kv_;
    for (const T& t : tensors_) {
      while (data.size() % kAlignment != 0) data.push_back('\0');
      Str(&out, t.name);
      PutFixed32(&out, static_cast<uint32_t>(t.ne.size()));
      for (uint64_t d : t.ne) PutFixed64(&out, d);
      PutFixed32(&out, t.type);
      PutFixed64(&out, data.size());
      data += t.data;
    }
    while (out.size() % kAlignment != 0) out.push_back('\0');
    return out + data;
  }

 private:
  struct T {
    std::string name;
    std::vector<uint64_t> ne;
    uint32_t type;
    std::string data;
  };
  static uint32_t FloatBits(float f) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    return b;
  }
  static void Str(std::string* o, const std::string& s) {
    PutFixed64(o, s.size());
    *o += s;
  }
  void Key(const std::string& k, runtime::GgufValueType t) {
    Str(&kv_, k);
    PutFixed32(&kv_, static_cast<uint32_t>(t));
    ++kv_count_;
  }
  void Array(const std::string& k, runtime::GgufValueType elem, uint64_t count) {
    Key(k, runtime::GgufValueType::kArray);
    PutFixed32(&kv_, static_cast<uint32_t>(elem));
    PutFixed64(&kv_, count);
  }
  std::string kv_;
  uint64_t kv_count_ = 0;
  std::vector<T> tensors_;
};

runtime::ModelConfig TinyConfig(runtime::ClassifierMode classifier) {
  return {.dim = 8, .hidden_dim = 16, .n_layers = 1, .n_heads = 2, .n_kv_heads = 1,
          .head_dim = 4, .vocab_size = 8, .seq_len = 16, .classifier = classifier};
}

const std::vector<std::string>& TinyPieces() {
  static const std::vector<std::string> pieces = {
      "<unk>", "<s>", "</s>", "\xe2\x96\x81", "a", "\xe2\x96\x81" "a", "<0x41>", "on"};
  return pieces;
}

// Weights as F32 or F16 bytes: a small ramp, so every tensor differs.
std::string TensorBytes(uint64_t floats, bool f16) {
  std::string out;
  for (uint64_t i = 0; i < floats; ++i) {
    const float v = static_cast<float>(i % 13) * 0.01f - 0.05f;
    if (f16) {
      PutFixed16(&out, runtime::ref::FloatToHalf(v));
    } else {
      uint32_t b;
      std::memcpy(&b, &v, 4);
      PutFixed32(&out, b);
    }
  }
  return out;
}

std::string GgufImage(bool f16, runtime::ClassifierMode classifier) {
  using runtime::WeightKind;
  const runtime::ModelConfig c = TinyConfig(classifier);
  GgufWriter w;
  w.String("general.architecture", "llama");
  w.U32("llama.embedding_length", c.dim);
  w.U32("llama.block_count", c.n_layers);
  w.U32("llama.feed_forward_length", c.hidden_dim);
  w.U32("llama.attention.head_count", c.n_heads);
  w.U32("llama.attention.head_count_kv", c.n_kv_heads);
  w.U32("llama.context_length", c.seq_len);
  w.F32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.String("tokenizer.ggml.model", "llama");
  w.Strings("tokenizer.ggml.tokens", TinyPieces());
  w.Floats("tokenizer.ggml.scores", {0, 0, 0, -1, -2, -0.5f, 0, -3});
  auto add = [&](const std::string& name, WeightKind kind) {
    const runtime::TensorShape s = runtime::ShapeOf(c, kind);
    std::vector<uint64_t> ne = s.rows == 1 ? std::vector<uint64_t>{s.cols}
                                           : std::vector<uint64_t>{s.cols, s.rows};
    w.Tensor(name, ne, f16 ? 1 : 0, TensorBytes(s.Floats(), f16));
  };
  add("token_embd.weight", WeightKind::kTokenEmbedding);
  add("output_norm.weight", WeightKind::kRmsFinal);
  if (classifier == runtime::ClassifierMode::kSeparate) add("output.weight", WeightKind::kClassifier);
  const std::pair<const char*, WeightKind> per_layer[] = {
      {"attn_norm", WeightKind::kRmsAtt}, {"attn_q", WeightKind::kWq},
      {"attn_k", WeightKind::kWk},        {"attn_v", WeightKind::kWv},
      {"attn_output", WeightKind::kWo},   {"ffn_norm", WeightKind::kRmsFfn},
      {"ffn_gate", WeightKind::kW1},      {"ffn_down", WeightKind::kW2},
      {"ffn_up", WeightKind::kW3}};
  for (const auto& [n, kind] : per_layer) add(std::string("blk.0.") + n + ".weight", kind);
  return w.Finish();
}

void RuntimeSeeds(const fs::path& dir) {
  const std::string f32 = GgufImage(false, runtime::ClassifierMode::kSeparate);
  Write(dir, "gguf_fuzzer", "tiny_f32", f32);
  Write(dir, "gguf_fuzzer", "tiny_f16_tied", GgufImage(true, runtime::ClassifierMode::kShared));
  Write(dir, "gguf_fuzzer", "truncated", f32.substr(0, f32.size() / 2));

  for (const auto classifier : {runtime::ClassifierMode::kShared, runtime::ClassifierMode::kSeparate}) {
    const runtime::ModelConfig c = TinyConfig(classifier);
    const bool shared = classifier == runtime::ClassifierMode::kShared;
    std::string file;
    const uint32_t header[7] = {c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads,
                                c.vocab_size, c.seq_len};
    for (size_t i = 0; i < 7; ++i) {
      const bool negate = i == 5 && !shared;  // A negative vocab_size: separate classifier.
      PutFixed32(&file, negate ? 0u - header[i] : header[i]);
    }
    // The whole checkpoint: body, the legacy RoPE tables, then the classifier when separate.
    file += TensorBytes(c.WeightFloats() + uint64_t{c.seq_len} * c.head_dim, false);
    Write(dir, "llama2c_fuzzer", shared ? "tiny_shared" : "tiny_separate", file);
    if (shared) Write(dir, "llama2c_fuzzer", "header_only", file.substr(0, 28));
  }

  std::string tok;
  PutFixed16(&tok, 8);  // The harness's token count.
  PutFixed32(&tok, 8);  // max_token_length
  for (size_t i = 0; i < TinyPieces().size(); ++i) {
    const float score = -static_cast<float>(i);
    uint32_t b;
    std::memcpy(&b, &score, 4);
    PutFixed32(&tok, b);
    PutFixed32(&tok, static_cast<uint32_t>(TinyPieces()[i].size()));
    tok += TinyPieces()[i];
  }
  Write(dir, "tokenizer_fuzzer", "tiny", tok);
  Write(dir, "tokenizer_fuzzer", "trailing", tok + "x");
  std::string fewer = tok;
  fewer[0] = 9;
  Write(dir, "tokenizer_fuzzer", "count_mismatch", fewer);

  Write(dir, "token_file_fuzzer", "ids", "1 306 4874 263\n29871\t13\r\n");
  Write(dir, "token_file_fuzzer", "max_u32", "4294967295 0\n");
  Write(dir, "token_file_fuzzer", "out_of_range", "4294967296\n");
  Write(dir, "token_file_fuzzer", "not_a_number", "12 x3 7\n");
}

void CodecSeeds(const fs::path& dir) {
  Result<codecs::CodecContext> ctx = codecs::CodecContext::Create();
  if (!ctx.ok()) return;
  const codecs::BlockGeometry g{.tokens = 16, .kv_heads = 2, .head_dim = 8,
                                .dtype = codecs::DType::kF16};
  const std::string raw = TensorBytes(g.raw_bytes() / 2, true);
  const std::pair<const char*, codecs::CodecParams> codecs_used[] = {
      {"identity", codecs::CodecParams::Identity()},
      {"shuffle_zstd", codecs::CodecParams::ShuffleZstd(1)},
      {"int8", codecs::CodecParams::Int8(32, 0)},
      {"int4_zstd", codecs::CodecParams::Int4(32, 3)},
      {"int8_rot", codecs::CodecParams::Quantized(codecs::CodecId::kInt8Rot, 16)},
      {"int4_rot_zstd", codecs::CodecParams::Quantized(codecs::CodecId::kInt4Rot, 8, 1)},
      {"k8v4", codecs::CodecParams::Quantized(codecs::CodecId::kK8V4, 16)},
      {"k8v4_rot", codecs::CodecParams::Quantized(codecs::CodecId::kK8V4Rot, 32)},
      {"ecq5", codecs::CodecParams::Ecq(codecs::CodecId::kEcq5)},
      {"ecq6_zstd3", codecs::CodecParams::Ecq(codecs::CodecId::kEcq6, 3)},
      {"ecq6v5", codecs::CodecParams::Ecq(codecs::CodecId::kEcq6V5)}};
  for (const auto& [name, params] : codecs_used) {
    std::vector<std::byte> out(codecs::MaxEncodedSize(params, g).value());
    Result<size_t> n = codecs::EncodeBlock(params, g, Bytes(raw), out, &*ctx);
    if (!n.ok()) continue;
    const std::string block = AsString(std::span(out).first(*n));
    Write(dir, "codecs_decode_block_fuzzer", name, Mode(0, block));
    Write(dir, "codecs_decode_block_fuzzer", std::string(name) + "_truncated",
          Mode(1, block.substr(0, block.size() - 5)));
  }
  // Mode 2: the harness encodes a block itself (codec byte, shape byte), then XORs the rest over
  // its payload: every codec id, with and without zstd.
  for (int codec = 0; codec < static_cast<int>(codecs::kCodecIdLast); ++codec) {
    const char pick = static_cast<char>(codec | (codec % 2 == 1 ? 0x80 : 0));  // Odd: zstd.
    Write(dir, "codecs_decode_block_fuzzer", "encoded_codec" + std::to_string(codec + 1),
          Mode(2, std::string(1, pick) + "\x1a" + std::string("\x00\x10\x00\x01\x80", 5)));
  }
}

}  // namespace
}  // namespace kvtier::fuzz

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus dir>\n", argv[0]);
    return 2;
  }
  const std::filesystem::path dir(argv[1]);
  kvtier::fuzz::SsdSeeds(dir);
  kvtier::fuzz::CheckpointSeeds(dir);
  kvtier::fuzz::ManifestSeeds(dir);
  kvtier::fuzz::RemoteSeeds(dir);
  kvtier::fuzz::FsSeeds(dir);
  kvtier::fuzz::RuntimeSeeds(dir);
  kvtier::fuzz::CodecSeeds(dir);
  return 0;
}
