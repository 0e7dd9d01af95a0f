// Goal: show the engine's remote-tier logic without a Redis server: node B finds and loads, byte
// for byte, what node A put (write-through, or write-back on eviction and on Flush); a damaged
// value fails only its own layer closed and is counted, and a damaged read is a miss that a later
// Load repairs; a store that is down or too slow costs nothing but misses (A keeps storing
// locally, its put failures are counted and logged once, B's lookups miss, the breaker opens) and
// once it answers again the breaker closes and write-back blocks that could not be put are put by
// the next Flush; an SSD kept in the in-memory Env serves a restarted node while the store is
// down; with both the SSD and the remote tier on write-back, each gets every block dirty for it.
// Method: two engines share one FakeRemoteStore (testing/fake_remote_store.h) with faults armed
// per test; a ManualClock drives the store's breaker and slow calls, so timeouts are instant and
// every run is the same; both engines run on the in-memory Env; blocks are derived from (chunk
// hash, layer) (engine_remote_test_util.h) so every byte that comes back is checked.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "engine/engine.h"
#include "engine/engine_remote_test_util.h"
#include "env/mem_env.h"
#include "testing/fake_remote_store.h"
#include "testing/test_util.h"

namespace kvtier {
namespace {

using remote_test::kBlockTokens;
using remote_test::kLayers;
using remote_test::LoadAndCheck;
using remote_test::Matched;
using remote_test::Ns;
using remote_test::StoreChunks;

constexpr uint64_t kCooldownUs = 1'000'000;

class EngineFakeRemoteTest : public ::testing::Test {
 protected:
  // A node with `host_blocks` blocks of host memory and the shared store as its remote tier.
  EngineOptions NodeOptions(uint32_t host_blocks,
                            WritePolicy remote_policy = WritePolicy::kWriteThrough) {
    EngineOptions o = remote_test::LocalNodeOptions(host_blocks, "");
    o.remote = RemoteTierOptions{.store = &store_, .write_policy = remote_policy};
    o.env = env_.get();
    o.logger = &logger_;
    return o;
  }

  std::unique_ptr<Engine> Open(const EngineOptions& o) { return remote_test::OpenEngine(o); }

  // Opens node A (with `a_options`) and node B (64 host blocks, write-through) into a_ and b_.
  void OpenNodes(const EngineOptions& a_options) {
    a_ = Open(a_options);
    b_ = Open(NodeOptions(64));
    ASSERT_NE(a_, nullptr);
    ASSERT_NE(b_, nullptr);
  }

