// Goal: show that SIGKILL at any moment never costs an acknowledged block in fdatasync-per-batch
// mode and never yields a damaged one. Method: fork a child that writes batches to an SsdTier in
// kPerBatch mode and reports each completed batch's block ids through a pipe; the parent kills it
// after a random delay, reopens the directory, and checks that every reported block is present and
// intact and every other block the child may have written is intact or absent. 20 iterations on
// one directory (the log grows across them); the seed is printed.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <set>
#include <thread>

#include "testing/test_util.h"
#include "tiers/ssd/ssd_test_util.h"
#include "tiers/ssd/ssd_tier.h"

namespace kvtier {
namespace {

constexpr size_t kBlock = 28 * 1024;
constexpr uint64_t kBatch = 8;
constexpr uint64_t kIdsPerIteration = 1'000'000;

SsdTierOptions Options(const std::string& dir) {
  SsdTierOptions o;
  o.dirs = {dir + "/a", dir + "/b"};
  o.segment_bytes = 1 * kMiB;
  o.capacity_bytes = 1 * kGiB;  // No reclaim: every acknowledged block must stay.
  o.sync = SsdSyncMode::kPerBatch;
  return o;
}

[[noreturn]] void ChildWrite(const std::string& dir, uint64_t first_id, int fd) {
  std::unique_ptr<Env> env = NewPosixEnv();
  Result<std::unique_ptr<SsdTier>> tier = SsdTier::Open(Options(dir), env.get());
  if (!tier.ok()) _exit(2);
  for (uint64_t id = first_id;; id += kBatch) {
    if (!ssd_test::Put(**tier, id, kBatch, kBlock).ok()) _exit(3);
    if (::write(fd, &id, sizeof(id)) != sizeof(id)) _exit(4);  // Acknowledged batch.
  }
}

TEST(SsdCrashTest, KillDuringPerBatchWritesLosesNothingAcknowledged) {
  const uint64_t seed = std::random_device{}();
  std::printf("SsdCrashTest seed=%llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  Result<ScopedTempDir> dir = ScopedTempDir::Create();
  ASSERT_TRUE(dir.ok());
  std::set<uint64_t> acked;  // First ids of acknowledged batches, all iterations.
  std::vector<std::pair<uint64_t, uint64_t>> attempted;  // [first, end) id range per iteration.
  for (int iter = 0; iter < 20; ++iter) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const uint64_t first = static_cast<uint64_t>(iter) * kIdsPerIteration;
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(fds[0]);
      ChildWrite(dir->path(), first, fds[1]);
    }
    ::close(fds[1]);
    std::this_thread::sleep_for(std::chrono::milliseconds(30 + rng() % 250));
    ::kill(pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "child exited with " << WEXITSTATUS(status);
    uint64_t id = 0;
    uint64_t end = first;
    while (::read(fds[0], &id, sizeof(id)) == sizeof(id)) {
      acked.insert(id);
      end = id + kBatch;
    }
    ::close(fds[0]);
    attempted.emplace_back(first, end + 4 * kBatch);  // Batches in flight at the kill too.

    std::unique_ptr<Env> env = NewPosixEnv();
    Result<std::unique_ptr<SsdTier>> tier = SsdTier::Open(Options(dir->path()), env.get());
    ASSERT_TRUE(tier.ok()) << tier.status().ToString();
    // This iteration's blocks every time; all earlier ones again at the end.
    const bool last = iter == 19;
    for (auto it = last ? acked.begin() : acked.lower_bound(first); it != acked.end(); ++it) {
      for (uint64_t i = *it; i < *it + kBatch; ++i) {
        Status s = ssd_test::Get(**tier, i, kBlock);
        ASSERT_TRUE(s.ok()) << "iteration " << iter << " lost acknowledged block " << i << ": "
                            << s.ToString() << " (seed " << seed << ")";
      }
    }
    for (size_t a = last ? 0 : attempted.size() - 1; a < attempted.size(); ++a) {
      const auto [lo, hi] = attempted[a];
      for (uint64_t i = lo; i < hi; ++i) {
        Status s = ssd_test::Get(**tier, i, kBlock);
        ASSERT_TRUE(s.ok() || s.IsNotFound()) << i << ": " << s.ToString() << " seed " << seed;
      }
    }
    // The parent's clean close writes a checkpoint: later iterations test checkpoint + scan.
    ASSERT_TRUE((*tier)->Close().ok());
  }
  EXPECT_GT(acked.size(), 20u);
}

}  // namespace
}  // namespace kvtier
