// CudaDeviceTier (see cuda_device_tier.h). Layout of the implementation:
//   - SlotList: the O(1) free list of slot indices (preallocated; no heap after Open).
//   - EventStates: recycles CopyEvent states so Copy() does not allocate in the steady state.
//   - CopyStream: one CUDA stream, a ring of copy records (one cudaEvent each, created at Open)
//     and the completion thread that waits on each record's event in order and completes its
//     CopyEvent. The ring bounds the copies in flight; a full ring blocks Copy().
#include "cuda/cuda_device_tier.h"

#include <pthread.h>

#include <array>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/assert.h"
#include "core/mutex.h"
#include "cuda/cuda_buffer.h"
#include "cuda/cuda_status.h"
#include "tiers/copy_event_state.h"

namespace kvtier::cuda {
namespace {

using EventState = CopyEvent::State;
using tiers_internal::CompleteRegion;
using tiers_internal::ResetEvent;

constexpr size_t kStreams = 3;  // One per CopyKind.
constexpr size_t kEventStatesPooled = 256;
constexpr size_t kEventStatesScanMax = 32;

class SlotList {
 public:
  explicit SlotList(uint32_t slots) : slots_(slots) {
    MutexLock lock(&mu_);
    free_.reserve(slots);
    for (uint32_t i = slots; i > 0; --i) free_.push_back(i - 1);
    allocated_.assign(slots, 0);
  }
  Result<uint32_t> Allocate() KV_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    if (free_.empty()) return Status::Busy("device tier (CUDA): every slot is allocated");
    const uint32_t slot = free_.back();
    free_.pop_back();
    allocated_[slot] = 1;
    return slot;
  }
  void Free(uint32_t slot) KV_EXCLUDES(mu_) {
    KV_CHECK(slot < slots_);
    MutexLock lock(&mu_);
    KV_DCHECK(allocated_[slot] == 1);
    allocated_[slot] = 0;
    free_.push_back(slot);
  }
  uint32_t FreeCount() const KV_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return static_cast<uint32_t>(free_.size());
  }

 private:
  const uint32_t slots_;
  mutable Mutex mu_;
  std::vector<uint32_t> free_ KV_GUARDED_BY(mu_);      // Stack; capacity slots_, never grows.
  std::vector<uint8_t> allocated_ KV_GUARDED_BY(mu_);  // 1 while allocated.
};

// A state only the pool refers to (use_count 1) has no other holder and can be re-armed.
class EventStates {
 public:
  EventStates() {
    MutexLock lock(&mu_);
    for (size_t i = 0; i < kEventStatesPooled; ++i)
      states_.push_back(std::make_shared<EventState>());
  }
  std::shared_ptr<EventState> Acquire() KV_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    for (size_t i = 0; i < kEventStatesScanMax; ++i) {
      std::shared_ptr<EventState>& entry = states_[cursor_];
      cursor_ = (cursor_ + 1) % kEventStatesPooled;
      if (entry.use_count() == 1) {
        ResetEvent(*entry, 1);
        return entry;
      }
    }
    auto fresh = std::make_shared<EventState>();  // Many held: take over an entry.
    ResetEvent(*fresh, 1);
    states_[cursor_] = fresh;
    cursor_ = (cursor_ + 1) % kEventStatesPooled;
    return fresh;
  }

 private:
  Mutex mu_;
  std::vector<std::shared_ptr<EventState>> states_ KV_GUARDED_BY(mu_);
  size_t cursor_ KV_GUARDED_BY(mu_) = 0;
};

CopyEvent Failed(Status status) {
  auto state = std::make_shared<EventState>();
  ResetEvent(*state, 1);
  CompleteRegion(*state, status);
  return CopyEvent(std::move(state));
}

