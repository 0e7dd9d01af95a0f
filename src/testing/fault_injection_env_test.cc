// Goal: show that FaultInjectionEnv injects each fault exactly where it is aimed (Nth matching
// operation, op kind, path filter, once or every time after), that short transfers and bit flips
// change exactly what they promise, that operations are counted, and that DropUnsyncedData
// reverts files to their last synced state: appends truncated, synced bytes that were overwritten
// restored, synced data kept, and files whose creation was never made durable by SyncDir removed.
// Method: a FaultInjectionEnv over the posix Env in a fresh mkdtemp directory. Every fault and the
// power-loss cases run through File methods, and again through an IoQueue on both backends
// (value-parameterized), reading results back through the base Env, which sees the real disk.
#include "testing/fault_injection_env.h"

#include <gtest/gtest.h>

#include <bit>
#include <optional>

#include "core/aligned_buffer.h"
#include "testing/test_util.h"

namespace kvtier {
namespace {

std::span<const std::byte> AsBytes(std::string_view s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

class FaultInjectionEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dir = ScopedTempDir::Create();
    ASSERT_TRUE(dir.ok()) << dir.status().ToString();
    dir_.emplace(std::move(dir).value());
    base_ = NewPosixEnv();
    env_.emplace(base_.get());
  }

  std::unique_ptr<File> Open(const std::string& name, OpenMode mode = OpenMode::kCreate) {
    auto f = env_->OpenFile(dir_->Join(name), {.mode = mode});
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    return f.ok() ? std::move(f).value() : nullptr;
  }

  // The file's contents as the disk has them, read through the base Env; "<missing>" when gone.
  std::string Contents(const std::string& name) {
    auto f = base_->OpenFile(dir_->Join(name), {.mode = OpenMode::kReadOnly});
    if (!f.ok()) return "<missing>";
    const uint64_t size = (*f)->Size().value();
    std::string out(size, '\0');
    size_t got = 0;
    EXPECT_TRUE((*f)->ReadAt(0, std::as_writable_bytes(std::span<char>(out)), &got).ok());
    out.resize(got);
    return out;
  }

  FaultId Arm(const FaultSpec& spec) {
    auto id = env_->ArmFault(spec);
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    return id.value_or(0);
  }

  std::optional<ScopedTempDir> dir_;
  std::unique_ptr<Env> base_;
  std::optional<FaultInjectionEnv> env_;
};

// ---------------------------------------------------------------------------------------------
// Faults through File

TEST_F(FaultInjectionEnvTest, FailsTheNthMatchingWriteOnce) {
  auto f = Open("f");
  const FaultId id = Arm({.op = FaultOp::kWrite, .nth = 3});
  EXPECT_TRUE(f->WriteAt(0, AsBytes("a")).ok());
  EXPECT_TRUE(f->Sync().ok());  // Not a write: does not count.
  EXPECT_TRUE(f->WriteAt(1, AsBytes("b")).ok());
  Status s = f->WriteAt(2, AsBytes("c"));
  EXPECT_TRUE(s.IsIoError()) << s.ToString();
  EXPECT_NE(s.message().find("injected fault: write of " + f->path() + " at offset 2"),
            std::string::npos)
      << s.ToString();
  EXPECT_TRUE(f->WriteAt(3, AsBytes("d")).ok());
  EXPECT_EQ(env_->FiredCount(id), 1u);
  EXPECT_EQ(Contents("f"), std::string("ab\0d", 4));  // The failed write wrote nothing.
}

TEST_F(FaultInjectionEnvTest, EveryAfterWithPathFilterAndNoSpace) {
  auto a = Open("a");
  auto b = Open("b");
  const FaultId id = Arm({.op = FaultOp::kWrite,
                          .path_substring = "/b",
                          .nth = 2,
                          .repeat = FaultRepeat::kEveryAfter,
                          .error = InjectedError::kNoSpace});
  EXPECT_TRUE(b->WriteAt(0, AsBytes("1")).ok());
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(b->WriteAt(0, AsBytes("2")).IsNoSpace());
    EXPECT_TRUE(a->WriteAt(0, AsBytes("x")).ok());  // Another path: untouched.
  }
  EXPECT_EQ(env_->FiredCount(id), 3u);
  env_->DisarmFault(id);
  EXPECT_EQ(env_->FiredCount(id), 0u);
  EXPECT_TRUE(b->WriteAt(0, AsBytes("3")).ok());
}

