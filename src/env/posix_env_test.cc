// Goal: show that the posix Env does what env.h promises on a real filesystem: file I/O round
// trips (including reads past the end), open modes, directory operations, O_DIRECT on a disk
// filesystem, and the buffered fallback with exactly one log line per directory where O_DIRECT
// is refused.
// Method: every test works in a fresh mkdtemp directory that is removed afterwards. The fallback
// is exercised on procfs, which always refuses O_DIRECT, and on /dev/shm, whose tmpfs refuses it
// on kernels before 6.6 and accepts it after; that test checks the behaviour the kernel chose is
// consistent with what was logged.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <ctime>
#include <optional>

#include "core/aligned_buffer.h"
#include "env/env.h"
#include "testing/test_util.h"

namespace kvtier {
namespace {

std::span<const std::byte> AsBytes(std::string_view s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

std::string ReadAll(File& file, uint64_t offset, size_t len) {
  std::string out(len, '\0');
  size_t got = 0;
  Status s = file.ReadAt(offset, std::as_writable_bytes(std::span<char>(out.data(), len)), &got);
  EXPECT_TRUE(s.ok()) << s.ToString();
  out.resize(got);
  return out;
}

class PosixEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dir = ScopedTempDir::Create();
    ASSERT_TRUE(dir.ok()) << dir.status().ToString();
    dir_.emplace(std::move(dir).value());
    env_ = NewPosixEnv({.logger = &logger_});
  }

