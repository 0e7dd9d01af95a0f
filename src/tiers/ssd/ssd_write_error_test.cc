// Goal: show that the SSD tier never reports a write as done when the block is not on disk: once
// the filesystem fills up, every batch whose blocks did not get there fails (NoSpace, naming the
// file), including batches that failed before any I/O because no new segment could be created;
// a short write is reported as the kernel's error on the rest (NoSpace), not as a bare "short
// transfer"; admission refusals stay non-errors; and after a reopen exactly the blocks whose
// writes were acknowledged are there, byte for byte.
// Method: a real directory behind FaultInjectionEnv, which fails every write to segment files
// with ENOSPC from a chosen operation on (what a full disk does), or moves only a prefix of one
// write and then fails the next with ENOSPC; batches of one block each so that every batch after
// the first failure has to create a new segment.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "testing/fault_injection_env.h"
#include "testing/test_util.h"
#include "tiers/ssd/ssd_test_util.h"
#include "tiers/ssd/ssd_tier.h"

namespace kvtier {
namespace {

using ssd_test::Get;
using ssd_test::Key;
using ssd_test::Layout;
using ssd_test::Payload;

constexpr size_t kBlock = 60 * 1024;  // 64 KiB records: 15 per 1 MiB segment.

class SsdWriteErrorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<ScopedTempDir> d = ScopedTempDir::Create();
    ASSERT_TRUE(d.ok());
    dir_ = std::make_unique<ScopedTempDir>(std::move(d).value());
    base_ = NewPosixEnv();
    fenv_ = std::make_unique<FaultInjectionEnv>(base_.get());
  }
  SsdTierOptions Options() const {
    SsdTierOptions o;
    o.dirs = {dir_->Join("d0")};
    o.segment_bytes = 1 * kMiB;
    o.capacity_bytes = 64 * kMiB;
    return o;
  }
  // Writes block i alone; returns the batch status and sets *entry to the entry's status.
  static Status WriteOne(SsdTier& tier, uint64_t i, Status* entry, bool* skipped = nullptr) {
    const std::vector<std::byte> payload = Payload(i, kBlock);
    SsdBlockWrite w;
    w.key = Key(i);
    w.layout_digest = Layout();
    w.codec_id = 3;
    w.raw_bytes = static_cast<uint32_t>(kBlock * 2);
    w.payload = payload;
    const Status batch = tier.WriteBatchSync(std::span(&w, 1));
    *entry = w.status;
    if (skipped != nullptr) *skipped = w.skipped;
    return batch;
  }

  std::unique_ptr<ScopedTempDir> dir_;
  std::unique_ptr<Env> base_;
  std::unique_ptr<FaultInjectionEnv> fenv_;
};

TEST_F(SsdWriteErrorTest, EveryBatchAfterTheDiskFillsFailsAndNothingAcknowledgedIsLost) {
  const SsdTierOptions o = Options();
  std::vector<uint64_t> acknowledged;
  {
    Result<std::unique_ptr<SsdTier>> tier = SsdTier::Open(o, fenv_.get());
    ASSERT_TRUE(tier.ok()) << tier.status().ToString();
    // Writes to segment files: 1 is segment 1's header, 2-16 blocks 0-14, 17 segment 2's
    // header, 18-20 blocks 15-17. From the 21st on every one fails: block 18's record write
    // (an I/O error on a placed record), then the header of every new segment, so blocks 19-39
    // get no place at all.
    ASSERT_TRUE(fenv_
                    ->ArmFault({.op = FaultOp::kWrite,
                                .path_substring = ".kvs",
                                .nth = 21,
                                .repeat = FaultRepeat::kEveryAfter,
                                .error = InjectedError::kNoSpace})
                    .ok());
    uint64_t failed = 0;
    for (uint64_t i = 0; i < 40; ++i) {
      Status entry;
      const Status batch = WriteOne(**tier, i, &entry);
      EXPECT_EQ(batch.ok(), entry.ok()) << i << ": batch " << batch.ToString() << ", entry "
                                        << entry.ToString();
      if (batch.ok()) {
        acknowledged.push_back(i);
        continue;
      }
      ++failed;
      EXPECT_TRUE(batch.IsNoSpace()) << i << ": " << batch.ToString();
      EXPECT_NE(batch.message().find(".kvs"), std::string::npos) << batch.ToString();
    }
    EXPECT_EQ(acknowledged.size(), 18u);
    EXPECT_EQ(failed, 22u);
    EXPECT_EQ((*tier)->Stats().failed_writes, 22u);
    fenv_->DisarmAllFaults();
    ASSERT_TRUE((*tier)->Close().ok());
  }
  Result<std::unique_ptr<SsdTier>> tier = SsdTier::Open(o, base_.get());
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  for (uint64_t i = 0; i < 40; ++i) {
    const bool acked = std::find(acknowledged.begin(), acknowledged.end(), i) != acknowledged.end();
    const Status s = Get(**tier, i, kBlock);
    EXPECT_TRUE(acked ? s.ok() : s.IsNotFound()) << i << ": " << s.ToString();
  }
}

