// Goal: CachedPrefill turns the engine's prefix cache into saved compute without ever changing
// the result: a prompt that extends a cached one loads the cached chunks and computes only the
// rest; a prompt cached in full still yields its last token's logits; a block damaged on the SSD
// makes it recompute (stats.fell_back) instead of serving wrong KV; tenants with different salts
// share nothing; StoreKvChunks makes decoded tokens findable by the next turn; a cancelled
// forward pass ends the prefill with Aborted and is not retried as a full recomputation (the
// cancellation hook is polled once, not again by a fallback pass). The time spent waiting for the
// load (load_wait_us) is counted within the compute time, and is zero when nothing was loaded.
// Method: a small synthetic model and an Engine with a host tier and an SSD tier in a temporary
// directory. Every prefill's logits are compared with a plain Model::Forward over a fresh KV
// (no cache). The cached KV was computed with a different chunk split than the reference, so
// only float summation order differs (model_test measures 3e-6 for that); the bound is 1e-4 of
// the largest |logit|, as model_test's chunked-vs-token-by-token check.
#include "runtime/cached_prefill.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "runtime/synthetic.h"
#include "testing/test_util.h"
#include "tiers/ssd/ssd_options.h"

namespace kvtier::runtime {
namespace {

constexpr uint32_t kBlockTokens = 16;
constexpr uint32_t kContextTokens = 256;
constexpr double kLogitsTolerance = 1e-4;

ModelConfig SmallConfig() {
  return ModelConfig{.dim = 64,
                     .hidden_dim = 96,
                     .n_layers = 2,
                     .n_heads = 4,
                     .n_kv_heads = 2,
                     .head_dim = 16,
                     .vocab_size = 50,
                     .seq_len = kContextTokens,
                     .classifier = ClassifierMode::kSeparate};
}

std::vector<uint32_t> SomeTokens(size_t n, uint32_t offset = 0) {
  std::vector<uint32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<uint32_t>((i * 7919 + 13 + offset) % 50);
  return t;
}

double RelativeMaxError(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, scale = 1;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    diff = std::max(diff, std::fabs(double{a[i]} - b[i]));
    scale = std::max(scale, std::fabs(double{b[i]}));
  }
  return diff / scale;
}

class CachedPrefillTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dir = kvtier::ScopedTempDir::Create();
    ASSERT_TRUE(dir.ok()) << dir.status().ToString();
    dir_ = std::make_unique<kvtier::ScopedTempDir>(std::move(*dir));
    auto weights = MakeSyntheticWeights(SmallConfig(), 11);
    ASSERT_TRUE(weights.ok()) << weights.status().ToString();
    auto model = Model::Create(std::move(*weights));
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    model_ = std::move(*model);
    layout_ = model_->config().KvLayoutFor(kBlockTokens);
    OpenEngine();
  }

  void OpenEngine() {
    engine_.reset();
    EngineOptions o;
    o.layout = layout_;
    o.model.name = "cached-prefill-test";
    o.host.capacity_bytes = 64 * layout_.BlockBytes();
    o.host.huge_pages = HugePages::kOff;
    o.host.lock = MemoryLock::kOff;
    o.host.prefault = false;
    o.tiers.Emplace(kSsdTierName, SsdTierOptions{.dirs = {dir_->Join("ssd")},
                                                 .capacity_bytes = 64 * kMiB,
                                                 .segment_bytes = 1 * kMiB,
                                                 .staging_buffer_bytes = 64 * 1024,
                                                 .staging_buffers = 4});
    o.write_policy = WritePolicy::kWriteThrough;
    auto engine = Engine::Open(o);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    engine_ = std::move(*engine);
  }

  Namespace Ns(const std::string& salt) {
    auto ns = engine_->MakeNamespace(salt);
    EXPECT_TRUE(ns.ok()) << ns.status().ToString();
    return ns.ok() ? *ns : Namespace{};
  }

  std::unique_ptr<InMemoryKvBlocks> NewKv() {
    auto kv = InMemoryKvBlocks::Create(layout_, kContextTokens);
    EXPECT_TRUE(kv.ok()) << kv.status().ToString();
    return kv.ok() ? std::move(*kv) : nullptr;
  }

  // The last token's logits of a plain prefill without any cache.
  std::vector<float> Reference(const std::vector<uint32_t>& prompt) {
    std::unique_ptr<InMemoryKvBlocks> kv = NewKv();
    std::vector<float> logits;
    EXPECT_TRUE(model_->Forward(prompt, 0, *kv, {}, &logits).ok());
    return logits;
  }

  // A cached prefill of `prompt` in `ns`, checked against Reference().
  CachedPrefillStats Prefill(const Namespace& ns, const std::vector<uint32_t>& prompt) {
    std::unique_ptr<InMemoryKvBlocks> kv = NewKv();
    std::vector<float> logits;
    auto stats = CachedPrefill(*model_, *engine_, ns, prompt, *kv, {}, &logits);
    EXPECT_TRUE(stats.ok()) << stats.status().ToString();
    if (!stats.ok()) return {};
    EXPECT_LT(RelativeMaxError(logits, Reference(prompt)), kLogitsTolerance);
    EXPECT_EQ(stats->prompt_tokens, prompt.size());
    return *stats;
  }

  std::unique_ptr<kvtier::ScopedTempDir> dir_;
  std::unique_ptr<Model> model_;
  KvLayout layout_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(CachedPrefillTest, ExtendedPromptLoadsCachedChunksAndComputesTheRest) {
  const Namespace ns = Ns("alice");
  const std::vector<uint32_t> first = SomeTokens(40);  // Two full chunks and a tail.
  const CachedPrefillStats s1 = Prefill(ns, first);
  EXPECT_EQ(s1.cached_tokens, 0u);
  EXPECT_EQ(s1.computed_tokens, 40u);
  EXPECT_EQ(s1.stored_chunks, 2u);
  EXPECT_EQ(s1.load_wait_us, 0u);

  std::vector<uint32_t> second = first;
  for (uint32_t t : SomeTokens(30, 5)) second.push_back(t);
  const CachedPrefillStats s2 = Prefill(ns, second);
  EXPECT_EQ(s2.cached_tokens, 32u);
  EXPECT_EQ(s2.computed_tokens, 70u - 32u);
  EXPECT_FALSE(s2.fell_back);
  EXPECT_EQ(s2.chunk_tiers.size(), 2u);
  EXPECT_EQ(s2.stored_chunks, 4u - 2u);  // Chunks 2 and 3 are new.
  EXPECT_LE(s2.load_wait_us, s2.compute_us);
}

