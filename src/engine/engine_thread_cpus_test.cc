// Goal: show how the engine's threads are placed and prioritized.
// - EngineOptions::thread_cpus puts every thread the engine starts (workers, the SSD tier's I/O
//   and maintenance, the cleaner) on the CPUs it names, whatever CPUs the opening thread is bound
//   to; the opening thread keeps its own; "" keeps the opener's CPUs; a bad spec fails Open with
//   a message naming the option.
// - EngineOptions::background_nice lowers the priority of exactly the threads that only write
//   blocks down (the cleaner, the remote tier's writers) by the increment asked for, and leaves
//   every other thread (workers, completions, the remote readers) and the opener at the opener's
//   priority; 0 changes no thread; a value out of range fails Open naming the option.
// - EngineOptions::background_priority = kIdle also moves those same threads (and no other) to
//   SCHED_IDLE, their nice value kept.
// Method: for CPUs, Open runs on a thread bound to one CPU (as vLLM's CPU worker binds its
// process); the threads that appear in /proc/self/task during Open are the engine's, and each
// one's Cpus_allowed_list is read from its status file. For priorities, an engine with an SSD
// and a remote tier (a FakeRemoteStore) is opened and each of its threads is found by its name
// and its nice value and scheduling policy read from its stat file; the cleaner lowers itself as it starts, so the
// test waits for that (bounded) before reading.
#include <gtest/gtest.h>
#include <sched.h>

#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "core/kv_layout.h"
#include "core/small_file.h"
#include "core/thread_priority.h"
#include "engine/engine.h"
#include "env/thread_cpus.h"
#include "testing/fake_remote_store.h"
#include "testing/test_util.h"
#include "tiers/ssd/ssd_options.h"

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

// Stands for a pool whose threads have different nice values (never a real one: -20..19).
constexpr int kMixedNice = -100;

// Thread name -> nice value, for every thread of the process whose name starts with "kvtier-".
// Threads of one pool share a name prefix and, once started, a priority.

// One field of each kvtier thread's /proc stat line (proc(5): 19 is the nice value, 41 the
// scheduling policy), by thread name.
std::map<std::string, int> KvtierThreadStat(int wanted) {
  std::map<std::string, int> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    Result<std::string> comm = ReadSmallFile(e.path() / "comm");
    Result<std::string> stat = ReadSmallFile(e.path() / "stat");
    if (!comm.ok() || !stat.ok()) continue;  // The thread ended meanwhile.
    std::string name = comm->substr(0, comm->find('\n'));
    if (name.rfind("kvtier-", 0) != 0) continue;
    const std::string& text = *stat;
    const size_t paren = text.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream fields(text.substr(paren + 2));  // From field 3 (state) on.
    std::string field;
    int value = 0;
    for (int i = 3; i <= wanted && fields >> field; ++i) {
      if (i == wanted) value = std::stoi(field);
    }
    // Pools number their threads; one entry per pool, kMixedNice while its threads disagree.
    while (!name.empty() && std::isdigit(static_cast<unsigned char>(name.back()))) name.pop_back();
    const auto [it, inserted] = out.emplace(name, value);
    if (!inserted && it->second != value) it->second = kMixedNice;
  }
  return out;
}

std::map<std::string, int> KvtierThreadNice() { return KvtierThreadStat(19); }
std::map<std::string, int> KvtierThreadPolicy() { return KvtierThreadStat(41); }

class EngineThreadCpusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<ScopedTempDir> d = ScopedTempDir::Create();
    ASSERT_TRUE(d.ok());
    dir_ = std::make_unique<ScopedTempDir>(std::move(d).value());
  }

  EngineOptions Options(const std::string& thread_cpus, RemoteStore* remote = nullptr,
                        int background_nice = kBackgroundNiceDefault) {
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
    o.tiers.Emplace(kSsdTierName, s);
    o.thread_cpus = thread_cpus;
    if (remote != nullptr) o.remote = RemoteTierOptions{.store = remote};
    o.background_nice = background_nice;
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

class EngineBackgroundNiceTest : public EngineThreadCpusTest {
 protected:

  // Opens an engine and returns its threads' nice values once the cleaner has started (its name
  // is set by itself as it starts) and the cleaner and the remote writers have lowered themselves
  // when asked to: each thread lowers its own priority as it starts, after its name is set.
  std::map<std::string, int> OpenAndRead(int background_nice, std::unique_ptr<Engine>* engine) {
    Result<std::unique_ptr<Engine>> e = Engine::Open(Options("", &remote_, background_nice));
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    if (!e.ok()) return {};
    *engine = std::move(e).value();
    const int want = std::min(base_ + background_nice, kNiceMax);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    std::map<std::string, int> threads = KvtierThreadNice();
    const auto lowered = [&] {
      for (const char* name : {"kvtier-cleaner", "kvtier-rput"}) {
        if (threads.count(name) == 0 || threads[name] != want) return false;
      }
      return true;
    };
    while (!lowered() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      threads = KvtierThreadNice();
    }
    return threads;
  }

  const int base_ = ThisThreadNice();
  FakeRemoteStore remote_{{.layout_digest = LayoutDigest(KvLayout{
                               .layers = 2, .kv_heads = 2, .head_dim = 16,
                               .dtype = DType::kF16, .block_tokens = 16})}};
};

TEST_F(EngineBackgroundNiceTest, OnlyTheWritersAreLowered) {
  std::unique_ptr<Engine> engine;
  const std::map<std::string, int> threads = OpenAndRead(7, &engine);
  const int lowered = std::min(base_ + 7, kNiceMax);
  ASSERT_EQ(threads.count("kvtier-cleaner"), 1u);
  EXPECT_EQ(threads.at("kvtier-cleaner"), lowered);
  ASSERT_EQ(threads.count("kvtier-rput"), 1u);
  EXPECT_EQ(threads.at("kvtier-rput"), lowered);
  for (const char* kept : {"kvtier-remote", "kvtier-engine", "kvtier-compl"}) {
    ASSERT_EQ(threads.count(kept), 1u) << kept;
    EXPECT_EQ(threads.at(kept), base_) << kept;
  }
  EXPECT_EQ(ThisThreadNice(), base_);
}

// background_priority = idle: the same two writers also run under SCHED_IDLE, at their nice.
TEST_F(EngineBackgroundNiceTest, IdlePriorityMovesOnlyTheWritersToSchedIdle) {
  EngineOptions o = Options("", &remote_, 4);
  o.background_priority = BackgroundPriority::kIdle;
  Result<std::unique_ptr<Engine>> e = Engine::Open(o);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  std::map<std::string, int> policy = KvtierThreadPolicy();
  const auto moved = [&] {
    return policy.count("kvtier-cleaner") == 1 && policy["kvtier-cleaner"] == SCHED_IDLE &&
           policy.count("kvtier-rput") == 1 && policy["kvtier-rput"] == SCHED_IDLE;
  };
  while (!moved() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    policy = KvtierThreadPolicy();
  }
  EXPECT_TRUE(moved());
  for (const char* kept : {"kvtier-remote", "kvtier-engine", "kvtier-compl"}) {
    ASSERT_EQ(policy.count(kept), 1u) << kept;
    EXPECT_EQ(policy.at(kept), SCHED_OTHER) << kept;
  }
  const std::map<std::string, int> nice = KvtierThreadNice();
  EXPECT_EQ(nice.at("kvtier-cleaner"), std::min(base_ + 4, kNiceMax));
  EXPECT_EQ(nice.at("kvtier-rput"), std::min(base_ + 4, kNiceMax));
  EXPECT_FALSE(ThisThreadIdleScheduled());
}

TEST_F(EngineBackgroundNiceTest, ZeroLowersNoThread) {
  std::unique_ptr<Engine> engine;
  const std::map<std::string, int> threads = OpenAndRead(0, &engine);
  ASSERT_EQ(threads.count("kvtier-cleaner"), 1u);
  for (const auto& [name, nice] : threads) EXPECT_EQ(nice, base_) << name;
}

TEST_F(EngineBackgroundNiceTest, OutOfRangeFailsOpenNamingTheOption) {
  for (const int bad : {-1, 20}) {
    Result<std::unique_ptr<Engine>> e = Engine::Open(Options("", &remote_, bad));
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_TRUE(e.status().IsInvalidArgument()) << e.status().ToString();
    EXPECT_NE(e.status().message().find("background_nice"), std::string::npos)
        << e.status().ToString();
  }
}

}  // namespace
}  // namespace kvtier
