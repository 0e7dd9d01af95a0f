// Goal: synthetic presets carry the real models' geometry, shrinking keeps the KV geometry,
// weights are deterministic per seed (and per layer, so cutting layers keeps the rest), and
// activations stay sane so benchmarks on synthetic models measure a realistic forward pass.
// Method: presets are checked field by field against the published configs; shrunk configs
// against their KvLayout; two generations compared bit for bit; a forward pass through shrunk
// presets checks that logits are finite with a standard deviation in [0.05, 20].
#include "runtime/synthetic.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "runtime/model.h"

namespace kvtier::runtime {
namespace {

TEST(SyntheticTest, PresetsCopyRealGeometry) {
  struct Expect {
    const char* name;
    uint32_t layers, heads, kv_heads, head_dim, dim, hidden, vocab;
    float rope_base;
  };
  const Expect expected[] = {
      {"llama2-7b", 32, 32, 32, 128, 4096, 11008, 32000, 10000.0f},
      {"llama2-13b", 40, 40, 40, 128, 5120, 13824, 32000, 10000.0f},
      {"llama2-70b", 80, 64, 8, 128, 8192, 28672, 32000, 10000.0f},
      {"llama3-8b", 32, 32, 8, 128, 4096, 14336, 128256, 500000.0f},
      {"tinyllama-1.1b", 22, 32, 4, 64, 2048, 5632, 32000, 10000.0f},
  };
  EXPECT_EQ(SyntheticPresetNames().size(), std::size(expected));
  for (const Expect& e : expected) {
    auto c = SyntheticPreset(e.name);
    ASSERT_TRUE(c.ok()) << e.name;
    EXPECT_EQ(c->n_layers, e.layers) << e.name;
    EXPECT_EQ(c->n_heads, e.heads) << e.name;
    EXPECT_EQ(c->n_kv_heads, e.kv_heads) << e.name;
    EXPECT_EQ(c->head_dim, e.head_dim) << e.name;
    EXPECT_EQ(c->dim, e.dim) << e.name;
    EXPECT_EQ(c->hidden_dim, e.hidden) << e.name;
    EXPECT_EQ(c->vocab_size, e.vocab) << e.name;
    EXPECT_EQ(c->rope_base, e.rope_base) << e.name;
    EXPECT_TRUE(c->Validate().ok());
  }
  // Llama-2-70B: 2 x 80 x 8 x 128 x 2 B = 320 KiB of KV per token.
  EXPECT_EQ(SyntheticPreset("llama2-70b")->KvLayoutFor(256).TokenBytes(), 320u * 1024u);
  auto unknown = SyntheticPreset("gpt-5");
  EXPECT_TRUE(unknown.status().IsNotFound());
  EXPECT_NE(unknown.status().message().find("llama3-8b"), std::string::npos);
}

TEST(SyntheticTest, ShrinkKeepsKvGeometry) {
  const ModelConfig full = SyntheticPreset("llama2-70b").value();
  auto small =
      ShrinkConfig(full, {.layers = 2, .dim = 512, .hidden_dim = 1024, .vocab_size = 1000});
  ASSERT_TRUE(small.ok()) << small.status().ToString();
  EXPECT_EQ(small->n_layers, 2u);
  EXPECT_EQ(small->n_kv_heads, full.n_kv_heads);
  EXPECT_EQ(small->head_dim, full.head_dim);
  EXPECT_EQ(small->KvLayoutFor(256).TokenBytesPerLayer(),
            full.KvLayoutFor(256).TokenBytesPerLayer());
  EXPECT_TRUE(ShrinkConfig(full, {.dim = 1u << 30}).status().IsInvalidArgument());
}

TEST(SyntheticTest, DeterministicPerSeedAndLayer) {
  const ModelConfig c =
      ShrinkConfig(SyntheticPreset("tinyllama-1.1b").value(),
                   {.layers = 3, .dim = 128, .hidden_dim = 256, .vocab_size = 300})
          .value();
  auto a = MakeSyntheticWeights(c, 5);
  auto b = MakeSyntheticWeights(c, 5);
  auto other = MakeSyntheticWeights(c, 6);
  ASSERT_TRUE(a.ok() && b.ok() && other.ok());
  const auto wa = a->MutableAll(), wb = b->MutableAll(), wo = other->MutableAll();
  EXPECT_EQ(std::memcmp(wa.data(), wb.data(), wa.size() * 4), 0);
  EXPECT_NE(std::memcmp(wa.data(), wo.data(), wa.size() * 4), 0);
  ModelConfig two = c;
  two.n_layers = 2;
  auto cut = MakeSyntheticWeights(two, 5);
  ASSERT_TRUE(cut.ok());
  const auto x = cut->Get(WeightKind::kW2, 1), y = a->Get(WeightKind::kW2, 1);
  // Same generator per (kind, layer); only the residual scale 1/sqrt(2L) differs.
  EXPECT_NEAR(x[7] / y[7], std::sqrt(3.0 / 2.0), 1e-5);
  EXPECT_EQ(cut->Get(WeightKind::kWq, 1)[3], a->Get(WeightKind::kWq, 1)[3]);
}

TEST(SyntheticTest, ActivationsStaySane) {
  for (const char* preset : {"llama3-8b", "llama2-70b"}) {
    const ModelConfig c =
        ShrinkConfig(SyntheticPreset(preset).value(),
                     {.layers = 4, .dim = 256, .hidden_dim = 512, .vocab_size = 500})
            .value();
    auto model = Model::Create(MakeSyntheticWeights(c, 1).value());
    ASSERT_TRUE(model.ok());
    auto kv = InMemoryKvBlocks::Create(c.KvLayoutFor(16), 256);
    ASSERT_TRUE(kv.ok());
    std::vector<uint32_t> tokens(40);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(i * 37 % 500);
    std::vector<float> logits;
    ASSERT_TRUE((*model)->Forward(tokens, 0, **kv, {.logits = LogitsMode::kAll}, &logits).ok());
    double sum = 0, sum_sq = 0;
    for (float l : logits) {
      ASSERT_TRUE(std::isfinite(l)) << preset;
      sum += l;
      sum_sq += double{l} * l;
    }
    const double n = static_cast<double>(logits.size());
    const double sd = std::sqrt(sum_sq / n - (sum / n) * (sum / n));
    EXPECT_GT(sd, 0.05) << preset;
    EXPECT_LT(sd, 20.0) << preset;
  }
}

}  // namespace
}  // namespace kvtier::runtime
