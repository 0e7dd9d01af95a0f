// Goal: show that SsdTier stores and returns blocks exactly, keeps them across restarts (with a
// checkpoint, without one, with a stale one, after a torn tail), reclaims space by the rules of
// docs/ssd_format.md §7 (reference bits, TTL), and enforces admission and the write budget.
// Method: real files in a temporary directory through the posix Env, small segments so a few
// blocks fill one, a ManualClock where time matters, and direct edits of the files to simulate
// torn writes.
#include "tiers/ssd/ssd_tier.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "testing/test_util.h"
#include "tiers/ssd/ssd_recovery.h"
#include "tiers/ssd/ssd_test_util.h"

namespace kvtier {
namespace {

using ssd_test::Get;
using ssd_test::Put;

constexpr size_t kBlock = 60 * 1024;  // 64 KiB records: 15 per 1 MiB segment.

class SsdTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<ScopedTempDir> d = ScopedTempDir::Create();
    ASSERT_TRUE(d.ok());
    dir_ = std::make_unique<ScopedTempDir>(std::move(d).value());
    env_ = NewPosixEnv({.clock = &clock_});
  }
  SsdTierOptions Options(uint32_t dirs = 1) {
    SsdTierOptions o;
    for (uint32_t i = 0; i < dirs; ++i) o.dirs.push_back(dir_->Join("d" + std::to_string(i)));
    o.segment_bytes = 1 * kMiB;
    o.capacity_bytes = 64 * kMiB;
    o.sync = SsdSyncMode::kPerBatch;
    return o;
  }
  std::unique_ptr<SsdTier> OpenOrDie(const SsdTierOptions& o) {
    Result<std::unique_ptr<SsdTier>> t = SsdTier::Open(o, env_.get());
    KV_CHECK_OK(t.status());
    return std::move(t).value();
  }
  std::vector<std::string> Segments(const std::string& d) {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(d)) {
      if (e.path().extension() == ".kvs") out.push_back(e.path().string());
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  ManualClock clock_{1'000'000'000};
  std::unique_ptr<ScopedTempDir> dir_;
  std::unique_ptr<Env> env_;
};

// Readers tell a record that failed verification (corrupt) from one that is simply not there
// (never stored, expired, reclaimed): both are NotFound, only the first sets failed_verification.
TEST_F(SsdTierTest, FailedVerificationIsToldApartFromAbsence) {
  auto tier = OpenOrDie(Options());
  ASSERT_TRUE(Put(*tier, 0, 1, kBlock).ok());
  Result<AlignedBuffer> buf = AlignedBuffer::Allocate(ssd::RecordBytesForPayload(kBlock));
  ASSERT_TRUE(buf.ok());
  SsdBlockRead reads[2];
  reads[0] = {.key = ssd_test::Key(0), .layout_digest = ssd_test::Layout(7), .buffer = buf->span()};
  reads[1] = {.key = ssd_test::Key(1), .layout_digest = ssd_test::Layout(), .buffer = buf->span()};
  ASSERT_TRUE(tier->ReadBatchSync(std::span(&reads[0], 1)).ok());
  ASSERT_TRUE(tier->ReadBatchSync(std::span(&reads[1], 1)).ok());
  EXPECT_TRUE(reads[0].status.IsNotFound()) << reads[0].status.ToString();
  EXPECT_TRUE(reads[0].failed_verification);
  EXPECT_TRUE(reads[1].status.IsNotFound()) << reads[1].status.ToString();
  EXPECT_FALSE(reads[1].failed_verification);
}

TEST_F(SsdTierTest, WriteReadContainsErase) {
  auto tier = OpenOrDie(Options(2));
  ASSERT_TRUE(Put(*tier, 0, 40, kBlock).ok());
  for (uint64_t i = 0; i < 40; ++i) {
    EXPECT_TRUE(tier->Contains(ssd_test::Key(i)));
    EXPECT_TRUE(Get(*tier, i, kBlock).ok()) << i;
  }
  EXPECT_TRUE(Get(*tier, 99, kBlock).IsNotFound());
  // A wrong layout digest is never returned.
  EXPECT_TRUE(Get(*tier, 1, kBlock, 0, ssd_test::Layout(7)).IsNotFound());
  EXPECT_EQ(tier->Stats().corrupt_records, 1u);
  std::vector<BlockKey> gone = {ssd_test::Key(2), ssd_test::Key(3)};
  ASSERT_TRUE(tier->Erase(gone).ok());
  EXPECT_FALSE(tier->Contains(ssd_test::Key(2)));
  EXPECT_TRUE(Get(*tier, 3, kBlock).IsNotFound());
  // Overwrite returns the newest version.
  ASSERT_TRUE(Put(*tier, 4, 1, kBlock, 0, 9).ok());
  EXPECT_TRUE(Get(*tier, 4, kBlock, 9).ok());
  // Both directories got segments (striping).
  EXPECT_FALSE(Segments(dir_->Join("d0")).empty());
  EXPECT_FALSE(Segments(dir_->Join("d1")).empty());
  // A too-small read buffer is refused.
  Result<AlignedBuffer> small = AlignedBuffer::Allocate(4096);
  ASSERT_TRUE(small.ok());
  SsdBlockRead r;
  r.key = ssd_test::Key(5);
  r.layout_digest = ssd_test::Layout();
  r.buffer = small->span();
  ASSERT_TRUE(tier->ReadBatchSync(std::span(&r, 1)).ok());
  EXPECT_TRUE(r.status.IsInvalidArgument());
  EXPECT_TRUE(tier->Close().ok());
}

TEST_F(SsdTierTest, RestartWithCheckpoint) {
  SsdTierOptions o = Options(2);
  {
    auto tier = OpenOrDie(o);
    ASSERT_TRUE(Put(*tier, 0, 50, kBlock).ok());
    std::vector<BlockKey> gone = {ssd_test::Key(7)};
    ASSERT_TRUE(tier->Erase(gone).ok());
    ASSERT_TRUE(tier->Close().ok());
  }
  auto tier = OpenOrDie(o);
  EXPECT_TRUE(tier->Stats().checkpoint_used);
  EXPECT_EQ(tier->Stats().blocks, 49u);
  for (uint64_t i = 0; i < 50; ++i) {
    Status s = Get(*tier, i, kBlock);
    EXPECT_TRUE(i == 7 ? s.IsNotFound() : s.ok()) << i << " " << s.ToString();
  }
  // New writes after a restart go to new segments and survive another restart.
  ASSERT_TRUE(Put(*tier, 100, 5, kBlock).ok());
  ASSERT_TRUE(tier->Close().ok());
  tier = OpenOrDie(o);
  for (uint64_t i = 100; i < 105; ++i) {
    EXPECT_TRUE(Get(*tier, i, kBlock).ok());
  }
}

TEST_F(SsdTierTest, RestartWithoutCheckpointScansEverything) {
  SsdTierOptions o = Options(2);
  {
    auto tier = OpenOrDie(o);
    ASSERT_TRUE(Put(*tier, 0, 50, kBlock).ok());
    std::vector<BlockKey> gone = {ssd_test::Key(8)};
    ASSERT_TRUE(tier->Erase(gone).ok());
    ASSERT_TRUE(Put(*tier, 9, 1, kBlock, 0, 5).ok());
    ASSERT_TRUE(tier->Close().ok());
  }
  ASSERT_EQ(::unlink(dir_->Join("d0/index.ckpt").c_str()), 0);
  auto tier = OpenOrDie(o);
  EXPECT_FALSE(tier->Stats().checkpoint_used);
  EXPECT_EQ(tier->Stats().blocks, 49u);
  EXPECT_TRUE(Get(*tier, 8, kBlock).IsNotFound());  // The tombstone was replayed.
  EXPECT_TRUE(Get(*tier, 9, kBlock, 5).ok());       // The newest version won.
  EXPECT_TRUE(Get(*tier, 10, kBlock).ok());
}

TEST_F(SsdTierTest, StaleCheckpointPlusScan) {
  SsdTierOptions o = Options(1);
  {
    auto tier = OpenOrDie(o);
    ASSERT_TRUE(Put(*tier, 0, 20, kBlock).ok());
    ASSERT_TRUE(tier->Checkpoint().ok());
    std::filesystem::copy_file(dir_->Join("d0/index.ckpt"), dir_->Join("old.ckpt"));
    ASSERT_TRUE(Put(*tier, 20, 20, kBlock).ok());
    std::vector<BlockKey> gone = {ssd_test::Key(3), ssd_test::Key(25)};
    ASSERT_TRUE(tier->Erase(gone).ok());
    ASSERT_TRUE(tier->Close().ok());
  }
  std::filesystem::copy_file(dir_->Join("old.ckpt"), dir_->Join("d0/index.ckpt"),
                             std::filesystem::copy_options::overwrite_existing);
  auto tier = OpenOrDie(o);
  EXPECT_TRUE(tier->Stats().checkpoint_used);
  for (uint64_t i = 0; i < 40; ++i) {
    Status s = Get(*tier, i, kBlock);
    EXPECT_TRUE((i == 3 || i == 25) ? s.IsNotFound() : s.ok()) << i << " " << s.ToString();
  }
}

TEST_F(SsdTierTest, TornTailIsIgnored) {
  SsdTierOptions o = Options(1);
  {
    auto tier = OpenOrDie(o);
    ASSERT_TRUE(Put(*tier, 0, 10, kBlock).ok());
    ASSERT_TRUE(tier->Close().ok());
  }
  ASSERT_EQ(::unlink(dir_->Join("d0/index.ckpt").c_str()), 0);
  // Tear the last record: keep its header and half its payload.
  const std::vector<std::string> segs = Segments(dir_->Join("d0"));
  ASSERT_EQ(segs.size(), 1u);
  const uint64_t last = 4096 + 9 * 65536;
  std::filesystem::resize_file(segs[0], last + 32768);
  auto tier = OpenOrDie(o);
  EXPECT_EQ(tier->Stats().torn_or_corrupt_tails, 1u);
  for (uint64_t i = 0; i < 9; ++i) EXPECT_TRUE(Get(*tier, i, kBlock).ok()) << i;
  EXPECT_TRUE(Get(*tier, 9, kBlock).IsNotFound());
}

TEST_F(SsdTierTest, CorruptRecordEndsTheScanInsideAChunk) {
  SsdTierOptions o = Options(1);
  {
    auto tier = OpenOrDie(o);
    ASSERT_TRUE(Put(*tier, 0, 10, kBlock).ok());
    ASSERT_TRUE(tier->Close().ok());
  }
  ASSERT_EQ(::unlink(dir_->Join("d0/index.ckpt").c_str()), 0);
  // Flip one payload byte of record 5: the scan keeps 0-4 and stops there, though the read
  // chunk holds all ten records.
  const std::vector<std::string> segs = Segments(dir_->Join("d0"));
  ASSERT_EQ(segs.size(), 1u);
  {
    std::fstream f(segs[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(4096 + 5 * 65536 + 1000);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x5a);
    f.seekp(4096 + 5 * 65536 + 1000);
    f.write(&c, 1);
  }
  auto tier = OpenOrDie(o);
  EXPECT_EQ(tier->Stats().torn_or_corrupt_tails, 1u);
  EXPECT_EQ(tier->Stats().blocks, 5u);
  for (uint64_t i = 0; i < 5; ++i) EXPECT_TRUE(Get(*tier, i, kBlock).ok()) << i;
  for (uint64_t i = 5; i < 10; ++i) EXPECT_TRUE(Get(*tier, i, kBlock).IsNotFound()) << i;
}

// Records larger than a staging buffer span several write requests, and a batch larger than
// the pool is submitted in parts as buffers free up; both read back, with and without a scan.
TEST_F(SsdTierTest, StagingPoolSmallerThanRecordsAndBatches) {
  for (SsdSyncMode sync : {SsdSyncMode::kPerBatch, SsdSyncMode::kNone}) {
    SsdTierOptions o = Options(2);
    o.dirs = {dir_->Join(sync == SsdSyncMode::kNone ? "n0" : "p0"),
              dir_->Join(sync == SsdSyncMode::kNone ? "n1" : "p1")};
    o.sync = sync;
    o.staging_buffer_bytes = 16 * 1024;
    o.staging_buffers = 2;
    {
      auto tier = OpenOrDie(o);
      ASSERT_TRUE(Put(*tier, 0, 40, kBlock).ok());  // 64 KiB records: 4 buffers each.
      ASSERT_TRUE(Put(*tier, 40, 30, 1000).ok());   // 4 KiB records: 4 per buffer.
      for (uint64_t i = 0; i < 40; ++i) EXPECT_TRUE(Get(*tier, i, kBlock).ok()) << i;
      for (uint64_t i = 40; i < 70; ++i) EXPECT_TRUE(Get(*tier, i, 1000).ok()) << i;
      ASSERT_TRUE(tier->Close().ok());
    }
    ASSERT_EQ(::unlink((o.dirs[0] + "/index.ckpt").c_str()), 0);
    auto tier = OpenOrDie(o);
    EXPECT_EQ(tier->Stats().blocks, 70u);
    EXPECT_EQ(tier->Stats().torn_or_corrupt_tails, 0u);
    for (uint64_t i = 0; i < 40; ++i) EXPECT_TRUE(Get(*tier, i, kBlock).ok()) << i;
    for (uint64_t i = 40; i < 70; ++i) EXPECT_TRUE(Get(*tier, i, 1000).ok()) << i;
  }
}

// Records the writer laid out in its own buffers (SsdBlockWrite::record) are written from them,
// without a copy into the staging buffers; in the same batch, interleaved, records without one,
// with a misaligned one or with one too small for the record are copied as before. All read back
// byte for byte, before and after a restart that scans the segments, and the staged bytes count
// exactly the copied records.
TEST_F(SsdTierTest, RecordsInTheWritersBuffersAreWrittenWithoutACopy) {
  for (SsdSyncMode sync : {SsdSyncMode::kPerBatch, SsdSyncMode::kNone}) {
    SsdTierOptions o = Options(2);
    const std::string name = sync == SsdSyncMode::kNone ? "n" : "p";
    o.dirs = {dir_->Join(name + "0"), dir_->Join(name + "1")};
    o.sync = sync;
    const auto in_place = [](uint64_t i) { return i % 3 != 0; };
    const auto misaligned = [](uint64_t i) { return i == 4; };
    const uint64_t record = ssd::RecordBytesForPayload(kBlock);
    {
      auto tier = OpenOrDie(o);
      ASSERT_TRUE(ssd_test::PutInPlace(*tier, 0, 40, kBlock, in_place, misaligned).ok());
      // 14 blocks without a record buffer (0, 3, ..., 39) and the misaligned one are copied.
      EXPECT_EQ(tier->Stats().write_bytes, 40 * record);
      EXPECT_EQ(tier->Stats().staged_write_bytes, 15 * record);
      for (uint64_t i = 0; i < 40; ++i) EXPECT_TRUE(Get(*tier, i, kBlock).ok()) << i;
      ASSERT_TRUE(tier->Close().ok());
    }
    ASSERT_EQ(::unlink((o.dirs[0] + "/index.ckpt").c_str()), 0);
    auto tier = OpenOrDie(o);
    EXPECT_EQ(tier->Stats().blocks, 40u);
    EXPECT_EQ(tier->Stats().torn_or_corrupt_tails, 0u);
    EXPECT_EQ(tier->Stats().corrupt_records, 0u);
    for (uint64_t i = 0; i < 40; ++i) EXPECT_TRUE(Get(*tier, i, kBlock).ok()) << i;
    // A record buffer one byte short of the record is not written from.
    std::vector<std::byte> payload = ssd_test::Payload(50, kBlock);
    Result<AlignedBuffer> short_buffer = AlignedBuffer::Allocate(record);
    ASSERT_TRUE(short_buffer.ok());
    std::memcpy(short_buffer->data() + ssd::kRecordPayloadOffset, payload.data(), kBlock);
    SsdBlockWrite w{.key = ssd_test::Key(50),
                    .layout_digest = ssd_test::Layout(),
                    .codec_id = 3,
                    .raw_bytes = 2 * kBlock,
                    .payload = short_buffer->span().subspan(ssd::kRecordPayloadOffset, kBlock),
                    .record = short_buffer->span().first(record - 1)};
    const uint64_t staged = tier->Stats().staged_write_bytes;
    ASSERT_TRUE(tier->WriteBatchSync(std::span(&w, 1)).ok());
    ASSERT_TRUE(w.status.ok()) << w.status.ToString();
    EXPECT_EQ(tier->Stats().staged_write_bytes, staged + record);
    EXPECT_TRUE(Get(*tier, 50, kBlock).ok());
  }
}

// The scan reads segments in 8 MiB windows: records straddling a window's end and a record
// larger than the window are both recovered.
TEST_F(SsdTierTest, ScanRecoversRecordsAcrossAndLargerThanItsWindow) {
  constexpr size_t kLarge = 3 * kMiB;
  constexpr size_t kHuge = 9 * kMiB;
  SsdTierOptions o = Options(1);
  o.segment_bytes = 64 * kMiB;
  o.capacity_bytes = 4 * 64 * kMiB;
  {
    auto tier = OpenOrDie(o);
    ASSERT_TRUE(Put(*tier, 0, 5, kLarge).ok());
    ASSERT_TRUE(Put(*tier, 5, 1, kHuge).ok());
    ASSERT_TRUE(Put(*tier, 6, 3, kLarge).ok());
    ASSERT_TRUE(tier->Close().ok());
  }
  ASSERT_EQ(::unlink(dir_->Join("d0/index.ckpt").c_str()), 0);
  auto tier = OpenOrDie(o);
  EXPECT_EQ(tier->Stats().blocks, 9u);
  EXPECT_EQ(tier->Stats().torn_or_corrupt_tails, 0u);
  for (uint64_t i = 0; i < 9; ++i) {
    EXPECT_TRUE(Get(*tier, i, i == 5 ? kHuge : kLarge).ok()) << i;
  }
}

TEST_F(SsdTierTest, ReclaimKeepsReferencedBlocksAndDropsTheRest) {
  auto tier = OpenOrDie(Options(1));
  ASSERT_TRUE(Put(*tier, 0, 15, kBlock).ok());  // Fills segment 1 exactly.
  ASSERT_TRUE(Put(*tier, 15, 15, kBlock, /*ttl_us=*/5'000'000).ok());
  for (uint64_t i = 0; i < 5; ++i) ASSERT_TRUE(Get(*tier, i, kBlock).ok());  // Reference bits.
  ASSERT_TRUE(tier->ReclaimOldestSegment().ok());
  SsdTierStats st = tier->Stats();
  EXPECT_EQ(st.reclaimed_segments, 1u);
  EXPECT_EQ(st.reappended_blocks, 5u);
  EXPECT_EQ(st.dropped_blocks, 10u);
  for (uint64_t i = 0; i < 15; ++i) {
    Status s = Get(*tier, i, kBlock);
    EXPECT_TRUE(i < 5 ? s.ok() : s.IsNotFound()) << i << " " << s.ToString();
  }
  // Segment 2 holds blocks 15..29 with a TTL: referenced but expired blocks are dropped too.
  for (uint64_t i = 15; i < 20; ++i) ASSERT_TRUE(Get(*tier, i, kBlock).ok());
  clock_.Advance(6'000'000);
  EXPECT_TRUE(Get(*tier, 16, kBlock).IsNotFound());  // Expired is a miss.
  EXPECT_FALSE(tier->Contains(ssd_test::Key(17)));
  ASSERT_TRUE(tier->ReclaimOldestSegment().ok());
  EXPECT_EQ(tier->Stats().reappended_blocks, 5u);
  // Re-appended blocks had their reference bit cleared; survive a restart too.
  ASSERT_TRUE(tier->Close().ok());
  tier = OpenOrDie(Options(1));
  for (uint64_t i = 0; i < 5; ++i) EXPECT_TRUE(Get(*tier, i, kBlock).ok()) << i;
}

TEST_F(SsdTierTest, CapacityIsEnforcedByBackgroundReclaim) {
  SsdTierOptions o = Options(1);
  o.capacity_bytes = 6 * kMiB;
  auto tier = OpenOrDie(o);
  for (uint64_t b = 0; b < 20; ++b) ASSERT_TRUE(Put(*tier, b * 10, 10, kBlock).ok());
  SsdTierStats st = tier->Stats();
  EXPECT_LE(st.segments, 6u + 1u);
  EXPECT_GT(st.reclaimed_segments, 0u);
  EXPECT_TRUE(Get(*tier, 195, kBlock).ok());  // The newest blocks are there.
}

TEST_F(SsdTierTest, AdmissionAfterTwoRequests) {
  SsdTierOptions o = Options(1);
  o.admission = SsdAdmission::kAfterRequests;
  o.admission_requests = 2;
  auto tier = OpenOrDie(o);
  EXPECT_TRUE(Put(*tier, 1, 1, kBlock).IsAborted());
  EXPECT_FALSE(tier->Contains(ssd_test::Key(1)));
  EXPECT_TRUE(Put(*tier, 1, 1, kBlock).ok());
  EXPECT_TRUE(tier->Contains(ssd_test::Key(1)));
  // A read miss counts as a request.
  EXPECT_TRUE(Get(*tier, 2, kBlock).IsNotFound());
  EXPECT_TRUE(Put(*tier, 2, 1, kBlock).ok());
  EXPECT_EQ(tier->Stats().not_admitted, 1u);
}

TEST_F(SsdTierTest, WriteBudgetLimitsBytesPerSecond) {
  SsdTierOptions o = Options(1);
  o.write_budget_bytes_per_s = 4 * 65536;
  auto tier = OpenOrDie(o);
  for (uint64_t i = 0; i < 4; ++i) EXPECT_TRUE(Put(*tier, i, 1, kBlock).ok()) << i;
  EXPECT_TRUE(Put(*tier, 4, 1, kBlock).IsBusy());
  clock_.Advance(500'000);  // Half a second: two more records.
  EXPECT_TRUE(Put(*tier, 5, 1, kBlock).ok());
  EXPECT_TRUE(Put(*tier, 6, 1, kBlock).ok());
  EXPECT_TRUE(Put(*tier, 7, 1, kBlock).IsBusy());
  EXPECT_EQ(tier->Stats().over_budget, 2u);
}

TEST_F(SsdTierTest, OptionsAreValidated) {
  SsdTierOptions o = Options(1);
  o.segment_bytes = 5000;
  EXPECT_TRUE(SsdTier::Open(o, env_.get()).status().IsInvalidArgument());
  o = Options(1);
  o.capacity_bytes = 2 * kMiB;
  EXPECT_TRUE(SsdTier::Open(o, env_.get()).status().IsInvalidArgument());
  o.dirs.clear();
  EXPECT_TRUE(SsdTier::Open(o, env_.get()).status().IsInvalidArgument());
  o = Options(1);
  o.staging_buffer_bytes = 6000;
  EXPECT_TRUE(SsdTier::Open(o, env_.get()).status().IsInvalidArgument());
  o = Options(1);
  o.staging_buffers = 4097;
  EXPECT_TRUE(SsdTier::Open(o, env_.get()).status().IsInvalidArgument());
  o.staging_buffers = 4096;
  o.staging_buffer_bytes = 64 * kMiB;  // 256 GiB pinned: refused.
  EXPECT_TRUE(SsdTier::Open(o, env_.get()).status().IsInvalidArgument());
}

}  // namespace
}  // namespace kvtier