TEST_F(CachedPrefillTest, CancelledPassIsNotRecomputed) {
  const Namespace ns = Ns("alice");
  const std::vector<uint32_t> first = SomeTokens(40);
  EXPECT_EQ(Prefill(ns, first).stored_chunks, 2u);
  std::vector<uint32_t> second = first;
  for (uint32_t t : SomeTokens(30, 5)) second.push_back(t);
  int polls = 0;
  CachedPrefillOptions options;
  options.forward.cancelled = [&polls] {
    ++polls;
    return true;
  };
  std::unique_ptr<InMemoryKvBlocks> kv = NewKv();
  std::vector<float> logits;
  auto stats = CachedPrefill(*model_, *engine_, ns, second, *kv, options, &logits);
  EXPECT_TRUE(stats.status().IsAborted()) << stats.status().ToString();
  EXPECT_EQ(polls, 1);
}

TEST_F(CachedPrefillTest, FullyCachedPromptStillReturnsLastTokenLogits) {
  const Namespace ns = Ns("alice");
  const std::vector<uint32_t> prompt = SomeTokens(3 * kBlockTokens);
  EXPECT_EQ(Prefill(ns, prompt).stored_chunks, 3u);
  const CachedPrefillStats s = Prefill(ns, prompt);
  EXPECT_EQ(s.cached_tokens, 3u * kBlockTokens);
  EXPECT_EQ(s.computed_tokens, 1u);  // The last token is recomputed for its logits.
  EXPECT_EQ(s.stored_chunks, 0u);
  EXPECT_FALSE(s.fell_back);
}

TEST_F(CachedPrefillTest, CorruptSsdBlockFallsBackToRecompute) {
  const std::vector<uint32_t> prompt = SomeTokens(3 * kBlockTokens + 5);
  EXPECT_EQ(Prefill(Ns("alice"), prompt).stored_chunks, 3u);
  ASSERT_TRUE(engine_->Flush().ok());
  engine_.reset();  // Memory tiers are gone; the SSD directory stays.

  // Flip one payload byte of the first record (past the 4 KiB segment header and the record
  // header) in the first segment.
  std::string segment;
  for (const auto& f : std::filesystem::directory_iterator(dir_->Join("ssd"))) {
    if (f.path().extension() == ".kvs" && (segment.empty() || f.path().string() < segment)) {
      segment = f.path().string();
    }
  }
  ASSERT_FALSE(segment.empty());
  {
    std::fstream f(segment, std::ios::in | std::ios::out | std::ios::binary);
    const std::streamoff at = 4096 + 128 + 300;
    f.seekg(at);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x5A);
    f.seekp(at);
    f.write(&c, 1);
    ASSERT_TRUE(f.good());
  }

  OpenEngine();
  ASSERT_NE(engine_, nullptr);
  const CachedPrefillStats s = Prefill(Ns("alice"), prompt);  // Logits checked inside.
  EXPECT_TRUE(s.fell_back);
  EXPECT_EQ(s.cached_tokens, 0u);
  EXPECT_EQ(s.computed_tokens, prompt.size());
  EXPECT_GE(engine_->Stats().corrupt_blocks, 1u);
}

