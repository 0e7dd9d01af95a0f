// Goal: the ladder picks the documented codec for every (tier, age, sink) region and refuses
// inconsistent options, and a layer of finer_layers takes one rung finer; the quality gate
// measures error correctly and admits or refuses rungs by its budget. Method: table checks at and
// around each threshold; the attention function against a hand-computed case; int8 and int4
// measured on Gaussian FP16 blocks with outlier channels (int8 must pass a 2 % budget, int4 must
// not) and the gate's fallback and fail modes exercised.
#include "codecs/precision_ladder.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/limits.h"

namespace kvtier::codecs {
namespace {

constexpr uint32_t kSeed = 777;

PrecisionLadder DefaultLadder() {
  Result<PrecisionLadder> l = PrecisionLadder::Create({});
  EXPECT_TRUE(l.ok()) << l.status().ToString();
  return std::move(l).value();
}

TEST(PrecisionLadderTest, ChoosesByTierAgeAndSink) {
  const PrecisionLadder ladder = DefaultLadder();
  const CodecParams identity = CodecParams::Identity();
  const CodecParams zstd = CodecParams::ShuffleZstd(1);
  EXPECT_EQ(ladder.Choose(Tier::kDevice, 1'000'000, ChunkKind::kRegular), identity);
  EXPECT_EQ(ladder.Choose(Tier::kHost, 0, ChunkKind::kRegular), identity);
  EXPECT_EQ(ladder.Choose(Tier::kSsd, 2047, ChunkKind::kRegular), zstd);
  EXPECT_EQ(ladder.Choose(Tier::kSsd, 2048, ChunkKind::kRegular), CodecParams::Int8(32));
  EXPECT_EQ(ladder.Choose(Tier::kHost, 5000, ChunkKind::kRegular), CodecParams::Int8(32));
  EXPECT_EQ(ladder.Choose(Tier::kRemote, 16383, ChunkKind::kRegular), CodecParams::Int8(32));
  EXPECT_EQ(ladder.Choose(Tier::kRemote, 16384, ChunkKind::kRegular), CodecParams::Int4(32));
  EXPECT_EQ(ladder.Choose(Tier::kSsd, 1'000'000, ChunkKind::kSink), zstd);
  EXPECT_EQ(ladder.Choose(Tier::kHost, 1'000'000, ChunkKind::kSink), identity);
}

TEST(PrecisionLadderTest, LossyFromTierKeepsWarmerTiersExact) {
  Result<PrecisionLadder> l = PrecisionLadder::Create(
      {.recent_window_tokens = 0, .int4_age_tokens = 100, .lossy_from_tier = Tier::kSsd});
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->Choose(Tier::kHost, 500, ChunkKind::kRegular), CodecParams::Identity());
  EXPECT_EQ(l->Choose(Tier::kSsd, 0, ChunkKind::kRegular), CodecParams::Int8(32));
  EXPECT_EQ(l->Choose(Tier::kSsd, 100, ChunkKind::kRegular), CodecParams::Int4(32));
  EXPECT_EQ(l->Finer(Tier::kSsd, CodecParams::Int4(32)), CodecParams::Int8(32));
  EXPECT_EQ(l->Finer(Tier::kSsd, CodecParams::Int8(32)), CodecParams::ShuffleZstd(1));
  EXPECT_EQ(l->Finer(Tier::kHost, CodecParams::Int8(32)), CodecParams::Identity());
}

TEST(PrecisionLadderTest, RefusesInconsistentOptions) {
  EXPECT_FALSE(PrecisionLadder::Create({.recent_window_tokens = 10, .int4_age_tokens = 5}).ok());
  EXPECT_FALSE(PrecisionLadder::Create({.full_precision_at_rest = CodecParams::Int8()}).ok());
  EXPECT_FALSE(
      PrecisionLadder::Create({.full_precision_memory = CodecParams::ShuffleZstd(0)}).ok());
  EXPECT_FALSE(PrecisionLadder::Create({.int8 = CodecParams::Int4()}).ok());
  EXPECT_FALSE(PrecisionLadder::Create({.int4 = CodecParams::Int4(3)}).ok());
  EXPECT_FALSE(PrecisionLadder::Create({.lossy_from_tier = Tier::kDevice}).ok());
  EXPECT_FALSE(PrecisionLadder::Create({.lossy_from_tier = static_cast<Tier>(9)}).ok());
}

// A layer of finer_layers takes one rung finer than its age gives (int4 -> the int8 rung's codec,
// int8 -> full precision; full precision stays, in memory and at rest), other layers and the
// layer-less Choose the age's rung; with entropy-coded rungs at rest ecq5 -> ecq6. A layer list
// with a repeat, a layer at kLayersMax or too many layers is refused, naming the problem.
TEST(PrecisionLadderTest, FinerLayersTakeTheNextFinerRung) {
  Result<PrecisionLadder> l = PrecisionLadder::Create(
      {.recent_window_tokens = 10, .int4_age_tokens = 100, .finer_layers = {4, 1}});
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  const CodecParams int8 = CodecParams::Int8(32), int4 = CodecParams::Int4(32);
  for (const uint32_t layer : {0u, 2u, 3u, 5u}) {
    EXPECT_EQ(l->Choose(Tier::kSsd, 500, ChunkKind::kRegular, layer), int4) << layer;
    EXPECT_EQ(l->Choose(Tier::kSsd, 50, ChunkKind::kRegular, layer), int8) << layer;
  }
  for (const uint32_t layer : {1u, 4u}) {
    EXPECT_EQ(l->Choose(Tier::kSsd, 500, ChunkKind::kRegular, layer), int8) << layer;
    EXPECT_EQ(l->Choose(Tier::kSsd, 50, ChunkKind::kRegular, layer), CodecParams::ShuffleZstd(1));
    EXPECT_EQ(l->Choose(Tier::kHost, 50, ChunkKind::kRegular, layer), CodecParams::Identity());
    EXPECT_EQ(l->Choose(Tier::kSsd, 5, ChunkKind::kRegular, layer), CodecParams::ShuffleZstd(1));
    EXPECT_EQ(l->Choose(Tier::kSsd, 500, ChunkKind::kSink, layer), CodecParams::ShuffleZstd(1));
    EXPECT_EQ(l->Choose(Tier::kDevice, 500, ChunkKind::kRegular, layer), CodecParams::Identity());
  }
  EXPECT_EQ(l->Choose(Tier::kSsd, 500, ChunkKind::kRegular), int4);

  const CodecParams ecq6 = CodecParams::Ecq(CodecId::kEcq6);
  const CodecParams ecq5 = CodecParams::Ecq(CodecId::kEcq5);
  Result<PrecisionLadder> at_rest = PrecisionLadder::Create(
      {.recent_window_tokens = 0, .int4_age_tokens = 0, .int8 = ecq6, .int4 = ecq5,
       .lossy_from_tier = Tier::kSsd, .finer_layers = {3}});
  ASSERT_TRUE(at_rest.ok()) << at_rest.status().ToString();
  EXPECT_EQ(at_rest->Choose(Tier::kSsd, 0, ChunkKind::kRegular, 2), ecq5);
  EXPECT_EQ(at_rest->Choose(Tier::kRemote, 0, ChunkKind::kRegular, 3), ecq6);

  const auto refused = [](std::vector<uint32_t> layers, const std::string& text) {
    const Status s = PrecisionLadderOptions{.finer_layers = std::move(layers)}.Validate();
    EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
    EXPECT_NE(s.message().find(text), std::string::npos) << s.ToString();
  };
  refused({2, 7, 2}, "names layer 2 twice");
  refused({kLayersMax}, "is not below 1024");
  std::vector<uint32_t> many(kLadderFinerLayersMax + 1);
  for (uint32_t i = 0; i < many.size(); ++i) many[i] = i;
  refused(many, "at most 256");
  many.pop_back();
  EXPECT_TRUE(PrecisionLadderOptions{.finer_layers = many}.Validate().ok());
}

// The rungs may be the rotated and mixed-width codecs: the middle rung needs 8-bit keys, the
// coarsest 4-bit codes; Finer steps from the coarsest rung (or any 4-bit-key codec) to the middle
// one, and from the middle one to full precision.
TEST(PrecisionLadderTest, RotatedAndMixedRungs) {
  const CodecParams k8v4_rot = CodecParams::Quantized(CodecId::kK8V4Rot);
  const CodecParams int4_rot = CodecParams::Quantized(CodecId::kInt4Rot);
  Result<PrecisionLadder> l = PrecisionLadder::Create(
      {.recent_window_tokens = 10, .int4_age_tokens = 100, .int8 = k8v4_rot, .int4 = int4_rot});
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->Choose(Tier::kSsd, 50, ChunkKind::kRegular), k8v4_rot);
  EXPECT_EQ(l->Choose(Tier::kSsd, 500, ChunkKind::kRegular), int4_rot);
  EXPECT_EQ(l->Finer(Tier::kSsd, int4_rot), k8v4_rot);
  EXPECT_EQ(l->Finer(Tier::kSsd, CodecParams::Int4()), k8v4_rot);
  EXPECT_EQ(l->Finer(Tier::kSsd, k8v4_rot), CodecParams::ShuffleZstd(1));
  EXPECT_TRUE(PrecisionLadder::Create({.int8 = CodecParams::Int8(), .int4 = k8v4_rot}).ok());
  EXPECT_TRUE(
      PrecisionLadder::Create({.int8 = CodecParams::Quantized(CodecId::kInt8Rot)}).ok());
  // A middle rung with 4-bit keys, a coarsest rung of 8-bit codes, or the same codec twice.
  EXPECT_FALSE(PrecisionLadder::Create({.int8 = int4_rot}).ok());
  EXPECT_FALSE(PrecisionLadder::Create({.int4 = CodecParams::Quantized(CodecId::kInt8Rot)}).ok());
  EXPECT_FALSE(PrecisionLadder::Create({.int8 = k8v4_rot, .int4 = k8v4_rot}).ok());
}

