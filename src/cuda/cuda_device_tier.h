// CudaDeviceTier: the DeviceTier of the CUDA build. Slots live in one cudaMalloc'd pool on one
// GPU; Copy() runs on three dedicated non-blocking streams (H2D, D2H, D2D), records one cudaEvent
// per call, and a completion thread per stream turns that event into the CopyEvent of the tiers
// layer (memory_tier.h), so engine code waits on copies the same way in the CPU and CUDA builds.
//
// Memory rule: the slot pool is plain device memory sized at Open and never oversubscribed. Open
// asks cudaMemGetInfo first and refuses (NoSpace) a budget that, with headroom_bytes added, is
// beyond what the card has free. Managed (unified) memory is never used for slots.
//
// Fencing rule (docs/cuda.md): a slot is never read before the event of the copy that filled it
// has completed, and a copy never reads a buffer before the work that wrote it has completed.
// Copies of different kinds run on different streams and are NOT ordered with each other or with
// the caller's streams. Two ways to order them:
//   - on the host: CudaCopy::event.Wait() (blocks the calling thread);
//   - on the GPU (preferred on the data path): StreamWaitCopy(consumer, copy) makes `consumer`
//     wait for the copy without blocking the host, and CopyAsync(kind, regions, after) makes the
//     copy stream wait for `after` (an event the producer recorded) before the copy starts.
// A store (D2H) of KV that an engine's compute stream just wrote must pass that stream's event as
// `after`; vLLM's CPU offload corrupted KV exactly by missing this fence.
//
// Thread safety: every method may be called from any thread; Copy() and CopyAsync() make the
// tier's device current on the calling thread. Slot contents are not synchronized.
// Ownership: the tier owns the pool, the streams and the events; SlotData() and cuda_event
// handles are valid until the tier is destroyed. The destructor waits for queued copies.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <span>

#include "tiers/memory_tier.h"

namespace kvtier::cuda {

// Copies queued per stream and not yet completed (each holds one cudaEvent).
inline constexpr uint32_t kCudaCopiesInFlightMax = 1u << 14;

struct CudaDeviceTierOptions {
  // capacity_bytes, slot_bytes and logger as for the CPU tier; copy_queue_max bounds the Copy()
  // calls in flight per stream (at most kCudaCopiesInFlightMax; a full stream blocks the next
  // Copy: back-pressure). copy_threads is ignored: the GPU's copy engines do the copying.
  DeviceTierOptions tier;
  int32_t device = 0;                    // CUDA device ordinal.
  uint64_t headroom_bytes = 512 * kMiB;  // Free device memory Open leaves for others.

  Status Validate() const;
};

// The result of a copy: `event` completes (on the host) when every region has been copied;
// `cuda_event` was recorded on the copy stream after the copies, for StreamWaitCopy. cuda_event
// is nullptr when nothing was queued (empty call or an argument error). The tier may record the
// same cudaEvent again for a later copy on the same stream; waiting on it then waits for that
// later copy too, which is later in the same stream, so the fence stays correct.
struct CudaCopy {
  CopyEvent event;
  cudaEvent_t cuda_event = nullptr;
};

class CudaDeviceTier final : public DeviceTier {
 public:
  // Errors: InvalidArgument for bad options, Unavailable without a usable GPU, NoSpace when the
  // budget exceeds the card's free memory, and any failing CUDA call named in the message.
  static Result<std::unique_ptr<CudaDeviceTier>> Open(const CudaDeviceTierOptions& options);
  ~CudaDeviceTier() override;

  Result<uint32_t> Allocate() override;
  void Free(uint32_t slot) override;
  std::byte* SlotData(uint32_t slot) override;  // Device address, 4 KiB-aligned.
  uint32_t slot_bytes() const override;
  uint32_t slots() const override;
  MemoryTierStats Stats() const override;

  // The DeviceTier contract (memory_tier.h) on the kind's stream; same as CopyAsync(...).event.
  CopyEvent Copy(CopyKind kind, std::span<const CopyRegion> regions) override;

  // Queues `regions` on the stream of `kind`. When `after` is not nullptr the stream first waits
  // (on the GPU) for that event, so the copy cannot read data its producer has not finished.
  // Host pointers should be pinned (PinnedHostTier, PinnedBuffer); pageable memory works but
  // makes CUDA stage the copy synchronously.
  CudaCopy CopyAsync(CopyKind kind, std::span<const CopyRegion> regions,
                     cudaEvent_t after = nullptr);

  // Makes `consumer` wait on the GPU for `copy` (cudaStreamWaitEvent); the host does not block.
  // OK at once when copy.cuda_event is nullptr.
  static Status StreamWaitCopy(cudaStream_t consumer, const CudaCopy& copy);

  // The stream a kind's copies run on (for callers that chain their own work after copies).
  cudaStream_t stream(CopyKind kind) const;
  int32_t device() const;

  struct Impl;  // Defined in cuda_device_tier.cc.

 private:
  explicit CudaDeviceTier(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier::cuda
