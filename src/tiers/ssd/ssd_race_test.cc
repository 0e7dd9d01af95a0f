// Goal: show that the SSD tier stays correct when its own threads interleave: a Flush never
// returns OK while an fsync that covers its writes is still running or has failed (F1), an erased
// block never comes back after a crash however reclaim, erase and re-append interleave, with
// several directories whose segment ids are not in write order (F3), a write batch that
// cannot get space gives up after one stall period, not one per record (F4), with kPerBatch
// a batch is not acknowledged while a write placed before it is still in flight (F5),
// writers that waited for reclaim do not each make a segment of their own (F6), writers do not
// give up while a slow reclaim can still free a segment (F7), and a batch that waits for reclaim
// does not hold reserved records the reclaim's copies would wait for (F8).
// Method: a test-only Env decorator (GateEnv) whose segment files can hold an fsync, a read or
// a write until the test releases it (and then fail it), so a chosen interleaving happens every
// run;
// ReclaimOldestSegment called directly; a ManualClock that never moves, so that only the reclaim
// can end a writer's wait (F7, F8); a crash simulated by opening a second instance on the
// same directories while the first, which never wrote a checkpoint, is idle (its LOCKs released
// as the crash would release them).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "core/mutex.h"
#include "env/env_wrapper.h"
#include "testing/gate_env.h"
#include "testing/test_util.h"
#include "tiers/ssd_record.h"
#include "tiers/ssd/ssd_test_util.h"
#include "tiers/ssd/ssd_tier.h"

namespace kvtier {
namespace {

using ssd_test::Get;
using ssd_test::Put;

constexpr size_t kBlock = 60 * 1024;  // 64 KiB records: 15 per 1 MiB segment.

class SsdRaceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<ScopedTempDir> d = ScopedTempDir::Create();
    ASSERT_TRUE(d.ok());
    dir_ = std::make_unique<ScopedTempDir>(std::move(d).value());
    base_ = NewPosixEnv();
    env_ = std::make_unique<GateEnv>(base_.get());
  }
  SsdTierOptions Options(uint32_t dirs) {
    SsdTierOptions o;
    for (uint32_t i = 0; i < dirs; ++i) o.dirs.push_back(dir_->Join("d" + std::to_string(i)));
    o.segment_bytes = 1 * kMiB;
    o.capacity_bytes = 64 * kMiB;
    o.sync = SsdSyncMode::kPerBatch;
    o.io_backend = IoBackend::kThreadPool;  // Writes go through File, like on every machine.
    return o;
  }
  std::unique_ptr<SsdTier> OpenOrDie(const SsdTierOptions& o, Env* env) {
    Result<std::unique_ptr<SsdTier>> t = SsdTier::Open(o, env);
    KV_CHECK_OK(t.status());
    return std::move(t).value();
  }

  std::unique_ptr<ScopedTempDir> dir_;
  std::unique_ptr<Env> base_;
  std::unique_ptr<GateEnv> env_;
};

