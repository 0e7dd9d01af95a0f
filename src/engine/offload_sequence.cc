#include "engine/offload_sequence.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "core/assert.h"
#include "tiers/ssd_format.h"

namespace kvtier {
namespace {

constexpr uint32_t kNoSlot = UINT32_MAX;
constexpr int32_t kNoRead = -1;

uint64_t NowUs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace

// One (layer, chunk) of the block table. A slot index is set while the tier holds it; the
// *_current flags say whether that copy holds the latest bytes.
struct OffloadedSequence::Entry {
  uint32_t device_slot = kNoSlot;
  uint32_t host_slot = kNoSlot;
  CopyEvent device_event;  // Last copy into or out of the device slot.
  CopyEvent host_event;    // Last copy into the host slot.
  int32_t read = kNoRead;  // SSD -> host read in flight into reads_[read].
  uint32_t ssd_generation = 0;
  uint64_t last_use = 0;
  bool written = false;
  bool host_current = false;
  bool ssd_current = false;
  bool pinned = false;
  bool loading = false;  // In a host -> device batch being formed: its host slot stays.
};

struct OffloadedSequence::ReadSlot {
  SsdBlockRead read;  // Reads straight into the block's host slot.
  size_t index = 0;
};

uint32_t OffloadedSequence::HostSlotBytes(const KvLayout& layout, bool with_ssd) {
  const uint64_t block = layout.BlockBytes();
  if (!with_ssd) return static_cast<uint32_t>(block);
  const uint64_t record = ssd::kRecordPayloadOffset + block;
  return static_cast<uint32_t>((record + kDirectIoAlignment - 1) / kDirectIoAlignment *
                               kDirectIoAlignment);
}

std::byte* OffloadedSequence::HostData(uint32_t slot) {
  return tiers_.host->SlotData(slot) + host_offset_;
}

Status OffloadSequenceOptions::Validate() const {
  KV_RETURN_IF_ERROR(layout.Validate());
  if (chunks_max == 0 || chunks_max > kOffloadChunksMax) {
    return Status::InvalidArgument("OffloadSequenceOptions.chunks_max out of [1, 65536]");
  }
  if (device_blocks_max == 0) {
    return Status::InvalidArgument("OffloadSequenceOptions.device_blocks_max must be >= 1");
  }
  return depth.Validate();
}

OffloadedSequence::OffloadedSequence(const OffloadSequenceOptions& options,
                                     const OffloadTiers& tiers)
    : options_(options),
      tiers_(tiers),
      block_bytes_(options.layout.BlockBytes()),
      host_offset_(tiers.ssd != nullptr ? ssd::kRecordPayloadOffset : 0),
      depth_(options.depth) {}

Result<std::unique_ptr<OffloadedSequence>> OffloadedSequence::Create(
    const OffloadSequenceOptions& options, const OffloadTiers& tiers) {
  KV_RETURN_IF_ERROR(options.Validate());
  if (tiers.device == nullptr || tiers.host == nullptr) {
    return Status::InvalidArgument("OffloadTiers: device and host tiers are required");
  }
  const uint64_t block_bytes = options.layout.BlockBytes();
  if (tiers.device->slot_bytes() < block_bytes || tiers.host->slot_bytes() < block_bytes) {
    return Status::InvalidArgument("OffloadTiers: a tier's slot_bytes is below the block size");
  }
  if (tiers.host->slot_bytes() < HostSlotBytes(options.layout, tiers.ssd != nullptr)) {
    return Status::InvalidArgument("OffloadTiers: host slot_bytes below HostSlotBytes()");
  }
  if (tiers.device->slots() < options.device_blocks_max) {
    return Status::InvalidArgument("device_blocks_max exceeds the device tier's slots");
  }
  std::unique_ptr<OffloadedSequence> seq(new OffloadedSequence(options, tiers));
  KV_RETURN_IF_ERROR(seq->Init());
  return seq;
}

Status OffloadedSequence::Init() {
  const KvLayout& l = options_.layout;
  entries_.resize(size_t{l.layers} * options_.chunks_max);
  chunks_written_.assign(l.layers, 0);
  plans_.resize(l.layers);
  has_plan_.assign(l.layers, 0);
  layout_digest_ = LayoutDigest(l);
  stats_.depth = depth_.depth();
  if (tiers_.ssd != nullptr) {
    reads_.resize(kOffloadSsdReadsInFlightMax);
    for (uint32_t i = 0; i < kOffloadSsdReadsInFlightMax; ++i) {
      free_reads_.push_back(kOffloadSsdReadsInFlightMax - 1 - i);
    }
    MutexLock lock(&mu_);
    read_done_.assign(kOffloadSsdReadsInFlightMax, 0);
    read_status_.assign(kOffloadSsdReadsInFlightMax, Status::Ok());
  }
  return Status::Ok();
}

OffloadedSequence::~OffloadedSequence() {
  for (size_t i = 0; i < entries_.size(); ++i) {
    Entry& e = entries_[i];
    if (e.read != kNoRead) WaitRead(i).IgnoreError();
    e.device_event.Wait().IgnoreError();
    e.host_event.Wait().IgnoreError();
    if (e.device_slot != kNoSlot) tiers_.device->Free(e.device_slot);
    if (e.host_slot != kNoSlot) tiers_.host->Free(e.host_slot);
    if (e.ssd_current && tiers_.ssd != nullptr) {
      const BlockKey key = SsdKey(i);
      tiers_.ssd->Erase(std::span<const BlockKey>(&key, 1)).IgnoreError();
    }
  }
}

size_t OffloadedSequence::Index(uint32_t layer, uint32_t chunk) const {
  KV_CHECK(layer < options_.layout.layers);
  KV_CHECK(chunk < options_.chunks_max);
  return size_t{layer} * options_.chunks_max + chunk;
}

// How many layer steps until the block is needed again, in [1, layers]: 1 for the next layer;
// the layer being computed (when unpinned) and the one just computed come last.
uint32_t OffloadedSequence::Distance(size_t index) const {
  const uint32_t layers = options_.layout.layers;
  const auto layer = static_cast<uint32_t>(index / options_.chunks_max);
  return (layer + layers - cursor_layer_ - 1) % layers + 1;
}

BlockKey OffloadedSequence::SsdKey(size_t index) const {
  const Entry& e = entries_[index];
  BlockKey key;
  const uint64_t chunk = index % options_.chunks_max;
  for (size_t b = 0; b < 8; ++b) {
    key.chunk_hash[b] = static_cast<uint8_t>(options_.sequence_id >> (8 * b));
    key.chunk_hash[8 + b] = static_cast<uint8_t>(chunk >> (8 * b));
  }
  for (size_t b = 0; b < 4; ++b) {
    key.chunk_hash[16 + b] = static_cast<uint8_t>(e.ssd_generation >> (8 * b));
  }
  key.chunk_hash[31] = 0x5e;  // Marks offloaded-sequence keys apart from prefix-cache keys.
  key.layer = static_cast<uint32_t>(index / options_.chunks_max);
  return key;
}

int64_t OffloadedSequence::FindDeviceVictim(uint32_t distance_min) const {
  int64_t best = -1;
  uint32_t best_distance = 0;
  bool best_sink = true;
  uint64_t best_use = 0;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    if (e.device_slot == kNoSlot || e.pinned) continue;
    const uint32_t d = Distance(i);
    if (d <= distance_min) continue;
    const bool sink = i % options_.chunks_max < options_.sink_chunks;
    const bool better = best < 0 || d > best_distance ||
                        (d == best_distance && (best_sink && !sink)) ||
                        (d == best_distance && sink == best_sink && e.last_use < best_use);
    if (better) {
      best = static_cast<int64_t>(i);
      best_distance = d;
      best_sink = sink;
      best_use = e.last_use;
    }
  }
  return best;
}

// Host blocks with a read in flight are victims only when nothing else is (the eviction then
// waits for the read): prefetched reads must not leave a demand load without a slot.
int64_t OffloadedSequence::FindHostVictim(uint32_t distance_min) const {
  const int64_t settled = FindHostVictimPass(distance_min, false);
  return settled >= 0 ? settled : FindHostVictimPass(distance_min, true);
}

int64_t OffloadedSequence::FindHostVictimPass(uint32_t distance_min, bool reading) const {
  int64_t best = -1;
  uint32_t best_distance = 0;
  uint64_t best_use = 0;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    if (e.host_slot == kNoSlot || (e.read != kNoRead) != reading || e.pinned || e.loading) {
      continue;
    }
    // Without an SSD a host copy that is the only current one cannot go anywhere.
    if (tiers_.ssd == nullptr && !e.ssd_current && e.device_slot == kNoSlot) continue;
    const uint32_t d = Distance(i);
    if (d <= distance_min) continue;
    if (best < 0 || d > best_distance || (d == best_distance && e.last_use < best_use)) {
      best = static_cast<int64_t>(i);
      best_distance = d;
      best_use = e.last_use;
    }
  }
  return best;
}

