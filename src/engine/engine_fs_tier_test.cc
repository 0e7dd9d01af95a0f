// Goal: the fs tier as the engine's remote tier: two engines in two processes writing one shared
// directory at once (each sweeping it) leave every block the other reads back byte for byte;
// in one process, node B finds and loads what node A stored (write-through, and write-back on
// eviction and Flush), a restarted engine finds its blocks again, a damaged file fails only its
// own layer closed and is counted, and options by name build the tier (fs_dir with Redis is
// refused, naming both).
// Method: real engines on a temporary directory; the child processes are this binary re-run
// (FsTierChild.DISABLED_Run, driven by KVTIER_FS_CHILD); blocks are derived from (chunk hash,
// layer) (engine_remote_test_util.h), so every byte that comes back is checked.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/assert.h"
#include "engine/engine.h"
#include "engine/engine_remote_test_util.h"
#include "engine/options_table.h"
#include "testing/test_util.h"
#include "tiers/fs/fs_options.h"
#include "tiers/fs/fs_store.h"

namespace kvtier {
namespace {

using remote_test::kBlockTokens;
using remote_test::kLayers;
using remote_test::LoadAndCheck;
using remote_test::Matched;
using remote_test::Ns;
using remote_test::StoreChunks;

const std::string kKeyText = "7 " + std::string(64, 'c');

RemoteKeyring Ring() {
  Result<RemoteKeyring> r = RemoteKeyring::Parse(kKeyText);
  KV_CHECK_OK(r.status());
  return std::move(r).value();
}

EngineOptions NodeOptions(const std::string& dir, uint32_t host_blocks,
                          WritePolicy policy = WritePolicy::kWriteThrough) {
  EngineOptions o = remote_test::LocalNodeOptions(host_blocks, "");
  o.remote = RemoteTierOptions{
      .stores = TierOptionsSet::Of(kFsStoreName, FsStoreOptions{.dir = dir, .keyring = Ring()}),
      .write_policy = policy};
  return o;
}

// The child: stores `chunks` chunks of its own prompt and of a prompt both children store,
// under tenant "shared", in a directory swept every millisecond, then closes its engine.
TEST(FsTierChild, DISABLED_Run) {
  const char* spec = std::getenv("KVTIER_FS_CHILD");
  ASSERT_NE(spec, nullptr);
  const std::string s(spec);
  const std::string dir = s.substr(0, s.rfind(':'));
  const auto seed = static_cast<uint32_t>(std::stoul(s.substr(s.rfind(':') + 1)));
  EngineOptions o = NodeOptions(dir, 64);
  o.remote->stores.Get<FsStoreOptions>(kFsStoreName).bytes_max =
      1ull << 30;  // Far above what is written: sweeps remove nothing.
  o.remote->stores.Get<FsStoreOptions>(kFsStoreName).sweep_interval_ms = 1;
  std::unique_ptr<Engine> e = remote_test::OpenEngine(o);
  ASSERT_NE(e, nullptr);
  const Namespace ns = Ns(*e, "shared");
  for (uint32_t round = 0; round < 5; ++round) {
    ASSERT_TRUE(StoreChunks(*e, ns, TestTokens(seed * 100 + round, 4 * kBlockTokens), 4).ok());
    ASSERT_TRUE(StoreChunks(*e, ns, TestTokens(999, 8 * kBlockTokens), 8).ok());
  }
  ASSERT_TRUE(e->Flush().ok());
}

pid_t SpawnChild(const std::string& spec) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int null_fd = ::open("/dev/null", O_WRONLY);
    if (null_fd >= 0) ::dup2(null_fd, 1);
    ::setenv("KVTIER_FS_CHILD", spec.c_str(), 1);
    const char* argv[] = {"engine_fs_tier_test", "--gtest_filter=FsTierChild.DISABLED_Run",
                          "--gtest_also_run_disabled_tests", nullptr};
    ::execv("/proc/self/exe", const_cast<char* const*>(argv));
    ::_exit(127);
  }
  return pid;
}

class EngineFsTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<ScopedTempDir> t = ScopedTempDir::Create();
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tmp_.emplace(std::move(*t));
    dir_ = tmp_->Join("shared");
  }
  std::optional<ScopedTempDir> tmp_;
  std::string dir_;
};

