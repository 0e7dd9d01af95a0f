// The precision ladder and its quality gate (docs/codecs.md).
//
// PrecisionLadder maps (tier, block age, sink or not) to a codec: the sink chunk and a recent
// window keep full precision (identity in memory tiers, shuffle-zstd at rest), older blocks go
// to int8, the oldest to int4. QualityGate measures what a rung does to a real block - relative
// RMSE of the reconstructed K and V, and the cosine similarity of the attention output
// softmax(q K^T / sqrt(d)) V between original and reconstruction - and refuses a rung beyond the
// configured error budget, returning the next finer rung (or an error, if so configured).
//
// Why a gate: quantization error depends on the data (outlier channels, long tails); a ladder
// that is safe on one model can be too coarse on another, and the gate catches it on real blocks.
//
// Thread safety: PrecisionLadder and QualityGate are immutable after Create and may be shared;
// the CodecContext passed to the gate is used by one thread at a time. The gate allocates scratch
// per call: it is a calibration and sampling tool, not a per-block data-path step.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "codecs/block_geometry.h"
#include "codecs/codec.h"
#include "codecs/codec_params.h"
#include "kvtier/result.h"

namespace kvtier::codecs {

// Tiers, fastest first. Values are ordered: a larger value is a slower, colder tier.
enum class Tier : uint8_t {
  kDevice = 0,
  kHost = 1,
  kSsd = 2,
  kRemote = 3,
};

enum class ChunkKind : uint8_t {
  kRegular = 0,
  kSink = 1,  // The first chunk of a sequence: attention sinks, always full precision.
};

inline constexpr size_t kLadderFinerLayersMax = 256;

struct PrecisionLadderOptions {
  // Age = tokens between the sequence's newest token and the block's newest token. Blocks with
  // age < recent_window_tokens keep full precision; age >= int4_age_tokens go to int4; the rest
  // go to int8. Requires recent_window_tokens <= int4_age_tokens.
  uint64_t recent_window_tokens = 2048;
  uint64_t int4_age_tokens = 16384;
  // Full precision in memory tiers (device, host) and at rest (ssd, remote). Must be lossless.
  CodecParams full_precision_memory = CodecParams::Identity();
  CodecParams full_precision_at_rest = CodecParams::ShuffleZstd(1);
  // The middle rung: 8-bit keys (int8, int8-rot, k8v4, k8v4-rot), or at rest an entropy-coded
  // codec (ecq5, ecq6).
  CodecParams int8 = CodecParams::Int8(32);
  // The coarsest rung: 4-bit codes (int4, int4-rot, k8v4, k8v4-rot), other than the middle one,
  // or at rest an entropy-coded codec with fewer bits than the middle rung. Entropy-coded rungs
  // need lossy_from_tier ssd or remote: their variable-length codes are decoded before attention,
  // so no memory tier may hold them.
  CodecParams int4 = CodecParams::Int4(32);
  // Lossy rungs are used in this tier and colder ones only. Never kDevice: attention kernels
  // read device blocks directly.
  Tier lossy_from_tier = Tier::kHost;
  // Layers whose blocks take the next finer rung than their age gives them (the int4 rung the
  // int8 rung's codec, the int8 rung full precision): the layers the model is most sensitive
  // to, as `kvtier bench quality --per-layer` measures them. Distinct, each below kLayersMax,
  // at most kLadderFinerLayersMax of them.
  std::vector<uint32_t> finer_layers;

  Status Validate() const;
};

class PrecisionLadder {
 public:
  // InvalidArgument for invalid options.
  static Result<PrecisionLadder> Create(const PrecisionLadderOptions& options);

  CodecParams Choose(Tier tier, uint64_t age_tokens, ChunkKind kind) const;
  // As above for a block of `layer`: one rung finer in a layer of finer_layers.
  CodecParams Choose(Tier tier, uint64_t age_tokens, ChunkKind kind, uint32_t layer) const;
  // The next finer rung in `tier`: the int4 rung (or any codec with 4-bit keys) -> the int8 rung
  // -> full precision; full precision stays.
  CodecParams Finer(Tier tier, const CodecParams& rung) const;
  CodecParams FullPrecision(Tier tier) const;

  const PrecisionLadderOptions& options() const { return options_; }

 private:
  explicit PrecisionLadder(const PrecisionLadderOptions& options) : options_(options) {}
  PrecisionLadderOptions options_;
};

// Error budget of a rung. A rung passes when both K and V relative RMSE are <= rmse_rel_max
// and the attention-output cosine is >= attention_cosine_min.
struct QualityBudget {
  double rmse_rel_max = 0.05;
  double attention_cosine_min = 0.999;
};

struct QualityReport {
  double k_rmse_rel = 0;  // ||K - K'|| / ||K|| (Frobenius), 0 when both are zero.
  double v_rmse_rel = 0;
  double attention_cosine = 1;  // cos(attn(q, K, V), attn(q, K', V')).
};

enum class RefusalAction : uint8_t {
  kFallBackToFiner = 0,  // Admit() returns the next finer rung that passes.
  kFail = 1,             // Admit() returns Aborted.
};

struct QualityGateOptions {
  QualityBudget budget;
  RefusalAction on_refusal = RefusalAction::kFallBackToFiner;
};

// Attention of one query per KV head over a block, in F32, written plainly:
// out[h] = sum_t softmax_t(q[h] . k[t][h] / sqrt(head_dim)) v[t][h].
// k and v are [tokens][kv_heads][head_dim]; q and out are [kv_heads][head_dim].
void AttentionOutputF32(const BlockGeometry& geometry, std::span<const float> q,
                        std::span<const float> k, std::span<const float> v, std::span<float> out);

// cos(a, b) over equal-length vectors, in double: 1 when both are zero, 0 when only one is.
double CosineSimilarity(std::span<const float> a, std::span<const float> b);

// Encodes and decodes `block` with `params` and reports the error. `query` holds one query per
// KV head ([kv_heads][head_dim]). Fails like EncodeBlock (e.g. InvalidArgument for int8 on
// non-finite values) or with InvalidArgument for a query of the wrong size.
Result<QualityReport> MeasureQuality(const CodecParams& params, const BlockGeometry& geometry,
                                     std::span<const std::byte> block, std::span<const float> query,
                                     CodecContext* ctx);

class QualityGate {
 public:
  // InvalidArgument for a budget outside [0, inf) x [-1, 1].
  static Result<QualityGate> Create(const PrecisionLadder& ladder,
                                    const QualityGateOptions& options);

  // Returns `rung` when it meets the budget on `block` in `tier`; otherwise the first finer rung
  // that does (full precision always does), or Aborted (kFail). A lossy rung that cannot encode
  // the block (non-finite values, beyond FP16 range) counts as refused.
  Result<CodecParams> Admit(Tier tier, const CodecParams& rung, const BlockGeometry& geometry,
                            std::span<const std::byte> block, std::span<const float> query,
                            CodecContext* ctx) const;

  bool Passes(const QualityReport& report) const;

 private:
  QualityGate(const PrecisionLadder& ladder, const QualityGateOptions& options)
      : ladder_(ladder), options_(options) {}
  PrecisionLadder ladder_;
  QualityGateOptions options_;
};

}  // namespace kvtier::codecs
