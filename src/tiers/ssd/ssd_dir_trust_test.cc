// Goal: show that no file of an SSD cache directory is opened through a link and that no
// directory another user controls is used: a LOCK that is a symbolic link (to a file outside, or
// dangling) or a hard link is refused by the tier and every tool, and the file it names is left
// as it was; links planted under the temporaries' old fixed names (MANIFEST.tmp, index.ckpt.tmp)
// are never followed; a directory that is a link, owned by another uid, writable by others, or
// writable by its group while file_mode keeps the cache private is refused with its owner and
// mode in the message; a LOCK left by a process that died is taken over with a log line naming
// its pid, while a live holder is still refused.
// Method: real files in a mkdtemp directory through the posix Env; the "outside" file sits next
// to the cache directories and its bytes and mode are compared after each attack. The tests run
// as root, which bypasses permission checks, so ownership is tested with chown to a uid that no
// process here has and the mode rules are tested on the modes themselves.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "env/dir_trust.h"
#include "testing/test_util.h"
#include "tiers/ssd/ssd_dir_lock.h"
#include "tiers/ssd_format.h"
#include "tiers/ssd/ssd_test_util.h"
#include "tiers/ssd/ssd_tier.h"
#include "tiers/ssd/ssd_tools.h"

namespace kvtier {
namespace {

constexpr uid_t kOtherUid = 54321;  // Owns nothing on a test machine.
constexpr char kOutsideBytes[] = "data\n";

class SsdDirTrustTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<ScopedTempDir> d = ScopedTempDir::Create();
    ASSERT_TRUE(d.ok());
    root_ = std::make_unique<ScopedTempDir>(std::move(d).value());
    env_ = NewPosixEnv({.logger = &log_});
    outside_ = root_->Join("outside");  // A user's file, e.g. ~/.bashrc.
    std::ofstream(outside_) << kOutsideBytes;
    ASSERT_EQ(::chmod(outside_.c_str(), 0644), 0);
  }
  SsdTierOptions Options() const {
    SsdTierOptions o;
    o.dirs = {root_->Join("cache")};
    o.segment_bytes = 1 * kMiB;
    o.capacity_bytes = 16 * kMiB;
    return o;
  }
  // A cache with a few blocks, closed: what `kvtier run --cache-dir` leaves behind.
  SsdTierOptions MakeCache() {
    const SsdTierOptions o = Options();
    Result<std::unique_ptr<SsdTier>> t = SsdTier::Open(o, env_.get());
    KV_CHECK_OK(t.status());
    KV_CHECK_OK(ssd_test::Put(**t, 0, 4, 4096));
    KV_CHECK_OK((*t)->Close());
    return o;
  }
  void ExpectOutsideUntouched() {
    EXPECT_EQ(ReadFileOrWhy(outside_), kOutsideBytes);
    struct stat st {};
    ASSERT_EQ(::stat(outside_.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0644u);
  }
  // Every entry point that takes the directory: the tier, and each tool.
  void ExpectEveryOpenRefused(const SsdTierOptions& o, const std::string& needle) {
    Result<std::unique_ptr<SsdTier>> t = SsdTier::Open(o, env_.get());
    EXPECT_FALSE(t.ok());
    EXPECT_TRUE(MessageContains(t.status(), needle)) << t.status().ToString();
    const Status clear = ssd::ClearDir(env_.get(), o.dirs).status();
    EXPECT_TRUE(MessageContains(clear, needle)) << "clear: " << clear.ToString();
    const Status verify = ssd::VerifyDir(env_.get(), o.dirs).status();
    EXPECT_TRUE(MessageContains(verify, needle)) << "verify: " << verify.ToString();
    const Status repair = ssd::RepairDir(env_.get(), o.dirs).status();
    EXPECT_TRUE(MessageContains(repair, needle)) << "repair: " << repair.ToString();
    const Status stats = ssd::StatsDir(env_.get(), o.dirs, 0).status();
    EXPECT_TRUE(MessageContains(stats, needle)) << "stats: " << stats.ToString();
    const Status inspect = ssd::InspectDir(env_.get(), o.dirs).status();
    EXPECT_TRUE(MessageContains(inspect, needle)) << "inspect: " << inspect.ToString();
  }

  CapturingLogger log_;
  std::unique_ptr<ScopedTempDir> root_;
  std::unique_ptr<Env> env_;
  std::string outside_;
};

// ---------------------------------------------------------------------------------------------
// Links inside the directory

TEST_F(SsdDirTrustTest, LockLinkedToAFileOutsideIsRefusedAndTheFileKept) {
  const SsdTierOptions o = MakeCache();
  const std::string lock = o.dirs[0] + "/LOCK";
  ASSERT_EQ(::unlink(lock.c_str()), 0);
  ASSERT_EQ(::symlink(outside_.c_str(), lock.c_str()), 0);
  ExpectEveryOpenRefused(o, lock + " is a symbolic link");
  ExpectOutsideUntouched();
}

TEST_F(SsdDirTrustTest, DanglingLockLinkIsRefusedAndCreatesNothing) {
  const SsdTierOptions o = MakeCache();
  const std::string lock = o.dirs[0] + "/LOCK";
  const std::string target = root_->Join("created-by-kvtier");
  ASSERT_EQ(::unlink(lock.c_str()), 0);
  ASSERT_EQ(::symlink(target.c_str(), lock.c_str()), 0);
  ExpectEveryOpenRefused(o, lock + " is a symbolic link");
  EXPECT_FALSE(std::filesystem::exists(target));
}

TEST_F(SsdDirTrustTest, HardLinkedLockIsRefusedAndTheFileKept) {
  const SsdTierOptions o = MakeCache();
  const std::string lock = o.dirs[0] + "/LOCK";
  ASSERT_EQ(::unlink(lock.c_str()), 0);
  ASSERT_EQ(::link(outside_.c_str(), lock.c_str()), 0);
  ExpectEveryOpenRefused(o, "hard links");
  ExpectOutsideUntouched();
}

TEST_F(SsdDirTrustTest, LinksUnderTheOldTemporaryNamesAreNeverFollowed) {
  const SsdTierOptions o = Options();
  ASSERT_EQ(::mkdir(o.dirs[0].c_str(), 0700), 0);
  // A new cache writes its MANIFEST first; earlier versions opened MANIFEST.tmp with O_TRUNC.
  const std::string manifest_tmp = o.dirs[0] + "/" + ssd::kManifestTempName;
  ASSERT_EQ(::symlink(outside_.c_str(), manifest_tmp.c_str()), 0);
  Result<std::unique_ptr<SsdTier>> t = SsdTier::Open(o, env_.get());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ExpectOutsideUntouched();
  // Planted while the tier runs, before its closing checkpoint.
  const std::string ckpt_tmp = o.dirs[0] + "/" + ssd::kCheckpointTempName;
  ASSERT_EQ(::symlink(outside_.c_str(), ckpt_tmp.c_str()), 0);
  ASSERT_TRUE(ssd_test::Put(**t, 0, 4, 4096).ok());
  ASSERT_TRUE((*t)->Close().ok());
  ExpectOutsideUntouched();
  t->reset();
  // The next open removes the leftover links themselves (unlink never follows) and finds the data.
  Result<std::unique_ptr<SsdTier>> again = SsdTier::Open(o, env_.get());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(ssd_test::Get(**again, 3, 4096).ok());
  EXPECT_FALSE(std::filesystem::is_symlink(ckpt_tmp));
  ExpectOutsideUntouched();
}

TEST_F(SsdDirTrustTest, SegmentLinkedOutsideIsABadSegmentNotFollowed) {
  const SsdTierOptions o = MakeCache();
  const std::string seg = o.dirs[0] + "/seg-00000000000000ff.kvs";
  ASSERT_EQ(::symlink(outside_.c_str(), seg.c_str()), 0);
  Result<ssd::VerifyReport> v = ssd::VerifyDir(env_.get(), o.dirs);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  ASSERT_FALSE(v->problems.empty());
  EXPECT_NE(v->problems[0].what.find("symbolic link"), std::string::npos) << v->problems[0].what;
  Result<ssd::ClearReport> c = ssd::ClearDir(env_.get(), o.dirs);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(std::filesystem::is_symlink(seg));  // The link itself is removed, nothing else.
  ExpectOutsideUntouched();
}

// ---------------------------------------------------------------------------------------------
// Whose directory

TEST_F(SsdDirTrustTest, DirectoryThatIsALinkIsRefused) {
  const SsdTierOptions real = MakeCache();
  SsdTierOptions o = real;
  o.dirs = {root_->Join("link-to-cache")};
  ASSERT_EQ(::symlink(real.dirs[0].c_str(), o.dirs[0].c_str()), 0);
  ExpectEveryOpenRefused(o, o.dirs[0] + " is a symbolic link");
}

TEST_F(SsdDirTrustTest, DirectoryOfAnotherUserIsRefusedNamingOwnerAndMode) {
  const SsdTierOptions o = MakeCache();
  ASSERT_EQ(::chown(o.dirs[0].c_str(), kOtherUid, static_cast<gid_t>(-1)), 0);
  ExpectEveryOpenRefused(o, "(owner uid " + std::to_string(kOtherUid));
  Result<std::unique_ptr<SsdTier>> t = SsdTier::Open(o, env_.get());
  EXPECT_TRUE(MessageContains(t.status(), "mode 0700")) << t.status().ToString();
  EXPECT_TRUE(MessageContains(t.status(), "is not owned by this user")) << t.status().ToString();
}

TEST_F(SsdDirTrustTest, DirectoryWritableByOthersIsRefused) {
  const SsdTierOptions o = MakeCache();
  ASSERT_EQ(::chmod(o.dirs[0].c_str(), 0777), 0);
  ExpectEveryOpenRefused(o, "mode 0777");
  ASSERT_EQ(::chmod(o.dirs[0].c_str(), 01777), 0);  // Sticky does not protect the cache's names.
  ExpectEveryOpenRefused(o, "writable by others");
}

TEST_F(SsdDirTrustTest, GroupWritableDirectoryNeedsAGroupFileMode) {
  SsdTierOptions o = MakeCache();
  ASSERT_EQ(::chmod(o.dirs[0].c_str(), 0770), 0);
  Result<std::unique_ptr<SsdTier>> t = SsdTier::Open(o, env_.get());
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(MessageContains(t.status(), "writable by its group")) << t.status().ToString();
  // The LOCK that cache made is 0600: the tools refuse the directory as the tier does.
  EXPECT_TRUE(MessageContains(ssd::VerifyDir(env_.get(), o.dirs).status(), "writable by its group"));
  o.file_mode = 0660;  // A cache shared with the group: its directory may be group-writable.
  t = SsdTier::Open(o, env_.get());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_TRUE((*t)->Close().ok());
  t->reset();
  ASSERT_EQ(::chmod((o.dirs[0] + "/LOCK").c_str(), 0660), 0);  // What a 0660 tier creates.
  EXPECT_TRUE(ssd::VerifyDir(env_.get(), o.dirs).ok());
}

TEST_F(SsdDirTrustTest, CheckDirTrustRules) {
  struct stat st {};
  st.st_mode = S_IFDIR | 0700;
  st.st_uid = 1000;
  EXPECT_TRUE(CheckDirTrust("d", st, 1000, GroupWrite::kRefuse).ok());
  EXPECT_FALSE(CheckDirTrust("d", st, 1001, GroupWrite::kAllow).ok());
  st.st_mode = S_IFDIR | 0750;
  EXPECT_TRUE(CheckDirTrust("d", st, 1000, GroupWrite::kRefuse).ok());
  st.st_mode = S_IFDIR | 0770;
  EXPECT_FALSE(CheckDirTrust("d", st, 1000, GroupWrite::kRefuse).ok());
  EXPECT_TRUE(CheckDirTrust("d", st, 1000, GroupWrite::kAllow).ok());
  st.st_mode = S_IFDIR | 0702;
  EXPECT_FALSE(CheckDirTrust("d", st, 1000, GroupWrite::kAllow).ok());
  st.st_mode = S_IFREG | 0700;
  EXPECT_FALSE(CheckDirTrust("d", st, 1000, GroupWrite::kAllow).ok());
}

// ---------------------------------------------------------------------------------------------
// LOCK holders

// The pid of a child that has exited and been reaped: a process that no longer exists.
pid_t DeadPid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

TEST_F(SsdDirTrustTest, LockLeftByADeadProcessIsTakenOverWithALogLine) {
  const SsdTierOptions o = MakeCache();
  const pid_t dead = DeadPid();
  // What a worker killed by SIGKILL leaves: its pid in LOCK, its flock gone with it.
  std::ofstream(o.dirs[0] + "/LOCK", std::ios::trunc) << dead << "\n";
  Result<std::unique_ptr<SsdTier>> t = SsdTier::Open(o, env_.get());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(log_.CountContaining("was left by process " + std::to_string(dead)), 1u);
  EXPECT_EQ(ReadFileOrWhy(o.dirs[0] + "/LOCK"), std::to_string(::getpid()) + "\n");
  EXPECT_TRUE(ssd_test::Get(**t, 3, 4096).ok());
}

TEST_F(SsdDirTrustTest, LockHeldByALiveProcessIsRefusedNamingIt) {
  const SsdTierOptions o = MakeCache();
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    Result<ssd::DirLock> l =
        ssd::DirLock::Acquire(nullptr, o.dirs[0], ssd::DirLockMode::kExclusive);
    const char c = l.ok() ? 'y' : 'n';
    if (::write(ready[1], &c, 1) != 1) ::_exit(2);
    ::pause();
    ::_exit(0);
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ASSERT_EQ(c, 'y');
  Result<std::unique_ptr<SsdTier>> t = SsdTier::Open(o, env_.get());
  EXPECT_TRUE(t.status().IsBusy()) << t.status().ToString();
  EXPECT_TRUE(MessageContains(t.status(), "in use by process " + std::to_string(child)));
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  ::close(ready[0]);
  ::close(ready[1]);
  // SIGKILL leaves the child's pid in LOCK; the next open takes the directory over.
  t = SsdTier::Open(o, env_.get());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(log_.CountContaining("was left by process " + std::to_string(child)), 1u);
}

TEST_F(SsdDirTrustTest, LockInheritedByAForkedChildIsRefusedSayingSo) {
  const SsdTierOptions o = MakeCache();
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t holder = ::fork();
  if (holder == 0) {
    // The holder locks, forks a child that keeps the descriptor (no exec), and exits.
    Result<ssd::DirLock> l =
        ssd::DirLock::Acquire(nullptr, o.dirs[0], ssd::DirLockMode::kExclusive);
    if (!l.ok()) ::_exit(2);
    const pid_t heir = ::fork();
    if (heir == 0) {
      const pid_t self = ::getpid();
      if (::write(ready[1], &self, sizeof(self)) != sizeof(self)) ::_exit(2);
      ::pause();
      ::_exit(0);
    }
    ::_exit(heir > 0 ? 0 : 2);
  }
  pid_t heir = 0;
  ASSERT_EQ(::read(ready[0], &heir, sizeof(heir)), static_cast<ssize_t>(sizeof(heir)));
  int status = 0;
  ASSERT_EQ(::waitpid(holder, &status, 0), holder);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  Result<std::unique_ptr<SsdTier>> t = SsdTier::Open(o, env_.get());
  ::kill(heir, SIGKILL);  // A grandchild: reaped by init, not here.
  ::close(ready[0]);
  ::close(ready[1]);
  EXPECT_TRUE(t.status().IsBusy()) << t.status().ToString();
  EXPECT_TRUE(MessageContains(t.status(), "inherited LOCK from process " + std::to_string(holder)))
      << t.status().ToString();
}

}  // namespace
}  // namespace kvtier
