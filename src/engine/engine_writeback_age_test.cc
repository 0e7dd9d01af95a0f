// Goal: show the write-back age limit (EngineOptions::writeback_age_ms_max, docs/reliability.md):
// with write-back, a stored block reaches the SSD once it has been dirty for the limit, with no
// Flush and no memory pressure, so that a process killed afterwards loses none of it; a block
// stored later keeps its own, later deadline; a limit of 0 is write-through (the SSD write is
// done when the Store completes); a limit out of range is refused with a message naming it; and
// the dirty watermark's pass writes the blocks dirty longest first (so it cannot starve them);
// and the write-back horizon the engine reports passes a Store only once it is on the SSD.
// Method: a tiny layout (3 layers, 2 KiB blocks), a host tier far larger than what is stored and
// the dirty watermark off (writeback_dirty_fraction 1), so only the age limit can write a block
// down (except in the watermark test, which says how it differs). A ManualClock is the engine's
// clock: a block cannot fall due before the test advances it, so "not yet on the SSD" is certain;
// once it is advanced, the test waits (bounded, 10 s) for the cleaner, which looks again at least
// every kCleanerAgePollMsMax. A "crash" is a copy of the SSD directory taken while the engine is
// still open (what a killed process leaves: the engine's close would flush), opened by a second
// engine, which must find every block, byte for byte.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "testing/test_util.h"
#include "tiers/ssd/ssd_options.h"

namespace kvtier {
namespace {

constexpr uint32_t kLayers = 3;
constexpr uint32_t kBlockTokens = 16;
constexpr uint32_t kAgeMs = 1000;

KvLayout TestLayout() {
  return {.layers = kLayers,
          .kv_heads = 2,
          .head_dim = 16,
          .dtype = DType::kF16,
          .block_tokens = kBlockTokens};
}
const uint64_t kBlockBytes = TestLayout().BlockBytes();

class EngineWritebackAgeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<ScopedTempDir> d = ScopedTempDir::Create();
    ASSERT_TRUE(d.ok());
    dir_ = std::make_unique<ScopedTempDir>(std::move(d).value());
    env_ = NewPosixEnv({.clock = &clock_});
  }

  EngineOptions Options(const std::string& ssd_dir, uint32_t age_ms) {
    EngineOptions o;
    o.layout = TestLayout();
    o.model.name = "test-model";
    o.host.capacity_bytes = 256 * kBlockBytes;
    o.host.huge_pages = HugePages::kOff;
    o.host.lock = MemoryLock::kOff;
    o.host.prefault = false;
    SsdTierOptions s;
    s.dirs = {ssd_dir};
    s.segment_bytes = 1 * kMiB;
    s.capacity_bytes = 16 * kMiB;
    o.tiers.Emplace(kSsdTierName, s);
    o.write_policy = WritePolicy::kWriteBack;
    o.writeback_dirty_fraction = 1;  // No watermark: only the age limit writes blocks down.
    o.writeback_age_ms_max = age_ms;
    o.env = env_.get();
    return o;
  }

  std::unique_ptr<Engine> OpenOrDie(const EngineOptions& o) {
    Result<std::unique_ptr<Engine>> e = Engine::Open(o);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? std::move(e).value() : nullptr;
  }

  static Status StoreChunks(Engine& e, const Namespace& ns, std::span<const uint32_t> tokens) {
    KV_ASSIGN_OR_RETURN(std::vector<Hash256> hashes,
                        ChunkHashes(ns.digest, tokens, kBlockTokens));
    std::vector<std::vector<std::byte>> bufs;
    for (const Hash256& h : hashes) {
      for (uint32_t l = 0; l < kLayers; ++l) bufs.push_back(TestBlockPayload(h, l, kBlockBytes));
    }
    std::vector<std::span<const std::byte>> src(bufs.begin(), bufs.end());
    KV_ASSIGN_OR_RETURN(std::unique_ptr<StoreHandle> h, e.Store(ns, tokens, src));
    return h->Wait();
  }