TEST_F(FaultInjectionEnvTest, SyncOpenAndAnyFaults) {
  auto f = Open("f");
  Arm({.op = FaultOp::kSync});
  EXPECT_TRUE(f->Sync().IsIoError());
  EXPECT_TRUE(f->Sync().ok());
  Arm({.op = FaultOp::kOpen, .path_substring = "g"});
  EXPECT_TRUE(env_->OpenFile(dir_->Join("g"), {.mode = OpenMode::kCreate}).status().IsIoError());
  EXPECT_FALSE(env_->FileExists(dir_->Join("g")));
  Arm({.op = FaultOp::kAny, .nth = 2});  // Second operation of any kind.
  EXPECT_TRUE(f->WriteAt(0, AsBytes("x")).ok());
  std::byte b[1];
  size_t got = 0;
  EXPECT_TRUE(f->ReadAt(0, b, &got).IsIoError());
  env_->DisarmAllFaults();
  EXPECT_TRUE(f->ReadAt(0, b, &got).ok());
}

TEST_F(FaultInjectionEnvTest, ShortReadAndShortWrite) {
  auto f = Open("f");
  ASSERT_TRUE(f->WriteAt(0, AsBytes("0123456789")).ok());
  Arm({.kind = FaultKind::kShortTransfer, .op = FaultOp::kRead, .keep_bytes = 3});
  char buf[10] = {};
  size_t got = 0;
  ASSERT_TRUE(f->ReadAt(0, std::as_writable_bytes(std::span<char>(buf)), &got).ok());
  EXPECT_EQ(std::string_view(buf, got), "012");
  Arm({.kind = FaultKind::kShortTransfer, .op = FaultOp::kWrite, .error = InjectedError::kNoSpace});
  Status s = f->WriteAt(10, AsBytes("abcdefgh"));  // keep_bytes 0: half.
  EXPECT_TRUE(s.IsNoSpace()) << s.ToString();
  EXPECT_EQ(Contents("f"), "0123456789abcd");  // Only the prefix reached the file.
}

TEST_F(FaultInjectionEnvTest, BitFlipAtChosenAndSeededPositions) {
  auto f = Open("f");
  const std::string data(64, 'A');
  ASSERT_TRUE(f->WriteAt(0, AsBytes(data)).ok());
  Arm({.kind = FaultKind::kBitFlip, .bit_index = 9});
  std::string buf(64, '\0');
  size_t got = 0;
  ASSERT_TRUE(f->ReadAt(0, std::as_writable_bytes(std::span<char>(buf)), &got).ok());
  EXPECT_EQ(buf[1], 'A' ^ 0x02);
  EXPECT_EQ(buf.substr(2), data.substr(2));
  Arm({.kind = FaultKind::kBitFlip, .seed = 42});
  ASSERT_TRUE(f->ReadAt(0, std::as_writable_bytes(std::span<char>(buf)), &got).ok());
  int flipped_bits = 0;
  for (size_t i = 0; i < buf.size(); ++i) {
    flipped_bits += std::popcount(static_cast<unsigned>(static_cast<uint8_t>(buf[i] ^ 'A')));
  }
  EXPECT_EQ(flipped_bits, 1);
  EXPECT_EQ(Contents("f"), data);  // The disk is untouched.
}

