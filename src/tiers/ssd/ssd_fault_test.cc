// Goal: show that the SSD tier never returns a damaged block, survives damaged files, reports
// I/O errors clearly without losing what it stored, keeps every synced block across a power loss,
// and stays consistent under concurrent use. Method: flip bits and truncate segment files on disk,
// drop garbage files into the directory, inject EIO/ENOSPC and power loss with FaultInjectionEnv,
// and run a seeded multi-threaded stress test whose readers check every returned byte.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <thread>

#include "testing/fault_injection_env.h"
#include "testing/test_util.h"
#include "tiers/ssd/ssd_test_util.h"
#include "tiers/ssd/ssd_tier.h"

namespace kvtier {
namespace {

using ssd_test::Get;
using ssd_test::Put;

constexpr size_t kBlock = 60 * 1024;  // 64 KiB records.

class SsdFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<ScopedTempDir> d = ScopedTempDir::Create();
    ASSERT_TRUE(d.ok());
    dir_ = std::make_unique<ScopedTempDir>(std::move(d).value());
    base_ = NewPosixEnv();
    fenv_ = std::make_unique<FaultInjectionEnv>(base_.get());
  }
  SsdTierOptions Options() {
    SsdTierOptions o;
    o.dirs = {dir_->Join("d0"), dir_->Join("d1")};
    o.segment_bytes = 1 * kMiB;
    o.capacity_bytes = 64 * kMiB;
    return o;
  }
  std::unique_ptr<SsdTier> OpenOrDie(const SsdTierOptions& o, Env* env) {
    Result<std::unique_ptr<SsdTier>> t = SsdTier::Open(o, env);
    KV_CHECK_OK(t.status());
    return std::move(t).value();
  }
  std::string FirstSegment(const std::string& d) {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(d)) {
      if (e.path().extension() == ".kvs") out.push_back(e.path().string());
    }
    std::sort(out.begin(), out.end());
    return out.empty() ? "" : out[0];
  }

  // ENOSPC on every segment write from now on.
  Result<FaultId> ArmNoSpace() {
    return fenv_->ArmFault({.kind = FaultKind::kError,
                            .op = FaultOp::kWrite,
                            .path_substring = ".kvs",
                            .repeat = FaultRepeat::kEveryAfter,
                            .error = InjectedError::kNoSpace});
  }

  std::unique_ptr<ScopedTempDir> dir_;
  std::unique_ptr<Env> base_;
  std::unique_ptr<FaultInjectionEnv> fenv_;
};

TEST_F(SsdFaultTest, BitFlipInSegmentIsAMissNeverWrongData) {
  SsdTierOptions o = Options();
  o.dirs.resize(1);
  {
    auto tier = OpenOrDie(o, base_.get());
    ASSERT_TRUE(Put(*tier, 0, 10, kBlock).ok());
    ASSERT_TRUE(tier->Close().ok());
  }
  const std::string seg = FirstSegment(o.dirs[0]);
  ASSERT_TRUE(FlipByteOfFile(seg, 4096 + 2 * 65536 + 1000, 0x10).ok());  // Payload of block 2.
  ASSERT_TRUE(FlipByteOfFile(seg, 4096 + 5 * 65536 + 50, 0x10).ok());    // Header of block 5.
  {
    // With the checkpoint: every entry is known, verification at read time catches both.
    auto tier = OpenOrDie(o, base_.get());
    for (uint64_t i = 0; i < 10; ++i) {
      Status s = Get(*tier, i, kBlock);
      EXPECT_TRUE((i == 2 || i == 5) ? s.IsNotFound() : s.ok()) << i << " " << s.ToString();
    }
    EXPECT_EQ(tier->Stats().corrupt_records, 2u);
    ASSERT_TRUE(tier->Close().ok());
  }
  // Without a checkpoint the scan stops at the first bad record (block 2).
  ASSERT_EQ(::unlink((o.dirs[0] + "/index.ckpt").c_str()), 0);
  auto tier = OpenOrDie(o, base_.get());
  for (uint64_t i = 0; i < 10; ++i) {
    Status s = Get(*tier, i, kBlock);
    EXPECT_TRUE(i < 2 ? s.ok() : s.IsNotFound()) << i << " " << s.ToString();
  }
}

