#include "codecs/precision_ladder.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "codecs/entropy_quant.h"
#include "codecs/quantize.h"
#include "core/assert.h"
#include "core/limits.h"

namespace kvtier::codecs {

// ---------------------------------------------------------------------------------------------
// PrecisionLadder

namespace {

// Bits per element of a lossy codec, keys and values averaged (ecq in its quarter bits: ecq6v5
// 5.625), to order two rungs.
double MeanBits(const CodecParams& p) {
  if (p.entropy_coded()) {
    const EcqPrecision e = EcqPrecisionOf(p.codec);
    return (e.key_quarter_bits + e.value_quarter_bits) / 8.0;
  }
  return (p.key_bits() + p.value_bits()) / 2.0;
}

}  // namespace

Status PrecisionLadderOptions::Validate() const {
  if (recent_window_tokens > int4_age_tokens) {
    return Status::InvalidArgument("ladder: recent_window_tokens " +
                                   std::to_string(recent_window_tokens) +
                                   " exceeds int4_age_tokens " + std::to_string(int4_age_tokens));
  }
  for (const CodecParams* p : {&full_precision_memory, &full_precision_at_rest, &int8, &int4}) {
    KV_RETURN_IF_ERROR(p->Validate());
  }
  if (!full_precision_memory.lossless() || !full_precision_at_rest.lossless()) {
    return Status::InvalidArgument("ladder: full-precision codecs must be lossless");
  }
  if (finer_layers.size() > kLadderFinerLayersMax) {
    return Status::InvalidArgument("ladder: finer_layers names " +
                                   std::to_string(finer_layers.size()) + " layers; at most " +
                                   std::to_string(kLadderFinerLayersMax));
  }
  for (size_t i = 0; i < finer_layers.size(); ++i) {
    if (finer_layers[i] >= kLayersMax) {
      return Status::InvalidArgument("ladder: finer_layers: layer " +
                                     std::to_string(finer_layers[i]) + " is not below " +
                                     std::to_string(kLayersMax));
    }
    if (std::find(finer_layers.begin(), finer_layers.begin() + static_cast<std::ptrdiff_t>(i),
                  finer_layers[i]) != finer_layers.begin() + static_cast<std::ptrdiff_t>(i)) {
      return Status::InvalidArgument("ladder: finer_layers names layer " +
                                     std::to_string(finer_layers[i]) + " twice");
    }
  }
  if (lossy_from_tier == Tier::kDevice || static_cast<uint8_t>(lossy_from_tier) > 3) {
    return Status::InvalidArgument("ladder: lossy_from_tier must be host, ssd or remote");
  }
  if (int8.entropy_coded() || int4.entropy_coded()) {
    // At rest only; the middle rung 8-bit keys or ecq, the coarsest 4-bit codes or ecq, and
    // the coarsest with fewer bits.
    if (static_cast<uint8_t>(lossy_from_tier) < static_cast<uint8_t>(Tier::kSsd)) {
      return Status::InvalidArgument(
          "ladder: entropy-coded rungs (ecq5, ecq6, ecq6v5) are for ssd and remote only (their "
          "codes are decoded before attention); set lossy_from_tier to ssd or remote: " +
          int8.ToString() + ", " + int4.ToString());
    }
    const bool middle_ok = int8.entropy_coded() || (int8.grouped() && int8.key_bits() == 8);
    const bool coarse_ok = int4.entropy_coded() || (int4.grouped() && int4.bits() == 4);
    if (!middle_ok || !coarse_ok || MeanBits(int4) >= MeanBits(int8)) {
      return Status::InvalidArgument(
          "ladder: the int8 rung must have 8-bit keys or be entropy-coded, the int4 rung 4-bit "
          "codes or be entropy-coded, and the int4 rung fewer bits: " +
          int8.ToString() + ", " + int4.ToString());
    }
    return Status::Ok();
  }
  // The int8 rung: 8-bit keys (int8, int8-rot, k8v4, k8v4-rot); the int4 rung: 4-bit codes
  // (int4, int4-rot, k8v4, k8v4-rot); the int4 rung no finer than the int8 rung.
  if (int8.key_bits() != 8 || int4.bits() != 4 || int4 == int8) {
    return Status::InvalidArgument(
        "ladder: the int8 rung must have 8-bit keys and the int4 rung 4-bit codes, and differ: " +
        int8.ToString() + ", " + int4.ToString());
  }
  return Status::Ok();
}

Result<PrecisionLadder> PrecisionLadder::Create(const PrecisionLadderOptions& options) {
  KV_RETURN_IF_ERROR(options.Validate());
  return PrecisionLadder(options);
}

CodecParams PrecisionLadder::FullPrecision(Tier tier) const {
  const bool in_memory = tier == Tier::kDevice || tier == Tier::kHost;
  return in_memory ? options_.full_precision_memory : options_.full_precision_at_rest;
}

CodecParams PrecisionLadder::Choose(Tier tier, uint64_t age_tokens, ChunkKind kind) const {
  const bool lossy_tier =
      static_cast<uint8_t>(tier) >= static_cast<uint8_t>(options_.lossy_from_tier);
  if (!lossy_tier || kind == ChunkKind::kSink || age_tokens < options_.recent_window_tokens) {
    return FullPrecision(tier);
  }
  return age_tokens < options_.int4_age_tokens ? options_.int8 : options_.int4;
}

CodecParams PrecisionLadder::Choose(Tier tier, uint64_t age_tokens, ChunkKind kind,
                                    uint32_t layer) const {
  const CodecParams rung = Choose(tier, age_tokens, kind);
  const std::vector<uint32_t>& finer = options_.finer_layers;
  if (rung.lossless() || std::find(finer.begin(), finer.end(), layer) == finer.end()) return rung;
  return Finer(tier, rung);
}

CodecParams PrecisionLadder::Finer(Tier tier, const CodecParams& rung) const {
  if (rung == options_.int4 || (rung.grouped() && rung.key_bits() == 4)) return options_.int8;
  return FullPrecision(tier);
}

// ---------------------------------------------------------------------------------------------
// Quality measurement

void AttentionOutputF32(const BlockGeometry& g, std::span<const float> q, std::span<const float> k,
                        std::span<const float> v, std::span<float> out) {
  const size_t heads = g.kv_heads;
  const size_t dim = g.head_dim;
  const size_t channels = g.channels();
  KV_CHECK(q.size() == channels && out.size() == channels);
  KV_CHECK(k.size() == g.half_elements() && v.size() == g.half_elements());
  const double inv_sqrt_d = 1.0 / std::sqrt(static_cast<double>(dim));
  std::vector<double> scores(g.tokens);
  for (size_t h = 0; h < heads; ++h) {
    double max_score = -INFINITY;
    for (size_t t = 0; t < g.tokens; ++t) {
      double dot = 0;
      for (size_t d = 0; d < dim; ++d)
        dot += double{q[h * dim + d]} * k[t * channels + h * dim + d];
      scores[t] = dot * inv_sqrt_d;
      max_score = std::max(max_score, scores[t]);
    }
    double sum = 0;
    for (double& s : scores) {
      s = std::exp(s - max_score);
      sum += s;
    }
    for (size_t d = 0; d < dim; ++d) {
      double acc = 0;
      for (size_t t = 0; t < g.tokens; ++t) acc += scores[t] * v[t * channels + h * dim + d];
      out[h * dim + d] = static_cast<float>(acc / sum);
    }
  }
}

namespace {

double RelativeRmse(std::span<const float> a, std::span<const float> b) {
  double err = 0;
  double ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = double{a[i]} - b[i];
    err += d * d;
    ref += double{a[i]} * a[i];
  }
  if (ref == 0) return err == 0 ? 0 : INFINITY;
  return std::sqrt(err / ref);
}

}  // namespace