TEST_F(FaultInjectionEnvTest, CountsOperationsAndValidatesSpecs) {
  auto f = Open("f");
  ASSERT_TRUE(f->WriteAt(0, AsBytes("x")).ok());
  ASSERT_TRUE(f->Sync().ok());
  std::byte b[1];
  size_t got = 0;
  ASSERT_TRUE(f->ReadAt(0, b, &got).ok());
  ASSERT_TRUE(f->ReadAt(0, b, &got).ok());
  FaultOpCounts counts = env_->op_counts();
  EXPECT_EQ(counts.opens, 1u);
  EXPECT_EQ(counts.writes, 1u);
  EXPECT_EQ(counts.syncs, 1u);
  EXPECT_EQ(counts.reads, 2u);
  env_->ResetOpCounts();
  EXPECT_EQ(env_->op_counts().reads, 0u);

  EXPECT_TRUE(env_->ArmFault({.nth = 0}).status().IsInvalidArgument());
  EXPECT_TRUE(env_->ArmFault({.kind = FaultKind::kBitFlip, .op = FaultOp::kWrite})
                  .status()
                  .IsInvalidArgument());
  EXPECT_TRUE(env_->ArmFault({.kind = FaultKind::kShortTransfer, .op = FaultOp::kSync})
                  .status()
                  .IsInvalidArgument());
  for (int i = 0; i < 64; ++i) ASSERT_TRUE(env_->ArmFault({.nth = 1000}).ok());
  EXPECT_TRUE(env_->ArmFault({}).status().IsInvalidArgument());  // Bounded.
}

// ---------------------------------------------------------------------------------------------
// Power loss through File

TEST_F(FaultInjectionEnvTest, DropTruncatesUnsyncedAppends) {
  auto f = Open("f");
  ASSERT_TRUE(env_->SyncDir(dir_->path()).ok());
  ASSERT_TRUE(f->WriteAt(0, AsBytes("hello")).ok());
  ASSERT_TRUE(f->Sync().ok());
  ASSERT_TRUE(f->WriteAt(5, AsBytes(" world")).ok());
  f->Allocate(0, 1 << 16).IgnoreError();  // Grows the file where supported; also unsynced.
  ASSERT_TRUE(env_->DropUnsyncedData().ok());
  EXPECT_EQ(Contents("f"), "hello");
  // The file stays usable, and tracking starts again from the restored state.
  ASSERT_TRUE(f->WriteAt(5, AsBytes("!")).ok());
  ASSERT_TRUE(env_->DropUnsyncedData().ok());
  EXPECT_EQ(Contents("f"), "hello");
}

TEST_F(FaultInjectionEnvTest, DropRestoresOverwrittenSyncedBytes) {
  auto f = Open("f");
  ASSERT_TRUE(env_->SyncDir(dir_->path()).ok());
  ASSERT_TRUE(f->WriteAt(0, AsBytes("aaaaaaaa")).ok());
  ASSERT_TRUE(f->Sync().ok());
  ASSERT_TRUE(f->WriteAt(2, AsBytes("bbb")).ok());
  ASSERT_TRUE(f->WriteAt(3, AsBytes("cccccccc")).ok());  // Overlaps and extends.
  ASSERT_TRUE(f->Truncate(1).ok());                      // Cuts synced bytes too.
  ASSERT_TRUE(f->WriteAt(0, AsBytes("d")).ok());
  EXPECT_EQ(Contents("f"), "d");
  ASSERT_TRUE(env_->DropUnsyncedData().ok());
  EXPECT_EQ(Contents("f"), "aaaaaaaa");
}

TEST_F(FaultInjectionEnvTest, DropKeepsSyncedData) {
  auto f = Open("f");
  ASSERT_TRUE(env_->SyncDir(dir_->path()).ok());
  ASSERT_TRUE(f->WriteAt(0, AsBytes("one")).ok());
  ASSERT_TRUE(f->Sync().ok());
  ASSERT_TRUE(f->WriteAt(0, AsBytes("two")).ok());
  ASSERT_TRUE(f->Sync().ok());
  ASSERT_TRUE(env_->DropUnsyncedData().ok());
  EXPECT_EQ(Contents("f"), "two");
}