TEST_F(SsdFaultTest, TruncatedSegmentAndGarbageFiles) {
  SsdTierOptions o = Options();
  o.dirs.resize(1);
  {
    auto tier = OpenOrDie(o, base_.get());
    ASSERT_TRUE(Put(*tier, 0, 10, kBlock).ok());
    ASSERT_TRUE(tier->Close().ok());
  }
  std::filesystem::resize_file(FirstSegment(o.dirs[0]), 4096 + 4 * 65536 + 100);
  std::ofstream(o.dirs[0] + "/junk.txt") << "not a segment";
  std::ofstream(o.dirs[0] + "/seg-00000000000000ff.kvs") << std::string(8192, 'x');
  auto tier = OpenOrDie(o, base_.get());  // The checkpoint still lists blocks 4..9.
  EXPECT_EQ(tier->Stats().corrupt_segments, 1u);
  for (uint64_t i = 0; i < 10; ++i) {
    Status s = Get(*tier, i, kBlock);
    EXPECT_TRUE(i < 4 ? s.ok() : s.IsNotFound()) << i << " " << s.ToString();
  }
  // New segments get ids above the garbage one and work.
  ASSERT_TRUE(Put(*tier, 50, 20, kBlock).ok());
  EXPECT_TRUE(Get(*tier, 69, kBlock).ok());
  EXPECT_TRUE(std::filesystem::exists(o.dirs[0] + "/junk.txt"));
}

TEST_F(SsdFaultTest, NoSpaceAndIoErrorsAreReportedAndNothingStoredIsLost) {
  SsdTierOptions o = Options();
  auto tier = OpenOrDie(o, fenv_.get());
  ASSERT_TRUE(Put(*tier, 0, 20, kBlock).ok());
  Result<FaultId> f = ArmNoSpace();
  ASSERT_TRUE(f.ok());
  Status s = Put(*tier, 100, 10, kBlock);
  EXPECT_TRUE(s.IsNoSpace()) << s.ToString();
  for (uint64_t i = 0; i < 20; ++i) EXPECT_TRUE(Get(*tier, i, kBlock).ok()) << i;  // Reads work.
  fenv_->DisarmFault(*f);
  ASSERT_TRUE(Put(*tier, 200, 10, kBlock).ok());
  // EIO on a read is that read's error; the next read works.
  Result<FaultId> r =
      fenv_->ArmFault({.kind = FaultKind::kError, .op = FaultOp::kRead, .path_substring = ".kvs"});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(Get(*tier, 3, kBlock).IsIoError());
  EXPECT_TRUE(Get(*tier, 3, kBlock).ok());
  EXPECT_GT(tier->Stats().io_errors, 0u);
  ASSERT_TRUE(tier->Close().ok());
  tier = OpenOrDie(o, base_.get());
  for (uint64_t i = 0; i < 20; ++i) EXPECT_TRUE(Get(*tier, i, kBlock).ok()) << i;
  for (uint64_t i = 200; i < 210; ++i) EXPECT_TRUE(Get(*tier, i, kBlock).ok()) << i;
  for (uint64_t i = 100; i < 110; ++i) EXPECT_TRUE(Get(*tier, i, kBlock).IsNotFound()) << i;
}

