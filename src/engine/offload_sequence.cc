// OffloadedSequence: the block table, victim choice, the demand path and prefetch. SSD reads and
// writes and the codec work are in offload_sequence_io.cc; offload_sequence_internal.h holds the
// pieces both files share.
#include "engine/offload_sequence.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "codecs/block_format.h"
#include "core/aligned_buffer.h"
#include "core/assert.h"
#include "engine/offload_sequence_internal.h"

namespace kvtier {

using offload_internal::kNoPos;
using offload_internal::kNoRead;
using offload_internal::kNoSlot;
using offload_internal::NowUs;
using offload_internal::Rank;

uint64_t OffloadedSequence::PayloadBytesMax(
    const KvLayout& layout, const std::optional<codecs::PrecisionLadderOptions>& ladder) {
  uint64_t payload = layout.BlockBytes();
  if (ladder.has_value()) {
    const codecs::BlockGeometry g = offload_internal::GeometryOf(layout);
    for (const codecs::CodecParams& p :
         {ladder->full_precision_memory, ladder->int8, ladder->int4}) {
      const Result<size_t> bytes = codecs::MaxEncodedSize(p, g);
      if (bytes.ok()) payload = std::max<uint64_t>(payload, *bytes);
    }
  }
  return payload;
}

uint32_t OffloadedSequence::HostSlotBytes(
    const KvLayout& layout, const Tier* ssd,
    const std::optional<codecs::PrecisionLadderOptions>& ladder) {
  const uint64_t payload = PayloadBytesMax(layout, ladder);
  const uint64_t total = ssd != nullptr ? ssd->ReadBufferBytes(payload) : payload;
  return static_cast<uint32_t>(AlignUp(total, kDirectIoAlignment));
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
  if (codec_threads == 0 || codec_threads > kOffloadCodecThreadsMax) {
    return Status::InvalidArgument("OffloadSequenceOptions.codec_threads out of [1, 16]");
  }
  if (ladder.has_value()) {
    KV_RETURN_IF_ERROR(ladder->Validate());
    if (!ladder->full_precision_memory.lossless()) {
      return Status::InvalidArgument(
          "OffloadSequenceOptions.ladder.full_precision_memory must be lossless");
    }
  }
  return depth.Validate();
}

OffloadedSequence::OffloadedSequence(const OffloadSequenceOptions& options,
                                     const OffloadTiers& tiers)
    : options_(options),
      tiers_(tiers),
      block_bytes_(options.layout.BlockBytes()),
      host_offset_(tiers.ssd != nullptr ? tiers.ssd->PayloadOffset() : 0),
      geometry_(offload_internal::GeometryOf(options.layout)),
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
  if (tiers.host->slot_bytes() <
      HostSlotBytes(options.layout, tiers.ssd, options.ladder)) {
    return Status::InvalidArgument("OffloadTiers: host slot_bytes below HostSlotBytes()");
  }
  if (options.ladder.has_value() && options.ladder_attention == LadderAttention::kQuantized) {
    const codecs::BlockGeometry g = offload_internal::GeometryOf(options.layout);
    for (const codecs::CodecParams& p : {options.ladder->int8, options.ladder->int4}) {
      const Result<size_t> bytes = codecs::MaxEncodedSize(p, g);
      if (bytes.ok() && *bytes > tiers.device->slot_bytes()) {
        return Status::InvalidArgument(
            "OffloadTiers: device slot_bytes below the ladder's encoded block (" + p.ToString() +
            ")");
      }
    }
  }
  if (tiers.ssd != nullptr &&
      tiers.ssd->batch_max() < std::max(kOffloadReadBatchBlocks, kOffloadWriteBatchBlocks)) {
    return Status::InvalidArgument("OffloadTiers: the SSD tier's batch_max() is below " +
                                   std::to_string(std::max(kOffloadReadBatchBlocks,
                                                           kOffloadWriteBatchBlocks)) +
                                   " blocks");
  }
  if (tiers.device->slots() < options.device_blocks_max) {
    return Status::InvalidArgument("device_blocks_max exceeds the device tier's slots");
  }
  std::unique_ptr<OffloadedSequence> seq(new OffloadedSequence(options, tiers));
  KV_RETURN_IF_ERROR(seq->Init());
  return seq;
}

