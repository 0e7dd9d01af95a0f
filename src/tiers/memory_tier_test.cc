// Goal: the host (and CXL) memory tier hands out every slot exactly once, keeps each slot's bytes
// apart, reports huge pages, locking and NUMA binding as they really are, fails clearly on a NUMA
// node that does not exist, and ListNumaNodes reads both a fake CXL topology and the real one.
//
// Method: small tiers (a few MiB) opened with each option; the outcome of THP, mlock and mbind is
// checked against the kernel's own view (the THP mode file, VmLck in /proc/self/status,
// get_mempolicy on a slot's address). mlock failures are injected through SlotPoolOptions so the
// tests do not depend on the privileges of whoever runs them. ListNumaNodes reads a fake sysfs
// tree in a temporary directory with node0 (CPUs 0-1) and node1 (memory, no CPUs: a CXL node).
#include "tiers/memory_tier.h"

#include <gtest/gtest.h>
#include <numa.h>
#include <numaif.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "testing/test_util.h"
#include "tiers/slot_pool.h"

namespace kvtier {
namespace {

constexpr uint32_t kSlotBytes = 64 * 1024;

// The sanitizers intercept mlock and make it a successful no-op, so VmLck stays 0 under them.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kMlockIsReal = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kMlockIsReal = false;
#else
constexpr bool kMlockIsReal = true;
#endif
#else
constexpr bool kMlockIsReal = true;
#endif

HostTierOptions SmallOptions() {
  return {.name = "host", .capacity_bytes = 16 * kSlotBytes, .slot_bytes = kSlotBytes};
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// VmLck from /proc/self/status, in bytes.
uint64_t LockedBytes() {
  const std::string status = ReadText("/proc/self/status");
  const size_t at = status.find("VmLck:");
  if (at == std::string::npos) return 0;
  return std::stoull(status.substr(at + 6)) * 1024;
}

TEST(HostTierTest, AllocatesEverySlotOnceThenBusyThenReuses) {
  auto tier = HostTier::Open(SmallOptions());
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  HostTier& t = **tier;
  EXPECT_EQ(t.slots(), 16u);
  EXPECT_EQ(t.slot_bytes(), kSlotBytes);
  EXPECT_EQ(t.name(), "host");
  std::set<uint32_t> seen;
  for (uint32_t i = 0; i < 16; ++i) {
    auto slot = t.Allocate();
    ASSERT_TRUE(slot.ok());
    EXPECT_LT(*slot, 16u);
    EXPECT_TRUE(seen.insert(*slot).second);
  }
  auto full = t.Allocate();
  ASSERT_FALSE(full.ok());
  EXPECT_TRUE(full.status().IsBusy());
  EXPECT_EQ(t.Stats().slots_free, 0u);
  t.Free(5);
  EXPECT_EQ(t.Stats().slots_free, 1u);
  auto again = t.Allocate();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, 5u);
}

TEST(HostTierTest, SlotsKeepTheirOwnBytes) {
  auto tier = HostTier::Open(SmallOptions());
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  HostTier& t = **tier;
  for (uint32_t s = 0; s < t.slots(); ++s) {
    ASSERT_TRUE(t.Allocate().ok());
    std::byte* p = t.SlotData(s);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kSlotAlignmentBytes, 0u);
    std::memset(p, static_cast<int>(s + 1), kSlotBytes);
  }
  for (uint32_t s = 0; s < t.slots(); ++s) {
    const std::byte* p = t.SlotData(s);
    for (size_t i = 0; i < kSlotBytes; i += 511) {
      ASSERT_EQ(p[i], static_cast<std::byte>(s + 1)) << "slot " << s << " byte " << i;
    }
  }
}

TEST(HostTierTest, OddSlotSizeIsPaddedTo4KiB) {
  auto tier = HostTier::Open({.capacity_bytes = 10 * 1000, .slot_bytes = 1000});
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  const MemoryTierStats stats = (*tier)->Stats();
  EXPECT_EQ(stats.slots_total, 10u);
  EXPECT_EQ(stats.slot_bytes, 1000u);
  EXPECT_EQ(stats.slot_stride_bytes, 4096u);
  EXPECT_GE(stats.mapped_bytes, 10u * 4096u);
  EXPECT_EQ((*tier)->SlotData(1) - (*tier)->SlotData(0), 4096);
}

TEST(HostTierTest, ValidateRejectsBadOptions) {
  HostTierOptions o = SmallOptions();
  o.slot_bytes = 0;
  EXPECT_TRUE(o.Validate().IsInvalidArgument());
  o = SmallOptions();
  o.capacity_bytes = kSlotBytes - 1;
  EXPECT_TRUE(o.Validate().IsInvalidArgument());
  o = SmallOptions();
  o.name = "";
  EXPECT_TRUE(o.Validate().IsInvalidArgument());
  o = SmallOptions();
  o.numa_node = -2;
  EXPECT_TRUE(o.Validate().IsInvalidArgument());
  o = SmallOptions();
  o.capacity_bytes = uint64_t{kMemoryTierSlotsMax} * 2 * 4096;
  o.slot_bytes = 4096;
  EXPECT_TRUE(o.Validate().IsInvalidArgument());
  EXPECT_TRUE(HostTier::Open(o).status().IsInvalidArgument());
  EXPECT_TRUE(SmallOptions().Validate().ok());
}

TEST(HostTierTest, HugePagesReportedAsTheKernelAllows) {
  auto on = HostTier::Open(SmallOptions());
  ASSERT_TRUE(on.ok()) << on.status().ToString();
  const std::string mode = ReadText("/sys/kernel/mm/transparent_hugepage/enabled");
  const bool thp = !mode.empty() && mode.find("[never]") == std::string::npos;
  EXPECT_EQ((*on)->Stats().huge_pages, thp) << "THP mode: " << mode;
  EXPECT_EQ((*on)->Stats().mapped_bytes % kHugePageBytes, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*on)->SlotData(0)) % kHugePageBytes, 0u);

  HostTierOptions o = SmallOptions();
  o.huge_pages = HugePages::kOff;
  auto off = HostTier::Open(o);
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE((*off)->Stats().huge_pages);
}

