// Goal: a request's KV goes from an inference engine's pages into kvtier and back into other
// pages bit for bit (PagedSave, PagedLoad), only the chunks asked for are written, a failed layer
// leaves its pages untouched, and mismatched caches are refused at creation.
// Method: a real Engine (host tier only, then host + SSD after a restart); "pages" are vLLM CPU
// layout tensors ([P][H][2][N][C], described as vLLM shows them) filled with random FP16 bits;
// after a save and a fresh engine's load into different page numbers, the loaded pages are
// compared with the saved ones element for element, and the pages that must not be written are
// compared with their poison value.
#include "engine/paged_transfer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "testing/test_util.h"
#include "tiers/ssd/ssd_options.h"

namespace kvtier {
namespace {

constexpr uint32_t kLayers = 3, kHeads = 2, kDim = 16, kPageTokens = 16, kPages = 12;

KvLayout Layout() {
  return {.layers = kLayers, .kv_heads = kHeads, .head_dim = kDim, .dtype = DType::kF16,
          .block_tokens = kPageTokens};
}

// One layer's cache: kPages pages of [H][2][N][C] FP16 elements.
struct CpuCache {
  std::vector<std::vector<uint16_t>> layers;
  explicit CpuCache(uint16_t fill) {
    for (uint32_t l = 0; l < kLayers; ++l) {
      layers.emplace_back(size_t{kPages} * kHeads * 2 * kPageTokens * kDim, fill);
    }
  }
  void Randomize(uint32_t seed) {
    std::mt19937 rng(seed);
    for (auto& l : layers)
      for (auto& x : l) x = static_cast<uint16_t>(0x3000 + rng() % 0x0fff);  // Finite halves.
  }
  // A page of one layer, as a vector.
  std::vector<uint16_t> Page(uint32_t layer, uint32_t page) const {
    const size_t n = size_t{kHeads} * 2 * kPageTokens * kDim;
    return {layers[layer].begin() + static_cast<std::ptrdiff_t>(page * n),
            layers[layer].begin() + static_cast<std::ptrdiff_t>((page + 1) * n)};
  }
  std::shared_ptr<const PagedKvCache> Describe() {
    std::vector<PagedLayer> out;
    for (auto& l : layers) {
      PagedTensor t;
      t.data = reinterpret_cast<std::byte*>(l.data());
      t.bytes = l.size() * 2;
      t.elem_bytes = 2;
      t.shape = {kPages, kHeads, kPageTokens, 2 * kDim};
      t.strides = {kHeads * kPageTokens * 2 * kDim, kPageTokens * 2 * kDim, 2 * kDim, 1};
      Result<PagedLayer> layer = DescribePagedLayer("vllm_cpu", t, kHeads, kDim);
      EXPECT_TRUE(layer.ok()) << layer.status().ToString();
      out.push_back(*layer);
    }
    Result<std::shared_ptr<const PagedKvCache>> cache = PagedKvCache::Create(out, Layout());
    EXPECT_TRUE(cache.ok()) << cache.status().ToString();
    return *cache;
  }
};

class PagedTransferTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<ScopedTempDir> d = ScopedTempDir::Create();
    ASSERT_TRUE(d.ok());
    dir_ = std::make_unique<ScopedTempDir>(std::move(d).value());
  }
  std::unique_ptr<Engine> Open(bool ssd) {
    EngineOptions o;
    o.layout = Layout();
    o.model.name = "paged-test";
    o.host.capacity_bytes = 64 * Layout().BlockBytes();
    o.host.huge_pages = HugePages::kOff;
    o.host.lock = MemoryLock::kOff;
    o.host.prefault = false;
    if (ssd) {
      SsdTierOptions s;
      s.dirs = {dir_->Join("ssd")};
      s.segment_bytes = 1 * kMiB;
      s.capacity_bytes = 16 * kMiB;
      o.tiers.Emplace(kSsdTierName, s);
    }
    Result<std::unique_ptr<Engine>> e = Engine::Open(o);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? std::move(e).value() : nullptr;
  }
  std::unique_ptr<ScopedTempDir> dir_;
};