Result<uint32_t> OffloadedSequence::AllocateDevice(uint32_t distance_min) {
  if (device_used_ >= options_.device_blocks_max) {
    const int64_t victim = FindDeviceVictim(distance_min);
    if (victim < 0) return Status::Busy("device budget full of blocks needed sooner");
    KV_RETURN_IF_ERROR(EvictDevice(static_cast<size_t>(victim)));
  }
  KV_ASSIGN_OR_RETURN(uint32_t slot, tiers_.device->Allocate());
  ++device_used_;
  stats_.device_blocks_peak = std::max(stats_.device_blocks_peak, device_used_);
  return slot;
}

Result<uint32_t> OffloadedSequence::AllocateHost(uint32_t distance_min) {
  Result<uint32_t> slot = tiers_.host->Allocate();
  if (slot.ok()) {
    ++host_used_;
    return slot;
  }
  const int64_t victim = FindHostVictim(distance_min);
  if (victim < 0) return Status::NoSpace("host tier full and nothing can be demoted");
  KV_RETURN_IF_ERROR(EvictHost(static_cast<size_t>(victim)));
  KV_ASSIGN_OR_RETURN(uint32_t s, tiers_.host->Allocate());
  ++host_used_;
  return s;
}

// Demotes a device block. It goes to a free host slot when there is one (so device and host
// together hold more distinct blocks than either alone); with none it is dropped when the SSD
// holds it, and otherwise written back to the host, evicting a host block to the SSD if needed.
Status OffloadedSequence::EvictDevice(size_t index) {
  Entry& e = entries_[index];
  KV_RETURN_IF_ERROR(e.device_event.Wait());
  if (e.read != kNoRead) KV_RETURN_IF_ERROR(WaitRead(index));
  if (!e.host_current) {
    if (e.host_slot == kNoSlot) {
      Result<uint32_t> free_slot = tiers_.host->Allocate();
      if (free_slot.ok()) {
        e.host_slot = *free_slot;
        ++host_used_;
      } else if (!e.ssd_current) {
        const bool was_pinned = std::exchange(e.pinned, true);  // Not a host victim itself.
        Result<uint32_t> host = AllocateHost(0);
        e.pinned = was_pinned;
        KV_RETURN_IF_ERROR(host.status());
        e.host_slot = *host;
      }
    }
    if (e.host_slot != kNoSlot) {
      const CopyRegion region{HostData(e.host_slot), tiers_.device->SlotData(e.device_slot),
                              block_bytes_};
      e.host_event = tiers_.device->Copy(CopyKind::kDeviceToHost, std::span(&region, 1));
      KV_RETURN_IF_ERROR(e.host_event.Wait());
      e.host_current = true;
      stats_.bytes_device_to_host += block_bytes_;
    }
  }
  tiers_.device->Free(e.device_slot);
  e.device_slot = kNoSlot;
  e.device_event = CopyEvent();
  --device_used_;
  ++stats_.device_evictions;
  return Status::Ok();
}

