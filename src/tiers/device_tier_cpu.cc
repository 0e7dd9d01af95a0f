// The CPU build's DeviceTier: a slot pool in host memory with the device's byte budget, and one
// copy "stream" per CopyKind, mirroring the CUDA build's H2D, D2H and D2D streams. Each stream
// is a bounded FIFO ring of regions served by copy_threads threads, so copies of different kinds
// are not ordered with each other, and a full ring blocks the submitter (back-pressure).
//
// Events come from a small pool and are re-armed once no handle refers to them, so Copy() does
// not allocate in the steady state. See memory_tier.h for the contract.
#include <pthread.h>

#include <array>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/assert.h"
#include "tiers/copy_event_state.h"
#include "tiers/copy_kernels.h"
#include "tiers/slot_pool.h"

namespace kvtier {
namespace {

using tiers_internal::CompleteRegion;
using tiers_internal::ResetEvent;
using tiers_internal::SlotPool;
using EventState = CopyEvent::State;

constexpr size_t kStreams = 3;  // One per CopyKind.
constexpr size_t kEventPoolSize = 256;
constexpr size_t kEventPoolScanMax = 32;  // Bounds the work of one Acquire.

const char* StreamName(size_t stream) {
  constexpr std::array<const char*, kStreams> kNames = {"kv-copy-h2d", "kv-copy-d2h",
                                                        "kv-copy-d2d"};
  return kNames[stream];
}

// Recycles event states: an entry only the pool refers to (use_count 1) can be re-armed, since
// nobody else holds a reference through which to copy it.
class EventPool {
 public:
  EventPool() {
    MutexLock lock(&mu_);
    states_.reserve(kEventPoolSize);
    for (size_t i = 0; i < kEventPoolSize; ++i) states_.push_back(std::make_shared<EventState>());
  }

  std::shared_ptr<EventState> Acquire(uint32_t pending) KV_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    for (size_t i = 0; i < kEventPoolScanMax; ++i) {
      std::shared_ptr<EventState>& entry = states_[cursor_];
      cursor_ = (cursor_ + 1) % kEventPoolSize;
      if (entry.use_count() == 1) {
        ResetEvent(*entry, pending);
        return entry;
      }
    }
    // Many events are still held: allocate one and let it take over a pool entry, so the pool
    // follows the states in use (the displaced one lives on with its holders).
    auto fresh = std::make_shared<EventState>();
    ResetEvent(*fresh, pending);
    states_[cursor_] = fresh;
    cursor_ = (cursor_ + 1) % kEventPoolSize;
    return fresh;
  }

 private:
  Mutex mu_;
  std::vector<std::shared_ptr<EventState>> states_ KV_GUARDED_BY(mu_);
  size_t cursor_ KV_GUARDED_BY(mu_) = 0;
};

struct CopyWork {
  CopyRegion region;
  std::shared_ptr<EventState> event;  // Keeps the state alive until the region is copied.
};

// One stream: a bounded ring of regions and the threads that copy them in FIFO order.
class CopyStream {
 public:
  CopyStream(size_t index, uint32_t queue_max, uint32_t threads) : queue_max_(queue_max) {
    {
      MutexLock lock(&mu_);
      ring_.resize(queue_max);
    }
    threads_.reserve(threads);
    for (uint32_t i = 0; i < threads; ++i) {
      threads_.emplace_back([this] { Run(); });
      pthread_setname_np(threads_.back().native_handle(), StreamName(index));
    }
  }

  // Copies everything already queued, then joins the threads.
  ~CopyStream() {
    {
      MutexLock lock(&mu_);
      stopping_ = true;
    }
    not_empty_.SignalAll();
    for (std::thread& t : threads_) t.join();
  }

  // Blocks while the ring is full.
  void Push(const CopyRegion& region, const std::shared_ptr<EventState>& event) KV_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    KV_CHECK(!stopping_);  // Copy() racing with destruction.
    while (count_ == queue_max_) not_full_.Wait(&mu_);
    CopyWork& slot = ring_[(head_ + count_) % queue_max_];
    slot.region = region;
    slot.event = event;
    ++count_;
    not_empty_.Signal();
  }

 private:
  void Run() KV_EXCLUDES(mu_) {
    for (;;) {
      CopyWork work;
      {
        MutexLock lock(&mu_);
        while (count_ == 0 && !stopping_) not_empty_.Wait(&mu_);
        if (count_ == 0) return;  // Stopping and drained.
        work = std::move(ring_[head_]);
        head_ = (head_ + 1) % queue_max_;
        --count_;
        not_full_.Signal();
      }
      tiers_internal::CopyBytes(work.region.dst, work.region.src, work.region.bytes);
      CompleteRegion(*work.event, Status::Ok());
    }
  }

  const size_t queue_max_;
  Mutex mu_;
  CondVar not_empty_;
  CondVar not_full_;
  std::vector<CopyWork> ring_ KV_GUARDED_BY(mu_);  // queue_max_ entries, allocated once.
  size_t head_ KV_GUARDED_BY(mu_) = 0;
  size_t count_ KV_GUARDED_BY(mu_) = 0;
  bool stopping_ KV_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;  // Written only by the constructor.
};

// InvalidArgument for the first region that cannot be copied; counts the non-empty ones. Builds
// a message only on error, so the normal path does not allocate.
Status CheckRegions(std::span<const CopyRegion> regions, uint32_t* nonempty) {
  *nonempty = 0;
  for (size_t i = 0; i < regions.size(); ++i) {
    const CopyRegion& r = regions[i];
    if (r.bytes == 0) continue;
    const char* problem = nullptr;
    const auto d = reinterpret_cast<uintptr_t>(r.dst);
    const auto s = reinterpret_cast<uintptr_t>(r.src);
    if (r.dst == nullptr || r.src == nullptr) {
      problem = "has a null pointer";
    } else if (r.bytes > kCopyRegionBytesMax) {
      problem = "has more bytes than kCopyRegionBytesMax";
    } else if (d < s + r.bytes && s < d + r.bytes) {
      problem = "has overlapping source and destination";
    }
    if (problem != nullptr) {
      return Status::InvalidArgument("Copy: region " + std::to_string(i) + " (" +
                                     std::to_string(r.bytes) + " bytes) " + problem);
    }
    ++*nonempty;
  }
  return Status::Ok();
}