OffloadedSequence::~OffloadedSequence() {
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (entries_[i].read != kNoRead) WaitRead(i).IgnoreError();
  }
  codec_pool_.reset();  // Finishes the decodes in flight.
  std::vector<BlockKey> erase;
  for (size_t i = 0; i < entries_.size(); ++i) {
    Entry& e = entries_[i];
    e.device_event.Wait().IgnoreError();
    e.host_event.Wait().IgnoreError();
    if (e.device_slot != kNoSlot) tiers_.device->Free(e.device_slot);
    if (e.host_slot != kNoSlot) tiers_.host->Free(e.host_slot);
    if (e.ssd_current && tiers_.ssd != nullptr) erase.push_back(SsdKey(i));
  }
  const size_t erase_max = tiers_.ssd != nullptr ? tiers_.ssd->batch_max() : 1;
  for (size_t i = 0; i < erase.size(); i += erase_max) {
    const size_t n = std::min<size_t>(erase_max, erase.size() - i);
    tiers_.ssd->Erase(std::span(erase).subspan(i, n)).IgnoreError();
  }
}

size_t OffloadedSequence::Index(uint32_t layer, uint32_t chunk) const {
  KV_CHECK(layer < options_.layout.layers);
  KV_CHECK(chunk < options_.chunks_max);
  return size_t{layer} * options_.chunks_max + chunk;
}

uint32_t OffloadedSequence::LayerOf(size_t index) const {
  return static_cast<uint32_t>(index / options_.chunks_max);
}

uint32_t OffloadedSequence::ChunkOf(size_t index) const {
  return static_cast<uint32_t>(index % options_.chunks_max);
}

// How many layer steps until the block is needed again, in [1, layers]: 1 for the next layer;
// the layer being computed (when unpinned) and the one just computed come last.
uint32_t OffloadedSequence::Distance(size_t index) const {
  const uint32_t layers = options_.layout.layers;
  return (LayerOf(index) + layers - cursor_layer_ - 1) % layers + 1;
}

float OffloadedSequence::HeatAt(size_t index) const {
  const Entry& e = entries_[index];
  if (e.heat == 0.0f) return 0.0f;
  const double age = static_cast<double>(step_ - e.heat_step);
  return static_cast<float>(e.heat * std::exp2(-age / heat_half_life_steps_));
}

void OffloadedSequence::ObserveHeat(uint32_t layer, uint32_t chunk, float mass) {
  const size_t i = Index(layer, chunk);
  Entry& e = entries_[i];
  e.heat = HeatAt(i) + std::max(mass, 0.0f);
  e.heat_step = step_;
}

float OffloadedSequence::Heat(uint32_t layer, uint32_t chunk) const {
  return HeatAt(Index(layer, chunk));
}

// Among blocks needed equally soon: regular chunks before sink chunks, then the least heat,
// then the least recently used.
bool OffloadedSequence::Colder(size_t a, size_t b) const {
  const bool sink_a = ChunkOf(a) < options_.sink_chunks;
  const bool sink_b = ChunkOf(b) < options_.sink_chunks;
  if (sink_a != sink_b) return !sink_a;
  const float heat_a = HeatAt(a);
  const float heat_b = HeatAt(b);
  if (heat_a != heat_b) return heat_a < heat_b;
  return entries_[a].last_use < entries_[b].last_use;
}

// A device copy is clean when a current copy below holds it at the precision its age calls for:
// dropping it then loses nothing.
bool OffloadedSequence::DeviceCopyClean(size_t index) const {
  const Entry& e = entries_[index];
  if (!e.host_current && !e.ssd_current) return false;
  if (!ladder_.has_value()) return true;
  const uint32_t stored = e.host_current ? Rank(e.host_codec) : Rank(e.ssd_codec);
  return Rank(RungFor(index)) <= stored;
}