// Keeps the tiers exclusive: once a pinned block's device copy is complete, its host copy is
// released when the SSD also holds it, leaving host room for blocks the device does not hold.
void OffloadedSequence::ReleaseHostCopies() {
  for (const size_t i : pinned_) {
    Entry& e = entries_[i];
    if (e.host_slot == kNoSlot || !e.ssd_current || e.read != kNoRead) continue;
    if (!e.host_event.Ready() || !e.device_event.Ready()) continue;
    tiers_.host->Free(e.host_slot);
    e.host_slot = kNoSlot;
    e.host_current = false;
    --host_used_;
  }
}

// Demotes a host block; writes it to the SSD first when no other copy is current.
Status OffloadedSequence::EvictHost(size_t index) {
  Entry& e = entries_[index];
  if (e.read != kNoRead) KV_RETURN_IF_ERROR(WaitRead(index));
  KV_RETURN_IF_ERROR(e.host_event.Wait());
  KV_RETURN_IF_ERROR(e.device_event.Wait());  // An H2D copy may still read the host slot.
  if (e.host_current && !e.ssd_current && e.device_slot == kNoSlot) {
    KV_RETURN_IF_ERROR(WriteToSsd(index));
  }
  tiers_.host->Free(e.host_slot);
  e.host_slot = kNoSlot;
  e.host_current = false;
  --host_used_;
  ++stats_.host_evictions;
  return Status::Ok();
}

