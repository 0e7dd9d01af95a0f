// Goal: show the file-system guards that cache directories and report files rely on: OpenFile
// with Links::kRefuse never opens, creates or truncates what a link names; UniqueTempPath names
// cannot be guessed; OpenTrustedDir refuses a link, another user's directory and one that others
// can write, naming owner and mode; ReplaceRegularFile (--metrics-file, stats files) refuses a
// FIFO, a device node, a directory and a link in place of its target, and is not fooled by a link
// planted under the old fixed "<path>.tmp" name.
// Method: real files in a mkdtemp directory through the posix Env. The tests run as root, which
// bypasses permission checks: ownership is tested with chown to a uid no process here has, and
// the device node is made with mknod (skipped, with a reason, where that is not allowed).
#include "env/dir_trust.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>

#include "env/env.h"
#include "testing/test_util.h"

namespace kvtier {
namespace {

constexpr uid_t kOtherUid = 54321;

class DirTrustTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<ScopedTempDir> d = ScopedTempDir::Create();
    ASSERT_TRUE(d.ok());
    root_ = std::make_unique<ScopedTempDir>(std::move(d).value());
    env_ = NewPosixEnv();
    outside_ = root_->Join("outside");
    std::ofstream(outside_) << "data\n";
  }
  std::unique_ptr<ScopedTempDir> root_;
  std::unique_ptr<Env> env_;
  std::string outside_;
};

TEST_F(DirTrustTest, RefusedLinkIsNeitherFollowedNorCreated) {
  const std::string link = root_->Join("LOCK");
  ASSERT_EQ(::symlink(outside_.c_str(), link.c_str()), 0);
  for (const OpenMode mode : {OpenMode::kReadOnly, OpenMode::kCreate, OpenMode::kTruncate}) {
    Result<std::unique_ptr<File>> f =
        env_->OpenFile(link, {.mode = mode, .links = Links::kRefuse});
    ASSERT_TRUE(f.status().IsInvalidArgument()) << f.status().ToString();
    EXPECT_TRUE(MessageContains(f.status(), link + " is a symbolic link"));
  }
  EXPECT_EQ(ReadFileOrWhy(outside_), "data\n");
  const std::string target = root_->Join("never-created");
  const std::string dangling = root_->Join("dangling");
  ASSERT_EQ(::symlink(target.c_str(), dangling.c_str()), 0);
  EXPECT_FALSE(env_->OpenFile(dangling, {.mode = OpenMode::kCreate, .links = Links::kRefuse}).ok());
  EXPECT_FALSE(std::filesystem::exists(target));
  // The default still follows: files the user names (models, prompts) may be links.
  EXPECT_TRUE(env_->OpenFile(link, {.mode = OpenMode::kReadOnly}).ok());
}

TEST_F(DirTrustTest, TempPathsAreUnpredictable) {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    Result<std::string> p = UniqueTempPath("d/MANIFEST.tmp");
    ASSERT_TRUE(p.ok());
    ASSERT_EQ(p->size(), std::string("d/MANIFEST.tmp.").size() + 16) << *p;
    EXPECT_EQ(p->rfind("d/MANIFEST.tmp.", 0), 0u);
    seen.insert(*p);
  }
  EXPECT_EQ(seen.size(), 100u);
}

