// Goal: check that InspectDir counts blocks, live and dead bytes and that VerifyDir reports a
// flipped bit with its segment and offset; that CheckCacheDirs tells cache directories from
// others; that BenchSsd and BenchReopen measure a real tier, read every block back intact, and
// clean up after themselves; that their options are validated. Method: write through SsdTier,
// close, inspect, damage one record on disk, verify; run tiny benchmarks in a temp directory.
#include "tiers/ssd_tools.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "testing/test_util.h"
#include "tiers/ssd_test_util.h"
#include "tiers/ssd_tier.h"

namespace kvtier {
namespace {

TEST(SsdToolsTest, InspectAndVerify) {
  Result<ScopedTempDir> dir = ScopedTempDir::Create();
  ASSERT_TRUE(dir.ok());
  std::unique_ptr<Env> env = NewPosixEnv();
  SsdTierOptions o;
  o.dirs = {dir->Join("d0")};
  o.segment_bytes = 1 * kMiB;
  o.capacity_bytes = 16 * kMiB;
  {
    Result<std::unique_ptr<SsdTier>> tier = SsdTier::Open(o, env.get());
    ASSERT_TRUE(tier.ok());
    ASSERT_TRUE(ssd_test::Put(**tier, 0, 10, 60 * 1024).ok());
    ASSERT_TRUE(ssd_test::Put(**tier, 0, 1, 60 * 1024, 0, 2).ok());  // Supersedes block 0.
    ASSERT_TRUE((*tier)->Close().ok());
  }
  Result<ssd::InspectReport> r = ssd::InspectDir(env.get(), o.dirs);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->blocks, 10u);
  EXPECT_EQ(r->live_bytes, 10u * 65536);
  EXPECT_EQ(r->dead_bytes, 65536u);
  EXPECT_TRUE(r->checkpoint_valid);
  EXPECT_EQ(r->records_per_layout.size(), 1u);
  Result<std::vector<ssd::CorruptRecord>> v = ssd::VerifyDir(env.get(), o.dirs);
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->empty());

  const std::string seg = r->segments.at(0).path;
  const int fd = ::open(seg.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  char c = 0;
  ASSERT_EQ(::pread(fd, &c, 1, 4096 + 3 * 65536 + 500), 1);
  c = static_cast<char>(c ^ 1);
  ASSERT_EQ(::pwrite(fd, &c, 1, 4096 + 3 * 65536 + 500), 1);
  ::close(fd);
  v = ssd::VerifyDir(env.get(), o.dirs);
  ASSERT_TRUE(v.ok());
  ASSERT_EQ(v->size(), 1u);
  EXPECT_EQ((*v)[0].offset, 4096u + 3 * 65536);
  EXPECT_EQ((*v)[0].path, seg);
}

TEST(SsdToolsTest, CheckCacheDirs) {
  Result<ScopedTempDir> dir = ScopedTempDir::Create();
  ASSERT_TRUE(dir.ok());
  std::unique_ptr<Env> env = NewPosixEnv();
  EXPECT_TRUE(ssd::CheckCacheDirs(env.get(), {dir->Join("missing")}).IsNotFound());
  EXPECT_TRUE(ssd::CheckCacheDirs(env.get(), {dir->path()}).IsInvalidArgument());
  SsdTierOptions o;
  o.dirs = {dir->Join("d0")};
  o.segment_bytes = 1 * kMiB;
  o.capacity_bytes = 16 * kMiB;
  {
    Result<std::unique_ptr<SsdTier>> tier = SsdTier::Open(o, env.get());
    ASSERT_TRUE(tier.ok());
    ASSERT_TRUE(ssd_test::Put(**tier, 0, 1, 1000).ok());
    ASSERT_TRUE((*tier)->Close().ok());
  }
  EXPECT_TRUE(ssd::CheckCacheDirs(env.get(), o.dirs).ok());
}

TEST(SsdToolsTest, BenchSsdReadsEveryBlockBackAndCleansUp) {
  Result<ScopedTempDir> dir = ScopedTempDir::Create();
  ASSERT_TRUE(dir.ok());
  std::unique_ptr<Env> env = NewPosixEnv();
  ssd::BenchSsdOptions o{.dirs = {dir->path(), dir->path()},
                         .block_bytes = 64 * kKiB,
                         .queue_depth = 3,
                         .total_bytes = 2 * kMiB + 100};
  Result<ssd::BenchSsdReport> r = ssd::BenchSsd(env.get(), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->blocks, 32u);
  EXPECT_EQ(r->total_bytes, 2 * kMiB);
  EXPECT_EQ(r->payload_bytes, 64 * kKiB - ssd::kRecordPayloadOffset);
  EXPECT_GT(r->write_bytes_per_s, 0);
  EXPECT_GT(r->read_bytes_per_s, 0);
  EXPECT_LE(r->read_p50_us, r->read_p99_us);
  EXPECT_EQ(r->sync_mode, "periodic");
  EXPECT_FALSE(r->io_backend.empty());
  EXPECT_TRUE(r->kept_dirs.empty());
  EXPECT_TRUE(std::filesystem::is_empty(dir->path()));
}

TEST(SsdToolsTest, BenchReopenRecoversEveryBlockBothWays) {
  Result<ScopedTempDir> dir = ScopedTempDir::Create();
  ASSERT_TRUE(dir.ok());
  std::unique_ptr<Env> env = NewPosixEnv();
  Result<ssd::BenchReopenReport> r =
      ssd::BenchReopen(env.get(), {.dirs = {dir->path()}, .blocks = 2000});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->recovered_checkpoint, 2000u);
  EXPECT_EQ(r->recovered_scan, 2000u);
  EXPECT_TRUE(r->checkpoint_used);
  EXPECT_GT(r->reopen_scan_ms, 0);
  EXPECT_TRUE(std::filesystem::is_empty(dir->path()));
}

TEST(SsdToolsTest, BenchOptionsAreValidated) {
  std::unique_ptr<Env> env = NewPosixEnv();
  const ssd::BenchSsdOptions good{.dirs = {"/nonexistent-kvtier"}};
  EXPECT_TRUE(good.Validate().ok());
  ssd::BenchSsdOptions o = good;
  o.block_bytes = 1000;
  EXPECT_TRUE(o.Validate().IsInvalidArgument());
  o = good;
  o.block_bytes = 128 * kMiB;
  EXPECT_TRUE(o.Validate().IsInvalidArgument());
  o = good;
  o.queue_depth = 0;
  EXPECT_TRUE(o.Validate().IsInvalidArgument());
  o = good;
  o.queue_depth = 257;
  EXPECT_TRUE(o.Validate().IsInvalidArgument());
  o = good;
  o.total_bytes = 4096;
  EXPECT_TRUE(o.Validate().IsInvalidArgument());
  o = good;
  o.dirs.clear();
  EXPECT_TRUE(o.Validate().IsInvalidArgument());
  EXPECT_TRUE(ssd::BenchSsd(env.get(), good).status().IsNotFound());
  const ssd::BenchReopenOptions no_blocks{.dirs = {"x"}, .blocks = 0};
  EXPECT_TRUE(no_blocks.Validate().IsInvalidArgument());
}

}  // namespace
}  // namespace kvtier