Status OffloadedSequence::WriteToSsd(size_t index) {
  if (tiers_.ssd == nullptr) return Status::NoSpace("host tier full and no SSD tier");
  Entry& e = entries_[index];
  ++e.ssd_generation;
  SsdBlockWrite write;
  write.key = SsdKey(index);
  write.layout_digest = layout_digest_;
  write.codec_id = 0;  // Identity: the precision ladder is not applied here yet.
  write.raw_bytes = static_cast<uint32_t>(block_bytes_);
  write.payload = std::span<const std::byte>(HostData(e.host_slot), block_bytes_);
  KV_RETURN_IF_ERROR(tiers_.ssd->WriteBatchSync(std::span(&write, 1)));
  KV_RETURN_IF_ERROR(write.status);
  e.ssd_current = true;
  stats_.bytes_ssd_written += block_bytes_;
  return Status::Ok();
}

void OffloadedSequence::OnReadDone(uint32_t slot, Status status) {
  MutexLock lock(&mu_);
  read_done_[slot] = 1;
  read_status_[slot] = std::move(status);
  read_cv_.SignalAll();
}

// Starts an SSD -> host read of a block whose only current copy is on the SSD. Busy when the
// read pool or the host tier (for blocks needed sooner) is exhausted.
Status OffloadedSequence::StartSsdRead(size_t index, uint32_t distance_min) {
  Entry& e = entries_[index];
  KV_CHECK(e.read == kNoRead);
  if (free_reads_.empty()) return Status::Busy("SSD read pool exhausted");
  if (e.host_slot == kNoSlot) {
    const bool was_pinned = std::exchange(e.pinned, true);
    Result<uint32_t> host = AllocateHost(distance_min);
    e.pinned = was_pinned;
    if (!host.ok()) return host.status();
    e.host_slot = *host;
  }
  const uint32_t slot = free_reads_.back();
  free_reads_.pop_back();
  ReadSlot& r = reads_[slot];
  r.index = index;
  r.read = SsdBlockRead{};
  r.read.key = SsdKey(index);
  r.read.layout_digest = layout_digest_;
  r.read.buffer =
      std::span<std::byte>(tiers_.host->SlotData(e.host_slot), tiers_.host->slot_bytes());
  {
    MutexLock lock(&mu_);
    read_done_[slot] = 0;
  }
  e.read = static_cast<int32_t>(slot);
  tiers_.ssd->ReadBatch(std::span(&r.read, 1),
                        [this, slot](Status s) { OnReadDone(slot, std::move(s)); });
  return Status::Ok();
}

// A completed read: verify and copy the payload into the block's host slot.
Status OffloadedSequence::FinishRead(uint32_t slot) {
  ReadSlot& r = reads_[slot];
  Entry& e = entries_[r.index];
  Status status;
  {
    MutexLock lock(&mu_);
    status = read_status_[slot];
  }
  e.read = kNoRead;
  free_reads_.push_back(slot);
  KV_RETURN_IF_ERROR(status);
  KV_RETURN_IF_ERROR(r.read.status);
  if (r.read.codec_id != 0 || r.read.payload.size() != block_bytes_ ||
      r.read.payload.data() != HostData(e.host_slot)) {
    return Status::Corruption("offloaded block on SSD has an unexpected codec or size");
  }
  e.host_current = true;
  stats_.bytes_ssd_read += block_bytes_;
  return Status::Ok();
}