// InvalidArgument for the first region that cannot be copied; counts the non-empty ones.
Status CheckRegions(std::span<const CopyRegion> regions, size_t* nonempty) {
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

struct CopyRecord {
  CudaEvent event;                    // Created at Open; re-recorded per Copy call.
  std::shared_ptr<EventState> state;  // Completed by the completion thread.
  Status submit_status;               // A failed enqueue (the event still orders the rest).
};

class CopyStream {
 public:
  static Result<std::unique_ptr<CopyStream>> Open(int32_t device, uint32_t records,
                                                  const char* name);
  ~CopyStream();

  // Enqueues the non-empty regions (after waiting for `after`), records the ring's next event and
  // hands `state` to the completion thread. Blocks while `records` copies are in flight.
  cudaEvent_t Submit(std::span<const CopyRegion> regions, cudaEvent_t after,
                     std::shared_ptr<EventState> state) KV_EXCLUDES(mu_);
  cudaStream_t get() const { return stream_.get(); }

 private:
  CopyStream(int32_t device, CudaStream stream, std::vector<CopyRecord> ring);
  Status Enqueue(std::span<const CopyRegion> regions, cudaEvent_t after, cudaEvent_t done);
  void Run() KV_EXCLUDES(mu_);

  const int32_t device_;
  CudaStream stream_;
  Mutex mu_;
  CondVar not_empty_;
  CondVar not_full_;
  std::vector<CopyRecord> ring_ KV_GUARDED_BY(mu_);  // Sized at Open; never grows.
  size_t head_ KV_GUARDED_BY(mu_) = 0;
  size_t count_ KV_GUARDED_BY(mu_) = 0;
  bool stopping_ KV_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

Result<std::unique_ptr<CopyStream>> CopyStream::Open(int32_t device, uint32_t records,
                                                     const char* name) {
  KV_ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create());
  std::vector<CopyRecord> ring(records);
  for (CopyRecord& r : ring) {
    // Blocking sync: the completion thread sleeps in cudaEventSynchronize instead of spinning.
    cudaEvent_t e = nullptr;
    KV_CUDA_RETURN_IF_ERROR(
        cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventBlockingSync));
    r.event = CudaEvent::Adopt(e);
  }
  std::unique_ptr<CopyStream> s(new CopyStream(device, std::move(stream), std::move(ring)));
  pthread_setname_np(s->thread_.native_handle(), name);
  return s;
}

CopyStream::CopyStream(int32_t device, CudaStream stream, std::vector<CopyRecord> ring)
    : device_(device), stream_(std::move(stream)) {
  {
    MutexLock lock(&mu_);
    ring_ = std::move(ring);
  }
  thread_ = std::thread([this] { Run(); });
}

CopyStream::~CopyStream() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  not_empty_.SignalAll();
  thread_.join();  // Run() drains the ring first.
}

Status CopyStream::Enqueue(std::span<const CopyRegion> regions, cudaEvent_t after,
                           cudaEvent_t done) {
  Status status;
  if (after != nullptr)
    status = CudaStatus(cudaStreamWaitEvent(get(), after, 0), "cudaStreamWaitEvent");
  for (const CopyRegion& r : regions) {
    if (!status.ok()) break;
    if (r.bytes == 0) continue;
    status = CudaStatus(cudaMemcpyAsync(r.dst, r.src, r.bytes, cudaMemcpyDefault, get()),
                        "cudaMemcpyAsync");
  }
  // Recorded even after a failed enqueue, so the record completes after what was queued.
  Status recorded = CudaStatus(cudaEventRecord(done, get()), "cudaEventRecord");
  return status.ok() ? recorded : status;
}

cudaEvent_t CopyStream::Submit(std::span<const CopyRegion> regions, cudaEvent_t after,
                               std::shared_ptr<EventState> state) {
  MutexLock lock(&mu_);
  KV_CHECK(!stopping_);  // Copy() racing with destruction.
  while (count_ == ring_.size()) not_full_.Wait(&mu_);
  CopyRecord& record = ring_[(head_ + count_) % ring_.size()];
  // Enqueued under the lock so ring order is stream order: the completion thread waits on the
  // events in the order the stream completes them.
  record.submit_status = Enqueue(regions, after, record.event.get());
  record.state = std::move(state);
  ++count_;
  not_empty_.Signal();
  return record.submit_status.ok() ? record.event.get() : nullptr;
}

