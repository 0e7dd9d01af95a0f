// See bench_codec.h.
#include "bench_codec.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "bench_util.h"
#include "byte_size.h"
#include "codecs/codec.h"
#include "codecs/precision_ladder.h"
#include "core/limits.h"
#include "env/dir_trust.h"
#include "flags.h"
#include "interrupt.h"
#include "json_output.h"
#include "kv_quality.h"
#include "progress.h"
#include "runtime/kv_blocks.h"
#include "runtime/model.h"
#include "runtime/model_loader.h"
#include "runtime/synthetic_kv.h"
#include "subprocess.h"

namespace kvtier::cli {
namespace {

using codecs::BlockGeometry;
using codecs::CodecParams;

// The synthetic blocks: the Llama-2-70B block shape (1 MiB of FP16), as codecs_bench.cc's.
constexpr BlockGeometry kSyntheticGeometry{
    .tokens = 256, .kv_heads = 8, .head_dim = 128, .dtype = DType::kF16};
// Tokens per block of the real model's KV (its blocks are small: stories260K has 32 channels).
constexpr uint32_t kModelBlockTokens = 64;
// Key channels c with c % kOutlierStride == kOutlierChannel are kOutlierScale times larger.
constexpr size_t kOutlierStride = 64;
constexpr size_t kOutlierChannel = 9;
constexpr float kOutlierScale = 8.0f;
constexpr const char* kPrompt = "Once upon a time, there was a little girl named Lily.";

// The blocks of one data set, back to back, and one query per KV head for each.
struct DataSet {
  std::string name;
  BlockGeometry geometry;
  size_t blocks = 0;
  std::vector<uint16_t> halves;  // blocks * geometry.elements().
  std::vector<float> queries;    // blocks * geometry.channels().

  std::span<const std::byte> Block(size_t i) const {
    const size_t n = geometry.elements();
    return std::as_bytes(std::span<const uint16_t>(halves).subspan(i * n, n));
  }
  size_t raw_bytes() const { return halves.size() * sizeof(uint16_t); }
};

struct Row {
  std::string codec, data;
  double ratio = 0, encode_bytes_per_s = 0, decode_bytes_per_s = 0, rel_rmse = 0, attn_cosine = 1,
         attn_cosine_min = 1;
};

void FillQueries(uint64_t seed, DataSet* d) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  d->queries.resize(d->blocks * d->geometry.channels());
  for (float& q : d->queries) q = dist(rng);
}

DataSet Gaussian(size_t blocks, uint64_t seed) {
  DataSet d{.name = "gaussian", .geometry = kSyntheticGeometry, .blocks = blocks};
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  d.halves.resize(blocks * d.geometry.elements());
  for (uint16_t& h : d.halves) h = codecs::F32ToF16(dist(rng));
  FillQueries(seed + 1, &d);
  return d;
}

// Synthetic KV (heavy-hitter tokens over unit noise) with outlier key channels, one layer.
class OutlierKv {
 public:
  static Result<OutlierKv> Create(uint32_t chunks, uint64_t seed) {
    const KvLayout layout{.layers = 1,
                          .kv_heads = kSyntheticGeometry.kv_heads,
                          .head_dim = kSyntheticGeometry.head_dim,
                          .dtype = DType::kF16,
                          .block_tokens = kSyntheticGeometry.tokens};
    runtime::SyntheticKvOptions o{.context_tokens = chunks * layout.block_tokens, .seed = seed};
    KV_ASSIGN_OR_RETURN(runtime::SyntheticKvContext ctx,
                        runtime::SyntheticKvContext::Create(layout, o));
    return OutlierKv(std::move(ctx));
  }
  // Block `chunk` into `out` (kSyntheticGeometry.elements() halves).
  void Fill(uint32_t chunk, std::span<uint16_t> out) {
    ctx_.FillBlock(0, chunk, out, &scratch_);
    const size_t channels = kSyntheticGeometry.channels();
    for (size_t i = 0; i < kSyntheticGeometry.half_elements(); ++i) {  // K only.
      if (i % channels % kOutlierStride != kOutlierChannel) continue;
      out[i] = codecs::F32ToF16(codecs::F16ToF32(out[i]) * kOutlierScale);
    }
  }