Status OffloadedSequence::HarvestReads() {
  for (uint32_t slot = 0; slot < reads_.size(); ++slot) {
    if (entries_.empty() ||
        std::find(free_reads_.begin(), free_reads_.end(), slot) != free_reads_.end()) {
      continue;
    }
    bool done = false;
    {
      MutexLock lock(&mu_);
      done = read_done_[slot] != 0;
    }
    if (done) KV_RETURN_IF_ERROR(FinishRead(slot));
  }
  return Status::Ok();
}

Status OffloadedSequence::WaitRead(size_t index) {
  const auto slot = static_cast<uint32_t>(entries_[index].read);
  {
    MutexLock lock(&mu_);
    while (read_done_[slot] == 0) read_cv_.Wait(&mu_);
  }
  return FinishRead(slot);
}

// Starts host -> device copies of `indexes` (blocks current on the host) in one batch. Blocks
// that get no slot set *pressure and are skipped (prefetch) or fail the call (distance 0).
Status OffloadedSequence::LoadToDevice(std::span<const size_t> indexes, uint32_t distance_min,
                                       bool* pressure) {
  regions_.clear();
  scratch_chunks_.clear();
  for (const size_t i : indexes) entries_[i].loading = true;  // Their host slots must stay.
  for (const size_t i : indexes) {
    Entry& e = entries_[i];
    Result<uint32_t> slot = AllocateDevice(distance_min);
    if (!slot.ok()) {
      if (distance_min == 0 && slot.status().code() == StatusCode::kBusy) {
        return Status::NoSpace("device budget below the blocks one layer reads");
      }
      if (distance_min == 0) return slot.status();
      *pressure = true;
      break;
    }
    e.device_slot = *slot;
    KV_RETURN_IF_ERROR(e.host_event.Wait());  // A write-back into the host slot finished.
    regions_.push_back(
        {tiers_.device->SlotData(e.device_slot), HostData(e.host_slot), block_bytes_});
    scratch_chunks_.push_back(static_cast<uint32_t>(i % options_.chunks_max));
  }
  for (const size_t i : indexes) entries_[i].loading = false;
  if (regions_.empty()) return Status::Ok();
  const CopyEvent event = tiers_.device->Copy(CopyKind::kHostToDevice, regions_);
  const uint32_t layer = static_cast<uint32_t>(indexes[0] / options_.chunks_max);
  for (const uint32_t chunk : scratch_chunks_) {
    Entry& e = entries_[Index(layer, chunk)];
    e.device_event = event;
  }
  stats_.bytes_host_to_device += regions_.size() * block_bytes_;
  return Status::Ok();
}

void OffloadedSequence::Unpin() {
  for (const size_t i : pinned_) entries_[i].pinned = false;
  pinned_.clear();
}

void OffloadedSequence::PlannedChunks(uint32_t layer, std::vector<uint32_t>* out) const {
  out->clear();
  if (has_plan_[layer] != 0) {
    for (const uint32_t c : plans_[layer]) {
      if (c < chunks_written_[layer]) out->push_back(c);
    }
    return;
  }
  for (uint32_t c = 0; c < chunks_written_[layer]; ++c) out->push_back(c);
}

Status OffloadedSequence::AcquireLayer(uint32_t layer, std::span<const uint32_t> chunks) {
  KV_RETURN_IF_ERROR(HarvestReads());
  Unpin();
  cursor_layer_ = layer;
  const uint64_t start_us = NowUs();
  scratch_.clear();
  for (const uint32_t c : chunks) {
    const size_t i = Index(layer, c);
    Entry& e = entries_[i];
    if (!e.written) return Status::InvalidArgument("AcquireLayer of a chunk never written");
    e.pinned = true;
    e.last_use = ++tick_;
    pinned_.push_back(i);
    if (e.device_slot != kNoSlot) continue;
    ++stats_.blocks_demand;
    KV_RETURN_IF_ERROR(StartDemandRead(i));
    scratch_.push_back(i);
  }
  for (const size_t i : scratch_) {
    if (entries_[i].read != kNoRead) KV_RETURN_IF_ERROR(WaitRead(i));
  }
  bool pressure = false;
  KV_RETURN_IF_ERROR(LoadToDevice(scratch_, 0, &pressure));
  for (const size_t i : pinned_) KV_RETURN_IF_ERROR(entries_[i].device_event.Wait());
  const uint64_t stall_us = NowUs() - start_us;
  ReleaseHostCopies();
  stats_.stall_us += stall_us;
  stats_.last_stall_us = stall_us;
  ++stats_.layers_acquired;
  KV_RETURN_IF_ERROR(Prefetch(layer, &pressure));
  stats_.depth = depth_.Observe(stall_us, pressure);
  stats_.depth_grows = depth_.grows();
  stats_.depth_shrinks = depth_.shrinks();
  return Status::Ok();
}

