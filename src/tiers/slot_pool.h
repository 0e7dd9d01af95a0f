// SlotPool: the memory and free list shared by HostTier and the CPU DeviceTier. Internal to the
// tiers layer (the public interface is memory_tier.h).
//
// Open() maps one anonymous private region, 2 MiB-aligned so transparent huge pages can back it,
// then in this order: madvise(MADV_HUGEPAGE), mbind(MPOL_BIND) to a NUMA node, pre-fault every
// page, mlock. The order matters: the policy must be set before the first touch places a page,
// and locking last means mlock finds the pages already present. The free list is a preallocated
// stack of slot indices under a mutex: Allocate/Free are O(1) and never allocate.
//
// Thread safety: Allocate/Free/Stats may be called from any thread. Slot contents are not
// synchronized. Ownership: the pool owns the mapping and unmaps it in its destructor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/mutex.h"
#include "tiers/memory_tier.h"

namespace kvtier::tiers_internal {

struct SlotPoolOptions {
  std::string name;         // For messages: "host", "cxl", "device".
  uint32_t slots = 0;       // At least 1, at most kMemoryTierSlotsMax.
  uint32_t slot_bytes = 0;  // At least 1, at most kBlockBytesMax.
  int32_t numa_node = -1;   // -1: no binding.
  HugePages huge_pages = HugePages::kIfAvailable;
  MemoryLock lock = MemoryLock::kOff;
  bool prefault = true;
  Logger* logger = nullptr;  // Borrowed.
  // The mlock to call; tests substitute one that fails to exercise the fallback without
  // depending on the privileges of the user running them.
  int (*mlock_fn)(const void* addr, size_t len) = nullptr;  // nullptr: ::mlock.
};

// InvalidArgument when `node` does not exist, NotSupported when libnuma reports no NUMA support.
// `who` names the tier in the message.
Status CheckNumaNode(int32_t node, const std::string& who);

class SlotPool {
 public:
  static Result<std::unique_ptr<SlotPool>> Open(const SlotPoolOptions& options);
  ~SlotPool();
  SlotPool(const SlotPool&) = delete;
  SlotPool& operator=(const SlotPool&) = delete;

  Result<uint32_t> Allocate() KV_EXCLUDES(mu_);
  void Free(uint32_t slot) KV_EXCLUDES(mu_);
  std::byte* SlotData(uint32_t slot) const;
  MemoryTierStats Stats() const KV_EXCLUDES(mu_);

  uint32_t slots() const { return slots_; }
  uint32_t slot_bytes() const { return slot_bytes_; }
  size_t slot_stride_bytes() const { return stride_bytes_; }
  std::byte* base() const { return base_; }
  size_t mapped_bytes() const { return mapped_bytes_; }

 private:
  SlotPool(uint32_t slots, uint32_t slot_bytes, size_t stride_bytes);
  Status Map(const SlotPoolOptions& options);
  Status Lock(const SlotPoolOptions& options);

  const uint32_t slots_;
  const uint32_t slot_bytes_;
  const size_t stride_bytes_;
  std::byte* base_ = nullptr;  // 2 MiB-aligned (4 KiB-aligned without huge pages).
  size_t mapped_bytes_ = 0;
  bool locked_ = false;      // Set during Open only.
  bool huge_pages_ = false;  // Set during Open only.
  int32_t numa_node_ = -1;   // Set during Open only.

  mutable Mutex mu_;
  std::vector<uint32_t> free_ KV_GUARDED_BY(mu_);      // Stack; capacity slots_, never grows.
  std::vector<uint8_t> allocated_ KV_GUARDED_BY(mu_);  // Per slot: 1 while allocated.
};

}  // namespace kvtier::tiers_internal
