// Memory tiers: fixed-size slot pools that hold one block per slot.
//
// - HostTier: DRAM slabs allocated once at Open (transparent huge pages where allowed, pre-faulted
//   so first touch is not paid on the data path), optionally bound to a NUMA node with libnuma and
//   locked in memory (mlock) when permitted. A CXL memory expander appears to Linux as a NUMA node
//   without CPUs, so a second HostTier bound to that node is the CXL tier.
// - DeviceTier: the accelerator's memory. The CPU build keeps it in host memory with a byte budget
//   and moves data with copy threads signalled by events, so budgets, stalls and the pipeline are
//   real without a GPU; the CUDA build implements the same interface on cudaMalloc'd pools and
//   streams.
//
// Slots are identified by index. Allocation and freeing are O(1) (free list) and never touch the
// heap after Open. The tiers know nothing about keys: the engine maps keys to slots.
//
// Slot geometry: slot_bytes may be any size up to kBlockBytesMax; every slot starts on a 4 KiB
// boundary and owns slot_bytes rounded up to 4 KiB (Stats().slot_stride_bytes), so a slot can be
// the buffer of an O_DIRECT read or write of AlignUp(slot_bytes, 4 KiB) bytes. The capacity
// counts slot_bytes (capacity_bytes / slot_bytes slots); the padding is extra memory, none when
// slot_bytes is a multiple of 4 KiB. docs/memory_tiers.md explains the choices and how to set up
// a CXL tier.
//
// Thread safety: every method may be called from any thread. A slot's bytes belong to whoever
// allocated it until Free(); the tier does not synchronize access to slot contents.
// Ownership: the tier owns its memory; SlotData() pointers are valid until the tier is destroyed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/limits.h"
#include "core/logger.h"
#include "kvtier/result.h"

namespace kvtier {

// Bounds of the memory tiers (kept beside the interface they bound).
// Slots per tier: 64M slots of 16 KiB is 1 TiB; the free list then takes 256 MiB.
inline constexpr uint32_t kMemoryTierSlotsMax = 1u << 26;
// Slot addresses are aligned to this (O_DIRECT-able) and slots are padded to a multiple of it.
inline constexpr size_t kSlotAlignmentBytes = kDirectIoAlignment;
// Slabs are mapped at this alignment so transparent huge pages can back them.
inline constexpr size_t kHugePageBytes = 2 * kMiB;
// One CopyRegion moves at most this many bytes (larger copies are split by the caller).
inline constexpr uint64_t kCopyRegionBytesMax = 1 * kGiB;
inline constexpr uint32_t kCopyThreadsMax = 16;      // Per stream.
inline constexpr uint32_t kCopyQueueMax = 1u << 16;  // Regions queued per stream.
static_assert(kHugePageBytes % kSlotAlignmentBytes == 0);
static_assert(kBlockBytesMax <= kCopyRegionBytesMax);

enum class HugePages : uint8_t {
  kOff = 0,
  kIfAvailable = 1,  // madvise(MADV_HUGEPAGE); silently 4 KiB pages where THP is disabled.
};

enum class MemoryLock : uint8_t {
  kOff = 0,
  kIfPermitted = 1,  // mlock; on EPERM/ENOMEM one log line says so and the tier stays unlocked.
  kRequired = 2,     // mlock or Open fails with a message naming RLIMIT_MEMLOCK / CAP_IPC_LOCK.
};

struct HostTierOptions {
  std::string name = "host";    // For logs and stats: "host", "cxl".
  uint64_t capacity_bytes = 0;  // Rounded down to whole slots; at least one slot.
  uint32_t slot_bytes = 0;      // The block size of the layout (or the encoded bound); any size.
  int32_t numa_node = -1;       // -1: no binding. Else the node to bind the slabs to (mbind).
  HugePages huge_pages = HugePages::kIfAvailable;
  MemoryLock lock = MemoryLock::kIfPermitted;
  bool prefault = true;      // Touch every page at Open.
  Logger* logger = nullptr;  // Borrowed.

  // InvalidArgument naming the first bad field. Checks a complete set (slot_bytes included, so
  // the engine sets it first); Open() calls it. Whether numa_node exists is checked by Open().
  Status Validate() const;
};

struct MemoryTierStats {
  uint32_t slots_total = 0;
  uint32_t slots_free = 0;
  uint64_t slot_bytes = 0;
  uint64_t slot_stride_bytes = 0;  // slot_bytes rounded up to kSlotAlignmentBytes.
  uint64_t mapped_bytes = 0;       // Whole mapping, padding included.
  bool locked = false;             // mlock succeeded.
  bool huge_pages = false;         // MADV_HUGEPAGE accepted and THP not disabled system-wide.
  int32_t numa_node = -1;          // Bound node, -1 when unbound.
};

class HostTier {
 public:
  // Maps, binds, pre-faults and locks the slabs (see HostTierOptions). Errors: InvalidArgument
  // for bad options or a NUMA node that does not exist, NotSupported when a node is asked for
  // and libnuma reports no NUMA support, NoSpace when the mapping fails, and with
  // MemoryLock::kRequired NotSupported (EPERM) or NoSpace (ENOMEM) when mlock fails.
  static Result<std::unique_ptr<HostTier>> Open(const HostTierOptions& options);
  virtual ~HostTier() = default;