// Makes sure a block needed now is current on the host or on its way there: starts its SSD
// read, waiting for an earlier read when the pool is exhausted.
Status OffloadedSequence::StartDemandRead(size_t index) {
  const Entry& e = entries_[index];
  if (e.read != kNoRead || e.host_current) return Status::Ok();
  if (tiers_.ssd == nullptr || !e.ssd_current) {
    return Status::Corruption("offloaded block has no current copy in any tier");
  }
  Status s = StartSsdRead(index, 0);
  while (s.code() == StatusCode::kBusy) {
    KV_RETURN_IF_ERROR(WaitRead(FirstPendingRead()));
    s = StartSsdRead(index, 0);
  }
  return s;
}

size_t OffloadedSequence::FirstPendingRead() const {
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (entries_[i].read != kNoRead) return i;
  }
  KV_CHECK(false);
  return 0;
}

// Loads ahead along the layer schedule: host -> device for layers +1..+depth, SSD -> host for
// layers +1..+depth+1. Only slots held by blocks needed later than the prefetched one are
// reclaimed, so prefetch never evicts what it (or the current layer) needs sooner.
Status OffloadedSequence::Prefetch(uint32_t layer, bool* pressure) {
  const uint32_t depth = depth_.depth();
  const uint32_t layers = options_.layout.layers;
  if (depth == 0) return Status::Ok();
  for (uint32_t d = 1; d <= std::min(depth + 1, layers - 1); ++d) {
    const uint32_t next = (layer + d) % layers;
    PlannedChunks(next, &scratch_chunks_);
    const std::vector<uint32_t> chunks = scratch_chunks_;  // LoadToDevice reuses the scratch.
    scratch_.clear();
    for (const uint32_t c : chunks) {
      const size_t i = Index(next, c);
      Entry& e = entries_[i];
      if (e.device_slot != kNoSlot) continue;
      if (e.read == kNoRead && !e.host_current) {
        const Status s = StartSsdRead(i, d);
        if (!s.ok() && s.code() != StatusCode::kBusy && s.code() != StatusCode::kNoSpace) return s;
        if (!s.ok()) break;  // Pool or host full of blocks needed sooner: stop this layer.
        ++stats_.blocks_prefetched;
        continue;
      }
      if (d <= depth && e.read == kNoRead) scratch_.push_back(i);
    }
    if (!scratch_.empty()) {
      KV_RETURN_IF_ERROR(LoadToDevice(scratch_, d, pressure));
      stats_.blocks_prefetched += regions_.size();
    }
  }
  return Status::Ok();
}