TEST_F(PagedTransferTest, SavedPagesComeBackBitForBitAfterARestart) {
  const std::vector<uint32_t> tokens = TestTokens(7, 4 * kPageTokens + 5);
  CpuCache src(0);
  src.Randomize(1);
  const std::vector<int32_t> src_pages{9, 2, 5, 0};  // The request's pages, chunk order.
  {
    std::unique_ptr<Engine> engine = Open(/*ssd=*/true);
    ASSERT_NE(engine, nullptr);
    const Namespace ns = *engine->MakeNamespace("tenant", {});
    Result<std::unique_ptr<PagedSave>> save = PagedSave::Create(src.Describe(), src_pages, 4);
    ASSERT_TRUE(save.ok()) << save.status().ToString();
    for (uint32_t l = 0; l < kLayers; ++l) ASSERT_TRUE((*save)->GatherLayer(l).ok());
    ASSERT_TRUE((*save)->Commit(*engine, ns, tokens).ok());
    ASSERT_TRUE((*save)->Wait().ok());
    EXPECT_TRUE((*save)->Done());
    EXPECT_EQ((*save)->chunks_stored(), 4u);
    ASSERT_TRUE(engine->Flush().ok());
  }
  std::unique_ptr<Engine> engine = Open(/*ssd=*/true);  // A restart: the chunks are on SSD only.
  ASSERT_NE(engine, nullptr);
  const Namespace ns = *engine->MakeNamespace("tenant", {});
  ASSERT_EQ(engine->Lookup(ns, tokens)->matched_tokens, 4u * kPageTokens);

  constexpr uint16_t kPoison = 0x7bff;
  CpuCache dst(kPoison);
  const std::vector<int32_t> dst_pages{3, 11, 6, 1};
  // Chunk 0 is the inference engine's own (its prefix cache had it): not written.
  Result<std::unique_ptr<PagedLoad>> load =
      PagedLoad::Start(*engine, dst.Describe(), ns, tokens, dst_pages, /*first_chunk=*/1, 4);
  ASSERT_TRUE(load.ok()) << load.status().ToString();
  for (uint32_t l = 0; l < kLayers; ++l) ASSERT_TRUE((*load)->WaitLayer(l).ok());
  EXPECT_TRUE((*load)->Wait().ok());
  EXPECT_EQ((*load)->bytes_scattered(), 3ull * kLayers * Layout().BlockBytes());
  for (uint32_t l = 0; l < kLayers; ++l) {
    for (size_t c = 1; c < 4; ++c) {
      EXPECT_EQ(dst.Page(l, static_cast<uint32_t>(dst_pages[c])),
                src.Page(l, static_cast<uint32_t>(src_pages[c])))
          << "layer " << l << " chunk " << c;
    }
    for (uint32_t p = 0; p < kPages; ++p) {
      if (p == 11 || p == 6 || p == 1) continue;
      for (uint16_t x : dst.Page(l, p)) ASSERT_EQ(x, kPoison) << "layer " << l << " page " << p;
    }
  }
}

// A save from a chunk on (the request loaded the chunks before it) copies and stores only the
// new chunks; the whole prefix is then found and loads back bit for bit.
TEST_F(PagedTransferTest, ASaveFromAChunkCopiesOnlyTheNewChunks) {
  std::unique_ptr<Engine> engine = Open(/*ssd=*/false);
  ASSERT_NE(engine, nullptr);
  const Namespace ns = *engine->MakeNamespace("tenant", {});
  const std::vector<uint32_t> tokens = TestTokens(9, 4 * kPageTokens);
  CpuCache src(0);
  src.Randomize(3);
  const std::vector<int32_t> pages{4, 7, 1, 10};
  std::shared_ptr<const PagedKvCache> cache = src.Describe();
  Result<std::unique_ptr<PagedSave>> first = PagedSave::Create(cache, pages, 2);
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE((*first)->Commit(*engine, ns, tokens).ok());
  ASSERT_TRUE((*first)->Wait().ok());
  Result<std::unique_ptr<PagedSave>> rest = PagedSave::Create(cache, pages, 4, /*first_chunk=*/2);
  ASSERT_TRUE(rest.ok()) << rest.status().ToString();
  ASSERT_TRUE((*rest)->Commit(*engine, ns, tokens).ok());
  ASSERT_TRUE((*rest)->Wait().ok());
  EXPECT_EQ((*rest)->bytes_gathered(), 2ull * kLayers * Layout().BlockBytes());
  EXPECT_EQ((*rest)->chunks_stored(), 2u);
  ASSERT_EQ(engine->Lookup(ns, tokens)->matched_tokens, 4u * kPageTokens);

  CpuCache dst(0);
  const std::vector<int32_t> dst_pages{0, 1, 2, 3};
  Result<std::unique_ptr<PagedLoad>> load =
      PagedLoad::Start(*engine, dst.Describe(), ns, tokens, dst_pages, 0, 4);
  ASSERT_TRUE(load.ok());
  ASSERT_TRUE((*load)->Wait().ok());
  for (uint32_t l = 0; l < kLayers; ++l) {
    for (size_t c = 0; c < 4; ++c) {
      EXPECT_EQ(dst.Page(l, static_cast<uint32_t>(c)), src.Page(l, static_cast<uint32_t>(pages[c])))
          << "layer " << l << " chunk " << c;
    }
  }
  EXPECT_FALSE(PagedSave::Create(cache, pages, 4, 4).ok());  // Nothing new.
}