// Records written from the writer's buffers (SsdBlockWrite::record), several to a gathered
// write, fail and tear as staged ones do: ENOSPC fails the batch and loses nothing stored before;
// a gathered write cut short is completed from its buffers; one whose rest fails too is reported,
// and after a restart its records are intact or misses, never wrong bytes.
TEST_F(SsdFaultTest, RecordsWrittenInPlaceFailAndTearWithoutWrongBytes) {
  const auto all = [](uint64_t) { return true; };
  const auto aligned = [](uint64_t) { return false; };
  SsdTierOptions o = Options();
  auto tier = OpenOrDie(o, fenv_.get());
  ASSERT_TRUE(ssd_test::PutInPlace(*tier, 0, 20, kBlock, all, aligned).ok());
  EXPECT_EQ(tier->Stats().staged_write_bytes, 0u);
  Result<FaultId> f = ArmNoSpace();
  ASSERT_TRUE(f.ok());
  Status s = ssd_test::PutInPlace(*tier, 100, 10, kBlock, all, aligned);
  EXPECT_TRUE(s.IsNoSpace()) << s.ToString();
  fenv_->DisarmFault(*f);
  // Every write keeps at most 96 KiB: a gathered write of the batch's records is cut after one
  // record and half of the next, the I/O worker writes the rest from the gathered buffers (in
  // pieces of at most a record, which the fault leaves whole), and every record reads back.
  f = fenv_->ArmFault({.kind = FaultKind::kShortTransfer,
                       .op = FaultOp::kWrite,
                       .path_substring = ".kvs",
                       .repeat = FaultRepeat::kEveryAfter,
                       .keep_bytes = 96 * 1024});
  ASSERT_TRUE(f.ok());
  s = ssd_test::PutInPlace(*tier, 200, 8, kBlock, all, aligned);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_GE(fenv_->FiredCount(*f), 1u);
  fenv_->DisarmFault(*f);
  for (uint64_t i = 200; i < 208; ++i) EXPECT_TRUE(Get(*tier, i, kBlock).ok()) << i;
  // Every write short, and the rest failing too: the batch fails, and its records are torn.
  f = fenv_->ArmFault({.kind = FaultKind::kShortTransfer,
                       .op = FaultOp::kWrite,
                       .path_substring = ".kvs",
                       .repeat = FaultRepeat::kEveryAfter,
                       .keep_bytes = 4096});
  ASSERT_TRUE(f.ok());
  s = ssd_test::PutInPlace(*tier, 300, 8, kBlock, all, aligned);
  EXPECT_FALSE(s.ok());
  fenv_->DisarmFault(*f);
  ASSERT_TRUE(ssd_test::PutInPlace(*tier, 400, 10, kBlock, all, aligned).ok());
  ASSERT_TRUE(tier->Close().ok());
  tier = OpenOrDie(o, base_.get());
  for (uint64_t i = 0; i < 20; ++i) EXPECT_TRUE(Get(*tier, i, kBlock).ok()) << i;
  for (uint64_t i = 100; i < 110; ++i) EXPECT_TRUE(Get(*tier, i, kBlock).IsNotFound()) << i;
  for (uint64_t i = 200; i < 208; ++i) EXPECT_TRUE(Get(*tier, i, kBlock).ok()) << i;
  for (uint64_t i = 300; i < 308; ++i) {
    s = Get(*tier, i, kBlock);
    EXPECT_TRUE(s.ok() || s.IsNotFound()) << i << " " << s.ToString();
  }
  for (uint64_t i = 400; i < 410; ++i) EXPECT_TRUE(Get(*tier, i, kBlock).ok()) << i;
}

TEST_F(SsdFaultTest, BitFlipOnReadIsDetected) {
  auto tier = OpenOrDie(Options(), fenv_.get());
  ASSERT_TRUE(Put(*tier, 0, 4, kBlock).ok());
  Result<FaultId> f = fenv_->ArmFault(
      {.kind = FaultKind::kBitFlip, .op = FaultOp::kRead, .path_substring = ".kvs", .seed = 7});
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(Get(*tier, 1, kBlock).IsNotFound());
  EXPECT_EQ(tier->Stats().corrupt_records, 1u);
}