TEST_F(EngineFsTierTest, TwoProcessesWritingAndSweepingOneDirectoryLoseNothing) {
  const pid_t a = SpawnChild(dir_ + ":1");
  const pid_t b = SpawnChild(dir_ + ":2");
  ASSERT_GT(a, 0);
  ASSERT_GT(b, 0);
  for (const pid_t pid : {a, b}) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  }
  std::unique_ptr<Engine> e = remote_test::OpenEngine(NodeOptions(dir_, 512));
  ASSERT_NE(e, nullptr);
  const Namespace ns = Ns(*e, "shared");
  for (const uint32_t seed : {1u, 2u}) {
    for (uint32_t round = 0; round < 5; ++round) {
      const std::vector<uint32_t> tokens = TestTokens(seed * 100 + round, 4 * kBlockTokens);
      EXPECT_EQ(Matched(*e, ns, tokens), 4 * kBlockTokens) << seed << "/" << round;
      for (const Status& s : LoadAndCheck(*e, ns, tokens, 4)) EXPECT_TRUE(s.ok()) << s.ToString();
    }
  }
  const std::vector<uint32_t> common = TestTokens(999, 8 * kBlockTokens);
  for (const Status& s : LoadAndCheck(*e, ns, common, 8)) EXPECT_TRUE(s.ok()) << s.ToString();
  const EngineStats stats = e->Stats();
  ASSERT_TRUE(stats.remote.has_value());
  ASSERT_FALSE(stats.tiers.empty());
  EXPECT_EQ(stats.tiers.back().kind, TierKind::kRemote);
  EXPECT_EQ(stats.tiers.back().name, "fs");  // The store's registered name.
  const RemoteStoreStats remote = stats.remote.value();
  EXPECT_EQ(remote.corrupt + remote.mismatched + remote.auth_failures, uint64_t{0});
  EXPECT_EQ(remote.hits, uint64_t{(2 * 5 * 4 + 8) * kLayers});
}