  std::optional<ScopedTempDir> dir_;
  CapturingLogger logger_;
  std::unique_ptr<Env> env_;
};

TEST_F(PosixEnvTest, WriteReadSizeTruncateAllocate) {
  auto file = env_->OpenFile(dir_->Join("f"), {.mode = OpenMode::kCreate});
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  File& f = **file;
  EXPECT_EQ(f.path(), dir_->Join("f"));
  EXPECT_FALSE(f.direct());
  EXPECT_GE(f.fd(), 0);
  ASSERT_TRUE(f.WriteAt(0, AsBytes("hello world")).ok());
  ASSERT_TRUE(f.WriteAt(6, AsBytes("kvtier")).ok());
  EXPECT_EQ(ReadAll(f, 0, 12), "hello kvtier");
  EXPECT_EQ(ReadAll(f, 6, 100), "kvtier");  // Short only at end of file.
  EXPECT_EQ(ReadAll(f, 1000, 10), "");
  EXPECT_EQ(f.Size().value(), 12u);
  ASSERT_TRUE(f.Sync().ok());
  ASSERT_TRUE(f.Truncate(5).ok());
  EXPECT_EQ(f.Size().value(), 5u);
  Status alloc = f.Allocate(0, 1 << 20);
  if (!alloc.IsNotSupported()) {
    ASSERT_TRUE(alloc.ok()) << alloc.ToString();
    EXPECT_EQ(f.Size().value(), uint64_t{1} << 20);
  }
  ASSERT_TRUE(f.Close().ok());
}

TEST_F(PosixEnvTest, OpenModes) {
  const std::string path = dir_->Join("m");
  EXPECT_TRUE(env_->OpenFile(path, {.mode = OpenMode::kReadWrite}).status().IsNotFound());
  EXPECT_TRUE(env_->OpenFile(path, {.mode = OpenMode::kReadOnly}).status().IsNotFound());
  {
    auto f = env_->OpenFile(path, {.mode = OpenMode::kCreateExclusive});
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    ASSERT_TRUE((*f)->WriteAt(0, AsBytes("abc")).ok());
  }
  Status exists = env_->OpenFile(path, {.mode = OpenMode::kCreateExclusive}).status();
  EXPECT_TRUE(exists.IsInvalidArgument()) << exists.ToString();
  EXPECT_NE(exists.message().find(path), std::string::npos);
  {
    auto f = env_->OpenFile(path, {.mode = OpenMode::kCreate});  // Kept when present.
    ASSERT_TRUE(f.ok());
    EXPECT_EQ((*f)->Size().value(), 3u);
  }
  {
    auto f = env_->OpenFile(path, {.mode = OpenMode::kReadOnly});
    ASSERT_TRUE(f.ok());
    Status s = (*f)->WriteAt(0, AsBytes("x"));
    EXPECT_TRUE(s.IsIoError()) << s.ToString();  // EBADF, with the file and offset named.
    EXPECT_NE(s.message().find(path + " at offset 0"), std::string::npos) << s.ToString();
  }
  auto f = env_->OpenFile(path, {.mode = OpenMode::kTruncate});
  ASSERT_TRUE(f.ok());
  EXPECT_EQ((*f)->Size().value(), 0u);
}

TEST_F(PosixEnvTest, ClosedFileReportsErrors) {
  auto f = env_->OpenFile(dir_->Join("c"), {.mode = OpenMode::kCreate});
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE((*f)->Close().ok());
  EXPECT_EQ((*f)->fd(), -1);
  EXPECT_TRUE((*f)->Close().ok());  // Closing twice is harmless.
  std::byte b[4];
  size_t got = 0;
  EXPECT_TRUE((*f)->ReadAt(0, b, &got).IsIoError());
  EXPECT_FALSE((*f)->Sync().ok());
}

TEST_F(PosixEnvTest, DirectoryOperations) {
  const std::string nested = dir_->Join("a/b//c/");
  ASSERT_TRUE(env_->CreateDirs(nested).ok());
  ASSERT_TRUE(env_->CreateDirs(nested).ok());  // Already there.
  for (const char* name : {"z", "a", "m"}) {
    ASSERT_TRUE(
        env_->OpenFile(dir_->Join(std::string("a/b/c/") + name), {.mode = OpenMode::kCreate}).ok());
  }
  auto names = env_->ListDir(dir_->Join("a/b/c"));
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(*names, (std::vector<std::string>{"a", "m", "z"}));
  ASSERT_TRUE(env_->RenameFile(dir_->Join("a/b/c/a"), dir_->Join("a/b/c/y")).ok());
  EXPECT_FALSE(env_->FileExists(dir_->Join("a/b/c/a")));
  EXPECT_TRUE(env_->FileExists(dir_->Join("a/b/c/y")));
  ASSERT_TRUE(env_->RemoveFile(dir_->Join("a/b/c/y")).ok());
  EXPECT_TRUE(env_->RemoveFile(dir_->Join("a/b/c/y")).IsNotFound());
  EXPECT_TRUE(env_->SyncDir(dir_->Join("a/b/c")).ok());
  EXPECT_TRUE(env_->SyncDir(dir_->Join("missing")).IsNotFound());
  EXPECT_TRUE(env_->ListDir(dir_->Join("missing")).status().IsNotFound());
  EXPECT_TRUE(env_->RenameFile(dir_->Join("missing"), dir_->Join("x")).IsNotFound());
  // A path through a regular file can't become a directory.
  EXPECT_FALSE(env_->CreateDirs(dir_->Join("a/b/c/m/d")).ok());
  EXPECT_FALSE(env_->CreateDirs(dir_->Join("a/b/c/m")).ok());
  auto free_bytes = env_->FreeSpaceBytes(dir_->path());
  ASSERT_TRUE(free_bytes.ok());
  EXPECT_GT(*free_bytes, 0u);
  EXPECT_TRUE(env_->FreeSpaceBytes(dir_->Join("missing")).status().IsNotFound());
}

TEST_F(PosixEnvTest, DirectIoOnDiskFilesystem) {
  const std::string path = dir_->Join("direct");
  auto file = env_->OpenFile(path, {.mode = OpenMode::kCreate, .direct = DirectIo::kRequired});
  if (file.status().IsNotSupported()) {
    GTEST_SKIP() << "the temp directory refuses O_DIRECT: " << file.status().ToString();
  }
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  File& f = **file;
  EXPECT_TRUE(f.direct());
  auto buf = AlignedBuffer::Allocate(2 * kDirectIoAlignment);
  ASSERT_TRUE(buf.ok());
  for (size_t i = 0; i < buf->size(); ++i) buf->data()[i] = std::byte(i * 7);
  ASSERT_TRUE(f.WriteAt(kDirectIoAlignment, buf->span()).ok());
  auto back = AlignedBuffer::Allocate(2 * kDirectIoAlignment);
  size_t got = 0;
  ASSERT_TRUE(f.ReadAt(kDirectIoAlignment, back->span(), &got).ok());
  EXPECT_EQ(got, back->size());
  EXPECT_EQ(std::memcmp(buf->data(), back->data(), got), 0);
  // Misaligned offset, length and buffer are refused before reaching the kernel.
  EXPECT_TRUE(f.ReadAt(1, back->span(), &got).IsInvalidArgument());
  EXPECT_TRUE(f.ReadAt(0, back->span().first(100), &got).IsInvalidArgument());
  EXPECT_TRUE(f.WriteAt(0, buf->span().subspan(1, kDirectIoAlignment)).IsInvalidArgument());
  // A file whose size is not a multiple of the block ends in a short read.
  ASSERT_TRUE(f.Truncate(kDirectIoAlignment + 100).ok());
  ASSERT_TRUE(f.ReadAt(0, back->span(), &got).ok());
  EXPECT_EQ(got, kDirectIoAlignment + 100);
  EXPECT_EQ(logger_.lines().size(), 0u);
}

TEST_F(PosixEnvTest, DirectIoFallbackLogsOncePerDirectory) {
  // procfs never supports O_DIRECT.
  for (const char* path : {"/proc/self/status", "/proc/self/stat", "/proc/self/status"}) {
    auto f = env_->OpenFile(path, {.mode = OpenMode::kReadOnly, .direct = DirectIo::kPreferred});
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    EXPECT_FALSE((*f)->direct());
    EXPECT_GT(ReadAll(**f, 0, 16).size(), 0u);  // Buffered reads work.
  }
  EXPECT_EQ(logger_.lines().size(), 1u);
  EXPECT_EQ(logger_.CountContaining("/proc/self"), 1u);
  auto cpuinfo = env_->OpenFile("/proc/cpuinfo", {.direct = DirectIo::kPreferred});
  ASSERT_TRUE(cpuinfo.ok());
  EXPECT_EQ(logger_.lines().size(), 2u);  // Another directory, another line.
  Status required = env_->OpenFile("/proc/self/status", {.direct = DirectIo::kRequired}).status();
  EXPECT_TRUE(required.IsNotSupported()) << required.ToString();
  EXPECT_NE(required.message().find("/proc/self/status"), std::string::npos);
}

TEST_F(PosixEnvTest, DirectIoOnTmpfs) {
  if (::access("/dev/shm", W_OK) != 0) GTEST_SKIP() << "no writable /dev/shm";
  auto shm = ScopedTempDir::Create("/dev/shm");
  ASSERT_TRUE(shm.ok());
  auto preferred =
      env_->OpenFile(shm->Join("p1"), {.mode = OpenMode::kCreate, .direct = DirectIo::kPreferred});
  ASSERT_TRUE(preferred.ok()) << preferred.status().ToString();
  auto again =
      env_->OpenFile(shm->Join("p2"), {.mode = OpenMode::kCreate, .direct = DirectIo::kPreferred});
  ASSERT_TRUE(again.ok());
  auto required = env_->OpenFile(
      shm->Join("r"), {.mode = OpenMode::kCreateExclusive, .direct = DirectIo::kRequired});
  if ((*preferred)->direct()) {
    // tmpfs supports O_DIRECT since Linux 6.6.
    EXPECT_TRUE((*again)->direct());
    EXPECT_TRUE(required.ok());
    EXPECT_EQ(logger_.lines().size(), 0u);
  } else {
    EXPECT_FALSE((*again)->direct());
    EXPECT_TRUE(required.status().IsNotSupported());
    EXPECT_FALSE(env_->FileExists(shm->Join("r")));  // The refused exclusive create is undone.
    EXPECT_EQ(logger_.CountContaining(shm->path()), 1u);
    ASSERT_TRUE((*preferred)->WriteAt(1, AsBytes("x")).ok());  // Unaligned is fine when buffered.
  }
}

TEST(SystemClockTest, MonotonicAndWall) {
  Clock* clock = SystemClock();
  const uint64_t a = clock->NowMicros();
  clock->SleepForMicros(2000);
  const uint64_t b = clock->NowMicros();
  EXPECT_GE(b - a, 2000u);
  const auto wall_s = static_cast<uint64_t>(std::time(nullptr));
  EXPECT_NEAR(static_cast<double>(clock->WallMicros() / 1'000'000), static_cast<double>(wall_s),
              2.0);
  ManualClock manual(5);
  manual.SleepForMicros(10);
  EXPECT_EQ(manual.NowMicros(), 15u);
}

}  // namespace
}  // namespace kvtier