TEST_F(FaultInjectionEnvTest, DropRemovesCreationsWithoutSyncDir) {
  auto durable = Open("durable");
  ASSERT_TRUE(env_->SyncDir(dir_->path() + "/").ok());
  auto fresh = Open("fresh");
  ASSERT_TRUE(fresh->WriteAt(0, AsBytes("data")).ok());
  ASSERT_TRUE(fresh->Sync().ok());  // Data synced, but the directory entry is not.
  auto renamed = Open("renamed-from");
  ASSERT_TRUE(env_->RenameFile(dir_->Join("renamed-from"), dir_->Join("renamed-to")).ok());
  ASSERT_TRUE(env_->DropUnsyncedData().ok());
  EXPECT_FALSE(base_->FileExists(dir_->Join("fresh")));
  EXPECT_FALSE(base_->FileExists(dir_->Join("renamed-to")));
  EXPECT_TRUE(base_->FileExists(dir_->Join("durable")));
}

TEST_F(FaultInjectionEnvTest, PreexistingFilesCountAsSyncedAtFirstOpen) {
  {
    auto f = base_->OpenFile(dir_->Join("old"), {.mode = OpenMode::kCreate});
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->WriteAt(0, AsBytes("original")).ok());
  }
  auto f = Open("old", OpenMode::kReadWrite);
  ASSERT_TRUE(f->WriteAt(0, AsBytes("CHANGED!!")).ok());
  ASSERT_TRUE(env_->DropUnsyncedData().ok());
  EXPECT_EQ(Contents("old"), "original");
  auto t = Open("old", OpenMode::kTruncate);  // Emptying is unsynced too.
  EXPECT_EQ(Contents("old"), "");
  ASSERT_TRUE(env_->DropUnsyncedData().ok());
  EXPECT_EQ(Contents("old"), "original");
}

// ---------------------------------------------------------------------------------------------
// Faults and power loss through an IoQueue

class FaultInjectionIoQueueTest : public FaultInjectionEnvTest,
                                  public ::testing::WithParamInterface<IoBackend> {
 protected:
  std::unique_ptr<IoQueue> NewQueue() {
    auto q = env_->NewIoQueue({.depth = 8, .backend = GetParam(), .fallback_threads = 2});
    EXPECT_TRUE(q.ok()) << q.status().ToString();
    return q.ok() ? std::move(q).value() : nullptr;
  }
};

IoRequest Req(IoOp op, File* file, uint64_t offset, void* buffer, size_t length,
              uint64_t user_data) {
  return {.op = op,
          .file = file,
          .offset = offset,
          .buffer = static_cast<std::byte*>(buffer),
          .length = length,
          .user_data = user_data};
}

TEST_P(FaultInjectionIoQueueTest, ErrorShortAndFlipFaults) {
  auto f = Open("f");
  auto queue = NewQueue();
  ASSERT_NE(queue, nullptr);
  char w[3][4] = {{'a', 'a', 'a', 'a'}, {'b', 'b', 'b', 'b'}, {'c', 'c', 'c', 'c'}};
  Arm({.op = FaultOp::kWrite, .nth = 2});
  const IoRequest writes[] = {Req(IoOp::kWrite, f.get(), 0, w[0], 4, 10),
                              Req(IoOp::kWrite, f.get(), 4, w[1], 4, 11),
                              Req(IoOp::kWrite, f.get(), 8, w[2], 4, 12)};
  std::vector<IoCompletion> done;
  EXPECT_TRUE(RunToCompletion(*queue, writes, &done).IsIoError());
  ASSERT_EQ(done.size(), 3u);
  for (const IoCompletion& c : done) EXPECT_EQ(c.status.ok(), c.user_data != 11) << c.user_data;
  EXPECT_EQ(Contents("f"), std::string("aaaa\0\0\0\0cccc", 12));

  Arm({.kind = FaultKind::kShortTransfer, .op = FaultOp::kWrite, .keep_bytes = 1});
  const IoRequest short_write = Req(IoOp::kWrite, f.get(), 12, w[1], 4, 20);
  EXPECT_FALSE(RunToCompletion(*queue, {&short_write, 1}, &done).ok());
  EXPECT_EQ(done.at(0).bytes, 1u);
  EXPECT_EQ(Contents("f"), std::string("aaaa\0\0\0\0ccccb", 13));

  char r[13] = {};
  Arm({.kind = FaultKind::kShortTransfer, .op = FaultOp::kRead, .keep_bytes = 6});
  const IoRequest read = Req(IoOp::kRead, f.get(), 0, r, 13, 30);
  EXPECT_FALSE(RunToCompletion(*queue, {&read, 1}, &done).ok());
  EXPECT_EQ(done.at(0).bytes, 6u);
  EXPECT_EQ(std::string_view(r, 6), std::string_view("aaaa\0\0", 6));

  Arm({.kind = FaultKind::kBitFlip, .bit_index = 8 * 8});  // Lowest bit of byte 8.
  ASSERT_TRUE(RunToCompletion(*queue, {&read, 1}, &done).ok());
  EXPECT_EQ(r[8], 'c' ^ 1);
  EXPECT_EQ(r[9], 'c');

  const FaultOpCounts counts = env_->op_counts();
  EXPECT_EQ(counts.writes, 4u);
  EXPECT_EQ(counts.reads, 2u);
}