 private:
  explicit OutlierKv(runtime::SyntheticKvContext ctx) : ctx_(std::move(ctx)) {}
  runtime::SyntheticKvContext ctx_;
  std::vector<float> scratch_;
};

Result<DataSet> SyntheticOutliers(size_t blocks, uint64_t seed) {
  DataSet d{.name = "synthetic-outliers", .geometry = kSyntheticGeometry, .blocks = blocks};
  KV_ASSIGN_OR_RETURN(OutlierKv kv, OutlierKv::Create(static_cast<uint32_t>(blocks), seed));
  const size_t n = d.geometry.elements();
  d.halves.resize(blocks * n);
  for (size_t b = 0; b < blocks; ++b) {
    kv.Fill(static_cast<uint32_t>(b), std::span<uint16_t>(d.halves).subspan(b * n, n));
  }
  FillQueries(seed + 1, &d);
  return d;
}

// The K/V blocks of a real model: a prompt (or BOS alone without a tokenizer) continued greedily
// to `tokens` positions, then prefilled in one pass; every full block of every layer.
Result<DataSet> ModelKv(const std::string& path, const std::string& tokenizer, uint32_t tokens,
                        uint64_t seed) {
  KV_ASSIGN_OR_RETURN(runtime::LoadedModel loaded, runtime::LoadModel(path, tokenizer));
  KV_ASSIGN_OR_RETURN(std::unique_ptr<runtime::Model> model,
                      runtime::Model::Create(std::move(loaded.weights)));
  const runtime::ModelConfig& config = model->config();
  tokens = std::min(tokens, config.seq_len);
  tokens -= tokens % kModelBlockTokens;
  if (tokens == 0) {
    return Status::InvalidArgument("--model-tokens: the model's context holds no " +
                                   std::to_string(kModelBlockTokens) + "-token block");
  }
  const KvLayout layout = config.KvLayoutFor(kModelBlockTokens);
  KV_RETURN_IF_ERROR(layout.Validate());
  std::vector<uint32_t> seq;
  if (loaded.tokenizer.has_value()) {
    KV_ASSIGN_OR_RETURN(seq, loaded.tokenizer->Encode(kPrompt));
  }
  if (seq.empty()) seq.push_back(1);  // llama2.c's BOS.
  if (seq.size() > tokens) seq.resize(tokens);
  {
    KV_ASSIGN_OR_RETURN(std::unique_ptr<runtime::InMemoryKvBlocks> kv,
                        runtime::InMemoryKvBlocks::Create(layout, tokens));
    std::vector<float> logits;
    KV_RETURN_IF_ERROR(model->Forward(seq, 0, *kv, {}, &logits));
    while (seq.size() < tokens) {
      const uint32_t next =
          static_cast<uint32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      seq.push_back(next);
      if (seq.size() == tokens) break;
      const uint32_t pos = static_cast<uint32_t>(seq.size() - 1);
      KV_RETURN_IF_ERROR(
          model->Forward(std::span<const uint32_t>(&seq.back(), 1), pos, *kv, {}, &logits));
    }
  }
  KV_ASSIGN_OR_RETURN(std::unique_ptr<runtime::InMemoryKvBlocks> kv,
                      runtime::InMemoryKvBlocks::Create(layout, tokens));
  std::vector<float> logits;
  KV_RETURN_IF_ERROR(model->Forward(seq, 0, *kv, {.logits = runtime::LogitsMode::kNone}, &logits));
  const uint32_t chunks = tokens / kModelBlockTokens;
  DataSet d{.name = std::filesystem::path(path).stem().string(),
            .geometry = {.tokens = kModelBlockTokens,
                         .kv_heads = layout.kv_heads,
                         .head_dim = layout.head_dim,
                         .dtype = DType::kF16},
            .blocks = size_t{chunks} * layout.layers};
  for (uint32_t c = 0; c < chunks; ++c) {
    for (uint32_t l = 0; l < layout.layers; ++l) {
      KV_ASSIGN_OR_RETURN(std::span<const uint16_t> b, kv->Block(l, c));
      d.halves.insert(d.halves.end(), b.begin(), b.end());
    }
  }
  FillQueries(seed + 1, &d);
  return d;
}

// The data set as a NumPy .npy file (format version 1.0): the magic, the version, a little-endian
// u16 header length, a Python dict literal naming the dtype, order and shape, padded with spaces
// and a newline so that the data starts at a multiple of 64 bytes, then the FP16 halves.
std::string NpyBytes(const DataSet& d) {
  const BlockGeometry& g = d.geometry;
  std::string header = "{'descr': '<f2', 'fortran_order': False, 'shape': (" +
                       std::to_string(d.blocks) + ", 2, " + std::to_string(g.tokens) + ", " +
                       std::to_string(g.kv_heads) + ", " + std::to_string(g.head_dim) + "), }";
  constexpr size_t kPreamble = 10;  // Magic (6), version (2), header length (2).
  header.append(63 - (kPreamble + header.size()) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  const size_t data_at = out.size();
  out.resize(data_at + d.raw_bytes());
  for (size_t i = 0; i < d.halves.size(); ++i) {  // Little-endian whatever the host.
    out[data_at + 2 * i] = static_cast<char>(d.halves[i] & 0xff);
    out[data_at + 2 * i + 1] = static_cast<char>(d.halves[i] >> 8);
  }
  return out;
}

std::vector<float> ToF32(std::span<const std::byte> block) {
  const size_t n = block.size() / sizeof(uint16_t);
  std::vector<float> out(n);
  codecs::GetKernels().f16_to_f32(reinterpret_cast<const uint16_t*>(block.data()), n, out.data());
  return out;
}

// Seconds since construction: wall time, or this thread's CPU time with --cpu-time (the rate of
// one core however busy the machine is with other work: time the thread waited is not counted).
class PassTimer {
 public:
  explicit PassTimer(bool cpu_time) : cpu_time_(cpu_time), start_(Now(cpu_time)) {}
  double Seconds() const { return Now(cpu_time_) - start_; }

 private:
  static double Now(bool cpu_time) {
    timespec t{};
    clock_gettime(cpu_time ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  }
  bool cpu_time_;
  double start_;
};

struct NamedCodec {
  const char* name;
  CodecParams params;
};

// Every codec kvtier has, with the parameters the engine uses by default.
const NamedCodec kCodecs[] = {
    {"identity", CodecParams::Identity()},
    {"shuffle-zstd", CodecParams::ShuffleZstd(1)},
    {"int8", CodecParams::Int8(32)},
    {"int8+zstd", CodecParams::Int8(32, 1)},
    {"int4", CodecParams::Int4(32)},
    {"int4+zstd", CodecParams::Int4(32, 1)},
    {"int8-rot", CodecParams::Quantized(codecs::CodecId::kInt8Rot)},
    {"int4-rot", CodecParams::Quantized(codecs::CodecId::kInt4Rot)},
    {"int4-rot+zstd", CodecParams::Quantized(codecs::CodecId::kInt4Rot, 32, 1)},
    {"k8v4", CodecParams::Quantized(codecs::CodecId::kK8V4)},
    {"k8v4-rot", CodecParams::Quantized(codecs::CodecId::kK8V4Rot)},
    {"ecq5", CodecParams::Ecq(codecs::CodecId::kEcq5)},
    {"ecq6", CodecParams::Ecq(codecs::CodecId::kEcq6)},
    {"ecq6v5", CodecParams::Ecq(codecs::CodecId::kEcq6V5)},
};

Result<Row> MeasureCodec(const NamedCodec& codec, const DataSet& d, uint32_t repeat, bool cpu_time,
                         codecs::CodecContext* ctx) {
  KV_ASSIGN_OR_RETURN(const size_t max_encoded, codecs::MaxEncodedSize(codec.params, d.geometry));
  const size_t block_bytes = d.geometry.raw_bytes();
  std::vector<std::byte> encoded(max_encoded * d.blocks);
  std::vector<uint16_t> decoded(d.halves.size());
  std::vector<size_t> sizes(d.blocks);
  std::vector<double> encode_s, decode_s;
  for (uint32_t r = 0; r < repeat; ++r) {
    if (Interrupted()) return Status::Aborted("interrupted");
    const PassTimer enc(cpu_time);
    for (size_t b = 0; b < d.blocks; ++b) {
      KV_ASSIGN_OR_RETURN(
          sizes[b],
          codecs::EncodeBlock(codec.params, d.geometry, d.Block(b),
                              std::span(encoded).subspan(b * max_encoded, max_encoded), ctx));
    }
    encode_s.push_back(enc.Seconds());
    const PassTimer dec(cpu_time);
    for (size_t b = 0; b < d.blocks; ++b) {
      KV_RETURN_IF_ERROR(codecs::DecodeBlock(
          std::span<const std::byte>(encoded).subspan(b * max_encoded, sizes[b]), d.geometry,
          std::as_writable_bytes(std::span(decoded)).subspan(b * block_bytes, block_bytes), ctx));
    }
    decode_s.push_back(dec.Seconds());
  }
  size_t total_encoded = 0;
  for (const size_t s : sizes) total_encoded += s;
  Row row{.codec = codec.name, .data = d.name};
  const double raw = static_cast<double>(d.raw_bytes());
  row.ratio = raw / static_cast<double>(total_encoded);
  row.encode_bytes_per_s = raw / std::max(Median(encode_s), 1e-9);
  row.decode_bytes_per_s = raw / std::max(Median(decode_s), 1e-9);
  ErrorSums errors;
  double cosine_sum = 0, cosine_min = 1;
  const size_t half = d.geometry.half_elements(), channels = d.geometry.channels();
  std::vector<float> out_ref(channels), out_got(channels);
  for (size_t b = 0; b < d.blocks; ++b) {
    const std::vector<float> ref = ToF32(d.Block(b));
    const std::vector<float> got =
        ToF32(std::as_bytes(std::span(decoded)).subspan(b * block_bytes, block_bytes));
    errors.Add(ref, got);
    const std::span<const float> q =
        std::span<const float>(d.queries).subspan(b * channels, channels);
    const std::span<const float> r(ref), g(got);
    codecs::AttentionOutputF32(d.geometry, q, r.first(half), r.subspan(half), out_ref);
    codecs::AttentionOutputF32(d.geometry, q, g.first(half), g.subspan(half), out_got);
    const double cosine = codecs::CosineSimilarity(out_ref, out_got);
    cosine_sum += cosine;
    cosine_min = std::min(cosine_min, cosine);
  }
  row.rel_rmse = errors.RelRmse();
  row.attn_cosine = codec.params.lossless() ? 1.0 : cosine_sum / static_cast<double>(d.blocks);
  row.attn_cosine_min = codec.params.lossless() ? 1.0 : cosine_min;
  return row;
}

// The zstd program at level 1, one thread, on the data set's raw bytes in a file (compressed to
// and decompressed from its standard output): what compressing the KV with the stock tool costs.
Result<Row> MeasureZstdCli(const DataSet& d, uint32_t repeat, const std::string& scratch) {
  const std::string raw_path = scratch + "/" + d.name + ".raw";
  const std::string zst_path = raw_path + ".zst";
  {
    std::ofstream f(raw_path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(d.halves.data()),
            static_cast<std::streamsize>(d.raw_bytes()));
    if (!f) return Status::IoError("cannot write " + raw_path);
  }
  std::vector<double> encode_s, decode_s;
  std::string compressed;
  for (uint32_t r = 0; r < repeat; ++r) {
    if (Interrupted()) return Status::Aborted("interrupted");
    const Stopwatch enc;
    KV_ASSIGN_OR_RETURN(compressed, Capture({"zstd", "-1", "-T1", "-q", "-c", raw_path}));
    encode_s.push_back(enc.Seconds());
  }
  {
    std::ofstream f(zst_path, std::ios::binary | std::ios::trunc);
    f.write(compressed.data(), static_cast<std::streamsize>(compressed.size()));
    if (!f) return Status::IoError("cannot write " + zst_path);
  }
  for (uint32_t r = 0; r < repeat; ++r) {
    if (Interrupted()) return Status::Aborted("interrupted");
    const Stopwatch dec;
    KV_ASSIGN_OR_RETURN(const std::string back, Capture({"zstd", "-d", "-q", "-c", zst_path}));
    decode_s.push_back(dec.Seconds());
    if (back.size() != d.raw_bytes() ||
        std::memcmp(back.data(), d.halves.data(), back.size()) != 0) {
      return Status::Corruption("zstd did not give back the bytes of " + d.name);
    }
  }
  const double raw = static_cast<double>(d.raw_bytes());
  return Row{.codec = "zstd-cli",
             .data = d.name,
             .ratio = raw / static_cast<double>(std::max<size_t>(compressed.size(), 1)),
             .encode_bytes_per_s = raw / std::max(Median(encode_s), 1e-9),
             .decode_bytes_per_s = raw / std::max(Median(decode_s), 1e-9)};
}

// The precision ladder's codecs at rest (the SSD tier) by each block's age over a sequence of
// `tokens` synthetic-outliers tokens: the sink and recent blocks lossless, then int8, then int4.
// The cosine is of one query per KV head attending over the whole sequence.
Result<Row> MeasureLadder(const codecs::PrecisionLadderOptions& options, uint32_t tokens,
                          uint32_t repeat, uint64_t seed, bool cpu_time,
                          codecs::CodecContext* ctx) {
  const BlockGeometry g = kSyntheticGeometry;
  const uint32_t chunks = (tokens + g.tokens - 1) / g.tokens;
  const uint64_t total_tokens = uint64_t{chunks} * g.tokens;
  KV_ASSIGN_OR_RETURN(const codecs::PrecisionLadder ladder,
                      codecs::PrecisionLadder::Create(options));
  KV_ASSIGN_OR_RETURN(OutlierKv kv, OutlierKv::Create(chunks, seed));
  KV_ASSIGN_OR_RETURN(const size_t max_encoded, codecs::MaxEncodedSizeAnyCodec(g));
  std::vector<uint16_t> block(g.elements()), decoded(g.elements());
  std::vector<std::byte> encoded(max_encoded);
  std::vector<float> query(g.channels());
  std::mt19937_64 rng(seed + 2);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (float& q : query) q = dist(rng);
  SequenceAttention att_ref(g, query), att_got(g, query);
  ErrorSums errors;
  uint64_t encoded_total = 0;
  std::vector<double> encode_s, decode_s;
  for (uint32_t r = 0; r < repeat; ++r) {
    double enc_s = 0, dec_s = 0;
    for (uint32_t c = 0; c < chunks; ++c) {
      if (Interrupted()) return Status::Aborted("interrupted");
      kv.Fill(c, block);
      const uint64_t age = total_tokens - uint64_t{c + 1} * g.tokens;
      const CodecParams params = ladder.Choose(
          codecs::Tier::kSsd, age, c == 0 ? codecs::ChunkKind::kSink : codecs::ChunkKind::kRegular);
      const PassTimer enc(cpu_time);
      KV_ASSIGN_OR_RETURN(
          const size_t n,
          codecs::EncodeBlock(params, g, std::as_bytes(std::span(block)), encoded, ctx));
      enc_s += enc.Seconds();
      const PassTimer dec(cpu_time);
      KV_RETURN_IF_ERROR(codecs::DecodeBlock(std::span<const std::byte>(encoded).first(n), g,
                                             std::as_writable_bytes(std::span(decoded)), ctx));
      dec_s += dec.Seconds();
      if (r != 0) continue;
      encoded_total += n;
      const std::vector<float> ref = ToF32(std::as_bytes(std::span(block)));
      const std::vector<float> got = ToF32(std::as_bytes(std::span(decoded)));
      errors.Add(ref, got);
      att_ref.Add(ref);
      att_got.Add(got);
    }
    encode_s.push_back(enc_s);
    decode_s.push_back(dec_s);
  }
  const double raw = static_cast<double>(uint64_t{chunks} * g.raw_bytes());
  return Row{.codec = "ladder",
             .data = "synthetic-outliers-" + std::to_string(total_tokens) + "-tokens",
             .ratio = raw / static_cast<double>(encoded_total),
             .encode_bytes_per_s = raw / std::max(Median(encode_s), 1e-9),
             .decode_bytes_per_s = raw / std::max(Median(decode_s), 1e-9),
             .rel_rmse = errors.RelRmse(),
             .attn_cosine = codecs::CosineSimilarity(att_ref.Output(), att_got.Output()),
             .attn_cosine_min = codecs::CosineSimilarity(att_ref.Output(), att_got.Output())};
}

void Print(const std::vector<Row>& rows, bool json) {
  if (json) {
    nlohmann::ordered_json j = nlohmann::ordered_json::array();
    for (const Row& r : rows) {
      nlohmann::ordered_json o;
      o["codec"] = r.codec;
      o["data"] = r.data;
      o["ratio"] = r.ratio;
      o["encode_bytes_per_s"] = r.encode_bytes_per_s;
      o["decode_bytes_per_s"] = r.decode_bytes_per_s;
      o["rel_rmse"] = r.rel_rmse;
      o["attn_cosine"] = r.attn_cosine;
      o["attn_cosine_min"] = r.attn_cosine_min;
      j.push_back(o);
    }
    std::printf("%s\n", JsonText(j, 2).c_str());
    return;
  }
  std::printf("%-14s %-34s %7s %12s %12s %10s %11s %11s\n", "codec", "data", "ratio", "encode MB/s",
              "decode MB/s", "rel_rmse", "attn_cosine", "cosine_min");
  for (const Row& r : rows) {
    std::printf("%-14s %-34s %7.3f %12.0f %12.0f %10.2e %11.6f %11.6f\n", r.codec.c_str(),
                r.data.c_str(), r.ratio, r.encode_bytes_per_s / 1e6, r.decode_bytes_per_s / 1e6,
                r.rel_rmse, r.attn_cosine, r.attn_cosine_min);
  }
}

// The ladder of --ladder-int8, --ladder-int4 (codec names; empty: the defaults),
// --ladder-recent and --ladder-int4-age (0: the defaults), validated.
Result<codecs::PrecisionLadderOptions> LadderOptions(const std::string& int8_rung,
                                                     const std::string& int4_rung, uint32_t recent,
                                                     uint32_t int4_age) {
  codecs::PrecisionLadderOptions o;
  if (!int8_rung.empty()) {
    Result<CodecParams> p = codecs::ParseCodecParams(int8_rung);
    if (!p.ok()) return p.status().WithContext("--ladder-int8");
    o.int8 = *p;
  }
  if (!int4_rung.empty()) {
    Result<CodecParams> p = codecs::ParseCodecParams(int4_rung);
    if (!p.ok()) return p.status().WithContext("--ladder-int4");
    o.int4 = *p;
  }
  if (recent != 0) o.recent_window_tokens = recent;
  if (int4_age != 0) o.int4_age_tokens = int4_age;
  // The measure is at rest (the SSD tier), where entropy-coded rungs may be used.
  if (o.int8.entropy_coded() || o.int4.entropy_coded()) o.lossy_from_tier = codecs::Tier::kSsd;
  KV_RETURN_IF_ERROR(o.Validate());
  return o;
}

}  // namespace

BenchCodec::BenchCodec(CLI::App* bench)
    : app_(bench->add_subcommand(
          "codec",
          "Ratio, throughput and quality of every codec on synthetic and real KV, "
          "beside the zstd program and the precision ladder")) {
  app_->add_option("--model", model_,
                   "llama2.c/GGUF model whose prefilled KV is a data set (default: "
                   "shared/models/stories260K.gguf beside the repository, when present)");
  app_->add_option("--tokenizer", tokenizer_, "llama2.c tokenizer for --model (optional)");
  app_->add_option("--save-model-kv", save_model_kv_,
                   "Also write the model's KV blocks to this file as a NumPy array (.npy, FP16, "
                   "[block][K, V][token][kv_head][head_dim])");
  app_->add_option("--model-tokens", model_tokens_,
                   "Tokens of the model's sequence, at most its context (default 512)")
      ->check(WholeNumber(kModelBlockTokens, 1u << 20));
  app_->add_option("--bytes", bytes_text_,
                   "Bytes of each synthetic data set, whole 1 MiB blocks (default 16MiB)")
      ->check(ByteSize(kMiB, 64 * kGiB));
  app_->add_option("--ladder-tokens", ladder_tokens_,
                   "Tokens of the precision ladder's sequence (default 32768)")
      ->check(WholeNumber(kSyntheticGeometry.tokens, 1u << 20));
  app_->add_option("--ladder-int8", ladder_int8_,
                   "The ladder's middle rung by codec name (default int8; 8-bit keys, or "
                   "ecq5/ecq6)");
  app_->add_option("--ladder-int4", ladder_int4_,
                   "The ladder's coarsest rung by codec name (default int4; 4-bit codes, or an "
                   "ecq with fewer bits than the middle rung)");
  app_->add_option("--ladder-recent", ladder_recent_,
                   "Tokens the ladder keeps lossless (default 2048)")
      ->check(WholeNumber(1, 1u << 20));
  app_->add_option("--ladder-int4-age", ladder_int4_age_,
                   "Age in tokens from which the ladder takes its coarsest rung (default 16384)")
      ->check(WholeNumber(1, 1u << 20));
  app_->add_option("--repeat", repeat_, "Timed repetitions; medians are reported (default 5)")
      ->check(WholeNumber(1, 1000));
  app_->add_option("--seed", seed_, "Seed of the synthetic data and the queries (default 1)");
  app_->add_flag("--no-zstd-cli", no_zstd_cli_, "Leave out the zstd program's rows");
  app_->add_flag("--cpu-time", cpu_time_,
                 "Time the codecs by the thread's CPU time instead of wall time: one core's "
                 "rate on a busy machine (the zstd program's rows stay wall time)");
  app_->add_flag("--json", json_, "Print one JSON array of rows");
}

Status BenchCodec::Run() {
  InstallInterruptHandler();
  // The ladder's options first: a bad rung is reported before minutes of measurements.
  KV_ASSIGN_OR_RETURN(const codecs::PrecisionLadderOptions ladder_options,
                      LadderOptions(ladder_int8_, ladder_int4_, ladder_recent_, ladder_int4_age_));
  KV_ASSIGN_OR_RETURN(const uint64_t bytes, ParseBytes("--bytes", bytes_text_));
  const uint64_t block_bytes = kSyntheticGeometry.raw_bytes();
  const size_t blocks = bytes / block_bytes;
  std::vector<DataSet> sets;
  sets.push_back(Gaussian(blocks, seed_));
  KV_ASSIGN_OR_RETURN(DataSet outliers, SyntheticOutliers(blocks, seed_));
  sets.push_back(std::move(outliers));
  std::string model = model_;
  if (model.empty() && !save_model_kv_.empty() && !FindSharedModel().has_value()) {
    return Status::InvalidArgument("--save-model-kv: no model (shared/models/" +
                                   std::string(kSharedModelFile) +
                                   " not found beside the repository; --model FILE)");
  }
  if (model.empty()) {
    if (std::optional<std::string> found = FindSharedModel(); found.has_value()) {
      model = *found;
    } else {
      std::fprintf(stderr,
                   "kvtier bench codec: no model (shared/models/%s not found beside the "
                   "repository; --model FILE); real-model rows left out\n",
                   kSharedModelFile);
    }
  }
  if (!model.empty()) {
    Result<DataSet> real = ModelKv(model, tokenizer_, model_tokens_, seed_);
    if (!real.ok()) return real.status().WithContext("--model " + model);
    if (!save_model_kv_.empty()) {
      KV_RETURN_IF_ERROR(
          ReplaceRegularFile("--save-model-kv", save_model_kv_, NpyBytes(*real), 0644));
    }
    sets.push_back(std::move(real).value());
  }
  bool zstd_cli = !no_zstd_cli_;
  if (zstd_cli && !Capture({"zstd", "--version"}).ok()) {
    std::fprintf(stderr,
                 "kvtier bench codec: zstd not found; zstd-cli rows left out "
                 "(install zstd)\n");
    zstd_cli = false;
  }
  std::optional<ScopedRemoval> scratch_removal;
  std::string scratch;
  if (zstd_cli) {
    KV_ASSIGN_OR_RETURN(scratch, MakeScratchDir("", "kvtier-bench-codec"));
    scratch_removal.emplace(scratch);
  }
  KV_ASSIGN_OR_RETURN(codecs::CodecContext ctx, codecs::CodecContext::Create());
  KV_RETURN_IF_ERROR(ctx.Reserve(kSyntheticGeometry));
  const size_t per_set = std::size(kCodecs) + (zstd_cli ? 1 : 0);
  Progress progress("bench codec", sets.size() * per_set + 1, ProgressUnit::kCount, "measurements");
  std::vector<Row> rows;
  for (const DataSet& d : sets) {
    for (const NamedCodec& codec : kCodecs) {
      Result<Row> row = MeasureCodec(codec, d, repeat_, cpu_time_, &ctx);
      if (!row.ok()) return row.status().WithContext(std::string(codec.name) + " on " + d.name);
      rows.push_back(std::move(row).value());
      progress.Add(1);
    }
    if (zstd_cli) {
      Result<Row> row = MeasureZstdCli(d, repeat_, scratch);
      if (!row.ok()) return row.status().WithContext("zstd-cli on " + d.name);
      rows.push_back(std::move(row).value());
      progress.Add(1);
    }
  }
  Result<Row> ladder =
      MeasureLadder(ladder_options, ladder_tokens_, repeat_, seed_, cpu_time_, &ctx);
  if (!ladder.ok()) return ladder.status().WithContext("ladder");
  rows.push_back(std::move(ladder).value());
  progress.Add(1);
  progress.Finish();
  Print(rows, json_);
  return Status::Ok();
}

}  // namespace kvtier::cli
