// Goal: show that concurrent Stores, Loads, Lookups, Pins and Prefetches of overlapping prefixes
// never serve a block that is still being written or that belongs to another key, and that
// nothing hangs while tiny tiers are under constant eviction and write-back pressure.
// Method: several threads run random operations (seeded; the seed is printed and can be forced
// with --gtest_random_seed) on a few shared token sequences that diverge after random chunks.
// Every block's bytes are a function of (chunk hash, layer), so any thread can check any byte it
// loads. Busy answers are allowed (tiny tiers); wrong bytes and hangs are not (the test has a
// deadline per operation through gtest's overall timeout in CTest).
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <thread>

#include "engine/engine.h"
#include "testing/test_util.h"
#include "tiers/ssd/ssd_options.h"

namespace kvtier {
namespace {

constexpr uint32_t kLayers = 3;
constexpr uint32_t kBlockTokens = 16;
constexpr uint32_t kChunksMax = 4;

KvLayout TestLayout() {
  return {.layers = kLayers,
          .kv_heads = 2,
          .head_dim = 16,
          .dtype = DType::kF16,
          .block_tokens = kBlockTokens};
}
const uint64_t kBlockBytes = TestLayout().BlockBytes();

std::vector<std::byte> Payload(const Hash256& chunk, uint32_t layer) {
  return TestBlockPayload(chunk, layer, kBlockBytes);
}

// Sequence `base` with a variant that diverges from chunk `split` on.
std::vector<uint32_t> Sequence(uint32_t base, uint32_t split, uint32_t variant) {
  std::vector<uint32_t> t(kChunksMax * kBlockTokens);
  for (size_t i = 0; i < t.size(); ++i) {
    t[i] =
        base * 7919u + static_cast<uint32_t>(i) + (i >= split * kBlockTokens ? variant * 31u : 0);
  }
  return t;
}

struct Counters {
  std::atomic<uint64_t> stores{0}, busy{0}, loads_ok{0}, layers_failed{0}, mismatches{0};
  // Layers whose every chunk was loaded and compared byte for byte (loads_ok alone would also
  // count loads in which every layer failed).
  std::atomic<uint64_t> layers_verified{0};
};

class Worker {
 public:
  Worker(Engine* engine, const Namespace& ns, uint64_t seed, Counters* c)
      : engine_(engine), ns_(ns), rng_(seed), c_(c) {}

  void Run(int iterations) {
    for (int i = 0; i < iterations; ++i) {
      const std::vector<uint32_t> tokens = Sequence(Pick(3), Pick(kChunksMax), Pick(2));
      const uint32_t chunks = 1 + Pick(kChunksMax);
      switch (Pick(8)) {
        case 0:
        case 1:
        case 2:
          DoStore(tokens, chunks);
          break;
        case 3: {
          Result<PinHandle> pin = engine_->Pin(ns_, tokens);
          ASSERT_TRUE(pin.ok());
          DoLoad(tokens);
          break;
        }
        case 4:
          ASSERT_TRUE(engine_->Prefetch(ns_, tokens).ok());
          break;
        default:
          DoLoad(tokens);
      }
    }
  }

 private:
  uint32_t Pick(uint32_t n) { return static_cast<uint32_t>(rng_() % n); }

  void DoStore(const std::vector<uint32_t>& tokens, uint32_t chunks) {
    Result<std::vector<Hash256>> h = ChunkHashes(ns_.digest, tokens, kBlockTokens);
    ASSERT_TRUE(h.ok());
    std::vector<std::vector<std::byte>> bufs;
    for (uint32_t c = 0; c < chunks; ++c) {
      for (uint32_t l = 0; l < kLayers; ++l) bufs.push_back(Payload((*h)[c], l));
    }
    std::vector<std::span<const std::byte>> src(bufs.begin(), bufs.end());
    Result<std::unique_ptr<StoreHandle>> s = engine_->Store(ns_, tokens, src);
    if (!s.ok()) {
      ASSERT_TRUE(s.status().IsBusy()) << s.status().ToString();
      ++c_->busy;
      return;
    }
    const Status w = (*s)->Wait();
    ASSERT_TRUE(w.ok()) << w.ToString();
    ++c_->stores;
  }