void OffloadedSequence::TrackDevice(size_t index, bool resident) {
  offload_internal::Track(&device_list_, &entries_[index].device_pos, index, resident,
                          [this](size_t moved, uint32_t pos) { entries_[moved].device_pos = pos; });
  stats_.device_blocks_peak =
      std::max(stats_.device_blocks_peak, static_cast<uint32_t>(device_list_.size()));
}

void OffloadedSequence::TrackHost(size_t index, bool resident) {
  offload_internal::Track(&host_list_, &entries_[index].host_pos, index, resident,
                          [this](size_t moved, uint32_t pos) { entries_[moved].host_pos = pos; });
}

int64_t OffloadedSequence::FindDeviceVictim(uint32_t distance_min, bool clean_only) const {
  int64_t best = -1;
  uint32_t best_distance = 0;
  for (const size_t i : device_list_) {
    const Entry& e = entries_[i];
    if (e.pinned || e.loading) continue;
    const uint32_t d = Distance(i);
    if (d <= distance_min || (clean_only && !DeviceCopyClean(i))) continue;
    if (best < 0 || d > best_distance ||
        (d == best_distance && Colder(i, static_cast<size_t>(best)))) {
      best = static_cast<int64_t>(i);
      best_distance = d;
    }
  }
  return best;
}

// clean_only (prefetch): the victim's demotion may not force anything else out, so a dirty
// block qualifies only while the host tier has a free slot to take it.
Result<uint32_t> OffloadedSequence::AllocateDevice(uint32_t distance_min, bool clean_only) {
  if (device_list_.size() >= options_.device_blocks_max) {
    const bool host_free = host_list_.size() < tiers_.host->slots();
    const int64_t victim = FindDeviceVictim(distance_min, clean_only && !host_free);
    if (victim < 0) return Status::Busy("device budget full of blocks needed sooner");
    KV_RETURN_IF_ERROR(EvictDevice(static_cast<size_t>(victim), !clean_only));
  }
  return tiers_.device->Allocate();
}

// Demotes a device block: a dirty one (or one whose stored rung is finer than its age calls for)
// is written down to the host; a clean raw one is kept in a free host slot when there is one
// (host and device together then hold more distinct blocks), else dropped.
Status OffloadedSequence::EvictDevice(size_t index, bool may_evict_host) {
  Entry& e = entries_[index];
  KV_RETURN_IF_ERROR(e.device_event.Wait());
  if (!DeviceCopyClean(index)) {
    KV_RETURN_IF_ERROR(DemoteToHost(index, may_evict_host));
  } else if (e.host_slot == kNoSlot && e.read == kNoRead && e.device_codec == 0 &&
             RungFor(index).codec == codecs::CodecId::kIdentity) {
    // Only a plain copy is worth it: re-encoding a clean block costs more CPU than reading its
    // encoded record back.
    Result<uint32_t> free_slot = tiers_.host->Allocate();
    if (free_slot.ok()) {
      e.host_slot = *free_slot;
      TrackHost(index, true);
      KV_RETURN_IF_ERROR(EncodeToHost(index, codecs::CodecParams::Identity()));
    }
  }
  if (e.fresh && observer_ != nullptr) {
    observer_->OnWrittenBlockLeavesDevice(
        LayerOf(index), ChunkOf(index),
        std::span<const std::byte>(tiers_.device->SlotData(e.device_slot), block_bytes_));
  }
  e.fresh = false;
  tiers_.device->Free(e.device_slot);
  e.device_slot = kNoSlot;
  e.device_codec = 0;
  e.device_event = CopyEvent();
  TrackDevice(index, false);
  ++stats_.device_evictions;
  return Status::Ok();
}

