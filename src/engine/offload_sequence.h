// OffloadedSequence: one sequence whose KV cache is larger than its device budget
// (ARCHITECTURE.md §1 "offloaded-sequence mode", §6 "schedule-driven prefetch").
//
// The sequence owns a block table: for every (layer, chunk) it records where the block lives, a
// device slot, a host slot and/or a record on the SSD, and which of those copies are current.
// A device budget (in blocks) bounds the device slots held at any time; it is never exceeded.
// When a slot is needed and the budget is full, the coldest unpinned block is demoted: cold means
// "next needed furthest in the layer schedule" (in a forward pass layers come in order, so the
// block of the layer just computed is needed last; plain recency would evict exactly the block
// needed next), ties broken by recency, sink chunks last. A demoted device block moves to a free
// host slot (or, when no other copy is current, to a host slot freed by demoting a host block to
// the SSD); otherwise, current on the SSD, it is dropped. Once a block is on the device its host
// copy is released if the SSD also holds it, so the tiers hold distinct blocks (exclusive).
//
// The pipeline is driven by the layer schedule and by events: AcquireLayer(N) makes N's chunks
// device-resident and waits for their copy events (never returning a block before its event
// completed), then starts host -> device copies for layers N+1..N+depth and SSD -> host reads for
// layers N+1..N+depth+1, so with depth 1 SSD feeds layer N+2 while the device link feeds N+1 and
// compute runs on N. The depth adapts (engine/offload_depth.h) to the stall measured per layer.
// PlanLayer() lets a selector (Quest) narrow what a future layer will read so prefetch loads
// only that.
//
// Thread safety: one caller thread at a time (the forward pass). SSD completions arrive on the
// SSD tier's I/O thread and only touch the read pool under mu_. Ownership: the tiers are
// borrowed and must outlive the sequence; the sequence owns the slots it allocated and frees
// them (and erases its SSD records) in its destructor. Block spans are borrowed: see
// DeviceBlock().
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/kv_layout.h"
#include "core/mutex.h"
#include "engine/offload_depth.h"
#include "kvtier/result.h"
#include "tiers/memory_tier.h"
#include "tiers/ssd_tier.h"

namespace kvtier {

// Bounds (kept beside the interface they bound).
inline constexpr uint32_t kOffloadChunksMax = 1u << 16;        // Chunks per layer.
inline constexpr uint32_t kOffloadSsdReadsInFlightMax = 1024;  // SSD -> host reads in flight.
static_assert(kOffloadSsdReadsInFlightMax <= kSsdBatchEntriesMax);

struct OffloadSequenceOptions {
  KvLayout layout;                 // Geometry of every block (any dtype; bytes are opaque here).
  uint32_t chunks_max = 0;         // Chunks per layer this sequence may hold.
  uint32_t device_blocks_max = 0;  // Device budget in blocks: >= the blocks one layer reads.
  uint32_t sink_chunks = 1;        // Leading chunks demoted last (attention sinks).
  uint64_t sequence_id = 0;        // Names this sequence's records on the SSD.
  PrefetchDepthOptions depth;      // depth_min == depth_max == 0 disables prefetch.

  // InvalidArgument naming the first bad field.
  Status Validate() const;
};

// Borrowed tiers. device and host are required: device slot_bytes >= the layout's block bytes,
// host slot_bytes >= OffloadedSequence::HostSlotBytes() (with an SSD a host slot holds a whole
// SSD record, so reads land in it directly: no staging buffer, no copy). ssd may be null, and
// then the host tier must hold whatever the device budget does not.
struct OffloadTiers {
  DeviceTier* device = nullptr;
  HostTier* host = nullptr;
  SsdTier* ssd = nullptr;
};

// Where a block's current copies are (a block may be current in several tiers at once).
struct BlockPlacement {
  bool written = false;
  bool device = false;
  bool host = false;
  bool ssd = false;
};

struct OffloadStats {
  uint64_t layers_acquired = 0;
  uint64_t stall_us = 0;       // Total time AcquireLayer waited for data.
  uint64_t last_stall_us = 0;  // Of the latest AcquireLayer.
  uint32_t depth = 0;          // Current prefetch depth.
  uint32_t depth_grows = 0, depth_shrinks = 0;
  uint64_t bytes_host_to_device = 0, bytes_device_to_host = 0;
  uint64_t bytes_ssd_read = 0, bytes_ssd_written = 0;
  uint64_t blocks_prefetched = 0;  // Loads started ahead of their layer.
  uint64_t blocks_demand = 0;      // Loads started by AcquireLayer itself (misses).
  uint64_t device_evictions = 0, host_evictions = 0;
  uint32_t device_blocks = 0, device_blocks_peak = 0, host_blocks = 0;
};

class OffloadedSequence {
 public:
  static Result<std::unique_ptr<OffloadedSequence>> Create(const OffloadSequenceOptions& options,
                                                           const OffloadTiers& tiers);
  ~OffloadedSequence();
  OffloadedSequence(const OffloadedSequence&) = delete;
  OffloadedSequence& operator=(const OffloadedSequence&) = delete;

