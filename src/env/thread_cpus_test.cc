// Goal: show that thread_cpus parses CPU lists strictly, finds the CPUs the process may use from
// its cgroup's cpuset and the online CPUs, refuses CPUs outside them naming both, and that
// ScopedThreadCpus moves the calling thread (and the threads it starts meanwhile) to the chosen
// CPUs and back.
// Method: the cgroup and /sys files are written under a temporary root (sys_root), so every case
// of the cpuset lookup is exact on any machine; the affinity cases run on a thread of their own
// that starts bound to one CPU, and read each thread's CPUs back with sched_getaffinity.
#include "env/thread_cpus.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "testing/test_util.h"

namespace kvtier {
namespace {

void WriteFile(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << text;
}

TEST(ThreadCpusTest, CpuListsParseStrictly) {
  EXPECT_EQ(*ParseCpuList("0-3,8"), (std::vector<int>{0, 1, 2, 3, 8}));
  EXPECT_EQ(*ParseCpuList("3,1,1\n"), (std::vector<int>{1, 3}));
  EXPECT_EQ(FormatCpuList({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  for (const char* bad : {"", "a", "3-1", "1,,2", "-1", "1-", ",1", "1 2", "99999"}) {
    Result<std::vector<int>> r = ParseCpuList(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_TRUE(r.status().IsInvalidArgument());
    EXPECT_NE(r.status().message().find("not a CPU list"), std::string::npos) << bad;
  }
}

class ThreadCpusRootTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<ScopedTempDir> d = ScopedTempDir::Create();
    ASSERT_TRUE(d.ok());
    dir_ = std::make_unique<ScopedTempDir>(std::move(d).value());
    root_ = dir_->path();
  }
  std::unique_ptr<ScopedTempDir> dir_;
  std::string root_;
};

TEST_F(ThreadCpusRootTest, TheNearestCgroupCpusetLimitsTheOnlineCpus) {
  WriteFile(root_ + "/sys/devices/system/cpu/online", "0-7\n");
  WriteFile(root_ + "/proc/self/cgroup", "0::/a/b\n");
  // b has no cpuset file of its own: a's applies.
  WriteFile(root_ + "/sys/fs/cgroup/a/cpuset.cpus.effective", "2-5,9\n");
  EXPECT_EQ(*AllowedCpus(root_), (std::vector<int>{2, 3, 4, 5}));  // 9 is not online.
  WriteFile(root_ + "/sys/fs/cgroup/a/b/cpuset.cpus.effective", "6\n");
  EXPECT_EQ(*AllowedCpus(root_), (std::vector<int>{6}));
  // An empty cpuset (cgroup v2 leaves it empty where the controller is off): the parent's.
  WriteFile(root_ + "/sys/fs/cgroup/a/b/cpuset.cpus.effective", "\n");
  EXPECT_EQ(*AllowedCpus(root_), (std::vector<int>{2, 3, 4, 5}));
}

TEST_F(ThreadCpusRootTest, WithoutACpusetEveryOnlineCpu) {
  WriteFile(root_ + "/sys/devices/system/cpu/online", "0-3\n");
  EXPECT_EQ(*AllowedCpus(root_), (std::vector<int>{0, 1, 2, 3}));  // No /proc/self/cgroup.
  WriteFile(root_ + "/proc/self/cgroup", "0::/\n");
  EXPECT_EQ(*AllowedCpus(root_), (std::vector<int>{0, 1, 2, 3}));
  WriteFile(root_ + "/sys/fs/cgroup/cpuset.cpus.effective", "1-2\n");
  EXPECT_EQ(*AllowedCpus(root_), (std::vector<int>{1, 2}));
}

TEST_F(ThreadCpusRootTest, SpecsResolveOrNameTheProblem) {
  WriteFile(root_ + "/sys/devices/system/cpu/online", "0-7\n");
  WriteFile(root_ + "/proc/self/cgroup", "0::/svc\n");
  WriteFile(root_ + "/sys/fs/cgroup/svc/cpuset.cpus.effective", "2-5\n");
  EXPECT_TRUE(ResolveThreadCpus("", root_)->empty());  // The caller's CPUs: no change.
  EXPECT_EQ(*ResolveThreadCpus("all", root_), (std::vector<int>{2, 3, 4, 5}));
  EXPECT_EQ(*ResolveThreadCpus("4,2", root_), (std::vector<int>{2, 4}));
  Result<std::vector<int>> outside = ResolveThreadCpus("0-2", root_);
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(outside.status().message().find("CPUs 0-1 are not ones this process may use (2-5)"),
            std::string::npos)
      << outside.status().ToString();
  Result<std::vector<int>> bad = ResolveThreadCpus("half", root_);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("thread_cpus: \"half\" is not a CPU list"),
            std::string::npos)
      << bad.status().ToString();
  // No /sys at all: an I/O error naming the file, not a guess.
  EXPECT_FALSE(ResolveThreadCpus("all", root_ + "/none").ok());
}

TEST(ThreadCpusTest, AScopeMovesTheThreadAndWhatItStartsThenMovesItBack) {
  const std::vector<int> allowed = *AllowedCpus();
  ASSERT_FALSE(allowed.empty());
  std::thread([&] {
    // Bound to one CPU, as an inference engine binds its compute thread.
    Result<ScopedThreadCpus> one = ScopedThreadCpus::Enter({allowed.back()});
    ASSERT_TRUE(one.ok()) << one.status().ToString();
    EXPECT_EQ(*CurrentThreadCpus(), (std::vector<int>{allowed.back()}));
    {
      Result<ScopedThreadCpus> all = ScopedThreadCpus::Enter(allowed);
      ASSERT_TRUE(all.ok()) << all.status().ToString();
      EXPECT_EQ(*CurrentThreadCpus(), allowed);
      std::vector<int> child;
      std::thread([&] { child = *CurrentThreadCpus(); }).join();
      EXPECT_EQ(child, allowed);  // Started inside the scope: keeps its CPUs.
    }
    EXPECT_EQ(*CurrentThreadCpus(), (std::vector<int>{allowed.back()}));
    // An empty set changes nothing.
    ASSERT_TRUE(ScopedThreadCpus::Enter({}).ok());
    EXPECT_EQ(*CurrentThreadCpus(), (std::vector<int>{allowed.back()}));
  }).join();
}

}  // namespace
}  // namespace kvtier