TEST_P(FaultInjectionIoQueueTest, ShortWriteOnDirectFileStaysAligned) {
  auto file =
      env_->OpenFile(dir_->Join("d"), {.mode = OpenMode::kCreate, .direct = DirectIo::kPreferred});
  ASSERT_TRUE(file.ok());
  auto queue = NewQueue();
  auto buf = AlignedBuffer::Allocate(3 * kDirectIoAlignment);
  Arm({.kind = FaultKind::kShortTransfer, .op = FaultOp::kWrite, .keep_bytes = 5000});
  const IoRequest write = Req(IoOp::kWrite, file->get(), 0, buf->data(), buf->size(), 1);
  std::vector<IoCompletion> done;
  EXPECT_FALSE(RunToCompletion(*queue, {&write, 1}, &done).ok());
  ASSERT_EQ(done.size(), 1u);
  // RunToCompletion turns the short transfer into an error that names it.
  EXPECT_NE(done[0].status.message().find("short write"), std::string::npos);
  EXPECT_EQ(done[0].bytes, (*file)->direct() ? kDirectIoAlignment : 5000u);
}

TEST_P(FaultInjectionIoQueueTest, DropUnsyncedDataTracksQueueWritesAndSyncs) {
  auto f = Open("f");
  ASSERT_TRUE(env_->SyncDir(dir_->path()).ok());
  auto queue = NewQueue();
  ASSERT_NE(queue, nullptr);
  char first[] = "synced--";
  char second[] = "OVER";
  char tail[] = "+tail";
  const IoRequest step1[] = {Req(IoOp::kWrite, f.get(), 0, first, 8, 1),
                             Req(IoOp::kSync, f.get(), 0, nullptr, 0, 2)};
  // The sync must follow the write, so they run one after the other.
  ASSERT_TRUE(RunToCompletion(*queue, {&step1[0], 1}).ok());
  ASSERT_TRUE(RunToCompletion(*queue, {&step1[1], 1}).ok());
  const IoRequest step2[] = {Req(IoOp::kWrite, f.get(), 2, second, 4, 3),
                             Req(IoOp::kWrite, f.get(), 8, tail, 5, 4)};
  ASSERT_TRUE(RunToCompletion(*queue, step2).ok());
  EXPECT_EQ(Contents("f"), "syOVER--+tail");
  ASSERT_TRUE(env_->DropUnsyncedData().ok());
  EXPECT_EQ(Contents("f"), "synced--");
  // A failed sync does not make anything durable.
  ASSERT_TRUE(RunToCompletion(*queue, {&step2[1], 1}).ok());
  Arm({.op = FaultOp::kSync});
  EXPECT_FALSE(RunToCompletion(*queue, {&step1[1], 1}).ok());
  ASSERT_TRUE(env_->DropUnsyncedData().ok());
  EXPECT_EQ(Contents("f"), "synced--");
}

INSTANTIATE_TEST_SUITE_P(Backends, FaultInjectionIoQueueTest,
                         ::testing::Values(IoBackend::kIoUring, IoBackend::kThreadPool),
                         [](const ::testing::TestParamInfo<IoBackend>& param_info) {
                           return param_info.param == IoBackend::kIoUring ? "IoUring"
                                                                          : "ThreadPool";
                         });

}  // namespace
}  // namespace kvtier