// Power loss: every block acknowledged by a completed sync is present; others intact or absent.
void PowerLossCase(SsdFaultTest* t, SsdSyncMode mode, FaultInjectionEnv* fenv,
                   const SsdTierOptions& base_options, Env* base) {
  SsdTierOptions o = base_options;
  o.sync = mode;
  o.sync_interval_ms = 3'600'000;  // Periodic sync only when we call Flush.
  Result<std::unique_ptr<SsdTier>> t1 = SsdTier::Open(o, fenv);
  ASSERT_TRUE(t1.ok());
  ASSERT_TRUE(Put(**t1, 0, 30, kBlock).ok());
  if (mode != SsdSyncMode::kPerBatch) {
    ASSERT_TRUE((*t1)->Flush().ok());
  }
  const uint64_t durable = (*t1)->durable_sequence();
  EXPECT_GE(durable, 30u);
  ASSERT_TRUE(Put(**t1, 30, 30, kBlock).ok());
  ASSERT_TRUE(fenv->DropUnsyncedData().ok());
  (*t1)->ReleaseLocksForTesting();  // As the crash would.
  {
    // A second instance recovers from what survived (the first is still open but idle).
    Result<std::unique_ptr<SsdTier>> t2 = SsdTier::Open(o, base);
    ASSERT_TRUE(t2.ok());
    for (uint64_t i = 0; i < 30; ++i) {
      EXPECT_TRUE(Get(**t2, i, kBlock).ok()) << i;
    }
    for (uint64_t i = 30; i < 60; ++i) {
      Status s = Get(**t2, i, kBlock);
      EXPECT_TRUE(mode == SsdSyncMode::kPerBatch ? s.ok() : (s.ok() || s.IsNotFound()))
          << i << " " << s.ToString();
    }
  }
  (void)t;
}

TEST_F(SsdFaultTest, PowerLossPerBatch) {
  PowerLossCase(this, SsdSyncMode::kPerBatch, fenv_.get(), Options(), base_.get());
}
TEST_F(SsdFaultTest, PowerLossPeriodic) {
  PowerLossCase(this, SsdSyncMode::kPeriodic, fenv_.get(), Options(), base_.get());
}
TEST_F(SsdFaultTest, PowerLossNone) {
  PowerLossCase(this, SsdSyncMode::kNone, fenv_.get(), Options(), base_.get());
}

TEST_F(SsdFaultTest, StressManyThreads) {
  const uint64_t seed = std::random_device{}();
  std::printf("SsdFaultTest.StressManyThreads seed=%llu\n", static_cast<unsigned long long>(seed));
  SsdTierOptions o = Options();
  o.capacity_bytes = 12 * kMiB;  // Forces reclaim while the threads run.
  o.sync = SsdSyncMode::kNone;
  auto tier = OpenOrDie(o, base_.get());
  constexpr int kThreads = 4;
  constexpr uint64_t kKeys = 60;
  std::atomic<uint64_t> wrong{0}, hits{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(seed + static_cast<uint64_t>(t));
      std::vector<uint32_t> version(kKeys, 0);
      const uint64_t base = static_cast<uint64_t>(t) * 1000;
      for (int op = 0; op < 300; ++op) {
        const uint64_t k = rng() % kKeys;
        const uint64_t choice = rng() % 10;
        if (choice < 4) {
          ++version[k];
          Status s = Put(*tier, base + k, 1, 8192, 0, version[k]);
          if (!s.ok()) --version[k];  // Not stored: the old version may still be there.
        } else if (choice < 9) {
          Status s = Get(*tier, base + k, 8192, version[k]);
          if (s.ok()) ++hits;
          if (!s.ok() && !s.IsNotFound()) ++wrong;  // Corruption = wrong bytes returned.
        } else {
          std::vector<BlockKey> keys = {ssd_test::Key(base + k)};
          if (tier->Erase(keys).ok()) ++version[k];  // Any later read must miss or be newer.
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0u) << "seed " << seed;
  EXPECT_GT(hits.load(), 0u);
  EXPECT_TRUE(tier->Close().ok());
}

}  // namespace
}  // namespace kvtier
