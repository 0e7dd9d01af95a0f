// Goal: show that the engine's workers do not wait for the I/O of the tiers below memory: a Load
// whose SSD reads are held, or a Store whose write-through is held, does not keep the worker
// pool from other work (a Load from host memory completes meanwhile, while the SSD layers or the
// Store are still pending), the held work then completes (the stored bytes; the Store's handle
// only once its blocks are on the SSD), a write-through larger than the staging pool completes,
// and an engine destroyed while reads it issued on its own (a Prefetch) are held waits for them
// instead of letting their completions run on a destroyed engine.
// Method: a tiny layout (3 layers, 2 KiB blocks, 8 staging buffers) over a real directory behind
// GateEnv, whose gates hold the next read or fsync of a segment file on the SSD tier's I/O
// thread until the test releases them (the SSD tier on its thread-pool backend reads and syncs
// through File); one worker thread, so that a worker parked on the I/O would stall everything
// queued behind it. Run under the sanitizer builds to catch a completion touching freed memory.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "engine/engine_remote_test_util.h"
#include "testing/gate_env.h"
#include "testing/test_util.h"
#include "tiers/ssd/ssd_options.h"

namespace kvtier {
namespace {

using remote_test::kBlockTokens;
using remote_test::kLayers;
using remote_test::LoadAndCheck;
using remote_test::StoreChunks;

const uint64_t kBlockBytes = remote_test::SmallLayout().BlockBytes();

// One chunk's blocks, layer by layer, and the spans over them.
struct ChunkBuffers {
  std::vector<std::vector<std::byte>> blocks =
      std::vector<std::vector<std::byte>>(kLayers, std::vector<std::byte>(kBlockBytes));
  std::vector<std::span<std::byte>> spans;
  ChunkBuffers() { spans.assign(blocks.begin(), blocks.end()); }
};

class EngineAsyncTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<ScopedTempDir> d = ScopedTempDir::Create();
    ASSERT_TRUE(d.ok());
    dir_ = std::make_unique<ScopedTempDir>(std::move(d).value());
    env_ = NewPosixEnv();
    gated_ = std::make_unique<GateEnv>(env_.get());
  }

  // One chunk of host memory, one worker; every Store is written through to the SSD.
  EngineOptions Options() {
    EngineOptions o = remote_test::LocalNodeOptions(kLayers, dir_->Join("ssd"));
    o.worker_threads = 1;
    // A Load's SSD hits stay out of host memory: a promotion could evict the chunk a test keeps
    // there for its memory-only Load.
    o.promote_on_load = false;
    o.tiers.Get<SsdTierOptions>(kSsdTierName).io_backend =
        IoBackend::kThreadPool;  // Reads and syncs go through File (the gates).
    o.env = gated_.get();
    return o;
  }

  static std::vector<uint32_t> Tokens(uint32_t seed) { return TestTokens(seed, kBlockTokens); }

  std::vector<std::vector<std::byte>> Expected(const Namespace& ns, uint32_t seed) {
    const std::vector<Hash256> h = *ChunkHashes(ns.digest, Tokens(seed), kBlockTokens);
    std::vector<std::vector<std::byte>> out;
    for (uint32_t l = 0; l < kLayers; ++l) out.push_back(TestBlockPayload(h[0], l, kBlockBytes));
    return out;
  }

  Status StoreChunk(Engine& e, const Namespace& ns, uint32_t seed) {
    return StoreChunks(e, ns, Tokens(seed), 1);
  }

  std::unique_ptr<ScopedTempDir> dir_;
  std::unique_ptr<Env> env_;
  std::unique_ptr<GateEnv> gated_;
};

// Chunk 1 only on the SSD, chunk 2 in host memory: the Load of chunk 1 has one read batch per
// layer. With its first read held, the Load of chunk 2 (a memory copy on the one worker) must
// complete while chunk 1 still has a layer pending: a worker that waited for the read would
// have run chunk 2's copy only after every layer of chunk 1.
TEST_F(EngineAsyncTest, HeldReadsDoNotHoldTheWorkers) {
  Result<std::unique_ptr<Engine>> e = Engine::Open(Options());
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  const Namespace ns = *(*e)->MakeNamespace("t");
  ASSERT_TRUE(StoreChunk(**e, ns, 1).ok());
  ASSERT_TRUE(StoreChunk(**e, ns, 2).ok());  // Evicts chunk 1 (clean: it is on the SSD).
  ASSERT_EQ((*e)->Lookup(ns, Tokens(1))->chunk_tiers.at(0), TierKind::kSsd);
  ASSERT_EQ((*e)->Lookup(ns, Tokens(2))->chunk_tiers.at(0), TierKind::kHost);

  ChunkBuffers from_ssd;
  ChunkBuffers from_host;
  gated_->read_gate.Arm(Status::Ok());
  Result<std::unique_ptr<LoadHandle>> slow = (*e)->Load(ns, Tokens(1), from_ssd.spans);
  ASSERT_TRUE(slow.ok()) << slow.status().ToString();
  ASSERT_TRUE(gated_->read_gate.WaitEntered());
  Result<std::unique_ptr<LoadHandle>> fast = (*e)->Load(ns, Tokens(2), from_host.spans);
  ASSERT_TRUE(fast.ok()) << fast.status().ToString();
  EXPECT_TRUE((*fast)->Wait().ok());
  bool all_ready = true;
  for (uint32_t l = 0; l < kLayers; ++l) all_ready = all_ready && (*slow)->LayerReady(l);
  EXPECT_FALSE(all_ready) << "the memory copy waited for the held SSD read";
  gated_->read_gate.Release();
  EXPECT_TRUE((*slow)->Wait().ok());
  EXPECT_EQ(from_ssd.blocks, Expected(ns, 1));
  EXPECT_EQ(from_host.blocks, Expected(ns, 2));
  const EngineStats st = (*e)->Stats();
  EXPECT_EQ(st.load_failures, 0u);
  EXPECT_EQ(st.corrupt_blocks, 0u);
  EXPECT_EQ(st.tiers.back().hits, kLayers);  // The SSD's hits: chunk 1's blocks.
}

