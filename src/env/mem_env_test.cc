// Goal: show what the in-memory Env does beyond the contract it shares with the posix Env
// (env_contract_test.cc): its capacity (free space falls as files grow, a write past it fails
// with NoSpace and writes nothing, removed files count until their last File closes), the
// O_DIRECT refusal it can simulate (one log line per directory for kPreferred, NotSupported for
// kRequired), its IoQueue backends, path folding, concurrent writers, its injected clock, and
// that the fault-injecting decorator works over it (power loss drops unsynced bytes).
// Method: small capacities so the limits are reached with a few KiB; a CapturingLogger for the
// fallback lines; threads writing distinct ranges of one file; FaultInjectionEnv over a MemEnv.
#include "env/mem_env.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "core/assert.h"
#include "testing/fault_injection_env.h"
#include "testing/test_util.h"

namespace kvtier {
namespace {

std::span<const std::byte> AsBytes(std::string_view s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

std::unique_ptr<File> OpenOrDie(Env& env, const std::string& path, OpenMode mode) {
  Result<std::unique_ptr<File>> f = env.OpenFile(path, {.mode = mode});
  KV_CHECK_OK(f.status());
  return std::move(f).value();
}

TEST(MemEnvTest, CapacityBoundsEveryWrite) {
  std::unique_ptr<Env> env = NewMemEnv({.capacity_bytes = 10'000});
  EXPECT_EQ(env->FreeSpaceBytes("/").value(), 10'000u);
  std::unique_ptr<File> f = OpenOrDie(*env, "/f", OpenMode::kCreate);
  const std::vector<std::byte> chunk(4000, std::byte{1});
  ASSERT_TRUE(f->WriteAt(0, chunk).ok());
  ASSERT_TRUE(f->WriteAt(4000, chunk).ok());
  EXPECT_EQ(env->FreeSpaceBytes("/").value(), 2'000u);
  const Status full = f->WriteAt(8000, chunk);
  EXPECT_TRUE(full.IsNoSpace()) << full.ToString();
  EXPECT_EQ(f->Size().value(), 8000u) << "a refused write writes nothing";
  EXPECT_TRUE(f->Allocate(0, 20'000).IsNoSpace());
  EXPECT_TRUE(f->Truncate(20'000).IsNoSpace());
  ASSERT_TRUE(f->Truncate(1000).ok());  // Shrinking frees space.
  EXPECT_EQ(env->FreeSpaceBytes("/").value(), 9'000u);

  // A removed file keeps its bytes until its last File is gone, as on a real filesystem.
  ASSERT_TRUE(env->RemoveFile("/f").ok());
  EXPECT_EQ(env->FreeSpaceBytes("/").value(), 9'000u);
  f.reset();
  EXPECT_EQ(env->FreeSpaceBytes("/").value(), 10'000u);
}

TEST(MemEnvTest, RefusedDirectIoFallsBackOrFails) {
  CapturingLogger logger;
  std::unique_ptr<Env> env = NewMemEnv({.direct_io = MemDirectIo::kRefused, .logger = &logger});
  ASSERT_TRUE(env->CreateDirs("/d1").ok());
  ASSERT_TRUE(env->CreateDirs("/d2").ok());
  for (const char* path : {"/d1/a", "/d1/b", "/d2/a"}) {
    Result<std::unique_ptr<File>> f =
        env->OpenFile(path, {.mode = OpenMode::kCreate, .direct = DirectIo::kPreferred});
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    EXPECT_FALSE((*f)->direct());
  }
  EXPECT_EQ(logger.CountContaining("O_DIRECT refused in /d1"), 1u);
  EXPECT_EQ(logger.CountContaining("O_DIRECT refused in /d2"), 1u);
  const Status required =
      env->OpenFile("/d1/c", {.mode = OpenMode::kCreateExclusive, .direct = DirectIo::kRequired})
          .status();
  EXPECT_TRUE(required.IsNotSupported()) << required.ToString();
  EXPECT_FALSE(env->FileExists("/d1/c")) << "the exclusive create is undone";

  // Supported (the default): the file is direct and the alignment rules apply.
  std::unique_ptr<Env> direct_env = NewMemEnv();
  Result<std::unique_ptr<File>> f =
      direct_env->OpenFile("/x", {.mode = OpenMode::kCreate, .direct = DirectIo::kRequired});
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_TRUE((*f)->direct());
  EXPECT_TRUE((*f)->WriteAt(3, AsBytes("abc")).IsInvalidArgument());
}

TEST(MemEnvTest, IoQueueBackends) {
  std::unique_ptr<Env> env = NewMemEnv();
  Result<std::unique_ptr<IoQueue>> any = env->NewIoQueue({.depth = 8});
  ASSERT_TRUE(any.ok()) << any.status().ToString();
  EXPECT_EQ((*any)->backend_name(), "threadpool");
  EXPECT_TRUE(env->NewIoQueue({.backend = IoBackend::kIoUring}).status().IsNotSupported());
  EXPECT_TRUE(env->NewIoQueue({.depth = 0}).status().IsInvalidArgument());
}

TEST(MemEnvTest, PathsAreFoldedAndRelativeToDot) {
  std::unique_ptr<Env> env = NewMemEnv();
  ASSERT_TRUE(env->CreateDirs("/a//b/").ok());
  EXPECT_TRUE(env->FileExists("/a/b"));
  ASSERT_NE(OpenOrDie(*env, "/a//b///f", OpenMode::kCreate), nullptr);
  EXPECT_TRUE(env->FileExists("/a/b/f"));
  EXPECT_EQ(env->ListDir("/a/b/").value(), std::vector<std::string>{"f"});
  EXPECT_EQ(env->ListDir("/").value(), std::vector<std::string>{"a"});
  ASSERT_NE(OpenOrDie(*env, "rel", OpenMode::kCreate), nullptr);
  EXPECT_EQ(env->ListDir(".").value(), std::vector<std::string>{"rel"});
  EXPECT_TRUE(env->OpenFile("", {.mode = OpenMode::kCreate}).status().IsNotFound());
}

TEST(MemEnvTest, ConcurrentWritersOfDistinctRanges) {
  std::unique_ptr<Env> env = NewMemEnv();
  std::unique_ptr<File> f = OpenOrDie(*env, "/shared", OpenMode::kCreate);
  constexpr int kThreads = 4;
  constexpr size_t kRangeBytes = 64 * 1024;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&f, t] {
      const std::vector<std::byte> bytes(kRangeBytes, std::byte(t + 1));
      // Small pieces, so that the file grows while the others write.
      for (size_t off = 0; off < kRangeBytes; off += 512) {
        const uint64_t at = static_cast<uint64_t>(t) * kRangeBytes + off;
        KV_CHECK_OK(f->WriteAt(at, std::span(bytes).subspan(off, 512)));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  std::vector<std::byte> back(kThreads * kRangeBytes);
  size_t got = 0;
  ASSERT_TRUE(f->ReadAt(0, back, &got).ok());
  ASSERT_EQ(got, back.size());
  for (size_t i = 0; i < back.size(); ++i) {
    ASSERT_EQ(back[i], std::byte(i / kRangeBytes + 1)) << "byte " << i;
  }
}

TEST(MemEnvTest, UsesTheInjectedClock) {
  ManualClock clock(5'000'000);
  std::unique_ptr<Env> env = NewMemEnv({.clock = &clock});
  EXPECT_EQ(env->clock(), &clock);
  EXPECT_EQ(NewMemEnv()->clock(), SystemClock());
}

TEST(MemEnvTest, FaultInjectionOverMemEnvDropsUnsyncedData) {
  std::unique_ptr<Env> mem = NewMemEnv();
  FaultInjectionEnv fenv(mem.get());
  ASSERT_TRUE(fenv.CreateDirs("/db").ok());
  ASSERT_TRUE(fenv.SyncDir("/").ok());
  std::unique_ptr<File> kept = OpenOrDie(fenv, "/db/kept", OpenMode::kCreate);
  ASSERT_TRUE(fenv.SyncDir("/db").ok());
  ASSERT_TRUE(kept->WriteAt(0, AsBytes("synced")).ok());
  ASSERT_TRUE(kept->Sync().ok());
  ASSERT_TRUE(kept->WriteAt(0, AsBytes("UNSYNCED-TAIL")).ok());
  std::unique_ptr<File> lost = OpenOrDie(fenv, "/db/lost", OpenMode::kCreate);
  ASSERT_TRUE(lost->WriteAt(0, AsBytes("never synced dir")).ok());
  ASSERT_TRUE(lost->Sync().ok());

  ASSERT_TRUE(fenv.DropUnsyncedData().ok());
  EXPECT_FALSE(mem->FileExists("/db/lost")) << "its directory entry was never synced";
  std::unique_ptr<File> check = OpenOrDie(*mem, "/db/kept", OpenMode::kReadOnly);
  std::string text(32, '\0');
  size_t got = 0;
  ASSERT_TRUE(check->ReadAt(0, std::as_writable_bytes(std::span(text)), &got).ok());
  text.resize(got);
  EXPECT_EQ(text, "synced");

  // Armed faults fire on MemEnv files as on posix ones.
  ASSERT_TRUE(fenv.ArmFault({.op = FaultOp::kWrite, .path_substring = "kept"}).ok());
  EXPECT_TRUE(kept->WriteAt(0, AsBytes("x")).IsIoError());
}

}  // namespace
}  // namespace kvtier