TEST_F(SsdWriteErrorTest, ShortWriteIsReportedAsTheErrorOnTheRest) {
  Result<std::unique_ptr<SsdTier>> tier = SsdTier::Open(Options(), fenv_.get());
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  Status entry;
  ASSERT_TRUE(WriteOne(**tier, 0, &entry).ok());  // Creates segment 1 (header write + record).
  // The next record write moves only 4 KiB; the write of the rest fails with ENOSPC.
  ASSERT_TRUE(fenv_
                  ->ArmFault({.kind = FaultKind::kShortTransfer,
                              .op = FaultOp::kWrite,
                              .path_substring = ".kvs",
                              .keep_bytes = 4096})
                  .ok());
  ASSERT_TRUE(fenv_
                  ->ArmFault({.op = FaultOp::kWrite,
                              .path_substring = ".kvs",
                              .nth = 2,
                              .repeat = FaultRepeat::kEveryAfter,
                              .error = InjectedError::kNoSpace})
                  .ok());
  const Status batch = WriteOne(**tier, 1, &entry);
  EXPECT_TRUE(batch.IsNoSpace()) << batch.ToString();
  EXPECT_TRUE(entry.IsNoSpace()) << entry.ToString();
  EXPECT_NE(batch.message().find("short write"), std::string::npos) << batch.ToString();
  fenv_->DisarmAllFaults();
  EXPECT_TRUE(Get(**tier, 0, kBlock).ok());
  EXPECT_TRUE(Get(**tier, 1, kBlock).IsNotFound());
}

TEST_F(SsdWriteErrorTest, ShortWriteThatCanFinishSucceeds) {
  Result<std::unique_ptr<SsdTier>> tier = SsdTier::Open(Options(), fenv_.get());
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  Status entry;
  ASSERT_TRUE(WriteOne(**tier, 0, &entry).ok());
  // A transient short write (the kernel may stop early): the rest is written and all is well.
  ASSERT_TRUE(fenv_
                  ->ArmFault({.kind = FaultKind::kShortTransfer,
                              .op = FaultOp::kWrite,
                              .path_substring = ".kvs",
                              .keep_bytes = 8192})
                  .ok());
  EXPECT_TRUE(WriteOne(**tier, 1, &entry).ok()) << entry.ToString();
  fenv_->DisarmAllFaults();
  EXPECT_TRUE(Get(**tier, 1, kBlock).ok());
}

TEST_F(SsdWriteErrorTest, RawBytesAboveTheBlockLimitIsRefusedBeforeWriting) {
  Result<std::unique_ptr<SsdTier>> tier = SsdTier::Open(Options(), base_.get());
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  const std::vector<std::byte> payload = Payload(0, 4096);
  SsdBlockWrite w;
  w.key = Key(0);
  w.layout_digest = Layout();
  w.raw_bytes = static_cast<uint32_t>(kBlockBytesMax + 1);
  w.payload = payload;
  EXPECT_TRUE((*tier)->WriteBatchSync(std::span(&w, 1)).IsInvalidArgument());
  EXPECT_TRUE(w.status.IsInvalidArgument()) << w.status.ToString();
  EXPECT_FALSE((*tier)->Contains(Key(0)));
}

// A crash during a reclaim can leave one segment more than the limit (the one the reclaim copied
// into); simulated here by reopening a full cache with a smaller capacity. A referenced block in
// the oldest segment must then still be copied by reclaim, and writes must get space again,
// instead of every write stalling on a reclaim that can never get a segment.
TEST_F(SsdWriteErrorTest, CacheOverItsSegmentLimitAfterACrashStillTakesWrites) {
  SsdTierOptions o = Options();
  o.capacity_bytes = 6 * kMiB;
  {
    Result<std::unique_ptr<SsdTier>> tier = SsdTier::Open(o, base_.get());
    ASSERT_TRUE(tier.ok()) << tier.status().ToString();
    for (uint64_t i = 0; i < 75; ++i) {  // 5 full segments, below the reclaim threshold.
      Status entry;
      ASSERT_TRUE(WriteOne(**tier, i, &entry).ok()) << entry.ToString();
    }
    ASSERT_EQ((*tier)->Stats().segments, 5u);
    ASSERT_TRUE((*tier)->Close().ok());
  }
  o.capacity_bytes = 4 * kMiB;  // Now one segment over the limit, as after such a crash.
  o.write_stall_ms_max = 3000;
  Result<std::unique_ptr<SsdTier>> tier = SsdTier::Open(o, base_.get());
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  ASSERT_TRUE(Get(**tier, 0, kBlock).ok());  // Referenced: reclaim must copy it.
  for (uint64_t i = 100; i < 130; ++i) {
    Status entry;
    const Status batch = WriteOne(**tier, i, &entry);
    ASSERT_TRUE(batch.ok()) << i << ": " << batch.ToString();
  }
  EXPECT_TRUE(Get(**tier, 0, kBlock).ok());
  EXPECT_LE((*tier)->Stats().segments, 5u);
}

TEST_F(SsdWriteErrorTest, AdmissionRefusalIsASkipNotAnError) {
  SsdTierOptions o = Options();
  o.admission = SsdAdmission::kAfterRequests;
  o.admission_requests = 2;
  Result<std::unique_ptr<SsdTier>> tier = SsdTier::Open(o, base_.get());
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  Status entry;
  bool skipped = false;
  EXPECT_TRUE(WriteOne(**tier, 0, &entry, &skipped).ok());
  EXPECT_TRUE(entry.IsAborted()) << entry.ToString();
  EXPECT_TRUE(skipped);
  EXPECT_TRUE(WriteOne(**tier, 0, &entry, &skipped).ok());  // Second request: admitted.
  EXPECT_TRUE(entry.ok()) << entry.ToString();
  EXPECT_FALSE(skipped);
  EXPECT_EQ((*tier)->Stats().failed_writes, 0u);
}

}  // namespace
}  // namespace kvtier