TEST(HostTierTest, LockedReportedAsTheKernelSees) {
  const uint64_t before = LockedBytes();
  HostTierOptions o = SmallOptions();
  o.lock = MemoryLock::kIfPermitted;
  CapturingLogger logger;
  o.logger = &logger;
  auto tier = HostTier::Open(o);
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  const MemoryTierStats stats = (*tier)->Stats();
  if (stats.locked) {
    if (kMlockIsReal) {
      EXPECT_GE(LockedBytes(), before + stats.mapped_bytes);
    }
    EXPECT_EQ(logger.CountContaining("mlock"), 0u);
  } else {
    EXPECT_EQ(logger.CountContaining("RLIMIT_MEMLOCK"), 1u);
  }
  o.lock = MemoryLock::kOff;
  auto unlocked = HostTier::Open(o);
  ASSERT_TRUE(unlocked.ok());
  EXPECT_FALSE((*unlocked)->Stats().locked);
}

TEST(HostTierTest, LockRequiredSucceedsOrSaysWhy) {
  HostTierOptions o = SmallOptions();
  o.lock = MemoryLock::kRequired;
  auto tier = HostTier::Open(o);
  if (tier.ok()) {
    EXPECT_TRUE((*tier)->Stats().locked);  // Root, CAP_IPC_LOCK, or a high enough limit.
  } else {
    EXPECT_TRUE(tier.status().IsNotSupported() || tier.status().IsNoSpace());
    EXPECT_NE(tier.status().message().find("RLIMIT_MEMLOCK"), std::string::npos);
  }
}

int FailingMlock(const void*, size_t) {
  errno = EPERM;
  return -1;
}