  // Host slot size the sequence needs: the block, or with an SSD tier the block's whole record.
  static uint32_t HostSlotBytes(const KvLayout& layout, bool with_ssd);

  const KvLayout& layout() const { return options_.layout; }
  uint32_t chunks_max() const { return options_.chunks_max; }
  // 1 + the highest chunk written in `layer` (0 when none).
  uint32_t chunks_written(uint32_t layer) const { return chunks_written_[layer]; }

  // The block for writing, device-resident (loaded first if it was demoted). Its copies in lower
  // tiers become stale. The span is valid until the next call on this sequence. CPU device tier
  // only (the caller writes through the pointer). NoSpace beyond chunks_max or budget.
  Result<std::span<std::byte>> MutableBlock(uint32_t layer, uint32_t chunk);

  // Makes `chunks` (written, ascending) of `layer` device-resident, waits for their copies, pins
  // them until the next AcquireLayer or MutableBlock, then prefetches the next layers. NoSpace
  // when the budget cannot hold them; Corruption/IoError from the SSD.
  Status AcquireLayer(uint32_t layer, std::span<const uint32_t> chunks);
  // A block pinned by the latest AcquireLayer (programmer error otherwise). Valid until the next
  // non-const call.
  std::span<const std::byte> DeviceBlock(uint32_t layer, uint32_t chunk) const;
  // A device-resident block whose copies completed, or an empty span (for summaries).
  std::span<const std::byte> PeekDeviceBlock(uint32_t layer, uint32_t chunk);

  // What a future AcquireLayer(layer) will ask for, so prefetch loads only that. Without a plan
  // prefetch assumes every written chunk.
  void PlanLayer(uint32_t layer, std::span<const uint32_t> chunks);
  void ClearPlan(uint32_t layer);

  BlockPlacement Placement(uint32_t layer, uint32_t chunk) const;
  OffloadStats Stats() const;
  // Corruption describing the first broken invariant of the block table (tests).
  Status CheckInvariants() const;

 private:
  struct Entry;
  struct ReadSlot;
  OffloadedSequence(const OffloadSequenceOptions& options, const OffloadTiers& tiers);
  Status Init();

  size_t Index(uint32_t layer, uint32_t chunk) const;
  std::byte* HostData(uint32_t slot);  // The block's bytes inside a host slot.
  uint32_t Distance(size_t index) const;
  Result<uint32_t> AllocateDevice(uint32_t distance_min);
  Result<uint32_t> AllocateHost(uint32_t distance_min);
  Status EvictDevice(size_t index);
  Status EvictHost(size_t index);
  void ReleaseHostCopies();
  int64_t FindDeviceVictim(uint32_t distance_min) const;
  int64_t FindHostVictim(uint32_t distance_min) const;
  int64_t FindHostVictimPass(uint32_t distance_min, bool reading) const;
  Status WriteToSsd(size_t index);
  Status StartSsdRead(size_t index, uint32_t distance_min);
  Status FinishRead(uint32_t slot);
  Status HarvestReads();
  Status WaitRead(size_t index);
  Status StartDemandRead(size_t index);
  size_t FirstPendingRead() const;
  Status LoadToDevice(std::span<const size_t> indexes, uint32_t distance_min, bool* pressure);
  Status Prefetch(uint32_t layer, bool* pressure);
  void Unpin();
  void PlannedChunks(uint32_t layer, std::vector<uint32_t>* out) const;
  BlockKey SsdKey(size_t index) const;
  void OnReadDone(uint32_t slot, Status status) KV_EXCLUDES(mu_);

  OffloadSequenceOptions options_;
  OffloadTiers tiers_;
  uint64_t block_bytes_;
  size_t host_offset_;  // Of the block in a host slot: the SSD record's payload offset.
  Hash256 layout_digest_{};
  std::vector<Entry> entries_;  // [layer * chunks_max + chunk].
  std::vector<uint32_t> chunks_written_;
  std::vector<std::vector<uint32_t>> plans_;
  std::vector<uint8_t> has_plan_;
  std::vector<size_t> pinned_;
  uint32_t cursor_layer_ = 0;
  uint64_t tick_ = 0;
  uint32_t device_used_ = 0;
  uint32_t host_used_ = 0;
  PrefetchDepthController depth_;
  OffloadStats stats_;
  std::vector<ReadSlot> reads_;  // Pool, fixed at Init.
  std::vector<uint32_t> free_reads_;
  std::vector<size_t> scratch_;  // Reused index lists.
  std::vector<uint32_t> scratch_chunks_;
  std::vector<CopyRegion> regions_;

  Mutex mu_;
  CondVar read_cv_;
  std::vector<uint8_t> read_done_ KV_GUARDED_BY(mu_);
  std::vector<Status> read_status_ KV_GUARDED_BY(mu_);
};

}  // namespace kvtier