TEST_F(PagedTransferTest, ALoadOfUncachedChunksIsRefusedAndWritesNothing) {
  std::unique_ptr<Engine> engine = Open(/*ssd=*/false);
  ASSERT_NE(engine, nullptr);
  const Namespace ns = *engine->MakeNamespace("tenant", {});
  const std::vector<uint32_t> tokens = TestTokens(8, 2 * kPageTokens);
  CpuCache dst(1);
  Result<std::unique_ptr<PagedLoad>> load =
      PagedLoad::Start(*engine, dst.Describe(), ns, tokens, {0, 1}, 0, 2);
  if (load.ok()) {
    // The engine may refuse at Start or report every layer missing; either way no page changes.
    for (uint32_t l = 0; l < kLayers; ++l) EXPECT_FALSE((*load)->WaitLayer(l).ok());
  }
  for (uint32_t l = 0; l < kLayers; ++l)
    for (uint16_t x : dst.layers[l]) ASSERT_EQ(x, 1);
}

// Staging buffers come back for the next load or save (no fresh page faults), the smallest that
// fits first.
TEST_F(PagedTransferTest, StagingBuffersAreReused) {
  CpuCache cpu(0);
  std::shared_ptr<const PagedKvCache> cache = cpu.Describe();
  Result<AlignedBuffer> big = cache->AcquireStaging(1 << 20);
  Result<AlignedBuffer> small = cache->AcquireStaging(64 << 10);
  ASSERT_TRUE(big.ok() && small.ok());
  const std::byte* big_data = big->data();
  const std::byte* small_data = small->data();
  cache->ReleaseStaging(std::move(*big));
  cache->ReleaseStaging(std::move(*small));
  Result<AlignedBuffer> again = cache->AcquireStaging(32 << 10);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->data(), small_data);  // The smallest that fits.
  Result<AlignedBuffer> again_big = cache->AcquireStaging(512 << 10);
  ASSERT_TRUE(again_big.ok());
  EXPECT_EQ(again_big->data(), big_data);

  // A warmed buffer waits in the pool: the next acquire of a smaller size gets it.
  ASSERT_TRUE(cache->WarmStaging(2 << 20).ok());
  Result<AlignedBuffer> warmed = cache->AcquireStaging(1 << 20);
  ASSERT_TRUE(warmed.ok());
  EXPECT_GE(warmed->capacity(), size_t{2} << 20);
  EXPECT_FALSE(cache->WarmStaging(PagedKvCache::kStagingKeptBytes + 1).ok());
}

TEST_F(PagedTransferTest, MismatchedCachesAndPagesAreRefused) {
  CpuCache cache(0);
  std::shared_ptr<const PagedKvCache> good = cache.Describe();
  std::vector<PagedLayer> two{good->layer(0), good->layer(1)};
  Result<std::shared_ptr<const PagedKvCache>> r = PagedKvCache::Create(two, Layout());
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.status().ToString().find("attention layers"), std::string::npos);

  KvLayout bf16 = Layout();
  bf16.dtype = DType::kF32;
  std::vector<PagedLayer> all{good->layer(0), good->layer(1), good->layer(2)};
  EXPECT_FALSE(PagedKvCache::Create(all, bf16).ok());
  KvLayout heads = Layout();
  heads.kv_heads = 4;
  EXPECT_FALSE(PagedKvCache::Create(all, heads).ok());

  EXPECT_FALSE(PagedSave::Create(good, {0, 1}, 3).ok());            // Too few pages.
  EXPECT_FALSE(PagedSave::Create(good, {0, kPages}, 2).ok());       // Out of range.
  EXPECT_FALSE(PagedSave::Create(good, {0, -1}, 2).ok());           // Negative.
  Result<std::unique_ptr<PagedSave>> save = PagedSave::Create(good, {0}, 1);
  ASSERT_TRUE(save.ok());
  EXPECT_FALSE((*save)->GatherLayer(kLayers).ok());
  EXPECT_FALSE((*save)->Wait().ok());  // Not committed.
}

}  // namespace
}  // namespace kvtier
