// Goal: show that the SSD tier runs on the in-memory Env (env/mem_env.h) as it does on disk, so
// its tests can run in memory: blocks round trip, survive a restart with and without the
// checkpoint, a torn tail is ignored, every block acknowledged under per-batch sync survives a
// power loss (FaultInjectionEnv over the MemEnv), and a full MemEnv turns into NoSpace without
// losing what was stored.
// Method: the tier's data lives in a MemEnv; only each directory's LOCK is a real file (the
// directory lock is an flock(2) by design, tiers/ssd_dir_lock.h), so the directories are also
// made, empty but for LOCK, in a mkdtemp directory. Files are damaged and removed through the
// MemEnv itself. Small segments so a few blocks fill one.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>

#include "env/mem_env.h"
#include "testing/fault_injection_env.h"
#include "testing/test_util.h"
#include "tiers/ssd/ssd_test_util.h"
#include "tiers/ssd/ssd_tier.h"

namespace kvtier {
namespace {

using ssd_test::Get;
using ssd_test::Put;

constexpr size_t kBlock = 60 * 1024;  // 64 KiB records: 15 per 1 MiB segment.

class SsdMemEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<ScopedTempDir> d = ScopedTempDir::Create();
    ASSERT_TRUE(d.ok());
    dir_ = std::make_unique<ScopedTempDir>(std::move(d).value());
    for (const char* name : {"d0", "d1"}) std::filesystem::create_directory(dir_->Join(name));
    env_ = NewMemEnv({.capacity_bytes = 64 * kMiB, .clock = &clock_});
  }
  SsdTierOptions Options() const {
    SsdTierOptions o;
    o.dirs = {dir_->Join("d0"), dir_->Join("d1")};
    o.segment_bytes = 1 * kMiB;
    o.capacity_bytes = 32 * kMiB;
    o.sync = SsdSyncMode::kPerBatch;
    return o;
  }
  std::unique_ptr<SsdTier> OpenOrDie(const SsdTierOptions& o, Env* env) {
    Result<std::unique_ptr<SsdTier>> t = SsdTier::Open(o, env);
    KV_CHECK_OK(t.status());
    return std::move(t).value();
  }
  // The segment files of one directory, as the MemEnv lists them.
  std::vector<std::string> Segments(const std::string& d) {
    std::vector<std::string> out;
    const Result<std::vector<std::string>> names = env_->ListDir(d);
    KV_CHECK_OK(names.status());
    for (const std::string& name : *names) {
      if (name.ends_with(".kvs")) out.push_back(d + "/" + name);
    }
    return out;
  }

  ManualClock clock_{1'000'000'000};
  std::unique_ptr<ScopedTempDir> dir_;
  std::unique_ptr<Env> env_;
};

TEST_F(SsdMemEnvTest, WriteReadEraseAndRestart) {
  {
    auto tier = OpenOrDie(Options(), env_.get());
    ASSERT_TRUE(Put(*tier, 0, 40, kBlock).ok());
    for (uint64_t i = 0; i < 40; ++i) EXPECT_TRUE(Get(*tier, i, kBlock).ok()) << i;
    std::vector<BlockKey> gone = {ssd_test::Key(7)};
    ASSERT_TRUE(tier->Erase(gone).ok());
    EXPECT_FALSE(Segments(dir_->Join("d0")).empty());
    EXPECT_FALSE(Segments(dir_->Join("d1")).empty());
    ASSERT_TRUE(tier->Close().ok());
  }
  EXPECT_FALSE(std::filesystem::exists(dir_->Join("d0/index.ckpt"))) << "data stays in memory";
  auto tier = OpenOrDie(Options(), env_.get());
  EXPECT_TRUE(tier->Stats().checkpoint_used);
  EXPECT_EQ(tier->Stats().blocks, 39u);
  for (uint64_t i = 0; i < 40; ++i) {
    const Status s = Get(*tier, i, kBlock);
    EXPECT_TRUE(i == 7 ? s.IsNotFound() : s.ok()) << i << " " << s.ToString();
  }
}

TEST_F(SsdMemEnvTest, RestartWithoutCheckpointAndTornTail) {
  SsdTierOptions o = Options();
  o.dirs.resize(1);
  {
    auto tier = OpenOrDie(o, env_.get());
    ASSERT_TRUE(Put(*tier, 0, 10, kBlock).ok());
    ASSERT_TRUE(tier->Close().ok());
  }
  ASSERT_TRUE(env_->RemoveFile(dir_->Join("d0/index.ckpt")).ok());
  // Tear the last record: keep its header and half its payload.
  const std::vector<std::string> segs = Segments(dir_->Join("d0"));
  ASSERT_EQ(segs.size(), 1u);
  {
    Result<std::unique_ptr<File>> f = env_->OpenFile(segs[0], {.mode = OpenMode::kReadWrite});
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->Truncate(4096 + 9 * 65536 + 32768).ok());
  }
  auto tier = OpenOrDie(o, env_.get());
  EXPECT_FALSE(tier->Stats().checkpoint_used);
  EXPECT_EQ(tier->Stats().torn_or_corrupt_tails, 1u);
  for (uint64_t i = 0; i < 9; ++i) EXPECT_TRUE(Get(*tier, i, kBlock).ok()) << i;
  EXPECT_TRUE(Get(*tier, 9, kBlock).IsNotFound());
}

TEST_F(SsdMemEnvTest, PowerLossKeepsEverySyncedBlock) {
  FaultInjectionEnv fenv(env_.get());
  auto t1 = OpenOrDie(Options(), &fenv);
  ASSERT_TRUE(Put(*t1, 0, 30, kBlock).ok());
  ASSERT_GE(t1->durable_sequence(), 30u);
  ASSERT_TRUE(fenv.DropUnsyncedData().ok());
  t1->ReleaseLocksForTesting();  // As the crash would.
  // A second instance recovers from what survived (the first is still open but idle).
  auto t2 = OpenOrDie(Options(), env_.get());
  for (uint64_t i = 0; i < 30; ++i) EXPECT_TRUE(Get(*t2, i, kBlock).ok()) << i;
}

TEST_F(SsdMemEnvTest, FullEnvIsNoSpaceAndStoredBlocksStay) {
  env_ = NewMemEnv({.capacity_bytes = 3 * kMiB, .clock = &clock_});
  SsdTierOptions o = Options();
  o.dirs.resize(1);
  auto tier = OpenOrDie(o, env_.get());
  ASSERT_TRUE(Put(*tier, 0, 10, kBlock).ok());
  Status full;
  uint64_t stored = 10;
  for (; stored < 100 && full.ok(); stored += 5) full = Put(*tier, stored, 5, kBlock);
  EXPECT_TRUE(full.IsNoSpace()) << full.ToString();
  EXPECT_LT(env_->FreeSpaceBytes(dir_->Join("d0")).value(), kMiB);
  for (uint64_t i = 0; i < 10; ++i) EXPECT_TRUE(Get(*tier, i, kBlock).ok()) << i;
}

}  // namespace
}  // namespace kvtier
