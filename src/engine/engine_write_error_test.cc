// Goal: show that every SSD write error reaches the engine's caller: with write-through, a
// StoreHandle::Wait whose blocks did not reach the SSD fails with the SSD's error (NoSpace naming
// the segment file once the disk is full, for the first failing store and every one after it);
// with write-back, Flush fails the same way; the SSD tier's write_failures counts the blocks; the
// blocks stay cached and dirty, so once space is back Flush writes them and a reopened engine
// finds every block that was ever acknowledged, byte for byte. And that Flush waits for a block
// another thread is writing: it never returns OK while that write is still in flight.
// Method: a tiny layout (3 layers, 2 KiB blocks) over a real directory behind FaultInjectionEnv,
// which fails every write to segment files with ENOSPC from the moment it is armed (what a full
// disk does: the open segment's next record and the header of every new segment fail).
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <vector>

#include "engine/engine.h"
#include "testing/fault_injection_env.h"
#include "testing/gate_env.h"
#include "testing/test_util.h"
#include "tiers/ssd/ssd_options.h"

namespace kvtier {
namespace {

constexpr uint32_t kLayers = 3;
constexpr uint32_t kBlockTokens = 16;

KvLayout TestLayout() {
  return {.layers = kLayers,
          .kv_heads = 2,
          .head_dim = 16,
          .dtype = DType::kF16,
          .block_tokens = kBlockTokens};
}
const uint64_t kBlockBytes = TestLayout().BlockBytes();

class EngineWriteErrorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<ScopedTempDir> d = ScopedTempDir::Create();
    ASSERT_TRUE(d.ok());
    dir_ = std::make_unique<ScopedTempDir>(std::move(d).value());
    env_ = NewPosixEnv();
    faulty_ = std::make_unique<FaultInjectionEnv>(env_.get());
  }

  EngineOptions Options(WritePolicy policy, uint32_t host_blocks) {
    EngineOptions o;
    o.layout = TestLayout();
    o.model.name = "test-model";
    o.host.capacity_bytes = host_blocks * kBlockBytes;
    o.host.huge_pages = HugePages::kOff;
    o.host.lock = MemoryLock::kOff;
    o.host.prefault = false;
    SsdTierOptions s;
    s.dirs = {dir_->Join("ssd")};
    s.segment_bytes = 1 * kMiB;
    s.capacity_bytes = 16 * kMiB;
    o.tiers.Emplace(kSsdTierName, s);
    o.write_policy = policy;
    o.env = faulty_.get();
    return o;
  }

  // Stores chunk `seed` (one chunk of fresh tokens); returns Store's or Wait's status.
  static Status StoreChunk(Engine& e, const Namespace& ns, uint32_t seed) {
    const std::vector<uint32_t> tokens = TestTokens(seed, kBlockTokens);
    Result<std::vector<Hash256>> hashes = ChunkHashes(ns.digest, tokens, kBlockTokens);
    KV_RETURN_IF_ERROR(hashes.status());
    std::vector<std::vector<std::byte>> bufs;
    std::vector<std::span<const std::byte>> src;
    for (uint32_t l = 0; l < kLayers; ++l) {
      bufs.push_back(TestBlockPayload((*hashes)[0], l, kBlockBytes));
    }
    for (const auto& b : bufs) src.emplace_back(b);
    KV_ASSIGN_OR_RETURN(std::unique_ptr<StoreHandle> h, e.Store(ns, tokens, src, {}));
    return h->Wait();
  }

  // Loads chunk `seed` from wherever it is and checks every byte; OK only if all layers match.
  static Status LoadChunk(Engine& e, const Namespace& ns, uint32_t seed) {
    const std::vector<uint32_t> tokens = TestTokens(seed, kBlockTokens);
    Result<std::vector<Hash256>> hashes = ChunkHashes(ns.digest, tokens, kBlockTokens);
    KV_RETURN_IF_ERROR(hashes.status());
    std::vector<std::vector<std::byte>> bufs(kLayers, std::vector<std::byte>(kBlockBytes));
    std::vector<std::span<std::byte>> dst(bufs.begin(), bufs.end());
    KV_ASSIGN_OR_RETURN(std::unique_ptr<LoadHandle> h, e.Load(ns, tokens, dst));
    KV_RETURN_IF_ERROR(h->Wait());
    for (uint32_t l = 0; l < kLayers; ++l) {
      if (bufs[l] != TestBlockPayload((*hashes)[0], l, kBlockBytes)) {
        return Status::Corruption("layer " + std::to_string(l) + " differs");
      }
    }
    return Status::Ok();
  }

  static uint64_t SsdWriteFailures(Engine& e) {
    const EngineStats st = e.Stats();
    for (const TierStats& t : st.tiers) {
      if (t.kind == TierKind::kSsd) return t.write_failures;
    }
    return 0;
  }

  Status ArmDiskFull() {
    return faulty_
        ->ArmFault({.op = FaultOp::kWrite,
                    .path_substring = ".kvs",
                    .repeat = FaultRepeat::kEveryAfter,
                    .error = InjectedError::kNoSpace})
        .status();
  }

  std::unique_ptr<ScopedTempDir> dir_;
  std::unique_ptr<Env> env_;
  std::unique_ptr<FaultInjectionEnv> faulty_;
};