// The write-through of chunk 3 is held in the SSD's fsync (one fsync per batch): the Load of
// chunk 2 from host memory completes on the one worker meanwhile, and the Store's handle
// completes only once the write did, with the block then on the SSD (Wait OK still means that).
TEST_F(EngineAsyncTest, HeldWritesDoNotHoldTheWorkers) {
  EngineOptions o = Options();
  o.host.capacity_bytes = 2 * kLayers * kBlockBytes;
  o.tiers.Get<SsdTierOptions>(kSsdTierName).sync = SsdSyncMode::kPerBatch;
  Result<std::unique_ptr<Engine>> e = Engine::Open(o);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  const Namespace ns = *(*e)->MakeNamespace("t");
  ASSERT_TRUE(StoreChunk(**e, ns, 2).ok());
  gated_->sync_gate.Arm(Status::Ok());
  const std::vector<std::vector<std::byte>> blocks = Expected(ns, 3);
  std::vector<std::span<const std::byte>> src(blocks.begin(), blocks.end());
  Result<std::unique_ptr<StoreHandle>> store = (*e)->Store(ns, Tokens(3), src, {});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ASSERT_TRUE(gated_->sync_gate.WaitEntered());
  ChunkBuffers from_host;
  Result<std::unique_ptr<LoadHandle>> load = (*e)->Load(ns, Tokens(2), from_host.spans);
  ASSERT_TRUE(load.ok()) << load.status().ToString();
  EXPECT_TRUE((*load)->Wait().ok());
  EXPECT_FALSE((*store)->Done()) << "the memory copy waited for the held SSD write";
  gated_->sync_gate.Release();
  EXPECT_TRUE((*store)->Wait().ok());
  EXPECT_EQ(from_host.blocks, Expected(ns, 2));
  EXPECT_EQ((*e)->Stats().tiers.back().blocks, 2 * kLayers);  // Both chunks on the SSD.
}

// A write-through of more blocks than there are staging buffers (8): its batches are issued one
// after the other, each waiting for buffers that only the answers to the earlier ones release.
// Every block reaches the SSD and comes back byte for byte.
TEST_F(EngineAsyncTest, StoreLargerThanTheStagingPoolCompletes) {
  EngineOptions o = Options();
  o.host.capacity_bytes = 4 * kLayers * kBlockBytes;
  Result<std::unique_ptr<Engine>> e = Engine::Open(o);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  const Namespace ns = *(*e)->MakeNamespace("t");
  const std::vector<uint32_t> tokens = TestTokens(9, 4 * kBlockTokens);
  ASSERT_TRUE(StoreChunks(**e, ns, tokens, 4).ok());  // 12 blocks.
  EXPECT_EQ((*e)->Stats().tiers.back().blocks, 4 * kLayers);
  e->reset();
  Result<std::unique_ptr<Engine>> again = Engine::Open(o);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  for (const Status& s : LoadAndCheck(**again, *(*again)->MakeNamespace("t"), tokens, 4)) {
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
}

// A Prefetch's read is held on the SSD's I/O thread when the engine is destroyed: the destructor
// returns only after the read completed and its continuation ran (the test releases the read
// only after the destructor started; nothing may then touch the destroyed engine).
TEST_F(EngineAsyncTest, DestructionDrainsReadsInFlight) {
  Result<std::unique_ptr<Engine>> e = Engine::Open(Options());
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  const Namespace ns = *(*e)->MakeNamespace("t");
  ASSERT_TRUE(StoreChunk(**e, ns, 1).ok());
  ASSERT_TRUE(StoreChunk(**e, ns, 2).ok());  // Chunk 1 now only on the SSD.
  gated_->read_gate.Arm(Status::Ok());
  ASSERT_TRUE((*e)->Prefetch(ns, Tokens(1)).ok());
  ASSERT_TRUE(gated_->read_gate.WaitEntered());
  std::atomic<bool> released{false};
  std::atomic<bool> destroyed_before_release{false};
  std::thread destroy([&] {
    e->reset();
    if (!released.load()) destroyed_before_release = true;
  });
  // Gives the destructor time to reach its wait; the gate would release itself after 10 s.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  released = true;
  gated_->read_gate.Release();
  destroy.join();
  EXPECT_FALSE(destroyed_before_release.load());

  // The blocks are intact for the next engine.
  Result<std::unique_ptr<Engine>> again = Engine::Open(Options());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  for (const Status& s : LoadAndCheck(**again, *(*again)->MakeNamespace("t"), Tokens(1), 1)) {
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
}

}  // namespace
}  // namespace kvtier