  // Whether every chunk of `tokens` loads with its exact bytes.
  static bool LoadsExactly(Engine& e, const Namespace& ns, std::span<const uint32_t> tokens) {
    Result<std::vector<Hash256>> hashes = ChunkHashes(ns.digest, tokens, kBlockTokens);
    if (!hashes.ok()) return false;
    std::vector<std::vector<std::byte>> bufs(hashes->size() * kLayers,
                                             std::vector<std::byte>(kBlockBytes));
    std::vector<std::span<std::byte>> dst(bufs.begin(), bufs.end());
    Result<std::unique_ptr<LoadHandle>> h = e.Load(ns, tokens, dst);
    if (!h.ok() || !(*h)->Wait().ok()) return false;
    for (size_t c = 0; c < hashes->size(); ++c) {
      for (uint32_t l = 0; l < kLayers; ++l) {
        if (bufs[c * kLayers + l] != TestBlockPayload((*hashes)[c], l, kBlockBytes)) return false;
      }
    }
    return true;
  }

  static uint64_t SsdBlocks(Engine& e) {
    for (const TierStats& t : e.Stats().tiers) {
      if (t.kind == TierKind::kSsd) return t.blocks;
    }
    return 0;
  }

  // Waits (at most about 10 s) until the SSD tier holds at least `blocks` blocks.
  static bool WaitForSsdBlocks(Engine& e, uint64_t blocks) {
    return WaitFor([&] { return SsdBlocks(e) >= blocks; });
  }

  // Waits (at most about 10 s) until the cleaner has counted `blocks` written blocks: the SSD
  // tier holds a block as soon as it is written, the engine counts it in background_writebacks
  // once the whole batch is answered.
  static bool WaitForBackgroundWritebacks(Engine& e, uint64_t blocks) {
    return WaitFor([&] { return e.Stats().background_writebacks >= blocks; });
  }

