// Goal: check that InspectDir counts blocks, live and dead bytes and that VerifyDir reports a
// flipped bit with its segment and offset. Method: write through SsdTier, close, inspect, damage
// one record on disk, verify.
#include "tiers/ssd_tools.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

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

}  // namespace
}  // namespace kvtier