Status OffloadedSequence::DemoteToHost(size_t index, bool may_evict_host) {
  Entry& e = entries_[index];
  const bool reencode = e.host_current || e.ssd_current;
  if (e.host_slot == kNoSlot) {
    const bool was_pinned = std::exchange(e.pinned, true);  // Not a host victim itself.
    Result<uint32_t> host = may_evict_host ? AllocateHost(0, false) : tiers_.host->Allocate();
    e.pinned = was_pinned;
    if (!host.ok()) {
      if (may_evict_host && tiers_.ssd != nullptr) {
        KV_RETURN_IF_ERROR(SpillToSsd(index));
        if (reencode) ++stats_.blocks_reencoded;
        return Status::Ok();
      }
      return Status::NoSpace("host tier cannot take a block demoted from the device: " +
                             host.status().message());
    }
    e.host_slot = *host;
    TrackHost(index, true);
  } else {
    KV_RETURN_IF_ERROR(e.host_event.Wait());
  }
  KV_RETURN_IF_ERROR(EncodeToHost(index, RungFor(index)));
  e.ssd_current = false;  // Rewritten (the record of an older generation is left to reclaim).
  if (reencode) ++stats_.blocks_reencoded;
  return Status::Ok();
}

// Host blocks with a read in flight are victims only when nothing else is (the eviction then
// waits for the read): prefetched reads must not leave a demand load without a slot.
int64_t OffloadedSequence::FindHostVictim(uint32_t distance_min, bool clean_only,
                                          bool reading) const {
  int64_t best = -1;
  uint32_t best_distance = 0;
  for (const size_t i : host_list_) {
    const Entry& e = entries_[i];
    if ((e.read != kNoRead) != reading || e.pinned || e.loading) continue;
    const bool only_copy = e.host_current && !e.ssd_current && e.device_slot == kNoSlot;
    // An only copy goes down to the SSD first (not for prefetch, and not without an SSD).
    if (only_copy && (clean_only || tiers_.ssd == nullptr)) continue;
    if (clean_only && e.host_current && !e.ssd_current) continue;
    const uint32_t d = Distance(i);
    if (d <= distance_min) continue;
    if (best < 0 || d > best_distance ||
        (d == best_distance && Colder(i, static_cast<size_t>(best)))) {
      best = static_cast<int64_t>(i);
      best_distance = d;
    }
  }
  return best;
}

Result<uint32_t> OffloadedSequence::AllocateHost(uint32_t distance_min, bool clean_only) {
  Result<uint32_t> slot = tiers_.host->Allocate();
  if (slot.ok()) return slot;
  int64_t victim = FindHostVictim(distance_min, clean_only, false);
  if (victim < 0 && !clean_only) victim = FindHostVictim(distance_min, clean_only, true);
  if (victim < 0) return Status::NoSpace("host tier full and nothing can be demoted");
  KV_RETURN_IF_ERROR(EvictHostBatch(static_cast<size_t>(victim), distance_min));
  return tiers_.host->Allocate();
}

// Frees the host slot of `first`; when that copy must go to the SSD first, other dirty victims
// needed no sooner go with it in one write batch (the SSD writes them in parallel).
Status OffloadedSequence::EvictHostBatch(size_t first, uint32_t distance_min) {
  std::vector<size_t>& batch = evict_scratch_;
  batch.assign(1, first);
  const auto needs_write = [this](size_t i) {
    const Entry& e = entries_[i];
    return e.host_current && !e.ssd_current;
  };
  if (needs_write(first)) {
    for (const size_t i : host_list_) {
      if (batch.size() >= kOffloadWriteBatchBlocks) break;
      const Entry& e = entries_[i];
      if (i == first || e.pinned || e.loading || e.read != kNoRead || !needs_write(i)) continue;
      if (e.device_slot != kNoSlot || Distance(i) <= distance_min) continue;
      batch.push_back(i);
    }
  }
  for (const size_t i : batch) {
    Entry& e = entries_[i];
    if (e.read != kNoRead) KV_RETURN_IF_ERROR(WaitRead(i));
    KV_RETURN_IF_ERROR(e.host_event.Wait());
    KV_RETURN_IF_ERROR(e.device_event.Wait());  // An H2D copy may still read the host slot.
  }
  if (needs_write(first)) KV_RETURN_IF_ERROR(WriteToSsd(batch));
  for (const size_t i : batch) {
    FreeHost(i);
    ++stats_.host_evictions;
  }
  return Status::Ok();
}