class CpuDeviceTier final : public DeviceTier {
 public:
  CpuDeviceTier(std::unique_ptr<SlotPool> pool, const DeviceTierOptions& options)
      : pool_(std::move(pool)) {
    for (size_t i = 0; i < kStreams; ++i) {
      streams_[i] = std::make_unique<CopyStream>(i, options.copy_queue_max, options.copy_threads);
    }
  }
  // Streams are destroyed first (members in reverse order): they drain their rings, so copies
  // in flight into slots finish before the slot memory is unmapped.
  ~CpuDeviceTier() override = default;

  Result<uint32_t> Allocate() override { return pool_->Allocate(); }
  void Free(uint32_t slot) override { pool_->Free(slot); }
  std::byte* SlotData(uint32_t slot) override { return pool_->SlotData(slot); }
  uint32_t slot_bytes() const override { return pool_->slot_bytes(); }
  uint32_t slots() const override { return pool_->slots(); }
  MemoryTierStats Stats() const override { return pool_->Stats(); }

  CopyEvent Copy(CopyKind kind, std::span<const CopyRegion> regions) override {
    const auto stream = static_cast<size_t>(kind);
    KV_CHECK(stream < kStreams);
    if (regions.size() > UINT32_MAX) {
      return Failed(Status::InvalidArgument("Copy: more than 2^32 regions in one call"));
    }
    uint32_t nonempty = 0;
    Status checked = CheckRegions(regions, &nonempty);
    if (!checked.ok()) return Failed(std::move(checked));
    if (nonempty == 0) return CopyEvent();
    std::shared_ptr<EventState> event = events_.Acquire(nonempty);
    for (const CopyRegion& r : regions) {
      if (r.bytes != 0) streams_[stream]->Push(r, event);
    }
    return CopyEvent(std::move(event));
  }

 private:
  // An event that completed with `status` (the error path may allocate).
  static CopyEvent Failed(Status status) {
    auto state = std::make_shared<EventState>();
    ResetEvent(*state, 1);
    CompleteRegion(*state, status);
    return CopyEvent(std::move(state));
  }

  const std::unique_ptr<SlotPool> pool_;
  EventPool events_;
  std::array<std::unique_ptr<CopyStream>, kStreams> streams_;
};

}  // namespace

Status DeviceTierOptions::Validate() const {
  if (capacity_bytes == 0) return Status::Ok();  // Disabled.
  if (slot_bytes == 0 || slot_bytes > kBlockBytesMax) {
    return Status::InvalidArgument("device tier: slot_bytes " + std::to_string(slot_bytes) +
                                   " not in [1, " + std::to_string(kBlockBytesMax) + "]");
  }
  if (capacity_bytes < slot_bytes) {
    return Status::InvalidArgument("device tier: capacity_bytes " + std::to_string(capacity_bytes) +
                                   " holds no slot of slot_bytes " + std::to_string(slot_bytes));
  }
  if (capacity_bytes / slot_bytes > kMemoryTierSlotsMax) {
    return Status::InvalidArgument("device tier: capacity_bytes / slot_bytes exceeds " +
                                   std::to_string(kMemoryTierSlotsMax) + " slots");
  }
  if (copy_threads == 0 || copy_threads > kCopyThreadsMax) {
    return Status::InvalidArgument("device tier: copy_threads " + std::to_string(copy_threads) +
                                   " not in [1, " + std::to_string(kCopyThreadsMax) + "]");
  }
  if (copy_queue_max == 0 || copy_queue_max > kCopyQueueMax) {
    return Status::InvalidArgument("device tier: copy_queue_max " + std::to_string(copy_queue_max) +
                                   " not in [1, " + std::to_string(kCopyQueueMax) + "]");
  }
  return Status::Ok();
}

Result<std::unique_ptr<DeviceTier>> DeviceTier::OpenCpu(const DeviceTierOptions& options) {
  KV_RETURN_IF_ERROR(options.Validate());
  if (options.capacity_bytes == 0) {
    return Status::InvalidArgument("device tier: capacity_bytes is 0 (the tier is disabled)");
  }
  const auto slots = static_cast<uint32_t>(options.capacity_bytes / options.slot_bytes);
  // Device memory is never locked or NUMA-bound in the CUDA build; the CPU stand-in only takes
  // huge pages and pre-faulting so its copies run at memory speed from the start.
  KV_ASSIGN_OR_RETURN(std::unique_ptr<SlotPool> pool,
                      SlotPool::Open({.name = "device tier",
                                      .slots = slots,
                                      .slot_bytes = options.slot_bytes,
                                      .huge_pages = HugePages::kIfAvailable,
                                      .lock = MemoryLock::kOff,
                                      .prefault = true,
                                      .logger = options.logger}));
  LogTo(options.logger, LogLevel::kInfo,
        "device tier (CPU) open: " + std::to_string(slots) + " slots of " +
            std::to_string(options.slot_bytes) + " bytes, " + std::to_string(options.copy_threads) +
            " copy thread(s) per stream, queue " + std::to_string(options.copy_queue_max) +
            " regions per stream");
  return std::unique_ptr<DeviceTier>(new CpuDeviceTier(std::move(pool), options));
}

}  // namespace kvtier
