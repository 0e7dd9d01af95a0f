// OffloadedSequence: SSD reads (batched, completed on the SSD tier's I/O thread), SSD writes,
// and the codec work of the precision ladder (encode on demotion, decode on promotion).
#include <algorithm>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/assert.h"
#include "engine/offload_sequence.h"
#include "engine/offload_sequence_internal.h"

namespace kvtier {

using offload_internal::kNoRead;
using offload_internal::kNoSlot;

Result<std::unique_ptr<OffloadedSequence::CodecPool>> OffloadedSequence::CodecPool::Create(
    uint32_t threads, const codecs::BlockGeometry& geometry) {
  std::unique_ptr<CodecPool> p(new CodecPool());
  {
    MutexLock lock(&p->mu_);
    for (uint32_t i = 0; i < threads; ++i) {
      KV_ASSIGN_OR_RETURN(codecs::CodecContext ctx, codecs::CodecContext::Create());
      KV_RETURN_IF_ERROR(ctx.Reserve(geometry));
      p->free_.push_back(std::make_unique<codecs::CodecContext>(std::move(ctx)));
    }
  }
  KV_ASSIGN_OR_RETURN(p->pool_, ThreadPool::Create({.threads = threads,
                                                    .queue_tasks_max = 4 * kOffloadCodecThreadsMax,
                                                    .name = "kvtier-decode"}));
  return p;
}

Status OffloadedSequence::CodecPool::Submit(std::function<void(codecs::CodecContext*)> work) {
  return pool_->Submit([this, work = std::move(work)] {
    std::unique_ptr<codecs::CodecContext> ctx;
    {
      MutexLock lock(&mu_);
      KV_CHECK(!free_.empty());  // As many contexts as threads.
      ctx = std::move(free_.back());
      free_.pop_back();
    }
    work(ctx.get());
    MutexLock lock(&mu_);
    free_.push_back(std::move(ctx));
  });
}

Status OffloadedSequence::Init() {
  const KvLayout& l = options_.layout;
  entries_.resize(size_t{l.layers} * options_.chunks_max);
  chunks_written_.assign(l.layers, 0);
  plans_.resize(l.layers);
  has_plan_.assign(l.layers, 0);
  heat_half_life_steps_ = options_.heat_half_life_steps != 0
                              ? static_cast<double>(options_.heat_half_life_steps)
                              : 4.0 * l.layers;
  stats_.depth = depth_.depth();
  if (options_.ladder.has_value()) {
    KV_ASSIGN_OR_RETURN(codecs::PrecisionLadder ladder,
                        codecs::PrecisionLadder::Create(*options_.ladder));
    ladder_ = ladder;
    KV_ASSIGN_OR_RETURN(codecs::CodecContext ctx, codecs::CodecContext::Create());
    KV_RETURN_IF_ERROR(ctx.Reserve(geometry_));
    caller_codec_ = std::make_unique<codecs::CodecContext>(std::move(ctx));
    KV_ASSIGN_OR_RETURN(codec_pool_, CodecPool::Create(options_.codec_threads, geometry_));
    KV_ASSIGN_OR_RETURN(raw_, AlignedBuffer::Allocate(AlignUp(block_bytes_, kDirectIoAlignment)));
  }
  if (tiers_.ssd != nullptr) {
    KV_ASSIGN_OR_RETURN(spill_, HugePageBuffer::Allocate(tiers_.host->slot_bytes()));
    constexpr uint32_t kBatches = kOffloadSsdReadsInFlightMax / kOffloadReadBatchBlocks;
    batches_.resize(kBatches);
    for (uint32_t b = 0; b < kBatches; ++b) {
      batches_[b].reads.reserve(kOffloadReadBatchBlocks);
      batches_[b].indexes.reserve(kOffloadReadBatchBlocks);
      free_batches_.push_back(kBatches - 1 - b);
    }
    MutexLock lock(&mu_);
    batch_done_.assign(kBatches, 0);
    batch_status_.assign(kBatches, Status::Ok());
  }
  return Status::Ok();
}

BlockKey OffloadedSequence::SsdKey(size_t index) const {
  const Entry& e = entries_[index];
  BlockKey key;
  const uint64_t chunk = ChunkOf(index);
  for (size_t b = 0; b < 8; ++b) {
    key.chunk_hash[b] = static_cast<uint8_t>(options_.sequence_id >> (8 * b));
    key.chunk_hash[8 + b] = static_cast<uint8_t>(chunk >> (8 * b));
  }
  for (size_t b = 0; b < 4; ++b) {
    key.chunk_hash[16 + b] = static_cast<uint8_t>(e.ssd_generation >> (8 * b));
  }
  key.chunk_hash[31] = 0x5e;  // Marks offloaded-sequence keys apart from prefix-cache keys.
  key.layer = LayerOf(index);
  return key;
}

// The ladder's rung for the block's age (tokens between the newest chunk and this one) and
// layer.
codecs::CodecParams OffloadedSequence::RungFor(size_t index) const {
  if (!ladder_.has_value()) return codecs::CodecParams::Identity();
  const uint32_t chunk = ChunkOf(index);
  const uint64_t age =
      chunk < newest_chunk_ ? uint64_t{newest_chunk_ - chunk} * options_.layout.block_tokens : 0;
  const codecs::ChunkKind kind =
      chunk < options_.sink_chunks ? codecs::ChunkKind::kSink : codecs::ChunkKind::kRegular;
  return ladder_->Choose(codecs::Tier::kHost, age, kind, LayerOf(index));
}

// Writes the device copy into `out`: a plain device -> host copy for identity, else encoded with
// `rung` (a lossy rung the block cannot take, e.g. non-finite values, falls back to the raw
// copy: full precision always works). A device copy held encoded is decoded first.
// *codec and *bytes describe the result.
Status OffloadedSequence::EncodeInto(size_t index, const codecs::CodecParams& rung,
                                     std::span<std::byte> out, uint8_t* codec, uint32_t* bytes) {
  Entry& e = entries_[index];
  KV_CHECK(e.device_slot != kNoSlot);
  KV_ASSIGN_OR_RETURN(const std::span<const std::byte> src, RawDeviceBytes(index));
  if (rung.codec != codecs::CodecId::kIdentity) {
    const Result<size_t> n = codecs::EncodeBlock(rung, geometry_, src, out, caller_codec_.get());
    if (n.ok()) {
      *codec = static_cast<uint8_t>(rung.codec);
      *bytes = static_cast<uint32_t>(*n);
      ++stats_.blocks_encoded;
      if (rung.bits() == 8) {
        ++stats_.encoded_int8;
      } else if (rung.bits() == 4) {
        ++stats_.encoded_int4;
      } else {
        ++stats_.encoded_lossless;
      }
      return Status::Ok();
    }
  }
  KV_CHECK(out.size() >= block_bytes_);
  const CopyRegion region{out.data(), src.data(), block_bytes_};
  KV_RETURN_IF_ERROR(tiers_.device->Copy(CopyKind::kDeviceToHost, std::span(&region, 1)).Wait());
  *codec = 0;
  *bytes = static_cast<uint32_t>(block_bytes_);
  stats_.bytes_device_to_host += block_bytes_;
  return Status::Ok();
}

Status OffloadedSequence::EncodeToHost(size_t index, const codecs::CodecParams& rung) {
  Entry& e = entries_[index];
  KV_CHECK(e.host_slot != kNoSlot);
  const std::span<std::byte> out(HostData(e.host_slot), tiers_.host->slot_bytes() - host_offset_);
  KV_RETURN_IF_ERROR(EncodeInto(index, rung, out, &e.host_codec, &e.host_bytes));
  e.host_current = true;
  return Status::Ok();
}

// Demotes a device block straight to the SSD through the sequence's spill buffer, for when the
// host tier is full of blocks that must stay (the layer being loaded).
Status OffloadedSequence::SpillToSsd(size_t index) {
  KV_RETURN_IF_ERROR(WriteDeviceToSsd(index));
  ++stats_.blocks_spilled;
  return Status::Ok();
}

Status OffloadedSequence::WriteDeviceToSsd(size_t index) {
  Entry& e = entries_[index];
  KV_CHECK(tiers_.ssd != nullptr);
  uint8_t codec = 0;
  uint32_t bytes = 0;
  const std::span<std::byte> out = spill_.span().subspan(host_offset_);
  KV_RETURN_IF_ERROR(EncodeInto(index, RungFor(index), out, &codec, &bytes));
  ++e.ssd_generation;
  TierWrite w;
  w.key = SsdKey(index);
  w.codec_id = codec;
  w.raw_bytes = static_cast<uint32_t>(block_bytes_);
  w.payload = out.first(bytes);
  w.record = spill_.span();  // The tier lays its record out around the payload (one copy).
  KV_RETURN_IF_ERROR(tiers_.ssd->WriteBatchSync(std::span(&w, 1)));
  if (!w.status.ok()) {
    return Status::IoError("writing an offloaded block to the SSD: " + w.status.message());
  }
  e.ssd_current = true;
  e.ssd_codec = codec;
  e.host_current = false;
  ++stats_.ssd_writes;
  stats_.bytes_ssd_written += tiers_.ssd->ReadBufferBytes(bytes);
  return Status::Ok();
}

Status OffloadedSequence::WriteBack() {
  if (tiers_.ssd == nullptr) return Status::Ok();
  std::vector<size_t> device_only, host_dirty;
  for (const size_t i : device_list_) {
    const Entry& e = entries_[i];
    if (e.written && e.device_codec == 0 && e.host_slot == kNoSlot && !e.ssd_current &&
        e.read == kNoRead && !e.loading) {
      device_only.push_back(i);
    }
  }
  for (const size_t i : host_list_) {
    const Entry& e = entries_[i];
    if (e.host_current && !e.ssd_current && !e.loading && e.read == kNoRead) {
      host_dirty.push_back(i);
    }
  }
  for (const size_t i : device_only) {
    KV_RETURN_IF_ERROR(entries_[i].device_event.Wait());
    KV_RETURN_IF_ERROR(WriteDeviceToSsd(i));
  }
  for (size_t first = 0; first < host_dirty.size(); first += kOffloadWriteBatchBlocks) {
    const std::span<const size_t> batch = std::span<const size_t>(host_dirty).subspan(
        first, std::min<size_t>(kOffloadWriteBatchBlocks, host_dirty.size() - first));
    for (const size_t i : batch) KV_RETURN_IF_ERROR(entries_[i].host_event.Wait());
    KV_RETURN_IF_ERROR(WriteToSsd(batch));
  }
  return Status::Ok();
}

Status OffloadedSequence::WriteToSsd(std::span<const size_t> indexes) {
  if (tiers_.ssd == nullptr) return Status::NoSpace("host tier full and no SSD tier");
  std::vector<TierWrite> writes(indexes.size());
  for (size_t k = 0; k < indexes.size(); ++k) {
    Entry& e = entries_[indexes[k]];
    KV_CHECK(e.host_current);
    ++e.ssd_generation;
    TierWrite& w = writes[k];
    w.key = SsdKey(indexes[k]);
    w.codec_id = e.host_codec;
    w.raw_bytes = static_cast<uint32_t>(block_bytes_);
    w.payload = std::span<const std::byte>(HostData(e.host_slot), e.host_bytes);
    // The slot holds a whole record's room (HostSlotBytes), as a read from the SSD fills it: the
    // tier writes the record from the slot, its header and padding around the payload.
    w.record = std::span(tiers_.host->SlotData(e.host_slot), tiers_.host->slot_bytes());
  }
  const Status batch = tiers_.ssd->WriteBatchSync(writes);
  Status first = batch;
  for (size_t k = 0; k < indexes.size(); ++k) {
    Entry& e = entries_[indexes[k]];
    if (!batch.ok() || !writes[k].status.ok()) {
      if (first.ok()) first = writes[k].status;
      continue;
    }
    e.ssd_current = true;
    e.ssd_codec = e.host_codec;
    ++stats_.ssd_writes;
    stats_.bytes_ssd_written += tiers_.ssd->ReadBufferBytes(e.host_bytes);
  }
  // The SSD's own code is kept (NoSpace stays NoSpace), with what was being done.
  if (!first.ok()) return first.WithContext("writing offloaded blocks to the SSD");
  return Status::Ok();
}

void OffloadedSequence::OnBatchDone(uint32_t batch, Status status) {
  MutexLock lock(&mu_);
  batch_done_[batch] = 1;
  batch_status_[batch] = std::move(status);
  read_cv_.SignalAll();
}

// Starts SSD -> host reads of the blocks of `indexes` whose only current copy is on the SSD,
// batched, while host room and the read pool last (prefetch, distance_min > 0, takes host
// slots of clean blocks needed later only). *started counts the reads started.
Status OffloadedSequence::StartReads(std::span<const size_t> indexes, uint32_t distance_min,
                                     size_t* started) {
  int64_t batch = -1;
  const auto submit = [this, &batch] {
    const auto b = static_cast<uint32_t>(batch);
    batch = -1;
    ReadBatch& rb = batches_[b];
    for (const size_t i : rb.indexes) entries_[i].loading = false;
    {
      MutexLock lock(&mu_);
      batch_done_[b] = 0;
    }
    busy_batches_.push_back(b);
    tiers_.ssd->ReadBatch(rb.reads, [this, b](Status s) { OnBatchDone(b, std::move(s)); });
  };
  Status status;
  for (const size_t i : indexes) {
    Entry& e = entries_[i];
    if (e.device_slot != kNoSlot || e.read != kNoRead || e.host_current) continue;
    if (distance_min > 0 && read_errors_.count(i) != 0) continue;  // Demand reports it.
    if (tiers_.ssd == nullptr || !e.ssd_current) {
      status =
          Status::Corruption("offloaded block (layer " + std::to_string(LayerOf(i)) + ", chunk " +
                             std::to_string(ChunkOf(i)) + ") has no current copy in any tier");
      break;
    }
    if (batch < 0) {
      if (free_batches_.empty()) break;  // The read pool is exhausted: try again later.
      batch = free_batches_.back();
      free_batches_.pop_back();
    }
    if (e.host_slot == kNoSlot) {
      const bool was_pinned = std::exchange(e.pinned, true);
      Result<uint32_t> host = AllocateHost(distance_min, distance_min > 0);
      e.pinned = was_pinned;
      if (!host.ok()) {
        const StatusCode code = host.status().code();
        if (code != StatusCode::kNoSpace && code != StatusCode::kBusy) status = host.status();
        break;
      }
      e.host_slot = *host;
      TrackHost(i, true);
    }
    ReadBatch& rb = batches_[static_cast<size_t>(batch)];
    TierRead r;
    r.key = SsdKey(i);
    r.buffer = std::span<std::byte>(tiers_.host->SlotData(e.host_slot), tiers_.host->slot_bytes());
    rb.reads.push_back(r);
    rb.indexes.push_back(i);
    e.read = static_cast<int32_t>(batch);
    e.loading = true;  // Not a host victim while its batch is being formed.
    ++*started;
    if (rb.reads.size() == kOffloadReadBatchBlocks) submit();
  }
  if (batch >= 0) {
    if (batches_[static_cast<size_t>(batch)].reads.empty()) {
      free_batches_.push_back(static_cast<uint32_t>(batch));
    } else {
      submit();
    }
  }
  return status;
}

// A completed batch: checks each read and makes its host copy current. A read that failed is
// recorded against its block (read_errors_) and reported when that block is needed (TakeReadError
// in the demand path), not to whoever happens to finish the batch.
Status OffloadedSequence::FinishBatch(uint32_t batch) {
  Status io;
  {
    MutexLock lock(&mu_);
    io = batch_status_[batch];
  }
  busy_batches_.erase(std::find(busy_batches_.begin(), busy_batches_.end(), batch));
  ReadBatch& rb = batches_[batch];
  for (size_t k = 0; k < rb.indexes.size(); ++k) {
    const size_t i = rb.indexes[k];
    Entry& e = entries_[i];
    const TierRead& r = rb.reads[k];
    e.read = kNoRead;
    Status s = io.ok() ? r.status : io;
    const size_t capacity = tiers_.host->slot_bytes() - host_offset_;
    if (s.ok() &&
        (r.raw_bytes != block_bytes_ || r.payload.data() != HostData(e.host_slot) ||
         (r.codec_id == 0 ? r.payload.size() != block_bytes_ : r.payload.size() > capacity))) {
      s = Status::Corruption("unexpected codec or size");
    }
    if (!s.ok()) {
      read_errors_[i] = Status::Corruption("offloaded block (layer " + std::to_string(LayerOf(i)) +
                                           ", chunk " + std::to_string(ChunkOf(i)) +
                                           ") could not be read back from the SSD: " + s.message());
      continue;
    }
    e.host_current = true;
    e.host_codec = r.codec_id;
    e.host_bytes = static_cast<uint32_t>(r.payload.size());
    ++stats_.ssd_reads;
    stats_.bytes_ssd_read += tiers_.ssd->ReadBufferBytes(r.payload.size());
  }
  rb.reads.clear();
  rb.indexes.clear();
  free_batches_.push_back(batch);
  return Status::Ok();
}

Status OffloadedSequence::TakeReadError(size_t index) {
  const auto it = read_errors_.find(index);
  if (it == read_errors_.end()) return Status::Ok();
  Status s = std::move(it->second);
  read_errors_.erase(it);  // A later request reads the block again.
  return s;
}

Status OffloadedSequence::HarvestReads() {
  Status first;
  for (size_t k = 0; k < busy_batches_.size();) {
    const uint32_t b = busy_batches_[k];
    bool done = false;
    {
      MutexLock lock(&mu_);
      done = batch_done_[b] != 0;
    }
    if (!done) {
      ++k;
      continue;
    }
    const Status s = FinishBatch(b);  // Removes b from busy_batches_.
    if (first.ok()) first = s;
  }
  return first;
}

Status OffloadedSequence::WaitRead(size_t index) {
  const auto batch = static_cast<uint32_t>(entries_[index].read);
  KV_CHECK(std::find(busy_batches_.begin(), busy_batches_.end(), batch) != busy_batches_.end());
  {
    MutexLock lock(&mu_);
    while (batch_done_[batch] == 0) read_cv_.Wait(&mu_);
  }
  return FinishBatch(batch);
}

// Waits for the first read batch in flight to complete and finishes it (an error of one of its
// blocks is returned; the pool slot is free either way).
Status OffloadedSequence::WaitAnyRead() {
  KV_CHECK(!busy_batches_.empty());
  const uint32_t batch = busy_batches_.front();
  {
    MutexLock lock(&mu_);
    while (batch_done_[batch] == 0) read_cv_.Wait(&mu_);
  }
  return FinishBatch(batch);
}

// Decodes the encoded host copies of `indexes` into their device slots on the codec threads;
// the event completes when all are done (with the first error: the blocks then fail closed).
CopyEvent OffloadedSequence::DecodeToDevice(std::span<const size_t> indexes) {
  struct Job {
    std::span<const std::byte> encoded;
    std::span<std::byte> out;
  };
  const uint32_t tasks =
      std::min<uint32_t>(options_.codec_threads, static_cast<uint32_t>(indexes.size()));
  const CopyEventSource source(tasks);
  for (uint32_t t = 0; t < tasks; ++t) {
    std::vector<Job> jobs;
    for (size_t k = t; k < indexes.size(); k += tasks) {
      const Entry& e = entries_[indexes[k]];
      jobs.push_back({std::span<const std::byte>(HostData(e.host_slot), e.host_bytes),
                      std::span<std::byte>(tiers_.device->SlotData(e.device_slot), block_bytes_)});
    }
    const codecs::BlockGeometry g = geometry_;
    const Status s =
        codec_pool_->Submit([jobs = std::move(jobs), source, g](codecs::CodecContext* ctx) {
          Status first;
          for (const Job& j : jobs) {
            const Status d = codecs::DecodeBlock(j.encoded, g, j.out, ctx);
            if (!d.ok() && first.ok())
              first = Status::Corruption("decoding an offloaded block: " + d.message());
          }
          source.Complete(first);
        });
    if (!s.ok()) source.Complete(s);
  }
  stats_.blocks_decoded += indexes.size();
  return source.event();
}

}  // namespace kvtier