void OffloadedSequence::FreeHost(size_t index) {
  Entry& e = entries_[index];
  tiers_.host->Free(e.host_slot);
  e.host_slot = kNoSlot;
  e.host_current = false;
  e.host_event = CopyEvent();
  TrackHost(index, false);
}

// Keeps the tiers exclusive: once a device copy is complete (the layer being acquired, or one
// prefetched ahead), its host copy is released when the SSD also holds it, leaving host room for
// the reads of the next layers.
void OffloadedSequence::ReleaseHostCopies() {
  for (const size_t i : device_list_) {
    Entry& e = entries_[i];
    if (e.host_slot == kNoSlot || !e.ssd_current || e.read != kNoRead || e.loading) continue;
    if (!e.host_event.Ready() || !e.device_event.Ready()) continue;
    FreeHost(i);
  }
}

// Starts host -> device transfers of `indexes` (blocks current on the host): plain copies for
// raw host copies and for encoded ones the device keeps encoded (KeepsEncoded), decodes for the
// other encoded ones. Blocks that get no slot set *pressure and are
// skipped (prefetch: distance_min > 0, clean victims only) or fail the call (distance_min 0).
Status OffloadedSequence::LoadToDevice(std::span<const size_t> indexes, uint32_t distance_min,
                                       bool* pressure) {
  regions_.clear();
  raw_scratch_.clear();
  decode_scratch_.clear();
  for (const size_t i : indexes) entries_[i].loading = true;  // Their host slots must stay.
  Status status;
  for (const size_t i : indexes) {
    Entry& e = entries_[i];
    Result<uint32_t> slot = AllocateDevice(distance_min, distance_min > 0);
    if (!slot.ok()) {
      if (distance_min > 0) {
        *pressure = true;
        break;
      }
      status = slot.status().code() == StatusCode::kBusy
                   ? Status::NoSpace("device budget below the blocks one layer reads")
                   : slot.status();
      break;
    }
    e.device_slot = *slot;
    e.device_codec = 0;
    e.device_bytes = static_cast<uint32_t>(block_bytes_);
    TrackDevice(i, true);
    status = e.host_event.Wait();  // A write-back into the host slot finished.
    if (!status.ok()) break;
    const bool copy = e.host_codec == 0 || KeepsEncoded(e.host_codec);
    if (copy && e.host_codec != 0) {
      e.device_codec = e.host_codec;
      e.device_bytes = e.host_bytes;
    }
    if (copy) {
      regions_.push_back(
          {tiers_.device->SlotData(e.device_slot), HostData(e.host_slot), e.device_bytes});
      raw_scratch_.push_back(i);
      stats_.bytes_host_to_device += e.device_bytes;
      if (e.device_codec != 0) ++stats_.blocks_promoted_encoded;
    } else {
      decode_scratch_.push_back(i);
      stats_.bytes_host_to_device += block_bytes_;
    }
  }
  for (const size_t i : indexes) entries_[i].loading = false;
  if (!regions_.empty()) {
    const CopyEvent event = tiers_.device->Copy(CopyKind::kHostToDevice, regions_);
    for (const size_t i : raw_scratch_) entries_[i].device_event = event;
  }
  if (!decode_scratch_.empty()) {
    const CopyEvent event = DecodeToDevice(decode_scratch_);
    for (const size_t i : decode_scratch_) entries_[i].device_event = event;
  }
  return status;
}