// F1: thread A's Flush is inside fsync(S); thread B's Flush must not return before it, and must
// report its failure (B's writes were in S; an fsync that failed does not make them durable).
TEST_F(SsdRaceTest, FlushWaitsForAnInFlightFsyncAndReportsItsFailure) {
  for (SsdSyncMode mode : {SsdSyncMode::kNone, SsdSyncMode::kPeriodic}) {
    SCOPED_TRACE(static_cast<int>(mode));
    SsdTierOptions o = Options(1);
    o.sync = mode;
    o.sync_interval_ms = 3'600'000;  // No periodic sync of its own during the test.
    auto tier = OpenOrDie(o, env_.get());
    ASSERT_TRUE(Put(*tier, 0, 5, kBlock).ok());
    const uint64_t durable_before = tier->durable_sequence();
    env_->sync_gate.Arm(Status::IoError("injected fsync failure"));
    Status a_status, b_status;
    std::thread a([&] { a_status = tier->Flush(); });
    ASSERT_TRUE(env_->sync_gate.WaitEntered());
    std::atomic<bool> b_done{false};
    std::thread b([&] {
      b_status = tier->Flush();
      b_done = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_FALSE(b_done.load()) << "Flush returned while an fsync of its data was running";
    env_->sync_gate.Release();
    a.join();
    b.join();
    EXPECT_TRUE(a_status.IsIoError()) << a_status.ToString();
    EXPECT_FALSE(b_status.ok()) << "Flush said OK although the fsync covering its writes failed";
    EXPECT_EQ(tier->durable_sequence(), durable_before);
    // A later Flush syncs again and succeeds.
    ASSERT_TRUE(tier->Flush().ok());
    EXPECT_GE(tier->durable_sequence(), 5u);
    ASSERT_TRUE(tier->Close().ok());
  }
}

// F1: a checkpoint taken while another caller's fsync runs waits for it, and fails with it.
TEST_F(SsdRaceTest, CheckpointWaitsForAnInFlightFsync) {
  SsdTierOptions o = Options(1);
  o.sync = SsdSyncMode::kNone;
  auto tier = OpenOrDie(o, env_.get());
  ASSERT_TRUE(Put(*tier, 0, 5, kBlock).ok());
  env_->sync_gate.Arm(Status::IoError("injected fsync failure"));
  std::thread a([&] { tier->Flush().IgnoreError(); });
  ASSERT_TRUE(env_->sync_gate.WaitEntered());
  std::atomic<bool> done{false};
  Status ck;
  std::thread b([&] {
    ck = tier->Checkpoint();
    done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(done.load()) << "a checkpoint named records whose fsync was still running";
  env_->sync_gate.Release();
  a.join();
  b.join();
  EXPECT_FALSE(ck.ok());
  ASSERT_TRUE(tier->Close().ok());
}

// Payloads that fill a whole segment (one record per segment) or take one 4 KiB block.
constexpr size_t kFull = 1 * kMiB - 4096 - 128;
constexpr size_t kTiny = 1000;

Status PutSized(SsdTier& tier, std::initializer_list<std::pair<uint64_t, size_t>> blocks) {
  std::vector<std::vector<std::byte>> payloads;
  std::vector<SsdBlockWrite> writes;
  for (const auto& [id, size] : blocks) payloads.push_back(ssd_test::Payload(id, size));
  size_t k = 0;
  for (const auto& [id, size] : blocks) {
    SsdBlockWrite w;
    w.key = ssd_test::Key(id);
    w.layout_digest = ssd_test::Layout();
    w.codec_id = 3;
    w.raw_bytes = static_cast<uint32_t>(size * 2);
    w.payload = payloads[k++];
    writes.push_back(w);
  }
  KV_RETURN_IF_ERROR(tier.WriteBatchSync(writes));
  for (const SsdBlockWrite& w : writes) KV_RETURN_IF_ERROR(w.status);
  return Status::Ok();
}

// F3 (a): with two directories, K (seq 3) lands in dir 0's segment 3 and its tombstone (seq 4) in
// dir 1's segment 2. Reclaiming segments 1 and 2 must not lose the tombstone while segment 3,
// which holds an older record of K, exists; a crash with no checkpoint must not bring K back.
TEST_F(SsdRaceTest, TombstoneOutlivesItsSegmentWhileAnOlderRecordExists) {
  SsdTierOptions o = Options(2);
  auto tier = OpenOrDie(o, env_.get());
  ASSERT_TRUE(PutSized(*tier, {{100, kFull}, {101, kTiny}}).ok());  // seg 1 (d0), seg 2 (d1).
  ASSERT_TRUE(PutSized(*tier, {{7, kFull}}).ok());                  // K: seg 3 (d0).
  const std::vector<BlockKey> k = {ssd_test::Key(7)};
  ASSERT_TRUE(tier->Erase(k).ok());                // Tombstone: seg 2 (d1).
  ASSERT_TRUE(tier->ReclaimOldestSegment().ok());  // seg 1.
  ASSERT_TRUE(tier->ReclaimOldestSegment().ok());  // seg 2, with the tombstone.
  EXPECT_FALSE(tier->Contains(k[0]));
  EXPECT_EQ(tier->Stats().live_tombstones, 1u);
  {
    // Crash: the first instance never wrote a checkpoint; recovery scans every segment.
    tier->ReleaseLocksForTesting();
    auto after = OpenOrDie(o, base_.get());
    EXPECT_FALSE(after->Contains(k[0])) << "an erased block came back after a crash";
    EXPECT_TRUE(Get(*after, 101, kTiny).IsNotFound());  // Unreferenced: dropped by reclaim.
    after.reset();
  }
  // Once every segment older than the tombstone is gone, reclaim drops the tombstone too.
  for (int i = 0; i < 4 && tier->Stats().segments > 0; ++i) {
    ASSERT_TRUE(tier->ReclaimOldestSegment().ok());
  }
  EXPECT_FALSE(tier->Contains(k[0]));
  EXPECT_EQ(tier->Stats().live_tombstones, 0u);
  ASSERT_TRUE(tier->Close().ok());
  auto reopened = OpenOrDie(o, base_.get());
  EXPECT_FALSE(reopened->Contains(k[0]));
}

// F3 (a) across a restart: the checkpoint must carry the live tombstone, so that a reclaim after
// the restart still keeps it while the older record exists.
TEST_F(SsdRaceTest, TombstoneSurvivesACheckpointedRestartThenAReclaim) {
  SsdTierOptions o = Options(2);
  {
    auto tier = OpenOrDie(o, env_.get());
    ASSERT_TRUE(PutSized(*tier, {{100, kFull}, {101, kTiny}}).ok());
    ASSERT_TRUE(PutSized(*tier, {{7, kFull}}).ok());
    const std::vector<BlockKey> k = {ssd_test::Key(7)};
    ASSERT_TRUE(tier->Erase(k).ok());
    ASSERT_TRUE(tier->Close().ok());  // Checkpoint lists segments 1..3 and the tombstone.
  }
  auto tier = OpenOrDie(o, env_.get());
  ASSERT_TRUE(tier->ReclaimOldestSegment().ok());
  ASSERT_TRUE(tier->ReclaimOldestSegment().ok());
  // Crash with the old checkpoint lost (a stale or rejected one must be as correct as none).
  ASSERT_TRUE(base_->RemoveFile(o.dirs[0] + "/index.ckpt").ok());
  tier->ReleaseLocksForTesting();
  auto after = OpenOrDie(o, base_.get());
  EXPECT_FALSE(after->Contains(ssd_test::Key(7))) << "an erased block came back after a crash";
}

// F3 (b): reclaim snapshots K, Erase(K) writes tombstone T while the reclaim reads K's record,
// then the re-append of K must neither beat T on disk nor bring K back in memory.
TEST_F(SsdRaceTest, EraseDuringReclaimReappendStaysErasedAfterACrash) {
  SsdTierOptions o = Options(2);
  auto tier = OpenOrDie(o, env_.get());
  ASSERT_TRUE(Put(*tier, 7, 1, kBlock).ok());  // K in seg 1 (d0), the oldest segment.
  ASSERT_TRUE(Get(*tier, 7, kBlock).ok());     // Referenced: reclaim re-appends it.
  env_->read_gate.Arm(Status::Ok());
  Status reclaimed;
  std::thread r([&] { reclaimed = tier->ReclaimOldestSegment(); });
  ASSERT_TRUE(env_->read_gate.WaitEntered());  // Reclaim has K in its snapshot.
  const std::vector<BlockKey> k = {ssd_test::Key(7)};
  std::atomic<bool> erased{false};
  std::thread e([&] {
    EXPECT_TRUE(tier->Erase(k).ok());
    erased = true;
  });
  // Erase may wait for the reclaim (it is serialised with it) or finish first; either is right.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  env_->read_gate.Release();
  r.join();
  e.join();
  ASSERT_TRUE(reclaimed.ok()) << reclaimed.ToString();
  EXPECT_FALSE(tier->Contains(k[0]));
  tier->ReleaseLocksForTesting();
  auto after = OpenOrDie(o, base_.get());
  EXPECT_FALSE(after->Contains(k[0])) << "an erased block came back after a crash";
}

// F4: with reclaim stuck (it holds a read of the oldest segment), a batch of 8 records that each
// need a new segment gives up after about one write_stall_ms_max, not eight, and every entry
// says Busy.
TEST_F(SsdRaceTest, StalledBatchGivesUpAfterOneStallPeriod) {
  SsdTierOptions o = Options(1);
  o.capacity_bytes = 4 * kMiB;  // 4 segments; reclaim starts above 3.
  o.write_stall_ms_max = 400;
  auto tier = OpenOrDie(o, env_.get());
  ASSERT_TRUE(Put(*tier, 0, 15, kBlock).ok());  // Segment 1, full.
  for (uint64_t i = 0; i < 15; ++i) ASSERT_TRUE(Get(*tier, i, kBlock).ok());
  env_->read_gate.Arm(Status::Ok());  // The reclaim of segment 1 will hang reading its blocks.
  ASSERT_TRUE(Put(*tier, 100, 45, kBlock).ok());  // Segments 2..4, full: at the limit.
  ASSERT_TRUE(env_->read_gate.WaitEntered());
  std::vector<std::vector<std::byte>> payloads;
  std::vector<SsdBlockWrite> writes(8);
  for (uint64_t i = 0; i < 8; ++i) {
    payloads.push_back(ssd_test::Payload(200 + i, kFull));
    writes[i].key = ssd_test::Key(200 + i);
    writes[i].layout_digest = ssd_test::Layout();
    writes[i].payload = payloads[i];
  }
  const auto start = std::chrono::steady_clock::now();
  Status s = tier->WriteBatchSync(writes);
  const auto took_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::steady_clock::now() - start)
                           .count();
  env_->read_gate.Release();
  // Nothing was written: the batch says so (Busy), and so does every entry.
  EXPECT_TRUE(s.IsBusy()) << s.ToString();
  for (const SsdBlockWrite& w : writes) EXPECT_TRUE(w.status.IsBusy()) << w.status.ToString();
  EXPECT_LT(took_ms, 3 * 400) << "each record of the batch stalled on its own";
  ASSERT_TRUE(tier->Close().ok());
}


// F5: batch A's record write is held (its place in the segment is still a hole) while batch B,
// placed after it in the same segment, is written and synced. A crash now would lose B (recovery's
// scan stops at the hole: shown by opening a second instance), so B must not be acknowledged
// until A's write has completed.
TEST_F(SsdRaceTest, BatchIsNotAcknowledgedWhileAnEarlierWriteIsInFlight) {
  SsdTierOptions o = Options(1);
  auto tier = OpenOrDie(o, env_.get());
  ASSERT_TRUE(Put(*tier, 0, 1, kBlock).ok());  // Segment 1 exists: its header is written.
  std::vector<std::byte> pa = ssd_test::Payload(1, kBlock);
  std::vector<std::byte> pb = ssd_test::Payload(2, kBlock);
  SsdBlockWrite a{.key = ssd_test::Key(1), .layout_digest = ssd_test::Layout(), .codec_id = 3,
                  .raw_bytes = static_cast<uint32_t>(2 * kBlock), .payload = pa};
  SsdBlockWrite b{.key = ssd_test::Key(2), .layout_digest = ssd_test::Layout(), .codec_id = 3,
                  .raw_bytes = static_cast<uint32_t>(2 * kBlock), .payload = pb};
  std::atomic<bool> a_released{false}, a_done{false}, b_done{false}, b_answered_before_a{false};
  Status a_status, b_status;
  env_->write_gate.Arm(Status::Ok());
  tier->WriteBatch(std::span(&a, 1), [&](Status s) {
    a_status = s;
    a_done = true;
  });
  ASSERT_TRUE(env_->write_gate.WaitEntered());
  tier->WriteBatch(std::span(&b, 1), [&](Status s) {
    b_status = s;
    if (!a_released.load()) b_answered_before_a = true;
    b_done = true;
  });
  // B's write and fsync complete (it is installed in the index) while A's write is held.
  for (int i = 0; i < 1000 && !tier->Contains(b.key); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(tier->Contains(b.key));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(b_done.load()) << "B was acknowledged while A's write before it was a hole";
  {
    // What a crash now would leave: the scan stops at A's hole and never reaches B.
    tier->ReleaseLocksForTesting();
    auto after = OpenOrDie(o, base_.get());
    EXPECT_TRUE(Get(*after, 0, kBlock).ok());
    EXPECT_TRUE(Get(*after, 2, kBlock).IsNotFound());
    ASSERT_TRUE(after->Close().ok());
  }
  a_released = true;
  env_->write_gate.Release();
  for (int i = 0; i < 1000 && !(a_done.load() && b_done.load()); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(a_done.load() && b_done.load());
  EXPECT_FALSE(b_answered_before_a.load());
  EXPECT_TRUE(a_status.ok()) << a_status.ToString();
  EXPECT_TRUE(b_status.ok()) << b_status.ToString();
  EXPECT_TRUE(Get(*tier, 1, kBlock).ok());
  EXPECT_TRUE(Get(*tier, 2, kBlock).ok());
  ASSERT_TRUE(tier->Close().ok());
}


// F6: at the segment limit, two writers that need a new segment wait for reclaim (held reading
// the one referenced block of segment 1). The reclaim, allowed past the limit, rolls segment 5
// for its copy; the writers must then write into segment 5, which has room, instead of each
// rolling a segment of its own: that left segment 5 behind with room, took the cache over its
// capacity, and put records into a segment older than the newest file in the directory (a
// block stored then was reclaimed with that older segment while newer, near-empty ones stayed).
// (The allowance is made large enough that neither gives up while the reclaim is held.)
TEST_F(SsdRaceTest, WritersThatWaitedForReclaimUseItsSegment) {
  SsdTierOptions o = Options(1);
  o.capacity_bytes = 4 * kMiB;  // 4 segments; reclaim starts at 4.
  o.write_stall_ms_max = 3'600'000;
  auto tier = OpenOrDie(o, env_.get());
  ASSERT_TRUE(Put(*tier, 0, 15, kBlock).ok());  // Segment 1, full.
  ASSERT_TRUE(Get(*tier, 0, kBlock).ok());      // Referenced: the reclaim copies (reads) it.
  env_->read_gate.Arm(Status::Ok());
  ASSERT_TRUE(Put(*tier, 100, 45, kBlock).ok());  // Segments 2..4, full: at the limit.
  ASSERT_TRUE(env_->read_gate.WaitEntered());
  Status s1, s2;
  std::thread w1([&] { s1 = Put(*tier, 200, 1, kBlock); });
  std::thread w2([&] { s2 = Put(*tier, 201, 1, kBlock); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // Both wait for a segment.
  env_->read_gate.Release();
  w1.join();
  w2.join();
  ASSERT_TRUE(s1.ok()) << s1.ToString();
  ASSERT_TRUE(s2.ok()) << s2.ToString();
  EXPECT_FALSE(base_->FileExists(o.dirs[0] + "/" + ssd::SegmentFileName(6)))
      << "a writer rolled a new segment while the reclaim's segment 5 had room";
  EXPECT_TRUE(Get(*tier, 0, kBlock).ok());
  EXPECT_TRUE(Get(*tier, 200, kBlock).ok());
  EXPECT_TRUE(Get(*tier, 201, kBlock).ok());
  ASSERT_TRUE(tier->Close().ok());
}

// The Env of the tests below: GateEnv's files with a ManualClock the test never advances, so a
// writer's stall allowance (write_stall_ms_max of the Env's clock without a segment freed) cannot
// run out however long the machine takes: whatever a writer does depends only on the reclaim.
class FrozenClockEnv final : public EnvWrapper {
 public:
  explicit FrozenClockEnv(Env* base) : EnvWrapper(base) {}
  Clock* clock() override { return &clock_; }

 private:
  ManualClock clock_{1'000'000'000};
};

// F7: at the segment limit, with the reclaim held (reading the one referenced block of segment
// 1), three writers need a new segment. None may give up (Busy) while the reclaim can still free
// one: they waited on a count of wake-ups (10 ms each, and they woke each other), so they gave up
// within milliseconds of a slow reclaim, whatever the time. Here their allowance is 50 ms of a
// clock that does not move; the test watches them for up to 2 s, then lets the reclaim finish, and
// every write must succeed.
TEST_F(SsdRaceTest, WritersWaitForASlowReclaimInsteadOfGivingUp) {
  FrozenClockEnv env(env_.get());
  SsdTierOptions o = Options(1);
  o.capacity_bytes = 4 * kMiB;  // 4 segments; reclaim starts at 4.
  o.write_stall_ms_max = 50;
  auto tier = OpenOrDie(o, &env);
  ASSERT_TRUE(Put(*tier, 0, 15, kBlock).ok());  // Segment 1, full.
  ASSERT_TRUE(Get(*tier, 0, kBlock).ok());      // Referenced: the reclaim copies (reads) it.
  env_->read_gate.Arm(Status::Ok());
  ASSERT_TRUE(Put(*tier, 100, 45, kBlock).ok());  // Segments 2..4, full: at the limit.
  ASSERT_TRUE(env_->read_gate.WaitEntered());
  constexpr int kWriters = 3;
  std::vector<Status> status(kWriters);
  std::atomic<int> finished{0};
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      status[static_cast<size_t>(w)] = Put(*tier, 200 + static_cast<uint64_t>(w), 1, kBlock);
      ++finished;
    });
  }
  for (int i = 0; i < 200 && finished.load() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(finished.load(), 0) << "a writer gave up while the reclaim could still free a segment";
  env_->read_gate.Release();
  for (std::thread& t : writers) t.join();
  for (int w = 0; w < kWriters; ++w) {
    EXPECT_TRUE(status[static_cast<size_t>(w)].ok()) << status[static_cast<size_t>(w)].ToString();
    EXPECT_TRUE(Get(*tier, 200 + static_cast<uint64_t>(w), kBlock).ok()) << w;
  }
  EXPECT_TRUE(Get(*tier, 0, kBlock).ok());
  // The writers may finish in the reclaim's segment once its copies are placed, while it still
  // syncs them and drops segment 1. A checkpoint is serialized with the reclaim, so it returns
  // after that reclaim has ended, and only then is its count final.
  ASSERT_TRUE(tier->Checkpoint().ok());
  EXPECT_GE(tier->Stats().reclaimed_segments, 1u);
  ASSERT_TRUE(tier->Close().ok());
}

// F8: a batch whose first record fits the last room of the open segment and whose second needs a
// new segment, at the limit. Its first record is reserved (a hole until written) while it waits
// for the reclaim, and the reclaim's copy, placed after that hole, may not be acknowledged before
// the hole is written (F5): the batch must hand its reserved records to the I/O threads before it
// waits, or writer and reclaim wait for each other until the writer's allowance runs out (never,
// with this clock). Both records and the copy must land.
TEST_F(SsdRaceTest, ABatchDoesNotWaitForReclaimWhileHoldingAReservedRecord) {
  FrozenClockEnv env(env_.get());
  SsdTierOptions o = Options(1);
  o.capacity_bytes = 4 * kMiB;
  auto tier = OpenOrDie(o, &env);
  ASSERT_TRUE(Put(*tier, 0, 15, kBlock).ok());  // Segment 1, full.
  ASSERT_TRUE(Get(*tier, 0, kBlock).ok());      // Referenced: the reclaim copies it.
  env_->read_gate.Arm(Status::Ok());
  ASSERT_TRUE(Put(*tier, 100, 44, kBlock).ok());  // Segments 2..4; one record of room left in 4.
  ASSERT_TRUE(env_->read_gate.WaitEntered());
  std::atomic<bool> done{false};
  Status batch;
  std::thread writer([&] {
    batch = Put(*tier, 200, 2, kBlock);
    done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // The writer reaches its wait.
  env_->read_gate.Release();
  for (int i = 0; i < 1000 && !done.load(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(done.load()) << "the batch and the reclaim waited for each other";
  writer.join();
  EXPECT_TRUE(batch.ok()) << batch.ToString();
  EXPECT_TRUE(Get(*tier, 0, kBlock).ok());
  EXPECT_TRUE(Get(*tier, 200, kBlock).ok());
  EXPECT_TRUE(Get(*tier, 201, kBlock).ok());
  ASSERT_TRUE(tier->Close().ok());
}

}  // namespace
}  // namespace kvtier
