// Goal: show that the posix Env and the in-memory Env keep the same contract (env.h), so that a
// test that passes on MemEnv says something about the posix Env the engine runs on: file I/O
// round trips with short reads only at end of file, open modes and their errors, closed and
// read-only files, directory operations and their errors, a removed file that stays usable while
// open, free space, and batched I/O through an IoQueue.
// Method: one value-parameterized suite runs the same body on each Env: the posix one in a fresh
// mkdtemp directory, the in-memory one in a directory it creates. Only what env.h promises is
// checked (exact messages and errno-specific codes beyond it are not).
#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "core/aligned_buffer.h"
#include "env/env.h"
#include "env/mem_env.h"
#include "testing/test_util.h"

namespace kvtier {
namespace {

enum class EnvKind : uint8_t { kPosix = 0, kMem = 1 };

std::span<const std::byte> AsBytes(std::string_view s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

class EnvContractTest : public ::testing::TestWithParam<EnvKind> {
 protected:
  void SetUp() override {
    if (GetParam() == EnvKind::kPosix) {
      Result<ScopedTempDir> dir = ScopedTempDir::Create();
      ASSERT_TRUE(dir.ok()) << dir.status().ToString();
      temp_.emplace(std::move(dir).value());
      root_ = temp_->path();
      env_ = NewPosixEnv();
    } else {
      root_ = "/contract";
      env_ = NewMemEnv();
      ASSERT_TRUE(env_->CreateDirs(root_).ok());
    }
  }

  std::string Join(std::string_view name) const { return root_ + "/" + std::string(name); }

  std::unique_ptr<File> Open(std::string_view name, OpenMode mode) {
    Result<std::unique_ptr<File>> f = env_->OpenFile(Join(name), {.mode = mode});
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    return f.ok() ? std::move(f).value() : nullptr;
  }

  static std::string ReadAll(File& file, uint64_t offset, size_t len) {
    std::string out(len, '\0');
    size_t got = 0;
    const Status s =
        file.ReadAt(offset, std::as_writable_bytes(std::span<char>(out.data(), len)), &got);
    EXPECT_TRUE(s.ok()) << s.ToString();
    out.resize(got);
    return out;
  }

  std::optional<ScopedTempDir> temp_;
  std::string root_;
  std::unique_ptr<Env> env_;
};

TEST_P(EnvContractTest, FileRoundTripAndSizes) {
  std::unique_ptr<File> f = Open("f", OpenMode::kCreate);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->path(), Join("f"));
  EXPECT_FALSE(f->direct());
  ASSERT_TRUE(f->WriteAt(0, AsBytes("hello world")).ok());
  ASSERT_TRUE(f->WriteAt(6, AsBytes("kvtier")).ok());
  EXPECT_EQ(ReadAll(*f, 0, 12), "hello kvtier");
  EXPECT_EQ(ReadAll(*f, 6, 100), "kvtier");  // Short only at end of file.
  EXPECT_EQ(ReadAll(*f, 50, 10), "");
  // A write past the end leaves a hole that reads as zeros.
  ASSERT_TRUE(f->WriteAt(20, AsBytes("z")).ok());
  EXPECT_EQ(ReadAll(*f, 12, 9), std::string(8, '\0') + "z");
  EXPECT_EQ(f->Size().value(), 21u);
  ASSERT_TRUE(f->Truncate(5).ok());
  EXPECT_EQ(f->Size().value(), 5u);
  EXPECT_EQ(ReadAll(*f, 0, 100), "hello");
  const Status allocated = f->Allocate(0, 8192);
  if (!allocated.IsNotSupported()) {  // Some filesystems have no fallocate.
    ASSERT_TRUE(allocated.ok()) << allocated.ToString();
    EXPECT_EQ(f->Size().value(), 8192u);
    EXPECT_EQ(ReadAll(*f, 0, 5), "hello");
  }
  ASSERT_TRUE(f->Sync().ok());
  ASSERT_TRUE(f->Close().ok());
  // Reopened, the bytes are there.
  std::unique_ptr<File> again = Open("f", OpenMode::kReadOnly);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(ReadAll(*again, 0, 5), "hello");
}

TEST_P(EnvContractTest, OpenModes) {
  EXPECT_TRUE(env_->OpenFile(Join("none"), {.mode = OpenMode::kReadOnly}).status().IsNotFound());
  EXPECT_TRUE(env_->OpenFile(Join("none"), {.mode = OpenMode::kReadWrite}).status().IsNotFound());
  EXPECT_TRUE(
      env_->OpenFile(Join("no/such/dir"), {.mode = OpenMode::kCreate}).status().IsNotFound());
  std::unique_ptr<File> f = Open("m", OpenMode::kCreateExclusive);
  ASSERT_NE(f, nullptr);
  ASSERT_TRUE(f->WriteAt(0, AsBytes("abc")).ok());
  EXPECT_TRUE(env_->OpenFile(Join("m"), {.mode = OpenMode::kCreateExclusive})
                  .status()
                  .IsInvalidArgument());
  EXPECT_EQ(Open("m", OpenMode::kCreate)->Size().value(), 3u);  // Kept.
  EXPECT_EQ(Open("m", OpenMode::kReadWrite)->Size().value(), 3u);
  // A read-only file refuses changes.
  std::unique_ptr<File> ro = Open("m", OpenMode::kReadOnly);
  ASSERT_NE(ro, nullptr);
  EXPECT_FALSE(ro->WriteAt(0, AsBytes("x")).ok());
  EXPECT_FALSE(ro->Truncate(0).ok());
  EXPECT_EQ(ReadAll(*ro, 0, 3), "abc");
  EXPECT_EQ(Open("m", OpenMode::kTruncate)->Size().value(), 0u);  // Emptied.
  // A directory is not a regular file.
  ASSERT_TRUE(env_->CreateDirs(Join("sub")).ok());
  const Status dir = env_->OpenFile(Join("sub"), {.kind = FileKind::kRegular}).status();
  EXPECT_TRUE(dir.IsInvalidArgument()) << dir.ToString();
  EXPECT_NE(dir.message().find("not a regular file"), std::string::npos) << dir.ToString();
}

TEST_P(EnvContractTest, ClosedFileReportsErrors) {
  std::unique_ptr<File> f = Open("c", OpenMode::kCreate);
  ASSERT_NE(f, nullptr);
  ASSERT_TRUE(f->Close().ok());
  EXPECT_EQ(f->fd(), -1);
  EXPECT_TRUE(f->Close().ok());  // Closing twice is harmless.
  std::byte b[4];
  size_t got = 0;
  EXPECT_TRUE(f->ReadAt(0, b, &got).IsIoError());
  EXPECT_FALSE(f->WriteAt(0, b).ok());
  EXPECT_FALSE(f->Sync().ok());
  EXPECT_FALSE(f->Size().ok());
}

TEST_P(EnvContractTest, DirectoryOperations) {
  ASSERT_TRUE(env_->CreateDirs(Join("a/b//c/")).ok());
  ASSERT_TRUE(env_->CreateDirs(Join("a/b/c")).ok());  // Already there: OK.
  EXPECT_TRUE(env_->FileExists(Join("a/b/c")));
  ASSERT_NE(Open("a/x", OpenMode::kCreate), nullptr);
  ASSERT_NE(Open("a/y", OpenMode::kCreate), nullptr);
  EXPECT_TRUE(env_->CreateDirs(Join("a/x")).IsInvalidArgument()) << "a file is in the way";
  Result<std::vector<std::string>> names = env_->ListDir(Join("a"));
  ASSERT_TRUE(names.ok()) << names.status().ToString();
  EXPECT_EQ(*names, (std::vector<std::string>{"b", "x", "y"}));
  EXPECT_TRUE(env_->ListDir(Join("none")).status().IsNotFound());
  EXPECT_FALSE(env_->ListDir(Join("a/x")).ok());

  ASSERT_TRUE(env_->RenameFile(Join("a/x"), Join("a/y")).ok());  // Replaces y.
  EXPECT_FALSE(env_->FileExists(Join("a/x")));
  EXPECT_TRUE(env_->FileExists(Join("a/y")));
  EXPECT_TRUE(env_->RenameFile(Join("a/x"), Join("a/z")).IsNotFound());
  ASSERT_TRUE(env_->RemoveFile(Join("a/y")).ok());
  EXPECT_FALSE(env_->FileExists(Join("a/y")));
  EXPECT_TRUE(env_->RemoveFile(Join("a/y")).IsNotFound());
  EXPECT_FALSE(env_->RemoveFile(Join("a/b")).ok()) << "RemoveFile does not remove directories";

  EXPECT_TRUE(env_->SyncDir(Join("a")).ok());
  EXPECT_TRUE(env_->SyncDir(Join("none")).IsNotFound());
  EXPECT_EQ(env_->ListDir(Join("a")).value(), (std::vector<std::string>{"b"}));
}

TEST_P(EnvContractTest, RemovedFileStaysUsableWhileOpen) {
  std::unique_ptr<File> f = Open("gone", OpenMode::kCreate);
  ASSERT_NE(f, nullptr);
  ASSERT_TRUE(f->WriteAt(0, AsBytes("still here")).ok());
  ASSERT_TRUE(env_->RemoveFile(Join("gone")).ok());
  EXPECT_FALSE(env_->FileExists(Join("gone")));
  EXPECT_EQ(ReadAll(*f, 0, 10), "still here");
  ASSERT_TRUE(f->WriteAt(10, AsBytes("!")).ok());
  EXPECT_EQ(f->Size().value(), 11u);
  // A new file of that name is a different file.
  std::unique_ptr<File> fresh = Open("gone", OpenMode::kCreate);
  ASSERT_NE(fresh, nullptr);
  EXPECT_EQ(fresh->Size().value(), 0u);
}

TEST_P(EnvContractTest, FreeSpaceAndClock) {
  Result<uint64_t> free_bytes = env_->FreeSpaceBytes(root_);
  ASSERT_TRUE(free_bytes.ok()) << free_bytes.status().ToString();
  EXPECT_GT(*free_bytes, 0u);
  EXPECT_TRUE(env_->FreeSpaceBytes(Join("none")).status().IsNotFound());
  ASSERT_NE(env_->clock(), nullptr);
  EXPECT_GT(env_->clock()->WallMicros(), 0u);
}

TEST_P(EnvContractTest, IoQueueWritesReadsAndSyncs) {
  std::unique_ptr<File> f = Open("q", OpenMode::kCreate);
  ASSERT_NE(f, nullptr);
  Result<std::unique_ptr<IoQueue>> queue = env_->NewIoQueue({.depth = 4});
  ASSERT_TRUE(queue.ok()) << queue.status().ToString();
  constexpr size_t kBlocks = 10;  // More than the depth: RunToCompletion resubmits.
  constexpr size_t kBlockBytes = 4096;
  Result<AlignedBuffer> out = AlignedBuffer::Allocate(kBlocks * kBlockBytes);
  Result<AlignedBuffer> in = AlignedBuffer::Allocate(kBlocks * kBlockBytes);
  ASSERT_TRUE(out.ok() && in.ok());
  for (size_t i = 0; i < out->size(); ++i) out->data()[i] = std::byte((i * 7 + i / 4096) & 0xff);
  std::vector<IoRequest> writes;
  for (size_t b = 0; b < kBlocks; ++b) {
    writes.push_back({.op = IoOp::kWrite,
                      .file = f.get(),
                      .offset = b * kBlockBytes,
                      .buffer = out->data() + b * kBlockBytes,
                      .length = kBlockBytes,
                      .user_data = b});
  }
  writes.push_back({.op = IoOp::kSync, .file = f.get(), .user_data = kBlocks});
  ASSERT_TRUE(RunToCompletion(**queue, writes).ok());
  std::vector<IoRequest> reads;
  for (size_t b = 0; b < kBlocks; ++b) {
    reads.push_back({.op = IoOp::kRead,
                     .file = f.get(),
                     .offset = b * kBlockBytes,
                     .buffer = in->data() + b * kBlockBytes,
                     .length = kBlockBytes,
                     .user_data = b});
  }
  std::vector<IoCompletion> completions;
  ASSERT_TRUE(RunToCompletion(**queue, reads, &completions).ok());
  EXPECT_EQ(completions.size(), kBlocks);
  EXPECT_EQ(std::memcmp(in->data(), out->data(), out->size()), 0);
  // A read past the end completes short; RunToCompletion reports that as an IoError.
  const IoRequest past{.op = IoOp::kRead,
                       .file = f.get(),
                       .offset = kBlocks * kBlockBytes - 100,
                       .buffer = in->data(),
                       .length = kBlockBytes};
  const Status short_read = RunToCompletion(**queue, std::span(&past, 1), &completions);
  EXPECT_TRUE(short_read.IsIoError()) << short_read.ToString();
  ASSERT_EQ(completions.size(), 1u);
  EXPECT_EQ(completions[0].bytes, 100u);
}

TEST_P(EnvContractTest, DirectFilesEnforceAlignment) {
  Result<std::unique_ptr<File>> f =
      env_->OpenFile(Join("d"), {.mode = OpenMode::kCreate, .direct = DirectIo::kPreferred});
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  if (!(*f)->direct()) GTEST_SKIP() << "this filesystem refuses O_DIRECT";
  Result<AlignedBuffer> buf = AlignedBuffer::Allocate(2 * kDirectIoAlignment);
  ASSERT_TRUE(buf.ok());
  ASSERT_TRUE((*f)->WriteAt(0, buf->span()).ok());
  size_t got = 0;
  EXPECT_TRUE((*f)->ReadAt(1, buf->span().first(kDirectIoAlignment), &got).IsInvalidArgument());
  EXPECT_TRUE((*f)->WriteAt(0, buf->span().subspan(1, 10)).IsInvalidArgument());
  EXPECT_TRUE((*f)->ReadAt(kDirectIoAlignment, buf->span(), &got).ok());
  EXPECT_EQ(got, kDirectIoAlignment);
}

INSTANTIATE_TEST_SUITE_P(Envs, EnvContractTest, ::testing::Values(EnvKind::kPosix, EnvKind::kMem),
                         [](const ::testing::TestParamInfo<EnvKind>& param) {
                           return param.param == EnvKind::kPosix ? "Posix" : "Mem";
                         });

}  // namespace
}  // namespace kvtier
