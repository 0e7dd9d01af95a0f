// Goal: show that EngineOptions::thread_cpus puts every thread the engine starts (workers, the
// SSD tier's I/O and maintenance, the cleaner) on the CPUs it names, whatever CPUs the opening
// thread is bound to, that the opening thread keeps its own, that "" keeps the opener's CPUs, and
// that a bad spec fails Open with a message naming the option.
// Method: Open runs on a thread bound to one CPU (as vLLM's CPU worker binds its process); the
// threads that appear in /proc/self/task during Open are the engine's, and each one's
// Cpus_allowed_list is read from its status file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "engine/engine.h"
#include "env/thread_cpus.h"
#include "testing/test_util.h"

namespace kvtier {
namespace {

std::set<std::string> Tasks() {
  std::set<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    out.insert(e.path().filename().string());
  }
  return out;
}

std::string CpusOf(const std::string& tid) {
  std::ifstream in("/proc/self/task/" + tid + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Cpus_allowed_list:", 0) == 0) {
      const size_t v = line.find_first_not_of(" \t", 18);
      return v == std::string::npos ? "" : line.substr(v);
    }
  }
  return "?";
}

class EngineThreadCpusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<ScopedTempDir> d = ScopedTempDir::Create();
    ASSERT_TRUE(d.ok());
    dir_ = std::make_unique<ScopedTempDir>(std::move(d).value());
  }

  EngineOptions Options(const std::string& thread_cpus) {
    EngineOptions o;
    o.layout = {.layers = 2, .kv_heads = 2, .head_dim = 16, .dtype = DType::kF16,
                .block_tokens = 16};
    o.model.name = "test-model";
    o.host.capacity_bytes = 1 * kMiB;
    o.host.huge_pages = HugePages::kOff;
    o.host.lock = MemoryLock::kOff;
    o.host.prefault = false;
    SsdTierOptions s;
    s.dirs = {dir_->Join("ssd-" + std::to_string(opened_++))};
    s.segment_bytes = 1 * kMiB;
    s.capacity_bytes = 8 * kMiB;
    o.ssd = s;
    o.thread_cpus = thread_cpus;
    return o;
  }

  // What OpenBoundTo saw: Open's status, the CPUs of the threads Open started (one entry per
  // distinct list) and the opening thread's CPUs after Open.
  struct Opened {
    Status status;
    std::set<std::string> cpus;
    std::string opener;
  };

  // Opens (and closes) an engine on a thread bound to `bound`.
  Opened OpenBoundTo(int bound, const std::string& thread_cpus) {
    Opened out;
    std::thread([&] {
      Result<ScopedThreadCpus> one = ScopedThreadCpus::Enter({bound});
      ASSERT_TRUE(one.ok()) << one.status().ToString();
      const std::set<std::string> before = Tasks();
      Result<std::unique_ptr<Engine>> e = Engine::Open(Options(thread_cpus));
      out.status = e.status();
      out.opener = FormatCpuList(*CurrentThreadCpus());
      if (!e.ok()) return;
      size_t started = 0;
      for (const std::string& tid : Tasks()) {
        if (before.count(tid) != 0) continue;
        ++started;
        out.cpus.insert(CpusOf(tid));
      }
      EXPECT_GE(started, 3u);  // Workers, completions, the SSD tier's threads, the cleaner.
    }).join();
    return out;
  }

  const std::vector<int> allowed_ = *AllowedCpus();
  std::unique_ptr<ScopedTempDir> dir_;
  int opened_ = 0;
};

TEST_F(EngineThreadCpusTest, AllPutsTheEnginesThreadsOnEveryAllowedCpu) {
  const Opened o = OpenBoundTo(allowed_.back(), "all");
  ASSERT_TRUE(o.status.ok()) << o.status.ToString();
  EXPECT_EQ(o.cpus, std::set<std::string>{FormatCpuList(allowed_)});
  EXPECT_EQ(o.opener, std::to_string(allowed_.back()));  // The opener keeps its own CPU.
}

TEST_F(EngineThreadCpusTest, EmptyKeepsTheOpenersCpus) {
  const Opened o = OpenBoundTo(allowed_.front(), "");
  ASSERT_TRUE(o.status.ok()) << o.status.ToString();
  EXPECT_EQ(o.cpus, std::set<std::string>{std::to_string(allowed_.front())});
}

TEST_F(EngineThreadCpusTest, AListNamesTheCpusAndABadOneFailsOpen) {
  const std::string first = std::to_string(allowed_.front());
  const Opened listed = OpenBoundTo(allowed_.back(), first);
  ASSERT_TRUE(listed.status.ok()) << listed.status.ToString();
  EXPECT_EQ(listed.cpus, std::set<std::string>{first});

  for (const char* bad : {"half", "4096"}) {
    const Opened o = OpenBoundTo(allowed_.back(), bad);
    EXPECT_TRUE(o.status.IsInvalidArgument()) << bad << ": " << o.status.ToString();
    EXPECT_NE(o.status.message().find("thread_cpus"), std::string::npos) << o.status.ToString();
    EXPECT_EQ(o.opener, std::to_string(allowed_.back()));
  }
}

}  // namespace
}  // namespace kvtier