  template <typename Done>
  static bool WaitFor(Done done) {
    for (int i = 0; i < 2000; ++i) {
      if (done()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return done();
  }

  // What a killed process leaves behind: the directory as it is now, with no flush.
  std::string CopyOfSsd(const std::string& name) {
    const std::string copy = dir_->Join(name);
    std::filesystem::copy(dir_->Join("ssd"), copy, std::filesystem::copy_options::recursive);
    return copy;
  }

  ManualClock clock_{1'000'000'000};
  std::unique_ptr<ScopedTempDir> dir_;
  std::unique_ptr<Env> env_;
};

TEST_F(EngineWritebackAgeTest, DirtyBlocksReachTheSsdAtTheirAgeWithoutFlush) {
  auto e = OpenOrDie(Options(dir_->Join("ssd"), kAgeMs));
  ASSERT_NE(e, nullptr);
  const Namespace ns = *e->MakeNamespace("t");
  const std::vector<uint32_t> first = TestTokens(1, 4 * kBlockTokens);
  ASSERT_TRUE(StoreChunks(*e, ns, first).ok());
  // The clock has not moved: nothing is due, nothing is on the SSD.
  EXPECT_EQ(SsdBlocks(*e), 0u);
  clock_.Advance(uint64_t{kAgeMs} * 1000 / 2);
  const std::vector<uint32_t> second = TestTokens(2, 2 * kBlockTokens);
  ASSERT_TRUE(StoreChunks(*e, ns, second).ok());
  // Half a limit later, still nothing due: a few of the cleaner's periods pass without a write.
  std::this_thread::sleep_for(std::chrono::milliseconds(3 * kCleanerAgePollMsMax));
  EXPECT_EQ(SsdBlocks(*e), 0u);
  EXPECT_EQ(e->Stats().background_writebacks, 0u);

  // The first store reaches its limit: its 12 blocks are written, the second store's are not
  // (due half a limit later on a clock that no longer moves).
  clock_.Advance(uint64_t{kAgeMs} * 1000 / 2);
  ASSERT_TRUE(WaitForSsdBlocks(*e, 4 * kLayers));
  ASSERT_TRUE(WaitForBackgroundWritebacks(*e, 4 * kLayers));
  EXPECT_EQ(SsdBlocks(*e), 4u * kLayers);
  EXPECT_EQ(e->Stats().background_writebacks, 4u * kLayers);

  // The process dies now: the SSD alone has the first store, exactly.
  {
    auto after = OpenOrDie(Options(CopyOfSsd("crash1"), kAgeMs));
    ASSERT_NE(after, nullptr);
    const Namespace ns2 = *after->MakeNamespace("t");
    EXPECT_EQ(after->Lookup(ns2, first)->matched_tokens, 4 * kBlockTokens);
    EXPECT_TRUE(LoadsExactly(*after, ns2, first));
    EXPECT_EQ(after->Lookup(ns2, second)->matched_tokens, 0u);
  }

  clock_.Advance(uint64_t{kAgeMs} * 1000 / 2);
  ASSERT_TRUE(WaitForSsdBlocks(*e, 6 * kLayers));
  auto after = OpenOrDie(Options(CopyOfSsd("crash2"), kAgeMs));
  ASSERT_NE(after, nullptr);
  const Namespace ns2 = *after->MakeNamespace("t");
  EXPECT_TRUE(LoadsExactly(*after, ns2, first));
  EXPECT_TRUE(LoadsExactly(*after, ns2, second));
}

// The write-back horizon (TierStats::writeback_horizon_us): every Store that completed before it
// is on the SSD. Method: the ManualClock only moves when told to, so each Store has a known time;
// the horizon must stay at or before a Store while its blocks are dirty, pass it once the cleaner
// wrote them (a copy of the directory then loads them), stop at the next dirty Store, become the
// present once nothing is dirty, and never move back. The cleaner runs on its own thread, so the
// test waits (bounded) for the horizon to move; it never sleeps to prove that it did not.
TEST_F(EngineWritebackAgeTest, HorizonPassesAStoreOnlyOnceItIsOnTheSsd) {
  auto e = OpenOrDie(Options(dir_->Join("ssd"), kAgeMs));
  ASSERT_NE(e, nullptr);
  auto ssd = [&] {
    for (const TierStats& t : e->Stats().tiers) {
      if (t.kind == TierKind::kSsd) return t;
    }
    ADD_FAILURE() << "no SSD tier in the statistics";
    return TierStats{};
  };
  uint64_t seen = 0;  // The largest horizon read so far: it never moves back.
  auto horizon = [&] {
    const uint64_t h = ssd().writeback_horizon_us;
    EXPECT_GE(h, seen) << "the horizon moved back";
    seen = std::max(seen, h);
    return h;
  };
  // Waits (at most about 10 s) until the horizon is past `t`.
  auto wait_past = [&](uint64_t t) {
    for (int i = 0; i < 2000 && horizon() <= t; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return horizon() > t;
  };
  // Nothing dirty: the horizon is the present and trails it by nothing.
  EXPECT_EQ(horizon(), clock_.NowMicros());
  EXPECT_EQ(ssd().writeback_lag_us, 0u);

  const Namespace ns = *e->MakeNamespace("t");
  const std::vector<uint32_t> first = TestTokens(1, 4 * kBlockTokens);
  const uint64_t first_us = clock_.NowMicros();
  ASSERT_TRUE(StoreChunks(*e, ns, first).ok());
  EXPECT_LE(horizon(), first_us);
  clock_.Advance(uint64_t{kAgeMs} * 1000 / 2);
  const std::vector<uint32_t> second = TestTokens(2, 2 * kBlockTokens);
  const uint64_t second_us = clock_.NowMicros();
  ASSERT_TRUE(StoreChunks(*e, ns, second).ok());
  EXPECT_LE(horizon(), first_us);
  EXPECT_GE(ssd().writeback_lag_us, second_us - first_us);

  // The first Store falls due and is written: the horizon passes it and stops at the second.
  clock_.Advance(uint64_t{kAgeMs} * 1000 / 2);
  ASSERT_TRUE(wait_past(first_us));
  EXPECT_LE(horizon(), second_us);
  EXPECT_EQ(SsdBlocks(*e), 4u * kLayers);
  {
    auto after = OpenOrDie(Options(CopyOfSsd("crash"), kAgeMs));
    ASSERT_NE(after, nullptr);
    EXPECT_TRUE(LoadsExactly(*after, *after->MakeNamespace("t"), first));
  }

  // The second is written too: nothing is dirty, the horizon is the present again.
  clock_.Advance(uint64_t{kAgeMs} * 1000 / 2);
  ASSERT_TRUE(wait_past(second_us));
  EXPECT_EQ(SsdBlocks(*e), 6u * kLayers);
  EXPECT_EQ(horizon(), clock_.NowMicros());
  // A Store now: the horizon stays where it is (not past the Store), it does not fall back.
  const uint64_t third_us = clock_.NowMicros();
  ASSERT_TRUE(StoreChunks(*e, ns, TestTokens(3, kBlockTokens)).ok());
  clock_.Advance(1000);
  EXPECT_EQ(horizon(), third_us);
}

// The dirty watermark's pass writes the blocks dirty longest first. Under a steady stream of
// Stores that pass runs round after round; when it took blocks in table order, an old block could
// wait there far past its age limit (a killed process then lost a Store the limit had promised).
// Method: the age limit off (an hour, on a clock that moves 1 ms), a host tier of 64 blocks with
// the watermark at half (32 dirty blocks; the pass cleans down to 16). Two chunks (6 blocks) are
// stored first, then 1 ms later single chunks until 36 blocks are dirty: the pass writes at least
// 17 of them, and the first 6 must be among them, whatever their place in the table.
TEST_F(EngineWritebackAgeTest, WatermarkPassWritesTheOldestFirst) {
  EngineOptions o = Options(dir_->Join("ssd"), kWritebackAgeMsMax);
  o.host.capacity_bytes = 64 * kBlockBytes;
  o.writeback_dirty_fraction = 0.5;
  auto e = OpenOrDie(o);
  ASSERT_NE(e, nullptr);
  const Namespace ns = *e->MakeNamespace("t");
  const std::vector<uint32_t> old = TestTokens(10, 2 * kBlockTokens);
  ASSERT_TRUE(StoreChunks(*e, ns, old).ok());
  clock_.Advance(1000);
  for (uint32_t i = 0; i < 10; ++i) {
    ASSERT_TRUE(StoreChunks(*e, ns, TestTokens(100 + i, kBlockTokens)).ok());
  }
  // Four of the pass's rounds (4 blocks each): the 6 oldest were in the first two.
  ASSERT_TRUE(WaitForSsdBlocks(*e, 16));
  auto after = OpenOrDie(Options(CopyOfSsd("crash"), kWritebackAgeMsMax));
  ASSERT_NE(after, nullptr);
  EXPECT_TRUE(LoadsExactly(*after, *after->MakeNamespace("t"), old));
}

TEST_F(EngineWritebackAgeTest, ZeroIsWriteThrough) {
  auto e = OpenOrDie(Options(dir_->Join("ssd"), 0));
  ASSERT_NE(e, nullptr);
  const Namespace ns = *e->MakeNamespace("t");
  const std::vector<uint32_t> tokens = TestTokens(3, 3 * kBlockTokens);
  ASSERT_TRUE(StoreChunks(*e, ns, tokens).ok());
  // No clock movement and no wait: the Store completed after its SSD writes.
  EXPECT_EQ(SsdBlocks(*e), 3u * kLayers);
  EXPECT_EQ(e->Stats().background_writebacks, 0u);
  auto after = OpenOrDie(Options(CopyOfSsd("crash"), 0));
  ASSERT_NE(after, nullptr);
  EXPECT_TRUE(LoadsExactly(*after, *after->MakeNamespace("t"), tokens));
}

TEST_F(EngineWritebackAgeTest, OutOfRangeIsRefused) {
  EngineOptions o = Options(dir_->Join("ssd"), kWritebackAgeMsMax + 1);
  const Result<std::unique_ptr<Engine>> e = Engine::Open(o);
  ASSERT_TRUE(e.status().IsInvalidArgument());
  EXPECT_NE(e.status().message().find("writeback_age_ms_max"), std::string::npos)
      << e.status().ToString();
}

}  // namespace
}  // namespace kvtier