TEST_F(EngineFsTierTest, NodeBFindsWhatNodeAStoredAndARestartFindsItAgain) {
  {
    std::unique_ptr<Engine> a = remote_test::OpenEngine(NodeOptions(dir_, 64));
    std::unique_ptr<Engine> b = remote_test::OpenEngine(NodeOptions(dir_, 64));
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    remote_test::ExpectNodeBFindsWhatNodeAStored(*a, *b, 1);
    // Another salt sees nothing.
    EXPECT_EQ(Matched(*b, Ns(*b, "other"), TestTokens(1, 4 * kBlockTokens)), 0u);
  }
  std::unique_ptr<Engine> c = remote_test::OpenEngine(NodeOptions(dir_, 64));
  ASSERT_NE(c, nullptr);
  const Namespace ns = Ns(*c, "tenant");
  const std::vector<uint32_t> tokens = TestTokens(1, 4 * kBlockTokens + 5);
  EXPECT_EQ(Matched(*c, ns, tokens), 4 * kBlockTokens);
  for (const Status& s : LoadAndCheck(*c, ns, tokens, 4)) EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST_F(EngineFsTierTest, WriteBackReachesTheDirectoryOnEvictionAndFlush) {
  std::unique_ptr<Engine> a =
      remote_test::OpenEngine(NodeOptions(dir_, kLayers, WritePolicy::kWriteBack));
  std::unique_ptr<Engine> b = remote_test::OpenEngine(NodeOptions(dir_, 64));
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  remote_test::ExpectWriteBackOnEvictionAndFlush(*a, *b, 2);
}

TEST_F(EngineFsTierTest, ADamagedFileFailsOnlyItsLayerClosed) {
  std::unique_ptr<Engine> a = remote_test::OpenEngine(NodeOptions(dir_, 64));
  std::unique_ptr<Engine> b = remote_test::OpenEngine(NodeOptions(dir_, 64));
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const Namespace ns = Ns(*a, "t");
  const std::vector<uint32_t> tokens = TestTokens(3, 2 * kBlockTokens);
  ASSERT_TRUE(StoreChunks(*a, ns, tokens, 2).ok());
  Result<std::vector<Hash256>> hashes = ChunkHashes(ns.digest, tokens, kBlockTokens);
  ASSERT_TRUE(hashes.ok());
  // The file's name, from a store with the same keys.
  Result<std::unique_ptr<FsStore>> names = FsStore::Open({.dir = dir_, .keyring = Ring()});
  ASSERT_TRUE(names.ok()) << names.status().ToString();
  const std::string path =
      dir_ + "/" + (*names)->RelativePath({.chunk_hash = (*hashes)[1], .layer = 1});
  ASSERT_TRUE(FlipByteOfFile(path, 300).ok());
  remote_test::ExpectOnlyTheDamagedLayerFailsClosed(*b, ns, tokens);
  const EngineStats stats = b->Stats();
  ASSERT_TRUE(stats.remote.has_value());
  EXPECT_EQ(stats.remote.value().auth_failures, uint64_t{1});
}

TEST_F(EngineFsTierTest, TheSweepsShowInTheRemoteTiersRow) {
  EngineOptions o = NodeOptions(dir_, 64);
  const uint64_t block_file_bytes = remote_test::SmallLayout().BlockBytes() + 256;
  o.remote->stores.Get<FsStoreOptions>(kFsStoreName).bytes_max =
      6 * block_file_bytes;  // About 6 of the 12 blocks stored.
  o.remote->stores.Get<FsStoreOptions>(kFsStoreName).sweep_interval_ms = 1;
  std::unique_ptr<Engine> e = remote_test::OpenEngine(o);
  ASSERT_NE(e, nullptr);
  ASSERT_TRUE(StoreChunks(*e, Ns(*e, "t"), TestTokens(8, 4 * kBlockTokens), 4).ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  TierStats remote;
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    remote = *remote_test::FindTier(e->Stats(), TierKind::kRemote);
  } while (remote.evictions == 0 && std::chrono::steady_clock::now() < deadline);
  EXPECT_GT(remote.evictions, 0u);
  EXPECT_EQ(remote.capacity_bytes, 6 * block_file_bytes);
  EXPECT_GT(remote.used_bytes, 0u);
}

TEST_F(EngineFsTierTest, OptionsByNameBuildTheTierAndRedisBesideItIsRefused) {
  EngineOptions o = remote_test::LocalNodeOptions(64, "");
  auto set = [&](std::string_view name, OptionValue v) {
    const OptionSpec* spec = FindEngineOption(name);
    ASSERT_NE(spec, nullptr) << name;
    ASSERT_TRUE(SetEngineOption(&o, *spec, v).ok()) << name;
  };
  set("fs_dir", std::string(dir_));
  set("fs_bytes_max", uint64_t{1} << 20);
  set("fs_max_age_s", uint64_t{3600});
  set("remote_insecure_plaintext", true);
  set("remote_write_policy", std::string("back"));
  ASSERT_TRUE(o.remote.has_value() && FindFsOptions(o.remote->stores) != nullptr);
  const FsStoreOptions fs = o.remote->stores.Get<FsStoreOptions>(kFsStoreName);
  EXPECT_EQ(fs.dir, dir_);
  EXPECT_EQ(fs.bytes_max, uint64_t{1} << 20);
  EXPECT_EQ(fs.max_age_s, uint64_t{3600});
  EXPECT_TRUE(fs.insecure_plaintext);
  EXPECT_EQ(o.remote.value().write_policy, WritePolicy::kWriteBack);
  std::unique_ptr<Engine> e = remote_test::OpenEngine(o);
  ASSERT_NE(e, nullptr);
  e.reset();

  set("remote_endpoints", std::vector<std::string>{"127.0.0.1:1"});
  Result<std::unique_ptr<Engine>> both = Engine::Open(o);
  ASSERT_FALSE(both.ok());
  EXPECT_TRUE(both.status().IsInvalidArgument()) << both.status().ToString();
  EXPECT_NE(both.status().message().find("fs_dir"), std::string::npos) << both.status().ToString();

  // Without keys or the plaintext choice the tier is refused, naming what is missing.
  EngineOptions bare = remote_test::LocalNodeOptions(64, "");
  bare.remote =
      RemoteTierOptions{.stores = TierOptionsSet::Of(kFsStoreName, FsStoreOptions{.dir = dir_})};
  Result<std::unique_ptr<Engine>> unkeyed = Engine::Open(bare);
  ASSERT_FALSE(unkeyed.ok());
  EXPECT_NE(unkeyed.status().message().find("remote_key_file"), std::string::npos)
      << unkeyed.status().ToString();
}

}  // namespace
}  // namespace kvtier