TEST_F(CachedPrefillTest, IntactSsdBlocksAreUsedAfterRestart) {
  const std::vector<uint32_t> prompt = SomeTokens(2 * kBlockTokens + 3);
  EXPECT_EQ(Prefill(Ns("alice"), prompt).stored_chunks, 2u);
  OpenEngine();
  ASSERT_NE(engine_, nullptr);
  const CachedPrefillStats s = Prefill(Ns("alice"), prompt);
  EXPECT_FALSE(s.fell_back);
  EXPECT_EQ(s.cached_tokens, 2u * kBlockTokens);
  ASSERT_EQ(s.chunk_tiers.size(), 2u);
  EXPECT_EQ(s.chunk_tiers[0], TierKind::kSsd);
  EXPECT_LE(s.load_wait_us, s.compute_us);
}

TEST_F(CachedPrefillTest, DifferentSaltsDoNotShare) {
  const std::vector<uint32_t> prompt = SomeTokens(2 * kBlockTokens + 7);
  EXPECT_EQ(Prefill(Ns("alice"), prompt).stored_chunks, 2u);
  const CachedPrefillStats bob = Prefill(Ns("bob"), prompt);
  EXPECT_EQ(bob.cached_tokens, 0u);
  EXPECT_EQ(bob.computed_tokens, prompt.size());
  EXPECT_EQ(Prefill(Ns("alice"), prompt).cached_tokens, 2u * kBlockTokens);
}

TEST_F(CachedPrefillTest, DecodedTokensStoredWithStoreKvChunksAreFoundNextTurn) {
  const Namespace ns = Ns("alice");
  std::vector<uint32_t> sequence = SomeTokens(20);
  std::unique_ptr<InMemoryKvBlocks> kv = NewKv();
  std::vector<float> logits;
  ASSERT_TRUE(CachedPrefill(*model_, *engine_, ns, sequence, *kv, {}, &logits).ok());
  for (uint32_t i = 0; i < 20; ++i) {  // Decode 20 tokens (one at a time, like a reply).
    const uint32_t token =
        static_cast<uint32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    sequence.push_back(token);
    ASSERT_TRUE(model_
                    ->Forward(std::span<const uint32_t>(&token, 1),
                              static_cast<uint32_t>(sequence.size() - 1), *kv, {}, &logits)
                    .ok());
  }
  auto stored = StoreKvChunks(*engine_, ns, sequence, *kv, {});
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  EXPECT_EQ(*stored, 2u - 1u);  // Chunk 0 came with the prefill; chunk 1 holds decoded tokens.
  for (uint32_t t : SomeTokens(10, 3)) sequence.push_back(t);  // The next user turn.
  const CachedPrefillStats s = Prefill(ns, sequence);
  EXPECT_EQ(s.cached_tokens, 2u * kBlockTokens);
  EXPECT_EQ(s.computed_tokens, sequence.size() - 2u * kBlockTokens);
}

TEST_F(CachedPrefillTest, RejectsEmptyPromptAndForeignLayout) {
  std::unique_ptr<InMemoryKvBlocks> kv = NewKv();
  std::vector<float> logits;
  const Namespace ns = Ns("alice");
  EXPECT_TRUE(
      CachedPrefill(*model_, *engine_, ns, {}, *kv, {}, &logits).status().IsInvalidArgument());
  auto other = InMemoryKvBlocks::Create(model_->config().KvLayoutFor(2 * kBlockTokens), 64);
  ASSERT_TRUE(other.ok());
  const std::vector<uint32_t> prompt = SomeTokens(4);
  EXPECT_TRUE(CachedPrefill(*model_, *engine_, ns, prompt, **other, {}, &logits)
                  .status()
                  .IsInvalidArgument());
}

}  // namespace
}  // namespace kvtier::runtime