  // Busy when every slot is allocated. O(1), no allocation, no syscall.
  virtual Result<uint32_t> Allocate() = 0;
  // Returns the slot to the free list. An index out of range aborts (KV_CHECK); freeing a slot
  // that is not allocated aborts in debug builds (KV_DCHECK).
  virtual void Free(uint32_t slot) = 0;
  // The slot's first byte, 4 KiB-aligned; Stats().slot_stride_bytes bytes from it are the slot's.
  virtual std::byte* SlotData(uint32_t slot) = 0;
  virtual uint32_t slot_bytes() const = 0;
  virtual uint32_t slots() const = 0;
  virtual MemoryTierStats Stats() const = 0;
  virtual const std::string& name() const = 0;
};

// Lists the NUMA nodes Linux reports and whether each has CPUs (a CPU-less node with memory is
// how a CXL expander shows up). `sysfs_root` lets tests point at a fake tree.
struct NumaNodeInfo {
  int32_t node = 0;
  bool has_cpus = false;
  uint64_t memory_bytes = 0;       // MemTotal.
  uint64_t memory_free_bytes = 0;  // MemFree, when the node reports it.
};
Result<std::vector<NumaNodeInfo>> ListNumaNodes(const std::string& sysfs_root = "/sys");

// ---------------------------------------------------------------------------------------------
// Device tier

// A one-shot completion signal for an asynchronous copy. Wait() blocks until the copy finished
// and returns its status; Ready() polls. Copyable handle (shared state): shared_ptr because the
// copy thread and any number of waiters hold it, and whichever lets go last frees it. The CPU
// device tier recycles states from a pool once no handle refers to them, so Copy() does not
// allocate in the steady state.
class CopyEvent {
 public:
  CopyEvent() = default;  // An already-completed OK event.
  Status Wait() const;
  bool Ready() const;

  struct State;
  explicit CopyEvent(std::shared_ptr<State> state) : state_(std::move(state)) {}

 private:
  std::shared_ptr<State> state_;  // Shared by the copy thread and waiters; nullptr = done.
};

// A CopyEvent completed by the caller's own asynchronous work instead of a tier's copy thread
// (a decode on a worker that fills a device slot), so that waiters treat both alike. Complete()
// is called once per pending unit (checked in debug builds); after the last the event is done,
// with the first error reported. Copyable handle to shared state, like CopyEvent.
class CopyEventSource {
 public:
  explicit CopyEventSource(uint32_t pending = 1);
  CopyEvent event() const { return CopyEvent(state_); }
  void Complete(const Status& status) const;

 private:
  std::shared_ptr<CopyEvent::State> state_;  // Shared with the events handed out.
};

struct DeviceTierOptions {
  uint64_t capacity_bytes = 0;  // Device memory budget for slots; 0 disables the tier.
  uint32_t slot_bytes = 0;
  uint32_t copy_threads = 1;       // CPU build: threads per stream (H2D, D2H, D2D) doing copies.
  uint32_t copy_queue_max = 1024;  // Queued copy regions per stream before Copy() blocks.
  Logger* logger = nullptr;

  // OK for a disabled tier (capacity_bytes 0) whatever the other fields; otherwise
  // InvalidArgument naming the first bad field. OpenCpu() calls it and refuses capacity 0.
  Status Validate() const;
};

enum class CopyKind : uint8_t {
  kHostToDevice = 0,  // The CUDA build runs these on its H2D stream.
  kDeviceToHost = 1,  // ... on its D2H stream.
  kDeviceToDevice = 2,
};

// One contiguous copy. "Device" pointers are slot addresses of this tier or buffers the caller
// owns in device memory (an inference engine's paged KV); in the CPU build both are host memory.
struct CopyRegion {
  std::byte* dst = nullptr;
  const std::byte* src = nullptr;
  size_t bytes = 0;
};

class DeviceTier {
 public:
  // The CPU build's implementation (host memory + copy threads).
  static Result<std::unique_ptr<DeviceTier>> OpenCpu(const DeviceTierOptions& options);
  virtual ~DeviceTier() = default;

  virtual Result<uint32_t> Allocate() = 0;  // Busy when full.
  virtual void Free(uint32_t slot) = 0;
  // Device address of a slot (host-addressable in the CPU build only).
  virtual std::byte* SlotData(uint32_t slot) = 0;

  // Queues the copies of `regions` (all of one kind) and returns one event that completes when
  // all of them have. Sources and destinations must stay valid, and destinations untouched,
  // until then. Blocks only while copy_queue_max copies are already queued (back-pressure).
  // A destination must never be read before its event completed: copies of different kinds run
  // on different streams (threads) and are not ordered with each other; within a stream copies
  // start in submission order (and, with copy_threads 1, finish in it), but only events order.
  // A region with a null pointer, more than kCopyRegionBytesMax bytes, or overlapping source
  // and destination fails the whole call before anything is queued: the event completes at
  // once with InvalidArgument. Empty regions are skipped; an empty span completes at once.
  virtual CopyEvent Copy(CopyKind kind, std::span<const CopyRegion> regions) = 0;

  virtual uint32_t slot_bytes() const = 0;
  virtual uint32_t slots() const = 0;
  virtual MemoryTierStats Stats() const = 0;
};

}  // namespace kvtier