// The demand path: streams `indexes` (pinned, not on the device) SSD -> host -> device through
// whatever host room there is, so a host tier smaller than a layer still works.
Status OffloadedSequence::BringToDevice(std::span<const size_t> indexes) {
  std::vector<size_t>& left = left_scratch_;
  std::vector<size_t>& ready = ready_scratch_;
  left.assign(indexes.begin(), indexes.end());
  while (!left.empty()) {
    for (const size_t i : left) KV_RETURN_IF_ERROR(TakeReadError(i));
    size_t started = 0;
    KV_RETURN_IF_ERROR(StartReads(left, 0, &started));
    KV_RETURN_IF_ERROR(HarvestReads());
    for (const size_t i : left) KV_RETURN_IF_ERROR(TakeReadError(i));
    ready.clear();
    size_t kept = 0;
    for (const size_t i : left) {
      const Entry& e = entries_[i];
      if (e.host_current && e.read == kNoRead) {
        ready.push_back(i);
      } else {
        left[kept++] = i;
      }
    }
    left.resize(kept);
    if (!ready.empty()) {
      bool pressure = false;
      KV_RETURN_IF_ERROR(LoadToDevice(ready, 0, &pressure));
      continue;
    }
    const auto reading = std::find_if(left.begin(), left.end(),
                                      [this](size_t i) { return entries_[i].read != kNoRead; });
    if (reading != left.end()) {
      KV_RETURN_IF_ERROR(WaitRead(*reading));
      continue;
    }
    // No read could start. The read pool may be taken by prefetches: wait for one of them.
    if (free_batches_.empty() && !busy_batches_.empty()) {
      KV_RETURN_IF_ERROR(WaitAnyRead());
      continue;
    }
    // Or host slots are held by this layer's blocks still being copied.
    bool released = false;
    for (const size_t i : pinned_) {
      Entry& e = entries_[i];
      if (e.host_slot == kNoSlot || e.device_slot == kNoSlot || !e.ssd_current) continue;
      KV_RETURN_IF_ERROR(e.device_event.Wait());
      released = true;
    }
    const size_t before = host_list_.size();
    if (released) ReleaseHostCopies();
    if (host_list_.size() == before) {
      return Status::NoSpace("host tier too small to stage the blocks of layer " +
                             std::to_string(LayerOf(left[0])));
    }
  }
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
  ReleaseHostCopies();
  Unpin();
  cursor_layer_ = layer;
  ++step_;
  const uint64_t start_us = NowUs();
  std::vector<size_t>& missing = missing_scratch_;
  missing.clear();
  for (const uint32_t c : chunks) {
    const size_t i = Index(layer, c);
    Entry& e = entries_[i];
    if (!e.written) return Status::InvalidArgument("AcquireLayer of a chunk never written");
    e.pinned = true;
    e.last_use = ++tick_;
    pinned_.push_back(i);
    if (e.device_slot == kNoSlot) missing.push_back(i);
  }
  stats_.blocks_acquired += chunks.size();
  stats_.blocks_demand += missing.size();
  KV_RETURN_IF_ERROR(BringToDevice(missing));
  for (const size_t i : pinned_) KV_RETURN_IF_ERROR(entries_[i].device_event.Wait());
  const uint64_t stall_us = NowUs() - start_us;
  ReleaseHostCopies();
  stats_.stall_us += stall_us;
  stats_.last_stall_us = stall_us;
  ++stats_.layers_acquired;
  bool pressure = false;
  KV_RETURN_IF_ERROR(Prefetch(layer, &pressure));
  stats_.depth = depth_.Observe(stall_us, pressure);
  stats_.depth_grows = depth_.grows();
  stats_.depth_shrinks = depth_.shrinks();
  return Status::Ok();
}