void CopyStream::Run() {
  static_cast<void>(cudaSetDevice(device_));
  for (;;) {
    cudaEvent_t event = nullptr;
    std::shared_ptr<EventState> state;
    Status status;
    {
      MutexLock lock(&mu_);
      while (count_ == 0 && !stopping_) not_empty_.Wait(&mu_);
      if (count_ == 0) return;  // Stopping and drained.
      // The head record stays in the ring (its event is not re-recorded) until it is popped.
      event = ring_[head_].event.get();
      state = std::move(ring_[head_].state);
      status = std::move(ring_[head_].submit_status);
    }
    Status synced = CudaStatus(cudaEventSynchronize(event), "cudaEventSynchronize");
    CompleteRegion(*state, status.ok() ? synced : status);
    MutexLock lock(&mu_);
    head_ = (head_ + 1) % ring_.size();
    --count_;
    not_full_.Signal();
  }
}

const char* StreamName(size_t stream) {
  constexpr std::array<const char*, kStreams> kNames = {"kv-cuda-h2d", "kv-cuda-d2h",
                                                        "kv-cuda-d2d"};
  return kNames[stream];
}

}  // namespace

struct CudaDeviceTier::Impl {
  int32_t device = 0;
  uint32_t slot_bytes = 0;
  uint32_t slots = 0;
  size_t stride_bytes = 0;
  DeviceBuffer pool;
  std::byte* base = nullptr;  // First slot: pool.data() rounded up to kSlotAlignmentBytes.
  std::unique_ptr<SlotList> free_list;
  EventStates states;
  // Declared last: destroyed first, so queued copies finish before the pool is freed.
  std::array<std::unique_ptr<CopyStream>, kStreams> streams;
};

Status CudaDeviceTierOptions::Validate() const {
  KV_RETURN_IF_ERROR(tier.Validate());
  if (tier.capacity_bytes == 0) {
    return Status::InvalidArgument("device tier (CUDA): capacity_bytes is 0 (tier disabled)");
  }
  if (tier.copy_queue_max == 0 || tier.copy_queue_max > kCudaCopiesInFlightMax) {
    return Status::InvalidArgument("device tier (CUDA): copy_queue_max " +
                                   std::to_string(tier.copy_queue_max) + " not in [1, " +
                                   std::to_string(kCudaCopiesInFlightMax) + "]");
  }
  if (device < 0) return Status::InvalidArgument("device tier (CUDA): device is negative");
  return Status::Ok();
}