// Entropy-coded rungs (ecq5, ecq6, ecq6v5) are taken at rest only (lossy_from_tier ssd or
// remote), with the coarsest rung having fewer bits per element than the middle one; memory
// tiers stay exact.
TEST(PrecisionLadderTest, EntropyCodedRungsAtRestOnly) {
  const CodecParams ecq5 = CodecParams::Ecq(CodecId::kEcq5);
  const CodecParams ecq6 = CodecParams::Ecq(CodecId::kEcq6);
  Result<PrecisionLadder> l =
      PrecisionLadder::Create({.recent_window_tokens = 10, .int4_age_tokens = 100, .int8 = ecq6,
                               .int4 = ecq5, .lossy_from_tier = Tier::kSsd});
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->Choose(Tier::kHost, 500, ChunkKind::kRegular), CodecParams::Identity());
  EXPECT_EQ(l->Choose(Tier::kSsd, 50, ChunkKind::kRegular), ecq6);
  EXPECT_EQ(l->Choose(Tier::kRemote, 500, ChunkKind::kRegular), ecq5);
  EXPECT_EQ(l->Finer(Tier::kSsd, ecq5), ecq6);
  EXPECT_EQ(l->Finer(Tier::kSsd, ecq6), CodecParams::ShuffleZstd(1));
  // Mixed with the grouped rungs: int8 then ecq5, ecq6 then int4.
  EXPECT_TRUE(PrecisionLadder::Create({.int4 = ecq5, .lossy_from_tier = Tier::kSsd}).ok());
  EXPECT_TRUE(PrecisionLadder::Create({.int8 = ecq6, .lossy_from_tier = Tier::kRemote}).ok());
  // In a memory tier, the coarsest rung finer than the middle one, or a middle rung of k8v4.
  const Status host = PrecisionLadder::Create({.int8 = ecq6, .int4 = ecq5}).status();
  EXPECT_TRUE(host.IsInvalidArgument());
  EXPECT_NE(host.message().find("lossy_from_tier"), std::string::npos) << host.message();
  EXPECT_FALSE(
      PrecisionLadder::Create({.int8 = ecq5, .int4 = ecq6, .lossy_from_tier = Tier::kSsd}).ok());
  EXPECT_FALSE(PrecisionLadder::Create({.int8 = ecq5, .int4 = ecq5,
                                        .lossy_from_tier = Tier::kSsd}).ok());
  // Ordered by bits per element, keys and values averaged: ecq6v5 (5.625) between ecq6 and
  // ecq5, k8v4 (6) above ecq5; int4 (4) below ecq6v5.
  const CodecParams ecq6v5 = CodecParams::Ecq(CodecId::kEcq6V5);
  EXPECT_TRUE(PrecisionLadder::Create({.int8 = ecq6, .int4 = ecq6v5,
                                       .lossy_from_tier = Tier::kSsd}).ok());
  EXPECT_TRUE(PrecisionLadder::Create({.int8 = ecq6v5, .int4 = ecq5,
                                       .lossy_from_tier = Tier::kSsd}).ok());
  EXPECT_FALSE(PrecisionLadder::Create({.int8 = ecq5, .int4 = ecq6v5,
                                        .lossy_from_tier = Tier::kSsd}).ok());
  EXPECT_TRUE(PrecisionLadder::Create({.int8 = CodecParams::Quantized(CodecId::kK8V4),
                                       .int4 = ecq5, .lossy_from_tier = Tier::kSsd}).ok());
  EXPECT_FALSE(PrecisionLadder::Create({.int8 = CodecParams::Quantized(CodecId::kK8V4),
                                        .int4 = ecq6, .lossy_from_tier = Tier::kSsd}).ok());
}