double CosineSimilarity(std::span<const float> a, std::span<const float> b) {
  double dot = 0;
  double na = 0;
  double nb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += double{a[i]} * b[i];
    na += double{a[i]} * a[i];
    nb += double{b[i]} * b[i];
  }
  if (na == 0 && nb == 0) return 1;
  if (na == 0 || nb == 0) return 0;
  return dot / std::sqrt(na * nb);
}

Result<QualityReport> MeasureQuality(const CodecParams& params, const BlockGeometry& g,
                                     std::span<const std::byte> block, std::span<const float> query,
                                     CodecContext* ctx) {
  KV_ASSIGN_OR_RETURN(const size_t max_bytes, MaxEncodedSize(params, g));
  if (query.size() != g.channels()) {
    return Status::InvalidArgument(
        "quality: query needs kv_heads * head_dim = " + std::to_string(g.channels()) + " values");
  }
  std::vector<std::byte> encoded(max_bytes);
  KV_ASSIGN_OR_RETURN(const size_t encoded_bytes, EncodeBlock(params, g, block, encoded, ctx));
  // Decoded bytes live in a float vector so they are aligned for every dtype.
  std::vector<float> decoded_storage((g.raw_bytes() + sizeof(float) - 1) / sizeof(float));
  std::span<std::byte> decoded(reinterpret_cast<std::byte*>(decoded_storage.data()), g.raw_bytes());
  KV_RETURN_IF_ERROR(DecodeBlock(std::span(encoded).first(encoded_bytes), g, decoded, ctx));

  const size_t n = g.half_elements();
  const size_t half_bytes = n * DTypeBytes(g.dtype);
  std::vector<float> orig(2 * n);
  std::vector<float> recon(2 * n);
  ToF32(ctx->kernels(), g.dtype, block.data(), n, orig.data());
  ToF32(ctx->kernels(), g.dtype, block.data() + half_bytes, n, orig.data() + n);
  ToF32(ctx->kernels(), g.dtype, decoded.data(), n, recon.data());
  ToF32(ctx->kernels(), g.dtype, decoded.data() + half_bytes, n, recon.data() + n);
  const std::span<const float> ok(orig.data(), n), ov(orig.data() + n, n);
  const std::span<const float> rk(recon.data(), n), rv(recon.data() + n, n);

  QualityReport report;
  report.k_rmse_rel = RelativeRmse(ok, rk);
  report.v_rmse_rel = RelativeRmse(ov, rv);
  std::vector<float> out_orig(g.channels());
  std::vector<float> out_recon(g.channels());
  AttentionOutputF32(g, query, ok, ov, out_orig);
  AttentionOutputF32(g, query, rk, rv, out_recon);
  report.attention_cosine = CosineSimilarity(out_orig, out_recon);
  return report;
}