TEST(SlotPoolTest, LockFailureIfPermittedLogsOnceAndContinues) {
  CapturingLogger logger;
  auto pool = tiers_internal::SlotPool::Open({.name = "host tier 'x'",
                                              .slots = 4,
                                              .slot_bytes = 4096,
                                              .lock = MemoryLock::kIfPermitted,
                                              .logger = &logger,
                                              .mlock_fn = &FailingMlock});
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  EXPECT_FALSE((*pool)->Stats().locked);
  ASSERT_EQ(logger.lines().size(), 1u);
  EXPECT_EQ(logger.CountContaining("RLIMIT_MEMLOCK"), 1u);
  EXPECT_EQ(logger.CountContaining("CAP_IPC_LOCK"), 1u);
  EXPECT_EQ(logger.CountContaining("continuing"), 1u);
}

TEST(SlotPoolTest, LockFailureRequiredFailsOpen) {
  auto pool = tiers_internal::SlotPool::Open({.name = "host tier 'x'",
                                              .slots = 4,
                                              .slot_bytes = 4096,
                                              .lock = MemoryLock::kRequired,
                                              .mlock_fn = &FailingMlock});
  ASSERT_FALSE(pool.ok());
  EXPECT_TRUE(pool.status().IsNotSupported());
  EXPECT_NE(pool.status().message().find("CAP_IPC_LOCK"), std::string::npos);
  EXPECT_NE(pool.status().message().find("host tier 'x'"), std::string::npos);
}

TEST(HostTierTest, BindsToNode0) {
  if (numa_available() < 0) GTEST_SKIP() << "no NUMA support in this kernel or container";
  HostTierOptions o = SmallOptions();
  o.numa_node = 0;
  auto tier = HostTier::Open(o);
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  EXPECT_EQ((*tier)->Stats().numa_node, 0);
  void* addr = (*tier)->SlotData(3);
  int mode = -1;
  unsigned long mask = 0;
  ASSERT_EQ(get_mempolicy(&mode, &mask, 8 * sizeof(mask), addr, MPOL_F_ADDR), 0)
      << std::strerror(errno);
  EXPECT_EQ(mode, MPOL_BIND);
  EXPECT_EQ(mask, 1ul);
  int node = -1;
  ASSERT_EQ(get_mempolicy(&node, nullptr, 0, addr, MPOL_F_NODE | MPOL_F_ADDR), 0);
  EXPECT_EQ(node, 0);  // The pre-faulted page is there.
}

