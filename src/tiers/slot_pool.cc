// SlotPool: mapping, NUMA binding, pre-faulting and locking of slot memory (see slot_pool.h).
#include "tiers/slot_pool.h"

#include <fcntl.h>
#include <numa.h>
#include <numaif.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/aligned_buffer.h"
#include "core/assert.h"
#include "core/unique_fd.h"

namespace kvtier::tiers_internal {
namespace {

constexpr size_t kPageBytes = 4096;
constexpr const char* kThpModePath = "/sys/kernel/mm/transparent_hugepage/enabled";

// False when the system-wide THP mode is "[never]": madvise then succeeds but changes nothing.
// An unreadable file (no THP in the kernel) also counts as no huge pages.
bool ThpEnabled() {
  UniqueFd fd(::open(kThpModePath, O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return false;
  char buf[128] = {};
  const ssize_t n = ::read(fd.get(), buf, sizeof(buf) - 1);
  if (n <= 0) return false;
  return std::strstr(buf, "[never]") == nullptr;
}

std::string ErrnoText(int err) {
  char buf[128];
  return strerror_r(err, buf, sizeof(buf));  // GNU form: may return a static string.
}

int DefaultMlock(const void* addr, size_t len) { return ::mlock(addr, len); }

// Touches one byte per 4 KiB page so the kernel allocates (and zeroes) every page now, at about
// 1 GB/s with 4 KiB pages or 5 GB/s with huge pages, instead of on the data path.
void Prefault(std::byte* base, size_t bytes) {
  volatile std::byte* p = base;
  for (size_t off = 0; off < bytes; off += kPageBytes) p[off] = std::byte{0};
}

}  // namespace

Status CheckNumaNode(int32_t node, const std::string& who) {
  if (numa_available() < 0) {
    return Status::NotSupported(who + ": numa_node " + std::to_string(node) +
                                " was requested but libnuma reports no NUMA support "
                                "(numa_available() < 0); set numa_node = -1");
  }
  const int max_node = numa_max_node();
  if (node < 0 || node > max_node ||
      numa_bitmask_isbitset(numa_all_nodes_ptr, static_cast<unsigned>(node)) == 0) {
    return Status::InvalidArgument(
        who + ": NUMA node " + std::to_string(node) +
        " does not exist or has no memory this process may use (nodes 0-" +
        std::to_string(max_node) + " exist; list them with ListNumaNodes or numactl -H)");
  }
  return Status::Ok();
}

SlotPool::SlotPool(uint32_t slots, uint32_t slot_bytes, size_t stride_bytes)
    : slots_(slots), slot_bytes_(slot_bytes), stride_bytes_(stride_bytes) {}

SlotPool::~SlotPool() {
  if (base_ != nullptr) ::munmap(base_, mapped_bytes_);
}

Result<std::unique_ptr<SlotPool>> SlotPool::Open(const SlotPoolOptions& options) {
  if (options.slots == 0 || options.slots > kMemoryTierSlotsMax) {
    return Status::InvalidArgument(options.name + ": slots " + std::to_string(options.slots) +
                                   " not in [1, " + std::to_string(kMemoryTierSlotsMax) + "]");
  }
  if (options.slot_bytes == 0 || options.slot_bytes > kBlockBytesMax) {
    return Status::InvalidArgument(options.name + ": slot_bytes " +
                                   std::to_string(options.slot_bytes) + " not in [1, " +
                                   std::to_string(kBlockBytesMax) + "]");
  }
  if (options.numa_node >= 0) KV_RETURN_IF_ERROR(CheckNumaNode(options.numa_node, options.name));
  const size_t stride = AlignUp(options.slot_bytes, kSlotAlignmentBytes);
  std::unique_ptr<SlotPool> pool(new SlotPool(options.slots, options.slot_bytes, stride));
  KV_RETURN_IF_ERROR(pool->Map(options));
  KV_RETURN_IF_ERROR(pool->Lock(options));
  {
    MutexLock lock(&pool->mu_);
    pool->free_.reserve(options.slots);
    // Pushed in reverse so slot 0 is handed out first (easier to read in tests and dumps).
    for (uint32_t i = options.slots; i > 0; --i) pool->free_.push_back(i - 1);
    pool->allocated_.assign(options.slots, 0);
  }
  return pool;
}

Status SlotPool::Map(const SlotPoolOptions& options) {
  const bool want_huge = options.huge_pages == HugePages::kIfAvailable;
  const size_t align = want_huge ? kHugePageBytes : kPageBytes;
  const size_t used = static_cast<size_t>(slots_) * stride_bytes_;
  mapped_bytes_ = AlignUp(used, align);
  // Over-map by one alignment unit, then unmap the unaligned head and the tail.
  const size_t reserve = mapped_bytes_ + align - kPageBytes;
  void* raw = ::mmap(nullptr, reserve, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) {
    const int err = errno;
    mapped_bytes_ = 0;
    return Status::NoSpace(options.name + ": mmap of " + std::to_string(reserve) +
                           " bytes failed: " + ErrnoText(err));
  }
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = AlignUp(start, align);
  if (aligned > start) ::munmap(raw, aligned - start);
  const uintptr_t end = aligned + mapped_bytes_;
  if (start + reserve > end) ::munmap(reinterpret_cast<void*>(end), start + reserve - end);
  base_ = reinterpret_cast<std::byte*>(aligned);

  if (want_huge) huge_pages_ = ::madvise(base_, mapped_bytes_, MADV_HUGEPAGE) == 0 && ThpEnabled();
  if (options.numa_node >= 0) {
    const auto node = static_cast<size_t>(options.numa_node);
    constexpr size_t kBitsPerWord = 8 * sizeof(unsigned long);
    std::vector<unsigned long> mask(node / kBitsPerWord + 1, 0);
    mask[node / kBitsPerWord] |= 1ul << (node % kBitsPerWord);
    // The kernel reads maxnode - 1 bits, hence the + 1.
    if (::mbind(base_, mapped_bytes_, MPOL_BIND, mask.data(), mask.size() * kBitsPerWord + 1, 0) !=
        0) {
      const int err = errno;
      return Status::InvalidArgument(options.name + ": mbind to NUMA node " + std::to_string(node) +
                                     " failed: " + ErrnoText(err));
    }
    numa_node_ = options.numa_node;
  }
  if (options.prefault) Prefault(base_, mapped_bytes_);
  return Status::Ok();
}

Status SlotPool::Lock(const SlotPoolOptions& options) {
  if (options.lock == MemoryLock::kOff) return Status::Ok();
  auto* const lock_fn = options.mlock_fn != nullptr ? options.mlock_fn : &DefaultMlock;
  if (lock_fn(base_, mapped_bytes_) == 0) {
    locked_ = true;
    return Status::Ok();
  }
  const int err = errno;
  rlimit limit{};
  std::string limit_text = "unknown";
  if (::getrlimit(RLIMIT_MEMLOCK, &limit) == 0) {
    limit_text = limit.rlim_cur == RLIM_INFINITY ? std::string("unlimited")
                                                 : std::to_string(limit.rlim_cur) + " bytes";
  }
  std::string msg = options.name + ": mlock of " + std::to_string(mapped_bytes_) +
                    " bytes failed: " + ErrnoText(err) + " (RLIMIT_MEMLOCK is " + limit_text +
                    "; locking more needs CAP_IPC_LOCK or a higher `ulimit -l`)";
  if (options.lock == MemoryLock::kIfPermitted) {
    LogTo(options.logger, LogLevel::kWarn, msg + "; continuing with unlocked memory");
    return Status::Ok();
  }
  if (err == EPERM) return Status::NotSupported(std::move(msg));
  return Status::NoSpace(std::move(msg));
}

Result<uint32_t> SlotPool::Allocate() {
  MutexLock lock(&mu_);
  // A short message stays in std::string's inline buffer: the Busy path does not allocate.
  if (free_.empty()) return Status::Busy("no free slot");
  const uint32_t slot = free_.back();
  free_.pop_back();
  allocated_[slot] = 1;
  return slot;
}

void SlotPool::Free(uint32_t slot) {
  KV_CHECK(slot < slots_);
  MutexLock lock(&mu_);
  KV_DCHECK(allocated_[slot] == 1);  // Double free.
  KV_CHECK(free_.size() < slots_);   // Catches a double free in release builds, late.
  allocated_[slot] = 0;
  free_.push_back(slot);  // Never reallocates: capacity is slots_.
}

std::byte* SlotPool::SlotData(uint32_t slot) const {
  KV_CHECK(slot < slots_);
  return base_ + static_cast<size_t>(slot) * stride_bytes_;
}

MemoryTierStats SlotPool::Stats() const {
  MemoryTierStats stats;
  stats.slots_total = slots_;
  {
    MutexLock lock(&mu_);
    stats.slots_free = static_cast<uint32_t>(free_.size());
  }
  stats.slot_bytes = slot_bytes_;
  stats.slot_stride_bytes = stride_bytes_;
  stats.mapped_bytes = mapped_bytes_;
  stats.locked = locked_;
  stats.huge_pages = huge_pages_;
  stats.numa_node = numa_node_;
  return stats;
}

}  // namespace kvtier::tiers_internal