// ---------------------------------------------------------------------------------------------
// QualityGate

Result<QualityGate> QualityGate::Create(const PrecisionLadder& ladder,
                                        const QualityGateOptions& options) {
  const QualityBudget& b = options.budget;
  if (!(b.rmse_rel_max >= 0) || !(b.attention_cosine_min >= -1 && b.attention_cosine_min <= 1)) {
    return Status::InvalidArgument(
        "quality gate: rmse_rel_max must be >= 0 and "
        "attention_cosine_min in [-1, 1]");
  }
  return QualityGate(ladder, options);
}

bool QualityGate::Passes(const QualityReport& r) const {
  const QualityBudget& b = options_.budget;
  return r.k_rmse_rel <= b.rmse_rel_max && r.v_rmse_rel <= b.rmse_rel_max &&
         r.attention_cosine >= b.attention_cosine_min;
}

Result<CodecParams> QualityGate::Admit(Tier tier, const CodecParams& rung,
                                       const BlockGeometry& geometry,
                                       std::span<const std::byte> block,
                                       std::span<const float> query, CodecContext* ctx) const {
  // Caller mistakes are reported, not taken for a refusal: after these checks an encode error
  // can only come from the block's values.
  KV_RETURN_IF_ERROR(geometry.Validate());
  KV_RETURN_IF_ERROR(rung.Validate());
  if (block.size() != geometry.raw_bytes() || query.size() != geometry.channels()) {
    return Status::InvalidArgument("quality gate: block or query size does not match " +
                                   geometry.ToString());
  }
  CodecParams candidate = rung;
  // At most three rungs (int4, int8, full precision): the loop is bounded by the ladder.
  for (int step = 0; step < 3 && !candidate.lossless(); ++step) {
    Result<QualityReport> report = MeasureQuality(candidate, geometry, block, query, ctx);
    if (!report.ok() && !report.status().IsInvalidArgument()) return report.status();
    if (report.ok() && Passes(*report)) return candidate;
    if (options_.on_refusal == RefusalAction::kFail) {
      return Status::Aborted(
          "quality gate refused " + candidate.ToString() +
          (report.ok() ? ": k_rmse_rel " + std::to_string(report->k_rmse_rel) + ", v_rmse_rel " +
                             std::to_string(report->v_rmse_rel) + ", attention cosine " +
                             std::to_string(report->attention_cosine)
                       : ": " + report.status().message()));
    }
    candidate = ladder_.Finer(tier, candidate);
  }
  return candidate;
}

}  // namespace kvtier::codecs