TEST(AttentionTest, MatchesHandComputedSoftmax) {
  const BlockGeometry g{.tokens = 2, .kv_heads = 1, .head_dim = 2, .dtype = DType::kF32};
  const float q[] = {1, 0};
  // Scores 0 and ln 3 after the 1/sqrt(2) scaling: weights 1/4 and 3/4.
  const float k[] = {0, 0, static_cast<float>(std::sqrt(2.0) * std::log(3.0)), 0};
  const float v[] = {1, 0, 0, 1};
  float out[2];
  AttentionOutputF32(g, q, k, v, out);
  EXPECT_NEAR(out[0], 0.25, 1e-6);
  EXPECT_NEAR(out[1], 0.75, 1e-6);
}

struct Block {
  BlockGeometry geometry;
  std::vector<uint16_t> halves;  // F16 elements.
  std::vector<float> query;
  std::span<const std::byte> bytes() const {
    return {reinterpret_cast<const std::byte*>(halves.data()), halves.size() * 2};
  }
};

Block GaussianF16Block() {
  Block b;
  b.geometry = {.tokens = 256, .kv_heads = 2, .head_dim = 64, .dtype = DType::kF16};
  std::mt19937 rng(kSeed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  b.halves.resize(b.geometry.elements());
  for (size_t i = 0; i < b.halves.size(); ++i) {
    const bool outlier = i % b.geometry.channels() == 9;
    b.halves[i] = F32ToF16(dist(rng) * (outlier ? 6.0f : 1.0f));
  }
  b.query.resize(b.geometry.channels());
  for (float& x : b.query) x = dist(rng);
  return b;
}

CodecContext NewContext() {
  Result<CodecContext> ctx = CodecContext::Create();
  EXPECT_TRUE(ctx.ok());
  return std::move(ctx).value();
}

TEST(QualityTest, LosslessIsExactAndQuantizedErrorsAreOrdered) {
  SCOPED_TRACE(::testing::Message() << "seed=" << kSeed);
  CodecContext ctx = NewContext();
  const Block b = GaussianF16Block();
  Result<QualityReport> exact =
      MeasureQuality(CodecParams::ShuffleZstd(1), b.geometry, b.bytes(), b.query, &ctx);
  ASSERT_TRUE(exact.ok());
  EXPECT_EQ(exact->k_rmse_rel, 0);
  EXPECT_EQ(exact->v_rmse_rel, 0);
  EXPECT_NEAR(exact->attention_cosine, 1, 1e-12);
  Result<QualityReport> q8 =
      MeasureQuality(CodecParams::Int8(32), b.geometry, b.bytes(), b.query, &ctx);
  Result<QualityReport> q4 =
      MeasureQuality(CodecParams::Int4(32), b.geometry, b.bytes(), b.query, &ctx);
  ASSERT_TRUE(q8.ok() && q4.ok());
  EXPECT_LT(q8->k_rmse_rel, 0.02);
  EXPECT_LT(q8->v_rmse_rel, 0.02);
  EXPECT_GT(q8->attention_cosine, 0.9999);
  EXPECT_GT(q4->k_rmse_rel, q8->k_rmse_rel);
  EXPECT_GT(q4->v_rmse_rel, 0.05);
  EXPECT_LT(q4->attention_cosine, q8->attention_cosine);
  std::printf("int8: k %.4f v %.4f cos %.6f; int4: k %.4f v %.4f cos %.6f\n", q8->k_rmse_rel,
              q8->v_rmse_rel, q8->attention_cosine, q4->k_rmse_rel, q4->v_rmse_rel,
              q4->attention_cosine);
}

TEST(QualityGateTest, AdmitsInt8AndRefusesInt4UnderATightBudget) {
  CodecContext ctx = NewContext();
  const Block b = GaussianF16Block();
  const PrecisionLadder ladder = DefaultLadder();
  Result<QualityGate> gate = QualityGate::Create(
      ladder, {.budget = {.rmse_rel_max = 0.02, .attention_cosine_min = 0.999}});
  ASSERT_TRUE(gate.ok());
  Result<CodecParams> r8 =
      gate->Admit(Tier::kSsd, CodecParams::Int8(32), b.geometry, b.bytes(), b.query, &ctx);
  ASSERT_TRUE(r8.ok());
  EXPECT_EQ(*r8, CodecParams::Int8(32));
  Result<CodecParams> r4 =
      gate->Admit(Tier::kSsd, CodecParams::Int4(32), b.geometry, b.bytes(), b.query, &ctx);
  ASSERT_TRUE(r4.ok());
  EXPECT_EQ(*r4, CodecParams::Int8(32));  // Next finer rung.

  Result<QualityGate> strict = QualityGate::Create(
      ladder, {.budget = {.rmse_rel_max = 0.02}, .on_refusal = RefusalAction::kFail});
  ASSERT_TRUE(strict.ok());
  Result<CodecParams> refused =
      strict->Admit(Tier::kSsd, CodecParams::Int4(32), b.geometry, b.bytes(), b.query, &ctx);
  EXPECT_TRUE(refused.status().IsAborted()) << refused.status().ToString();

  Result<QualityGate> impossible = QualityGate::Create(ladder, {.budget = {.rmse_rel_max = 0}});
  ASSERT_TRUE(impossible.ok());
  Result<CodecParams> full =
      impossible->Admit(Tier::kSsd, CodecParams::Int4(32), b.geometry, b.bytes(), b.query, &ctx);
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(*full, CodecParams::ShuffleZstd(1));
}

TEST(QualityGateTest, UnquantizableBlocksFallBackAndCallerErrorsAreReported) {
  CodecContext ctx = NewContext();
  Block b = GaussianF16Block();
  b.halves[5] = 0x7e00;  // NaN: int8 cannot encode it.
  Result<QualityGate> gate = QualityGate::Create(DefaultLadder(), {});
  ASSERT_TRUE(gate.ok());
  Result<CodecParams> r =
      gate->Admit(Tier::kHost, CodecParams::Int8(32), b.geometry, b.bytes(), b.query, &ctx);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, CodecParams::Identity());
  std::vector<float> short_query(3);
  EXPECT_TRUE(
      gate->Admit(Tier::kHost, CodecParams::Int8(32), b.geometry, b.bytes(), short_query, &ctx)
          .status()
          .IsInvalidArgument());
  EXPECT_FALSE(QualityGate::Create(DefaultLadder(), {.budget = {.rmse_rel_max = -1}}).ok());
  EXPECT_FALSE(QualityGate::Create(DefaultLadder(), {.budget = {.attention_cosine_min = 2}}).ok());
}

}  // namespace
}  // namespace kvtier::codecs
