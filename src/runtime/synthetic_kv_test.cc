// Goal: synthetic KV contexts are deterministic, place their salient tokens as documented, and
// GeneratedKvBlocks (which regenerates instead of storing) is byte for byte the source that
// FillSyntheticContext fills, so it can stand in for an all-resident reference; decoding over the
// two gives identical logits. Salient keys make attention concentrate: full attention puts most
// of its mass on the chunks holding them. Bad options are refused with a message.
// Method: a small llama2-7b-shaped layout (2 layers, 2 KV heads x 16, blocks of 16 tokens) and a
// 100-token context (a partial last chunk), compared block by block and through Model::Forward on
// a shrunk synthetic model.
#include "runtime/synthetic_kv.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "runtime/model.h"
#include "runtime/synthetic.h"

namespace kvtier::runtime {
namespace {

KvLayout Layout() {
  KvLayout l;
  l.layers = 2;
  l.kv_heads = 2;
  l.head_dim = 16;
  l.dtype = DType::kF16;
  l.block_tokens = 16;
  return l;
}

TEST(SyntheticKvTest, DeterministicWithSalientTokensAndZeroTail) {
  const SyntheticKvOptions o{.context_tokens = 100, .seed = 5, .salient_tokens = 3};
  Result<SyntheticKvContext> a = SyntheticKvContext::Create(Layout(), o);
  Result<SyntheticKvContext> b = SyntheticKvContext::Create(Layout(), o);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(a->chunks(), 7u);
  const size_t halves = Layout().BlockBytes() / 2;
  std::vector<uint16_t> x(halves), y(halves);
  std::vector<float> scratch;
  for (uint32_t layer = 0; layer < 2; ++layer) {
    ASSERT_EQ(a->salient_positions(layer).size(), 3u);
    for (const uint32_t p : a->salient_positions(layer)) {
      EXPECT_GE(p, o.sink_tokens);
      EXPECT_LT(p, o.context_tokens);
    }
    for (uint32_t c = 0; c < a->chunks(); ++c) {
      a->FillBlock(layer, c, x, &scratch);
      b->FillBlock(layer, c, y, &scratch);
      EXPECT_EQ(x, y);
    }
  }
  // Chunk 6 holds positions 96..99: rows 4..15 of K and V are zero.
  a->FillBlock(0, 6, x, &scratch);
  const size_t kv_dim = 32;
  for (size_t half = 0; half < 2; ++half) {
    for (size_t i = 4 * kv_dim; i < 16 * kv_dim; ++i) EXPECT_EQ(x[half * 16 * kv_dim + i], 0);
  }
  Result<SyntheticKvContext> other =
      SyntheticKvContext::Create(Layout(), {.context_tokens = 100, .seed = 6});
  ASSERT_TRUE(other.ok());
  other->FillBlock(0, 0, y, &scratch);
  a->FillBlock(0, 0, x, &scratch);
  EXPECT_NE(x, y);
}

TEST(SyntheticKvTest, GeneratedSourceEqualsFilledSourceAndDecodesTheSame) {
  Result<ModelConfig> preset = SyntheticPreset("llama2-7b");
  ASSERT_TRUE(preset.ok());
  Result<ModelConfig> config =
      ShrinkConfig(*preset, {.layers = 2, .dim = 64, .hidden_dim = 128, .vocab_size = 64});
  ASSERT_TRUE(config.ok());
  Result<ModelWeights> weights = MakeSyntheticWeights(*config, 2);
  ASSERT_TRUE(weights.ok());
  Result<std::unique_ptr<Model>> model = Model::Create(std::move(weights).value());
  ASSERT_TRUE(model.ok());
  const KvLayout layout = (*model)->config().KvLayoutFor(16);
  Result<SyntheticKvContext> ctx =
      SyntheticKvContext::Create(layout, {.context_tokens = 100, .salient_tokens = 4});
  ASSERT_TRUE(ctx.ok());
  Result<std::unique_ptr<InMemoryKvBlocks>> filled = InMemoryKvBlocks::Create(layout, 160);
  ASSERT_TRUE(filled.ok());
  ASSERT_TRUE(FillSyntheticContext(*ctx, **filled).ok());
  Result<std::unique_ptr<GeneratedKvBlocks>> generated = GeneratedKvBlocks::Create(&*ctx, 160);
  ASSERT_TRUE(generated.ok());
  for (uint32_t layer = 0; layer < 2; ++layer) {
    for (uint32_t c = 0; c < ctx->chunks(); ++c) {
      Result<std::span<const uint16_t>> want = (*filled)->Block(layer, c);
      Result<std::span<const uint16_t>> got = (*generated)->Block(layer, c);
      ASSERT_TRUE(want.ok() && got.ok());
      ASSERT_TRUE(std::equal(want->begin(), want->end(), got->begin())) << layer << "/" << c;
    }
  }
  EXPECT_FALSE((*generated)->MutableBlock(0, 2).ok());  // Full context chunks are read-only.
  std::vector<float> a, b;
  for (uint32_t t = 0; t < 20; ++t) {
    const uint32_t token = t % 64;
    ASSERT_TRUE((*model)->Forward(std::span(&token, 1), 100 + t, **filled, {}, &a).ok());
    ASSERT_TRUE((*model)->Forward(std::span(&token, 1), 100 + t, **generated, {}, &b).ok());
    ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << t;
  }
}

// Records the attention mass full attention gives each chunk.
class MassProbe final : public ForwardingKvBlocks {
 public:
  explicit MassProbe(KvBlockSource* inner) : ForwardingKvBlocks(inner) {}
  void ObserveAttention(uint32_t layer, std::span<const uint32_t> chunks,
                        std::span<const float> mass) override {
    masses.push_back({layer, std::vector<uint32_t>(chunks.begin(), chunks.end()),
                      std::vector<float>(mass.begin(), mass.end())});
  }
  struct Observation {
    uint32_t layer;
    std::vector<uint32_t> chunks;
    std::vector<float> mass;
  };
  std::vector<Observation> masses;
};

TEST(SyntheticKvTest, SalientTokensTakeMostOfTheAttention) {
  Result<ModelConfig> preset = SyntheticPreset("llama2-7b");
  ASSERT_TRUE(preset.ok());
  Result<ModelConfig> config =
      ShrinkConfig(*preset, {.layers = 2, .dim = 256, .hidden_dim = 512, .vocab_size = 256});
  ASSERT_TRUE(config.ok());
  Result<ModelWeights> weights = MakeSyntheticWeights(*config, 2);
  ASSERT_TRUE(weights.ok());
  Result<std::unique_ptr<Model>> model = Model::Create(std::move(weights).value());
  ASSERT_TRUE(model.ok());
  const KvLayout layout = (*model)->config().KvLayoutFor(64);
  for (const uint32_t salient : {0u, 8u}) {
    Result<SyntheticKvContext> ctx = SyntheticKvContext::Create(
        layout, {.context_tokens = 4096, .salient_tokens = salient, .salient_scale = 160});
    ASSERT_TRUE(ctx.ok());
    Result<std::unique_ptr<GeneratedKvBlocks>> kv = GeneratedKvBlocks::Create(&*ctx, 4096 + 64);
    ASSERT_TRUE(kv.ok());
    MassProbe probe(kv->get());
    std::vector<float> logits;
    for (uint32_t t = 0; t < 4; ++t) {
      const uint32_t token = 7 + t;
      ASSERT_TRUE((*model)->Forward(std::span(&token, 1), 4096 + t, probe, {}, &logits).ok());
    }
    double on_salient = 0;
    for (const MassProbe::Observation& o : probe.masses) {
      double total = 0;
      for (size_t i = 0; i < o.chunks.size(); ++i) {
        total += o.mass[i];
        for (const uint32_t p : ctx->salient_positions(o.layer)) {
          if (p / 64 == o.chunks[i]) {
            on_salient += o.mass[i];
            break;
          }
        }
      }
      EXPECT_NEAR(total, 1.0, 1e-3);
    }
    on_salient /= static_cast<double>(probe.masses.size());
    std::printf("salient tokens %u: %.3f of the attention mass on their chunks\n", salient,
                on_salient);
    if (salient > 0) {
      EXPECT_GT(on_salient, 0.8);
    } else {
      EXPECT_EQ(on_salient, 0.0);
    }
  }
}

TEST(SyntheticKvTest, BadOptionsAreRefused) {
  EXPECT_FALSE(SyntheticKvContext::Create(Layout(), {.context_tokens = 0}).ok());
  EXPECT_FALSE(
      SyntheticKvContext::Create(Layout(), {.context_tokens = 10, .salient_tokens = 8}).ok());
  EXPECT_FALSE(
      SyntheticKvContext::Create(Layout(), {.context_tokens = 100, .salient_scale = -1}).ok());
  KvLayout f32 = Layout();
  f32.dtype = DType::kF32;
  EXPECT_FALSE(SyntheticKvContext::Create(f32, {.context_tokens = 100}).ok());
}

}  // namespace
}  // namespace kvtier::runtime