TEST_F(EngineWriteErrorTest, WriteThroughWaitFailsForEveryStoreOnceTheDiskIsFull) {
  const EngineOptions o = Options(WritePolicy::kWriteThrough, 64 * kLayers);
  {
    Result<std::unique_ptr<Engine>> e = Engine::Open(o);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    const Namespace ns = *(*e)->MakeNamespace("t");
    ASSERT_TRUE(StoreChunk(**e, ns, 1).ok());
    ASSERT_TRUE(ArmDiskFull().ok());
    for (uint32_t seed = 2; seed < 12; ++seed) {
      const Status s = StoreChunk(**e, ns, seed);
      EXPECT_TRUE(s.IsNoSpace()) << seed << ": " << s.ToString();
      EXPECT_NE(s.message().find(".kvs"), std::string::npos) << s.ToString();
      // Still cached in memory: a failed write never loses the block from the cache.
      EXPECT_TRUE(LoadChunk(**e, ns, seed).ok()) << seed;
    }
    EXPECT_EQ(SsdWriteFailures(**e), 10u * kLayers);
    const Status flush = (*e)->Flush();
    EXPECT_TRUE(flush.IsNoSpace()) << flush.ToString();
    faulty_->DisarmAllFaults();  // Space is back: the dirty blocks go down now.
    ASSERT_TRUE((*e)->Flush().ok());
  }
  EngineOptions reopened = o;
  reopened.env = env_.get();
  Result<std::unique_ptr<Engine>> e = Engine::Open(reopened);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  const Namespace ns = *(*e)->MakeNamespace("t");
  for (uint32_t seed = 1; seed < 12; ++seed) {
    EXPECT_TRUE(LoadChunk(**e, ns, seed).ok()) << seed;
  }
}

TEST_F(EngineWriteErrorTest, WriteBackFlushReportsNoSpace) {
  EngineOptions o = Options(WritePolicy::kWriteBack, 64 * kLayers);
  o.writeback_dirty_fraction = 1;  // No cleaner: the blocks stay dirty until Flush.
  o.writeback_age_ms_max = kWritebackAgeMsMax;  // Nor the age limit, however slow the test runs.
  Result<std::unique_ptr<Engine>> e = Engine::Open(o);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  const Namespace ns = *(*e)->MakeNamespace("t");
  for (uint32_t seed = 1; seed < 5; ++seed) ASSERT_TRUE(StoreChunk(**e, ns, seed).ok());
  ASSERT_TRUE(ArmDiskFull().ok());
  const Status flush = (*e)->Flush();
  EXPECT_TRUE(flush.IsNoSpace()) << flush.ToString();
  EXPECT_NE(flush.message().find("flush"), std::string::npos) << flush.ToString();
  EXPECT_GE(SsdWriteFailures(**e), 4u * kLayers);
  faulty_->DisarmAllFaults();
  ASSERT_TRUE((*e)->Flush().ok());
  e->reset();
  EngineOptions reopened = o;
  reopened.env = env_.get();
  Result<std::unique_ptr<Engine>> again = Engine::Open(reopened);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  const Namespace ns2 = *(*again)->MakeNamespace("t");
  for (uint32_t seed = 1; seed < 5; ++seed) EXPECT_TRUE(LoadChunk(**again, ns2, seed).ok()) << seed;
}

// Two Flushes of one dirty block: the first claims it and its write is held in fsync (a gate);
// the second finds it claimed. It must wait for that write instead of returning OK while the
// block is only in memory (a crash then would lose a block whose Flush said it was durable).
TEST_F(EngineWriteErrorTest, FlushWaitsForABlockAnotherThreadIsWriting) {
  GateEnv gated(env_.get());
  EngineOptions o = Options(WritePolicy::kWriteBack, 64 * kLayers);
  o.env = &gated;
  o.writeback_dirty_fraction = 1;  // No cleaner: the two Flushes are the only writers.
  o.writeback_age_ms_max = kWritebackAgeMsMax;
  o.tiers.Get<SsdTierOptions>(kSsdTierName).sync = SsdSyncMode::kPerBatch;
  o.tiers.Get<SsdTierOptions>(kSsdTierName).io_backend =
      IoBackend::kThreadPool;  // Writes and syncs go through File.
  Result<std::unique_ptr<Engine>> e = Engine::Open(o);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  const Namespace ns = *(*e)->MakeNamespace("t");
  ASSERT_TRUE(StoreChunk(**e, ns, 1).ok());
  gated.sync_gate.Arm(Status::Ok());
  std::future<Status> first = std::async(std::launch::async, [&] { return (*e)->Flush(); });
  ASSERT_TRUE(gated.sync_gate.WaitEntered());  // The first Flush is inside the block's fsync.
  std::future<Status> second = std::async(std::launch::async, [&] { return (*e)->Flush(); });
  EXPECT_EQ(second.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout)
      << "the second Flush returned while the block was still being written";
  gated.sync_gate.Release();
  EXPECT_TRUE(first.get().ok());
  EXPECT_TRUE(second.get().ok());
  e->reset();
  EngineOptions reopened = o;
  reopened.env = env_.get();
  Result<std::unique_ptr<Engine>> again = Engine::Open(reopened);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(LoadChunk(**again, *(*again)->MakeNamespace("t"), 1).ok());
}

}  // namespace
}  // namespace kvtier