TEST_F(DirTrustTest, TrustedDirRefusesLinksOtherOwnersAndOthersWrite) {
  const std::string dir = root_->Join("cache");
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  EXPECT_TRUE(OpenTrustedDir(dir, GroupWrite::kRefuse).ok());
  const std::string link = root_->Join("cache-link");
  ASSERT_EQ(::symlink(dir.c_str(), link.c_str()), 0);
  EXPECT_TRUE(MessageContains(OpenTrustedDir(link, GroupWrite::kAllow).status(), "is a symbolic link"));
  EXPECT_TRUE(OpenTrustedDir(root_->Join("missing"), GroupWrite::kAllow).status().IsNotFound());
  EXPECT_TRUE(MessageContains(OpenTrustedDir(outside_, GroupWrite::kAllow).status(), "not a directory"));
  ASSERT_EQ(::chmod(dir.c_str(), 0707), 0);
  const Status others = OpenTrustedDir(dir, GroupWrite::kAllow).status();
  EXPECT_TRUE(MessageContains(others, "mode 0707")) << others.ToString();
  EXPECT_TRUE(MessageContains(others, "writable by others")) << others.ToString();
  ASSERT_EQ(::chmod(dir.c_str(), 0770), 0);
  EXPECT_TRUE(MessageContains(OpenTrustedDir(dir, GroupWrite::kRefuse).status(), "by its group"));
  EXPECT_TRUE(OpenTrustedDir(dir, GroupWrite::kAllow).ok());
  ASSERT_EQ(::chmod(dir.c_str(), 0700), 0);
  ASSERT_EQ(::chown(dir.c_str(), kOtherUid, static_cast<gid_t>(-1)), 0);
  const Status foreign = OpenTrustedDir(dir, GroupWrite::kAllow).status();
  EXPECT_TRUE(MessageContains(foreign, "owner uid " + std::to_string(kOtherUid))) << foreign.ToString();
  EXPECT_TRUE(MessageContains(foreign, "not owned by this user (" + DescribeUid(::geteuid())))
      << foreign.ToString();
}

TEST_F(DirTrustTest, ReplaceRegularFileWritesThroughATemporary) {
  const std::string path = root_->Join("metrics.prom");
  ASSERT_TRUE(ReplaceRegularFile("--metrics-file", path, "one\n", 0644).ok());
  ASSERT_TRUE(ReplaceRegularFile("--metrics-file", path, "two\n", 0644).ok());
  EXPECT_EQ(ReadFileOrWhy(path), "two\n");
  // Earlier versions wrote "<path>.tmp" with fopen("wb"): a link planted there was followed.
  const std::string planted = path + ".tmp";
  ASSERT_EQ(::symlink(outside_.c_str(), planted.c_str()), 0);
  ASSERT_TRUE(ReplaceRegularFile("--metrics-file", path, "three\n", 0644).ok());
  EXPECT_EQ(ReadFileOrWhy(path), "three\n");
  EXPECT_EQ(ReadFileOrWhy(outside_), "data\n");
  EXPECT_TRUE(std::filesystem::is_symlink(planted));
  // Only the target and the planted link: no temporary is left behind.
  size_t entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(root_->path())) {
    if (e.path().filename().string().find(".tmp.") != std::string::npos) ++entries;
  }
  EXPECT_EQ(entries, 0u);
}

TEST_F(DirTrustTest, ReplaceRegularFileRefusesWhatIsNotARegularFile) {
  const std::string fifo = root_->Join("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  const Status f = ReplaceRegularFile("--metrics-file", fifo, "x", 0644);
  EXPECT_TRUE(MessageContains(f, "--metrics-file " + fifo + " is a FIFO")) << f.ToString();
  struct stat st {};
  ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));  // Still the FIFO, not replaced.
  const std::string dir = root_->Join("dir");
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  EXPECT_TRUE(MessageContains(ReplaceRegularFile("w", dir, "x", 0644), "is a directory"));
  const std::string link = root_->Join("link");
  ASSERT_EQ(::symlink(outside_.c_str(), link.c_str()), 0);
  EXPECT_TRUE(MessageContains(ReplaceRegularFile("w", link, "x", 0644), "is a symbolic link"));
  EXPECT_EQ(ReadFileOrWhy(outside_), "data\n");
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  // /dev/null as root: earlier versions renamed the temporary over the device node.
  const std::string null_dev = root_->Join("null");
  if (::mknod(null_dev.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) {
    GTEST_SKIP() << "mknod not permitted here (" << std::strerror(errno) << ")";
  }
  EXPECT_TRUE(MessageContains(ReplaceRegularFile("w", null_dev, "x", 0644), "is a character device"));
  ASSERT_EQ(::lstat(null_dev.c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
}

}  // namespace
}  // namespace kvtier