namespace {

// NoSpace unless `bytes` plus `headroom` fit in the device's free memory right now.
Status CheckFreeMemory(int32_t device, uint64_t bytes, uint64_t headroom) {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  KV_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (bytes > free_bytes || headroom > free_bytes - bytes) {
    return Status::NoSpace("device tier (CUDA): budget of " + std::to_string(bytes) +
                           " bytes plus headroom " + std::to_string(headroom) +
                           " exceeds the free memory of device " + std::to_string(device) + " (" +
                           std::to_string(free_bytes) + " of " + std::to_string(total_bytes) +
                           " bytes free); device memory is never oversubscribed");
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<CudaDeviceTier>> CudaDeviceTier::Open(const CudaDeviceTierOptions& options) {
  KV_RETURN_IF_ERROR(options.Validate());
  KV_ASSIGN_OR_RETURN(const int count, CudaDeviceCount());
  if (options.device >= count) {
    return Status::InvalidArgument("device tier (CUDA): device " + std::to_string(options.device) +
                                   " not present (" + std::to_string(count) + " devices)");
  }
  KV_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));
  auto impl = std::make_unique<Impl>();
  impl->device = options.device;
  impl->slot_bytes = options.tier.slot_bytes;
  impl->slots = static_cast<uint32_t>(options.tier.capacity_bytes / options.tier.slot_bytes);
  impl->stride_bytes = (size_t{impl->slot_bytes} + kSlotAlignmentBytes - 1) / kSlotAlignmentBytes *
                       kSlotAlignmentBytes;
  const uint64_t pool_bytes = uint64_t{impl->slots} * impl->stride_bytes + kSlotAlignmentBytes;
  KV_RETURN_IF_ERROR(CheckFreeMemory(options.device, pool_bytes, options.headroom_bytes));
  KV_ASSIGN_OR_RETURN(impl->pool, DeviceBuffer::Allocate(pool_bytes));
  const auto raw = reinterpret_cast<uintptr_t>(impl->pool.data());
  const uintptr_t aligned =
      (raw + kSlotAlignmentBytes - 1) / kSlotAlignmentBytes * kSlotAlignmentBytes;
  impl->base = impl->pool.data() + (aligned - raw);
  impl->free_list = std::make_unique<SlotList>(impl->slots);
  for (size_t i = 0; i < kStreams; ++i) {
    KV_ASSIGN_OR_RETURN(
        impl->streams[i],
        CopyStream::Open(options.device, options.tier.copy_queue_max, StreamName(i)));
  }
  LogTo(options.tier.logger, LogLevel::kInfo,
        "device tier (CUDA) open: device " + std::to_string(options.device) + ", " +
            std::to_string(impl->slots) + " slots of " + std::to_string(impl->slot_bytes) +
            " bytes (" + std::to_string(pool_bytes) + " bytes of device memory), " +
            std::to_string(options.tier.copy_queue_max) + " copies in flight per stream");
  return std::unique_ptr<CudaDeviceTier>(new CudaDeviceTier(std::move(impl)));
}

CudaDeviceTier::CudaDeviceTier(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaDeviceTier::~CudaDeviceTier() = default;

Result<uint32_t> CudaDeviceTier::Allocate() { return impl_->free_list->Allocate(); }
void CudaDeviceTier::Free(uint32_t slot) { impl_->free_list->Free(slot); }
std::byte* CudaDeviceTier::SlotData(uint32_t slot) {
  KV_CHECK(slot < impl_->slots);
  return impl_->base + size_t{slot} * impl_->stride_bytes;
}
uint32_t CudaDeviceTier::slot_bytes() const { return impl_->slot_bytes; }
uint32_t CudaDeviceTier::slots() const { return impl_->slots; }
int32_t CudaDeviceTier::device() const { return impl_->device; }

MemoryTierStats CudaDeviceTier::Stats() const {
  return {.slots_total = impl_->slots,
          .slots_free = impl_->free_list->FreeCount(),
          .slot_bytes = impl_->slot_bytes,
          .slot_stride_bytes = impl_->stride_bytes,
          .mapped_bytes = impl_->pool.size(),
          .locked = true,  // Device memory cannot be paged out.
          .huge_pages = false,
          .numa_node = -1};
}

cudaStream_t CudaDeviceTier::stream(CopyKind kind) const {
  const auto index = static_cast<size_t>(kind);
  KV_CHECK(index < kStreams);
  return impl_->streams[index]->get();
}

CopyEvent CudaDeviceTier::Copy(CopyKind kind, std::span<const CopyRegion> regions) {
  return CopyAsync(kind, regions).event;
}

CudaCopy CudaDeviceTier::CopyAsync(CopyKind kind, std::span<const CopyRegion> regions,
                                   cudaEvent_t after) {
  const auto index = static_cast<size_t>(kind);
  KV_CHECK(index < kStreams);
  size_t nonempty = 0;
  Status checked = CheckRegions(regions, &nonempty);
  if (!checked.ok()) return {.event = Failed(std::move(checked))};
  if (nonempty == 0 && after == nullptr) return {};
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess || current != impl_->device) {
    Status set = CudaStatus(cudaSetDevice(impl_->device), "cudaSetDevice");
    if (!set.ok()) return {.event = Failed(std::move(set))};
  }
  std::shared_ptr<EventState> state = impl_->states.Acquire();
  CopyEvent event(state);
  cudaEvent_t recorded = impl_->streams[index]->Submit(regions, after, std::move(state));
  return {.event = std::move(event), .cuda_event = recorded};
}

Status CudaDeviceTier::StreamWaitCopy(cudaStream_t consumer, const CudaCopy& copy) {
  if (copy.cuda_event == nullptr) return Status::Ok();
  KV_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(consumer, copy.cuda_event, 0));
  return Status::Ok();
}

}  // namespace kvtier::cuda