Result<std::span<std::byte>> OffloadedSequence::MutableBlock(uint32_t layer, uint32_t chunk) {
  if (layer >= options_.layout.layers || chunk >= options_.chunks_max) {
    return Status::NoSpace("MutableBlock beyond the sequence's capacity");
  }
  KV_RETURN_IF_ERROR(HarvestReads());
  Unpin();
  cursor_layer_ = layer;  // Writes follow the layer schedule too.
  const size_t i = Index(layer, chunk);
  Entry& e = entries_[i];
  e.last_use = ++tick_;
  if (e.device_slot == kNoSlot) {
    e.pinned = true;
    if (e.written) KV_RETURN_IF_ERROR(StartDemandRead(i));
    if (e.read != kNoRead) KV_RETURN_IF_ERROR(WaitRead(i));
    Result<uint32_t> slot = AllocateDevice(0);
    e.pinned = false;
    if (!slot.ok()) return Status::NoSpace("device budget has no slot for a written block");
    e.device_slot = *slot;
    if (e.written) {
      const CopyRegion region{tiers_.device->SlotData(e.device_slot), HostData(e.host_slot),
                              block_bytes_};
      e.device_event = tiers_.device->Copy(CopyKind::kHostToDevice, std::span(&region, 1));
      stats_.bytes_host_to_device += block_bytes_;
    } else {
      std::memset(tiers_.device->SlotData(e.device_slot), 0, block_bytes_);
    }
  }
  KV_RETURN_IF_ERROR(e.device_event.Wait());
  if (e.host_slot != kNoSlot) {
    KV_RETURN_IF_ERROR(e.host_event.Wait());
    tiers_.host->Free(e.host_slot);
    e.host_slot = kNoSlot;
    --host_used_;
  }
  e.host_current = false;
  e.ssd_current = false;  // The old record stays until the SSD reclaims it; a new one is keyed
                          // by the next generation.
  e.written = true;
  chunks_written_[layer] = std::max(chunks_written_[layer], chunk + 1);
  return std::span<std::byte>(tiers_.device->SlotData(e.device_slot), block_bytes_);
}

std::span<const std::byte> OffloadedSequence::DeviceBlock(uint32_t layer, uint32_t chunk) const {
  const Entry& e = entries_[Index(layer, chunk)];
  KV_CHECK(e.pinned);
  KV_CHECK(e.device_slot != kNoSlot);
  KV_CHECK(e.device_event.Ready());
  return {tiers_.device->SlotData(e.device_slot), block_bytes_};
}

std::span<const std::byte> OffloadedSequence::PeekDeviceBlock(uint32_t layer, uint32_t chunk) {
  const Entry& e = entries_[Index(layer, chunk)];
  if (!e.written || e.device_slot == kNoSlot || !e.device_event.Ready()) return {};
  return {tiers_.device->SlotData(e.device_slot), block_bytes_};
}

void OffloadedSequence::PlanLayer(uint32_t layer, std::span<const uint32_t> chunks) {
  KV_CHECK(layer < options_.layout.layers);
  plans_[layer].assign(chunks.begin(), chunks.end());
  has_plan_[layer] = 1;
}

void OffloadedSequence::ClearPlan(uint32_t layer) {
  KV_CHECK(layer < options_.layout.layers);
  has_plan_[layer] = 0;
}

BlockPlacement OffloadedSequence::Placement(uint32_t layer, uint32_t chunk) const {
  const Entry& e = entries_[Index(layer, chunk)];
  return {.written = e.written,
          .device = e.device_slot != kNoSlot,
          .host = e.host_slot != kNoSlot && e.host_current,
          .ssd = e.ssd_current};
}

OffloadStats OffloadedSequence::Stats() const {
  OffloadStats s = stats_;
  s.device_blocks = device_used_;
  s.host_blocks = host_used_;
  return s;
}

Status OffloadedSequence::CheckInvariants() const {
  uint32_t device = 0;
  uint32_t host = 0;
  std::vector<uint32_t> slots;
  for (const Entry& e : entries_) {
    if (e.device_slot != kNoSlot) {
      ++device;
      slots.push_back(e.device_slot);
    }
    if (e.host_slot != kNoSlot) ++host;
    if (e.written && e.device_slot == kNoSlot && !e.host_current && !e.ssd_current &&
        e.read == kNoRead) {
      return Status::Corruption("a written block has no current copy");
    }
    if (!e.written && (e.host_current || e.ssd_current)) {
      return Status::Corruption("an unwritten block has a lower-tier copy");
    }
    if (e.pinned && e.device_slot == kNoSlot) {
      return Status::Corruption("a pinned block is not on the device");
    }
  }
  std::sort(slots.begin(), slots.end());
  if (std::adjacent_find(slots.begin(), slots.end()) != slots.end()) {
    return Status::Corruption("two blocks share a device slot");
  }
  if (device != device_used_ || host != host_used_) {
    return Status::Corruption("slot counters disagree with the block table");
  }
  if (device > options_.device_blocks_max) return Status::Corruption("device budget exceeded");
  return Status::Ok();
}

}  // namespace kvtier