  void DoLoad(const std::vector<uint32_t>& tokens) {
    Result<LookupResult> r = engine_->Lookup(ns_, tokens);
    ASSERT_TRUE(r.ok());
    const size_t chunks = r->matched_tokens / kBlockTokens;
    if (chunks == 0) return;
    Result<std::vector<Hash256>> h = ChunkHashes(ns_.digest, tokens, kBlockTokens);
    std::vector<std::vector<std::byte>> bufs(chunks * kLayers, std::vector<std::byte>(kBlockBytes));
    std::vector<std::span<std::byte>> dst(bufs.begin(), bufs.end());
    Result<std::unique_ptr<LoadHandle>> load = engine_->Load(ns_, tokens, dst);
    ASSERT_TRUE(load.ok()) << load.status().ToString();
    for (uint32_t l = 0; l < kLayers; ++l) {
      const Status s = (*load)->WaitLayer(l);
      if (!s.ok()) {
        // Evicted between Lookup and Load: allowed, and must say NotFound.
        ASSERT_TRUE(s.IsNotFound()) << s.ToString();
        ++c_->layers_failed;
        continue;
      }
      for (size_t c = 0; c < chunks; ++c) {
        if (bufs[c * kLayers + l] != Payload((*h)[c], l)) ++c_->mismatches;
      }
      ++c_->layers_verified;
    }
    ++c_->loads_ok;
  }

  Engine* engine_;
  Namespace ns_;
  std::mt19937_64 rng_;
  Counters* c_;
};

void RunStress(WritePolicy policy, bool device, bool cxl) {
  const uint64_t seed =
      static_cast<uint64_t>(::testing::UnitTest::GetInstance()->random_seed()) + 12345;
  std::printf("engine stress seed=%llu (rerun with --gtest_random_seed=%llu)\n",
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed - 12345));
  Result<ScopedTempDir> dir = ScopedTempDir::Create();
  ASSERT_TRUE(dir.ok());
  EngineOptions o;
  o.layout = TestLayout();
  o.model.name = "stress";
  o.device.capacity_bytes = device ? 8 * kBlockBytes : 0;
  o.host.capacity_bytes = 9 * kBlockBytes;
  o.host.huge_pages = HugePages::kOff;
  o.host.lock = MemoryLock::kOff;
  o.host.prefault = false;
  if (cxl) {
    HostTierOptions c = o.host;
    c.name = "cxl";
    c.capacity_bytes = 6 * kBlockBytes;
    o.cxl = c;
  }
  SsdTierOptions s;
  s.dirs = {dir->Join("ssd")};
  s.segment_bytes = 1 * kMiB;
  s.capacity_bytes = 8 * kMiB;
  s.sync = SsdSyncMode::kNone;
  o.tiers.Emplace(kSsdTierName, s);
  o.write_policy = policy;
  o.ssd_codec = codecs::CodecParams::ShuffleZstd(1);
  Result<std::unique_ptr<Engine>> engine = Engine::Open(o);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  Namespace ns = *(*engine)->MakeNamespace("stress");
  Counters counters;
  std::vector<std::thread> threads;
  for (uint64_t t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] { Worker(engine->get(), ns, seed * 31 + t, &counters).Run(250); });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_TRUE((*engine)->Flush().ok());
  EXPECT_EQ(counters.mismatches.load(), 0u);
  EXPECT_GT(counters.loads_ok.load(), 0u);
  EXPECT_GT(counters.layers_verified.load(), 0u);
  EXPECT_GT(counters.stores.load(), 0u);
  const EngineStats st = (*engine)->Stats();
  EXPECT_EQ(st.corrupt_blocks, 0u);
  for (const TierStats& t : st.tiers) {
    std::printf("tier %s: hits=%llu evictions=%llu writebacks=%llu promotions=%llu\n",
                std::string(TierKindName(t.kind)).c_str(), static_cast<unsigned long long>(t.hits),
                static_cast<unsigned long long>(t.evictions),
                static_cast<unsigned long long>(t.writebacks),
                static_cast<unsigned long long>(t.promotions));
  }
  std::printf("stores=%llu busy=%llu loads=%llu verified_layers=%llu failed_layers=%llu\n",
              static_cast<unsigned long long>(counters.stores.load()),
              static_cast<unsigned long long>(counters.busy.load()),
              static_cast<unsigned long long>(counters.loads_ok.load()),
              static_cast<unsigned long long>(counters.layers_verified.load()),
              static_cast<unsigned long long>(counters.layers_failed.load()));
}

TEST(EngineStressTest, WriteBackDeviceHostSsd) { RunStress(WritePolicy::kWriteBack, true, false); }
TEST(EngineStressTest, WriteThroughHostCxlSsd) {
  RunStress(WritePolicy::kWriteThrough, false, true);
}

}  // namespace
}  // namespace kvtier