TEST(HostTierTest, BindingToAMissingNodeFailsClearly) {
  HostTierOptions o = SmallOptions();
  o.name = "cxl";
  o.numa_node = 99;
  auto tier = HostTier::Open(o);
  ASSERT_FALSE(tier.ok());
  const std::string& msg = tier.status().message();
  EXPECT_NE(msg.find("node 99"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'cxl'"), std::string::npos) << msg;
  if (numa_available() >= 0) {
    EXPECT_TRUE(tier.status().IsInvalidArgument()) << msg;
    EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
  } else {
    EXPECT_TRUE(tier.status().IsNotSupported()) << msg;
  }
}

TEST(HostTierTest, FreeOutOfRangeAborts) {
  auto tier = HostTier::Open(SmallOptions());
  ASSERT_TRUE(tier.ok());
  EXPECT_DEATH((*tier)->Free(16), "check failed");
}

#ifndef NDEBUG
TEST(HostTierTest, DoubleFreeAbortsInDebug) {
  auto tier = HostTier::Open(SmallOptions());
  ASSERT_TRUE(tier.ok());
  auto slot = (*tier)->Allocate();
  ASSERT_TRUE(slot.ok());
  (*tier)->Free(*slot);
  EXPECT_DEATH((*tier)->Free(*slot), "check failed");
}
#endif

TEST(HostTierTest, ConcurrentAllocateAndFreeNeverShareASlot) {
  auto tier = HostTier::Open(SmallOptions());
  ASSERT_TRUE(tier.ok());
  HostTier& t = **tier;
  std::vector<std::thread> threads;
  std::atomic<int> errors{0};
  for (int id = 0; id < 4; ++id) {
    threads.emplace_back([&t, &errors, id] {
      for (int i = 0; i < 2000; ++i) {
        auto slot = t.Allocate();
        if (!slot.ok()) continue;  // Busy: the others hold every slot.
        auto* word = reinterpret_cast<volatile int*>(t.SlotData(*slot));
        *word = id;
        std::this_thread::yield();
        if (*word != id) errors.fetch_add(1);
        t.Free(*slot);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(t.Stats().slots_free, t.slots());
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

// <root>/devices/system/node/{node0 (CPUs 0-1, 8 GiB), node1 (no CPUs, 64 GiB: CXL)}.
std::string MakeFakeSysfs(const ScopedTempDir& dir) {
  const std::string nodes = dir.Join("devices/system/node");
  for (const char* sub : {"/node0", "/node1", "/power"}) {
    std::error_code ec;
    std::filesystem::create_directories(nodes + sub, ec);
    EXPECT_FALSE(ec) << ec.message();
  }
  WriteFile(nodes + "/possible", "0-1\n");
  WriteFile(nodes + "/has_cpu", "0\n");
  WriteFile(nodes + "/node0/cpulist", "0-1\n");
  WriteFile(nodes + "/node0/meminfo",
            "Node 0 MemTotal:        8388608 kB\nNode 0 MemFree:         1000 kB\n");
  WriteFile(nodes + "/node1/cpulist", "\n");
  WriteFile(nodes + "/node1/meminfo",
            "Node 1 MemTotal:       67108864 kB\nNode 1 MemFree:        67000000 kB\n");
  return dir.path();
}

TEST(NumaTest, FakeTreeShowsACpulessCxlNode) {
  auto dir = ScopedTempDir::Create();
  ASSERT_TRUE(dir.ok());
  auto nodes = ListNumaNodes(MakeFakeSysfs(*dir));
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  ASSERT_EQ(nodes->size(), 2u);
  EXPECT_EQ((*nodes)[0].node, 0);
  EXPECT_TRUE((*nodes)[0].has_cpus);
  EXPECT_EQ((*nodes)[0].memory_bytes, 8 * kGiB);
  EXPECT_EQ((*nodes)[1].node, 1);
  EXPECT_FALSE((*nodes)[1].has_cpus);
  EXPECT_EQ((*nodes)[1].memory_bytes, 64 * kGiB);
}

TEST(NumaTest, MissingTreeIsNotFound) {
  auto dir = ScopedTempDir::Create();
  ASSERT_TRUE(dir.ok());
  EXPECT_TRUE(ListNumaNodes(dir->path()).status().IsNotFound());
}

TEST(NumaTest, MeminfoWithoutMemTotalIsCorruption) {
  auto dir = ScopedTempDir::Create();
  ASSERT_TRUE(dir.ok());
  const std::string root = MakeFakeSysfs(*dir);
  WriteFile(root + "/devices/system/node/node1/meminfo", "Node 1 MemFree: 5 kB\n");
  auto nodes = ListNumaNodes(root);
  ASSERT_FALSE(nodes.ok());
  EXPECT_TRUE(nodes.status().IsCorruption());
  EXPECT_NE(nodes.status().message().find("node1/meminfo"), std::string::npos);
}

TEST(NumaTest, RealSysfsHasANodeWithCpus) {
  if (access("/sys/devices/system/node", F_OK) != 0) GTEST_SKIP() << "no NUMA info in /sys";
  auto nodes = ListNumaNodes();
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  ASSERT_GE(nodes->size(), 1u);
  EXPECT_EQ((*nodes)[0].node, 0);
  EXPECT_TRUE((*nodes)[0].has_cpus);
  EXPECT_GT((*nodes)[0].memory_bytes, 0u);
}

}  // namespace
}  // namespace kvtier