  ManualClock clock_;
  CapturingLogger logger_;
  std::unique_ptr<Env> env_ = NewMemEnv();
  FakeRemoteStore store_{{.layout_digest = LayoutDigest(remote_test::SmallLayout()),
                          .timeout_us = 500'000,
                          .breaker = {.failures_to_open = 3, .open_cooldown_us = kCooldownUs},
                          .clock = &clock_,
                          .logger = &logger_}};
  std::unique_ptr<Engine> a_, b_;  // Declared after the store and env: destroyed before them.
};

TEST_F(EngineFakeRemoteTest, NodeBFindsAndLoadsWhatNodeAStored) {
  ASSERT_NO_FATAL_FAILURE(OpenNodes(NodeOptions(64)));
  remote_test::ExpectNodeBFindsWhatNodeAStored(*a_, *b_, 1);
  EXPECT_EQ(store_.value_count(), 4u * kLayers);
  // Another salt sees nothing.
  EXPECT_EQ(Matched(*b_, Ns(*b_, "other"), TestTokens(1, 4 * kBlockTokens)), 0u);
}

TEST_F(EngineFakeRemoteTest, APromptLongerThanOneLookupBatchIsFoundWhole) {
  // 400 chunks of 3 layers: 1200 blocks, more than one Exists batch of kRemoteLookupKeysMax.
  constexpr size_t kChunks = 400;
  static_assert(kChunks * kLayers > kRemoteLookupKeysMax);
  ASSERT_NO_FATAL_FAILURE(OpenNodes(NodeOptions(2 * kChunks * kLayers)));
  const Namespace ns = Ns(*a_, "t");
  const std::vector<uint32_t> tokens = TestTokens(12, kChunks * kBlockTokens + 3);
  ASSERT_TRUE(StoreChunks(*a_, ns, tokens, kChunks).ok());
  ASSERT_EQ(store_.value_count(), kChunks * kLayers);
  EXPECT_EQ(Matched(*b_, Ns(*b_, "t"), tokens), kChunks * kBlockTokens);
  // A block missing in the second batch ends the prefix at its chunk.
  Result<std::vector<Hash256>> hashes = ChunkHashes(ns.digest, tokens, kBlockTokens);
  ASSERT_TRUE(hashes.ok());
  std::vector<RemoteDelete> drop = {{.key = {.chunk_hash = (*hashes)[350], .layer = 2}}};
  ASSERT_TRUE(store_.Delete(drop).ok() && drop[0].status.ok());
  EXPECT_EQ(Matched(*b_, Ns(*b_, "t"), tokens), 350 * kBlockTokens);
}

TEST_F(EngineFakeRemoteTest, CorruptValueFailsItsLayerClosed) {
  ASSERT_NO_FATAL_FAILURE(OpenNodes(NodeOptions(64)));
  const Namespace ns = Ns(*a_, "t");
  const std::vector<uint32_t> tokens = TestTokens(3, 2 * kBlockTokens);
  ASSERT_TRUE(StoreChunks(*a_, ns, tokens, 2).ok());
  Result<std::vector<Hash256>> hashes = ChunkHashes(ns.digest, tokens, kBlockTokens);
  ASSERT_TRUE(hashes.ok());
  ASSERT_TRUE(store_.CorruptStoredValue({.chunk_hash = (*hashes)[1], .layer = 1}, 300).ok());

  remote_test::ExpectOnlyTheDamagedLayerFailsClosed(*b_, ns, tokens);
  const EngineStats stats = b_->Stats();
  ASSERT_TRUE(stats.remote.has_value());
  EXPECT_EQ(stats.remote->corrupt, 1u);
  ASSERT_FALSE(stats.tiers.empty());
  EXPECT_EQ(stats.tiers.back().name, "remote");  // A borrowed store has no registered name.
}

TEST_F(EngineFakeRemoteTest, DamagedReadIsAMissAndALaterLoadSucceeds) {
  ASSERT_NO_FATAL_FAILURE(OpenNodes(NodeOptions(64)));
  const Namespace ns = Ns(*a_, "t");
  const std::vector<uint32_t> tokens = TestTokens(4, 2 * kBlockTokens);
  ASSERT_TRUE(StoreChunks(*a_, ns, tokens, 2).ok());
  Result<FaultId> f = store_.ArmFault({.kind = RemoteFaultKind::kCorrupt});
  ASSERT_TRUE(f.ok());
  size_t failed = 0;
  for (const Status& s : LoadAndCheck(*b_, ns, tokens, 2)) {
    if (!s.ok()) ++failed;
    EXPECT_TRUE(s.ok() || s.IsNotFound()) << s.ToString();
  }
  EXPECT_GE(failed, 1u) << "the damaged Get fails its layers closed";
  EXPECT_EQ(store_.FiredCount(*f), 1u);
  EXPECT_GE(b_->Stats().corrupt_blocks, 1u);
  // The stored values are intact: loading again returns every layer.
  for (const Status& s : LoadAndCheck(*b_, ns, tokens, 2)) EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST_F(EngineFakeRemoteTest, StoreDownCostsOnlyMissesAndTheBreakerRecovers) {
  ASSERT_NO_FATAL_FAILURE(OpenNodes(NodeOptions(64)));
  const Namespace ns = Ns(*a_, "t");
  const std::vector<uint32_t> stored = TestTokens(5, 2 * kBlockTokens);
  ASSERT_TRUE(StoreChunks(*a_, ns, stored, 2).ok());
  Result<FaultId> down =
      store_.ArmFault({.kind = RemoteFaultKind::kUnavailable, .repeat = FaultRepeat::kEveryAfter});
  ASSERT_TRUE(down.ok());

  // A keeps serving its own blocks and storing new ones locally; the put failures are counted.
  for (const Status& s : LoadAndCheck(*a_, ns, stored, 2)) EXPECT_TRUE(s.ok()) << s.ToString();
  const std::vector<uint32_t> fresh = TestTokens(6, 2 * kBlockTokens);
  EXPECT_TRUE(StoreChunks(*a_, ns, fresh, 2).ok());
  EXPECT_EQ(Matched(*a_, ns, fresh), 2u * kBlockTokens);
  EXPECT_GT(a_->Stats().remote_put_errors, 0u);
  EXPECT_EQ(logger_.CountContaining("engine: remote write failed"), 1u) << "once per streak";

  // B's lookups of remote-only chunks are misses; the breaker opens and then fails fast.
  for (int i = 0; i < 5; ++i) EXPECT_EQ(Matched(*b_, ns, stored), 0u);
  for (const Status& s : LoadAndCheck(*b_, ns, stored, 2)) EXPECT_TRUE(s.IsNotFound());
  EngineStats stats = b_->Stats();
  ASSERT_TRUE(stats.remote.has_value());
  EXPECT_EQ(stats.remote->breaker_state, BreakerState::kOpen);
  EXPECT_GT(stats.remote_lookup_errors, 0u);
  // A's put and B's first two lookups reached the store; the open breaker kept the rest away.
  EXPECT_EQ(store_.FiredCount(*down), 3u);

  // Back up: after the cool-down a probe closes the breaker and what was stored is found.
  store_.DisarmFault(*down);
  clock_.Advance(2 * kCooldownUs);
  EXPECT_EQ(Matched(*b_, ns, stored), 2u * kBlockTokens);
  for (const Status& s : LoadAndCheck(*b_, ns, stored, 2)) EXPECT_TRUE(s.ok()) << s.ToString();
  stats = b_->Stats();
  EXPECT_EQ(stats.remote->breaker_state, BreakerState::kClosed);
  EXPECT_GE(logger_.CountContaining("engine: remote tier answers again"), 1u);
}

TEST_F(EngineFakeRemoteTest, SlowStoreAnswersLateOrTimesOutToAMiss) {
  ASSERT_NO_FATAL_FAILURE(OpenNodes(NodeOptions(64)));
  const Namespace ns = Ns(*a_, "t");
  const std::vector<uint32_t> tokens = TestTokens(7, 2 * kBlockTokens);
  ASSERT_TRUE(StoreChunks(*a_, ns, tokens, 2).ok());
  ASSERT_TRUE(store_.ArmFault({.kind = RemoteFaultKind::kSlow, .delay_us = 100'000}).ok());
  EXPECT_EQ(Matched(*b_, ns, tokens), 2u * kBlockTokens) << "slow but within the timeout";
  ASSERT_TRUE(store_
                  .ArmFault({.kind = RemoteFaultKind::kSlow,
                             .op = RemoteOp::kExists,
                             .delay_us = 2'000'000})
                  .ok());
  EXPECT_EQ(Matched(*b_, ns, tokens), 0u) << "an Exists that times out is a miss";
  const EngineStats stats = b_->Stats();
  EXPECT_EQ(stats.remote_lookup_errors, 2u * kLayers);
  ASSERT_TRUE(stats.remote.has_value());
  EXPECT_EQ(stats.remote->timeouts, 2u * kLayers);
  EXPECT_EQ(Matched(*b_, ns, tokens), 2u * kBlockTokens);
}

TEST_F(EngineFakeRemoteTest, WriteBackPutsWhenEvictedAndOnFlush) {
  ASSERT_NO_FATAL_FAILURE(OpenNodes(NodeOptions(kLayers, WritePolicy::kWriteBack)));  // One chunk.
  remote_test::ExpectWriteBackOnEvictionAndFlush(*a_, *b_, 8);
  EXPECT_EQ(store_.value_count(), 2u * kLayers);
}

TEST_F(EngineFakeRemoteTest, WriteBackBlocksStayDirtyWhileTheStoreIsDown) {
  ASSERT_NO_FATAL_FAILURE(OpenNodes(NodeOptions(64, WritePolicy::kWriteBack)));
  const Namespace ns = Ns(*a_, "t");
  const std::vector<uint32_t> tokens = TestTokens(10, 2 * kBlockTokens);
  ASSERT_TRUE(StoreChunks(*a_, ns, tokens, 2).ok());
  Result<FaultId> down = store_.ArmFault({.kind = RemoteFaultKind::kUnavailable,
                                          .op = RemoteOp::kPut,
                                          .repeat = FaultRepeat::kEveryAfter});
  ASSERT_TRUE(down.ok());
  EXPECT_TRUE(a_->Flush().ok()) << "a remote failure never fails Flush";
  EXPECT_EQ(store_.value_count(), 0u);
  EXPECT_GT(a_->Stats().remote_put_errors, 0u);
  // Back up: the next Flush puts the blocks that stayed dirty.
  store_.DisarmFault(*down);
  clock_.Advance(2 * kCooldownUs);
  ASSERT_TRUE(a_->Flush().ok());
  EXPECT_EQ(store_.value_count(), 2u * kLayers);
  EXPECT_EQ(Matched(*b_, ns, tokens), 2u * kBlockTokens);
  for (const Status& s : LoadAndCheck(*b_, ns, tokens, 2)) EXPECT_TRUE(s.ok()) << s.ToString();
}

// Node A's SSD lives in the MemEnv too: after a restart while the store is down, A serves its
// prefix from the SSD it recovered, and nothing needs the remote tier.
TEST_F(EngineFakeRemoteTest, SsdOnTheMemEnvServesAfterARestartWhileTheStoreIsDown) {
  // Only the directory lock is a real file (an flock(2) by design, tiers/ssd/ssd_dir_lock.h).
  Result<ScopedTempDir> lock_dir = ScopedTempDir::Create();
  ASSERT_TRUE(lock_dir.ok());
  EngineOptions oa = NodeOptions(64);
  oa.tiers = remote_test::LocalNodeOptions(64, lock_dir->path()).tiers;
  const std::vector<uint32_t> tokens = TestTokens(11, 3 * kBlockTokens);
  Namespace ns;
  {
    std::unique_ptr<Engine> a = Open(oa);
    ASSERT_NE(a, nullptr);
    ns = Ns(*a, "t");
    ASSERT_TRUE(StoreChunks(*a, ns, tokens, 3).ok());
  }
  ASSERT_TRUE(store_.ArmFault({.kind = RemoteFaultKind::kUnavailable,
                               .repeat = FaultRepeat::kEveryAfter})
                  .ok());
  std::unique_ptr<Engine> a = Open(oa);
  ASSERT_NE(a, nullptr);
  Result<LookupResult> r = a->Lookup(ns, tokens);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->matched_tokens, 3u * kBlockTokens);
  for (TierKind k : r->chunk_tiers) EXPECT_EQ(k, TierKind::kSsd);
  for (const Status& s : LoadAndCheck(*a, ns, tokens, 3)) EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(a->Stats().remote_lookup_errors, 0u);
}

// The tier list below memory with both tiers on write-back: every block reaches each tier it is
// dirty for, the counters of each tier stay at its own position (the SSD's blocks, the remote
// tier's puts), and Lookup names the fastest tier that has a block.
TEST_F(EngineFakeRemoteTest, EachTierBelowMemoryGetsTheBlocksDirtyForIt) {
  Result<ScopedTempDir> lock_dir = ScopedTempDir::Create();
  ASSERT_TRUE(lock_dir.ok());
  EngineOptions oa = NodeOptions(kLayers, WritePolicy::kWriteBack);  // One chunk of host memory.
  oa.tiers = remote_test::LocalNodeOptions(64, lock_dir->path()).tiers;
  oa.write_policy = WritePolicy::kWriteBack;
  oa.writeback_dirty_fraction = 1.0;  // No cleaner watermark: only evictions and Flush write.
  a_ = Open(oa);
  ASSERT_NE(a_, nullptr);
  const Namespace ns = Ns(*a_, "t");
  const std::vector<uint32_t> tokens = TestTokens(12, 3 * kBlockTokens);
  for (size_t c = 1; c <= 3; ++c) {
    // One chunk per Store: each evicts the previous one (written back by the cleaner).
    const auto end = tokens.begin() + static_cast<std::ptrdiff_t>(c * kBlockTokens);
    const std::vector<uint32_t> prefix(tokens.begin(), end);
    const Status s = remote_test::StoreChunksRetrying(*a_, ns, prefix, c);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  ASSERT_TRUE(a_->Flush().ok());
  EXPECT_EQ(store_.value_count(), 3u * kLayers) << "every block was put remotely";
  const EngineStats stats = a_->Stats();
  ASSERT_EQ(stats.tiers.size(), 3u);  // Host, SSD, remote.
  EXPECT_EQ(stats.tiers[1].kind, TierKind::kSsd);
  EXPECT_EQ(stats.tiers[1].blocks, 3u * kLayers) << "every block reached the SSD";
  EXPECT_EQ(stats.tiers[1].write_failures, 0u);
  EXPECT_EQ(stats.tiers[2].kind, TierKind::kRemote);
  EXPECT_EQ(stats.tiers[2].writebacks, 3u * kLayers);
  EXPECT_EQ(stats.remote_put_errors, 0u);
  Result<LookupResult> r = a_->Lookup(ns, tokens);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->chunk_tiers.size(), 3u);
  EXPECT_EQ(r->chunk_tiers[0], TierKind::kSsd) << "evicted: the SSD is the fastest copy";
  EXPECT_EQ(r->chunk_tiers[2], TierKind::kHost);
  b_ = Open(NodeOptions(64));
  ASSERT_NE(b_, nullptr);
  r = b_->Lookup(ns, tokens);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->chunk_tiers.size(), 3u);
  for (TierKind k : r->chunk_tiers) EXPECT_EQ(k, TierKind::kRemote);
  for (const Status& s : LoadAndCheck(*b_, ns, tokens, 3)) EXPECT_TRUE(s.ok()) << s.ToString();
}

}  // namespace
}  // namespace kvtier