// Loads ahead along the layer schedule: host -> device for layers +1..+depth, SSD -> host for
// layers +1..+depth+1. Only slots of clean blocks needed later than the prefetched one are
// reclaimed, so prefetch never evicts what it (or the current layer) needs sooner and never
// forces a write-back.
Status OffloadedSequence::Prefetch(uint32_t layer, bool* pressure) {
  const uint32_t depth = depth_.depth();
  const uint32_t layers = options_.layout.layers;
  if (depth == 0) return Status::Ok();
  std::vector<size_t>& reads = prefetch_reads_;
  std::vector<size_t>& loads = prefetch_loads_;
  for (uint32_t d = 1; d <= std::min(depth + 1, layers - 1); ++d) {
    const uint32_t next = (layer + d) % layers;
    PlannedChunks(next, &scratch_chunks_);
    reads.clear();
    loads.clear();
    for (const uint32_t c : scratch_chunks_) {
      const size_t i = Index(next, c);
      const Entry& e = entries_[i];
      if (e.device_slot != kNoSlot || e.read != kNoRead) continue;
      if (e.host_current) {
        if (d <= depth) loads.push_back(i);
      } else if (e.ssd_current) {
        reads.push_back(i);
      }
    }
    size_t started = 0;
    KV_RETURN_IF_ERROR(StartReads(reads, d, &started));
    stats_.blocks_prefetched += started;
    if (started < reads.size()) *pressure = true;
    if (!loads.empty()) {
      KV_RETURN_IF_ERROR(LoadToDevice(loads, d, pressure));
      for (const size_t i : loads) {
        if (entries_[i].device_slot != kNoSlot) ++stats_.blocks_prefetched;
      }
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
  ++step_;
  const size_t i = Index(layer, chunk);
  Entry& e = entries_[i];
  e.last_use = ++tick_;
  if (e.device_slot == kNoSlot) {
    e.pinned = true;
    Status s;
    if (e.written) {
      s = BringToDevice(std::span<const size_t>(&i, 1));
    } else {
      Result<uint32_t> slot = AllocateDevice(0, false);
      if (slot.ok()) {
        e.device_slot = *slot;
        e.device_codec = 0;
        e.device_bytes = static_cast<uint32_t>(block_bytes_);
        TrackDevice(i, true);
        std::memset(tiers_.device->SlotData(e.device_slot), 0, block_bytes_);
      } else {
        s = slot.status();
      }
    }
    e.pinned = false;
    if (!s.ok()) {
      return s.code() == StatusCode::kBusy
                 ? Status::NoSpace("device budget has no slot for a written block")
                 : s;
    }
  }
  KV_RETURN_IF_ERROR(e.device_event.Wait());
  KV_RETURN_IF_ERROR(MakeDeviceRaw(i));  // The caller writes raw bytes.
  if (e.host_slot != kNoSlot) {
    if (e.read != kNoRead) KV_RETURN_IF_ERROR(WaitRead(i));
    KV_RETURN_IF_ERROR(e.host_event.Wait());
    FreeHost(i);
  }
  e.host_current = false;
  e.ssd_current = false;  // The old record stays until the SSD reclaims it; a new one is keyed
                          // by the next generation.
  e.written = true;
  e.fresh = true;
  chunks_written_[layer] = std::max(chunks_written_[layer], chunk + 1);
  newest_chunk_ = std::max(newest_chunk_, chunk);
  return std::span<std::byte>(tiers_.device->SlotData(e.device_slot), block_bytes_);
}

std::span<const std::byte> OffloadedSequence::DeviceBlock(uint32_t layer, uint32_t chunk) const {
  const Entry& e = entries_[Index(layer, chunk)];
  KV_CHECK(e.pinned);
  KV_CHECK(e.device_slot != kNoSlot);
  KV_CHECK(e.device_event.Ready());
  KV_CHECK(e.device_codec == 0);
  return {tiers_.device->SlotData(e.device_slot), block_bytes_};
}

Result<DeviceBlockView> OffloadedSequence::DeviceView(uint32_t layer, uint32_t chunk) const {
  const Entry& e = entries_[Index(layer, chunk)];
  KV_CHECK(e.pinned);
  KV_CHECK(e.device_slot != kNoSlot);
  KV_CHECK(e.device_event.Ready());
  const std::span<const std::byte> bytes(tiers_.device->SlotData(e.device_slot), e.device_bytes);
  if (e.device_codec == 0) return DeviceBlockView{.bytes = bytes};
  Result<codecs::BlockHeader> h = codecs::DecodeBlockHeader(bytes);
  const auto fail = [&](const std::string& why) {
    return Status::Corruption("offloaded block (layer " + std::to_string(layer) + ", chunk " +
                              std::to_string(chunk) + ") on the device does not verify: " + why);
  };
  if (!h.ok()) return fail(h.status().message());
  const codecs::BlockGeometry& g = h->geometry;
  if (static_cast<uint8_t>(h->params.codec) != e.device_codec || g.tokens != geometry_.tokens ||
      g.kv_heads != geometry_.kv_heads || g.head_dim != geometry_.head_dim ||
      g.dtype != geometry_.dtype || h->encoded_bytes() > bytes.size()) {
    return fail("header says " + h->params.ToString() + " " + g.ToString());
  }
  return DeviceBlockView{.codec = e.device_codec, .params = h->params, .bytes = bytes};
}

std::span<const std::byte> OffloadedSequence::PeekDeviceBlock(uint32_t layer, uint32_t chunk) {
  const Entry& e = entries_[Index(layer, chunk)];
  if (!e.written || e.device_slot == kNoSlot || !e.device_event.Ready() || e.device_codec != 0) {
    return {};
  }
  return {tiers_.device->SlotData(e.device_slot), block_bytes_};
}

bool OffloadedSequence::KeepsEncoded(uint8_t codec) const {
  if (!ladder_.has_value() || options_.ladder_attention != LadderAttention::kQuantized) {
    return false;
  }
  switch (static_cast<codecs::CodecId>(codec)) {
    case codecs::CodecId::kInt8:
      return !options_.ladder->int8.uses_zstd();
    case codecs::CodecId::kInt4:
      return !options_.ladder->int4.uses_zstd();
    default:
      return false;
  }
}

Result<std::span<const std::byte>> OffloadedSequence::RawDeviceBytes(size_t index) {
  const Entry& e = entries_[index];
  const std::span<const std::byte> slot(tiers_.device->SlotData(e.device_slot), e.device_bytes);
  if (e.device_codec == 0) return slot;
  const Status s = codecs::DecodeBlock(slot, geometry_, raw_.span().first(block_bytes_),
                                       caller_codec_.get());
  if (!s.ok()) {
    return Status::Corruption("offloaded block (layer " + std::to_string(LayerOf(index)) +
                              ", chunk " + std::to_string(ChunkOf(index)) +
                              ") on the device does not decode: " + s.message());
  }
  return std::span<const std::byte>(raw_.span().first(block_bytes_));
}

Status OffloadedSequence::MakeDeviceRaw(size_t index) {
  Entry& e = entries_[index];
  if (e.device_codec == 0) return Status::Ok();
  KV_ASSIGN_OR_RETURN(const std::span<const std::byte> raw, RawDeviceBytes(index));
  std::memcpy(tiers_.device->SlotData(e.device_slot), raw.data(), block_bytes_);
  e.device_codec = 0;
  e.device_bytes = static_cast<uint32_t>(block_bytes_);
  ++stats_.blocks_decoded;
  return Status::Ok();
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
          .ssd = e.ssd_current,
          .host_codec = e.host_codec,
          .ssd_codec = e.ssd_codec};
}

OffloadStats OffloadedSequence::Stats() const {
  OffloadStats s = stats_;
  s.device_blocks = static_cast<uint32_t>(device_list_.size());
  s.host_blocks = static_cast<uint32_t>(host_list_.size());
  return s;
}

Status OffloadedSequence::CheckInvariants() const {
  uint32_t device = 0;
  uint32_t host = 0;
  std::vector<uint32_t> slots;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    if (e.device_slot != kNoSlot) {
      ++device;
      slots.push_back(e.device_slot);
      if (e.device_pos == kNoPos || device_list_[e.device_pos] != i) {
        return Status::Corruption("a device block is missing from the device list");
      }
    }
    if (e.host_slot != kNoSlot) {
      ++host;
      if (e.host_pos == kNoPos || host_list_[e.host_pos] != i) {
        return Status::Corruption("a host block is missing from the host list");
      }
    }
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
    if (e.host_current && e.host_slot == kNoSlot) {
      return Status::Corruption("a current host copy has no host slot");
    }
  }
  std::sort(slots.begin(), slots.end());
  if (std::adjacent_find(slots.begin(), slots.end()) != slots.end()) {
    return Status::Corruption("two blocks share a device slot");
  }
  if (device != device_list_.size() || host != host_list_.size()) {
    return Status::Corruption("slot counters disagree with the block table");
  }
  if (device > options_.device_blocks_max) return Status::Corruption("device budget exceeded");
  return Status::Ok();
}

}  // namespace kvtier
