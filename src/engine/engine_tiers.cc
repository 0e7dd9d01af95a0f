// Slot allocation, eviction (drop, demotion, write-back) and the SSD read/write helpers of
// EngineImpl. See engine_impl.h for the locking rules and eviction.h for victim selection.
#include <cstring>

#include "core/assert.h"
#include "engine/engine_impl.h"

namespace kvtier {

namespace {
// A slot allocation gives up after this many evictions that were overtaken by other threads
// taking the freed slot (or by a Load pinning the victim); Busy then, never an endless loop.
constexpr uint32_t kAllocateAttemptsMax = 16;
}  // namespace

std::byte* EngineImpl::SlotData(MemTier t, uint32_t slot) {
  switch (t) {
    case MemTier::kDevice:
      return device_->SlotData(slot);
    case MemTier::kHost:
      return host_->SlotData(slot);
    case MemTier::kCxl:
      return cxl_->SlotData(slot);
  }
  return nullptr;
}

void EngineImpl::FreeRaw(MemTier t, uint32_t slot) {
  switch (t) {
    case MemTier::kDevice:
      device_->Free(slot);
      return;
    case MemTier::kHost:
      host_->Free(slot);
      return;
    case MemTier::kCxl:
      cxl_->Free(slot);
      return;
  }
}

Result<uint32_t> EngineImpl::AllocateRaw(MemTier t) {
  switch (t) {
    case MemTier::kDevice:
      return device_->Allocate();
    case MemTier::kHost:
      return host_->Allocate();
    case MemTier::kCxl:
      return cxl_->Allocate();
  }
  return Status::InvalidArgument("no such memory tier");
}

std::optional<MemTier> EngineImpl::ReadableTier(const BlockKey& key, uint64_t now_wall_us) {
  BlockEntry* e = index_.Find(key);
  if (e == nullptr || e->Expired(now_wall_us)) return std::nullopt;
  MemTier t;
  if (!e->FastestReadable(&t)) return std::nullopt;
  return t;
}

void EngineImpl::DropCopy(const BlockKey& key, BlockEntry* entry, MemTier t) {
  const size_t i = TierIndex(t);
  KV_CHECK(entry->slot[i] != kNoSlot);
  clocks_[i]->Release(entry->slot[i]);
  FreeRaw(t, entry->slot[i]);
  entry->slot[i] = kNoSlot;
  entry->copy[i] = CopyState::kNone;
  entry->referenced[i] = false;
  ++counters_[i].evictions;
  index_.EraseIfEmpty(key);
}

Result<uint32_t> EngineImpl::AllocateClean(MemTier t, VictimFilter filter) {
  KV_CHECK(filter != VictimFilter::kAny);
  if (!HasTier(t)) return Status::Busy("tier absent");
  Result<uint32_t> slot = AllocateRaw(t);
  if (slot.ok()) return slot;
  std::optional<uint32_t> victim =
      clocks_[TierIndex(t)]->PickVictim(t, &index_, NowWallUs(), filter);
  if (!victim.has_value()) return Status::Busy("no clean slot");
  const BlockKey key = *clocks_[TierIndex(t)]->Owner(*victim);
  DropCopy(key, index_.Find(key), t);
  return AllocateRaw(t);
}

Result<uint32_t> EngineImpl::AllocateSlot(MemTier t, VictimFilter filter, EvictWrites writes) {
  for (uint32_t attempt = 0; attempt < kAllocateAttemptsMax; ++attempt) {
    Result<uint32_t> slot = AllocateRaw(t);
    if (slot.ok()) return slot;
    KV_RETURN_IF_ERROR(EvictOne(t, filter, writes));
  }
  return Status::Busy(std::string(TierKindName(ToTierKind(t))) +
                      " tier: freed slots were taken by others; try again");
}

Status EngineImpl::EvictOne(MemTier t, VictimFilter filter, EvictWrites writes) {
  const size_t i = TierIndex(t);
  std::optional<uint32_t> victim = clocks_[i]->PickVictim(t, &index_, NowWallUs(), filter);
  if (!victim.has_value()) {
    return Status::Busy(std::string(TierKindName(ToTierKind(t))) +
                        " tier: every slot is pinned, being written or being evicted");
  }
  const BlockKey key = *clocks_[i]->Owner(*victim);
  BlockEntry* e = index_.Find(key);
  bool lower_tier = false;
  for (size_t u = i + 1; u < kMemTiers; ++u) lower_tier = lower_tier || HasTier(MemTierAt(u));
  const bool demote = !e->ReadableBelow(t) && lower_tier;
  if (e->Expired(NowWallUs()) || (CleanToDrop(*e, t) && !demote)) {
    DropCopy(key, e, t);
    return Status::Ok();
  }
  // The only memory copy: demote it to a lower memory tier when one has room (a cascade, like a
  // CPU cache), and if it is dirty and cannot be demoted, write it back to the SSD before its
  // slot is reused (docs/engine.md). A caller's thread never writes: the cleaner does.
  e->copy[i] = CopyState::kEvicting;
  Status s;
  bool left_to_cleaner = false;
  if (writes == EvictWrites::kHere) {
    s = WriteDown(key, t, *victim);
  } else {
    bool demoted = false;
    s = Demote(key, t, *victim, &demoted);
    const BlockEntry* d = index_.Find(key);
    left_to_cleaner = !demoted && ((ssd_ != nullptr && d->dirty) || d->remote_dirty);
  }
  e = index_.Find(key);
  KV_CHECK(e != nullptr);
  KV_CHECK(e->copy[i] == CopyState::kEvicting);
  e->copy[i] = CopyState::kReady;
  if (left_to_cleaner) {
    // The cleaner evicts it (or another victim) with its write-back; this caller takes a clean
    // victim if there is one, else gets Busy and tries again later.
    if (cleaner_.joinable()) {
      evict_wanted_[i] = std::max<uint32_t>(evict_wanted_[i], 1);
      cleaner_kick_ = true;
      cleaner_cv_.Signal();
    }
    std::optional<uint32_t> clean =
        clocks_[i]->PickVictim(t, &index_, NowWallUs(), VictimFilter::kCleanOnly);
    if (!clean.has_value()) {
      return Status::Busy(std::string(TierKindName(ToTierKind(t))) +
                          " tier: every evictable block must be written back first; the cleaner "
                          "is writing them, try again");
    }
    const BlockKey owner = *clocks_[i]->Owner(*clean);
    DropCopy(owner, index_.Find(owner), t);
    return Status::Ok();
  }
  if (e->pins != 0) return Status::Ok();  // A Load took it meanwhile; the caller retries.
  // Refusals by the admission filter or the write budget are policy, not faults: no log line.
  if (!s.ok() && !s.IsAborted() && !s.IsBusy()) {
    LogTo(logger_, LogLevel::kWarn,
          "engine: write-back of " + key.ToString() +
              " failed, dropping it from memory: " + s.ToString());
  }
  if (!s.ok() && !s.IsAborted() && e->dirty) ++dirty_dropped_;
  DropCopy(key, e, t);
  return Status::Ok();
}

Status EngineImpl::WriteDown(const BlockKey& key, MemTier t, uint32_t slot) {
  bool demoted = false;
  const Status s = Demote(key, t, slot, &demoted);
  if (demoted || !s.ok()) return s;
  return WriteBack(key, t, slot);
}

Status EngineImpl::Demote(const BlockKey& key, MemTier t, uint32_t slot, bool* demoted) {
  *demoted = false;
  // Demotion: the next lower memory tier with a free or clean slot takes the dirty copy.
  for (size_t u = TierIndex(t) + 1; u < kMemTiers; ++u) {
    const MemTier lower = MemTierAt(u);
    Result<uint32_t> dst = AllocateClean(lower);
    if (!dst.ok()) continue;
    BlockEntry* e = index_.Find(key);
    e->slot[u] = *dst;
    e->copy[u] = CopyState::kFilling;
    clocks_[u]->Assign(*dst, key, e->expiry_wall_us != 0);
    mu_.Unlock();
    const Status s = CopySlotToHost(t, slot, SlotData(lower, *dst));
    mu_.Lock();
    e = index_.Find(key);
    if (!s.ok()) {
      DropCopy(key, e, lower);
      return s;
    }
    e->copy[u] = CopyState::kReady;
    if (e->dirty) ++counters_[TierIndex(t)].writebacks;
    *demoted = true;
    return Status::Ok();
  }
  return Status::Ok();
}

Status EngineImpl::WriteBack(const BlockKey& key, MemTier t, uint32_t slot) {
  BlockEntry* e = index_.Find(key);
  const bool to_ssd = ssd_ != nullptr && e->dirty;
  const bool to_remote = e->remote_dirty;  // Only set with a write-back remote tier.
  // Clean, or nothing below: a cache may drop it.
  if (!to_ssd && !to_remote) return Status::Ok();
  const uint64_t expiry = e->expiry_wall_us;
  mu_.Unlock();
  // One lease for all buffers (raw copy, encoded record): never wait while holding one. A device
  // slot is copied out first; a host or CXL slot (kEvicting, so it stays put) is encoded where it
  // is and needs only the encode buffer, the lease's last.
  StagingLease lease = staging_->Acquire(t == MemTier::kDevice ? 2 : 1);
  Status copied;
  SsdWriteItem item{
      .key = key, .raw = RawForWrite(t, slot, lease.buffer(0), &copied), .expiry_wall_us = expiry};
  SsdWriteItem remote_item = item;
  Status s = copied;
  if (s.ok() && to_ssd) s = WriteToSsd(std::span(&item, 1), lease.buffers().last(1));
  if (s.ok() && to_ssd) s = item.status;
  // The remote put reuses the encode buffer after the SSD write returned (it copied the payload).
  if (copied.ok() && to_remote) WriteToRemote(std::span(&remote_item, 1), lease.buffers().last(1));
  mu_.Lock();
  e = index_.Find(key);
  const bool remote_ok = copied.ok() && to_remote && remote_item.status.ok();
  if (remote_ok) e->remote_dirty = false;
  if (to_ssd && s.ok()) {
    e->dirty = false;
    e->on_ssd = true;
  }
  if ((to_ssd && s.ok()) || remote_ok) ++counters_[TierIndex(t)].writebacks;
  // A failed remote put is never an error here (WriteToRemote counted and logged it).
  return to_ssd ? s : copied;
}

Status EngineImpl::CopySlotToHost(MemTier t, uint32_t slot, std::byte* dst) {
  if (t == MemTier::kDevice) {
    const CopyRegion region{.dst = dst, .src = device_->SlotData(slot), .bytes = block_bytes_};
    return device_->Copy(CopyKind::kDeviceToHost, std::span(&region, 1)).Wait();
  }
  std::memcpy(dst, SlotData(t, slot), block_bytes_);
  return Status::Ok();
}

std::span<const std::byte> EngineImpl::RawForWrite(MemTier t, uint32_t slot,
                                                   std::span<std::byte> staging, Status* copied) {
  if (t != MemTier::kDevice) {
    *copied = Status::Ok();
    return {SlotData(t, slot), block_bytes_};
  }
  *copied = CopySlotToHost(t, slot, staging.data());
  if (!copied->ok()) return {};
  MutexLock lock(&mu_);
  stats_.staged_copy_bytes += block_bytes_;
  return staging.first(block_bytes_);
}

void EngineImpl::ReadFromSsd(std::span<SsdReadItem> items) {
  KV_CHECK(items.size() <= kLoadStagingBatchMax);
  if (items.empty()) return;
  StagingLease lease = staging_->Acquire(static_cast<uint32_t>(items.size()));
  std::vector<SsdBlockRead> reads(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    reads[i].key = items[i].key;
    reads[i].layout_digest = layout_digest_;
    reads[i].buffer = lease.buffer(i);
  }
  const Status io = ssd_->ReadBatchSync(reads);
  Result<CodecLease> ctx = contexts_->Acquire();
  // Blocks the SSD holds but this engine cannot use: erased, so that Lookup stops reporting them
  // and the next Store rewrites them (Store skips keys the SSD contains).
  std::vector<BlockKey> unusable;
  for (size_t i = 0; i < items.size(); ++i) {
    SsdReadItem& item = items[i];
    Status s = io.ok() ? reads[i].status : io;
    bool undecodable = false;
    if (s.ok() && reads[i].raw_bytes != block_bytes_) s = Status::Corruption("raw size differs");
    if (s.ok() && !ctx.ok()) s = ctx.status();
    if (s.ok()) {
      s = codecs::DecodeBlock(reads[i].payload, geometry_, item.dst, ctx->get());
      undecodable = !s.ok();
    }
    if (s.ok()) {
      item.status = Status::Ok();
      continue;
    }
    // A record that failed verification (the SSD dropped it) or did not decode: a miss, never
    // wrong bytes, and counted as corrupt. A block reclaimed or expired since Lookup is a plain
    // miss; a read the SSD refused (InvalidArgument: a record larger than the buffer) is unusable.
    item.corrupt = reads[i].failed_verification || undecodable || s.IsCorruption();
    if (io.ok() && (undecodable || s.IsCorruption() || s.IsInvalidArgument())) {
      unusable.push_back(item.key);
    }
    item.status =
        Status::NotFound("block " + item.key.ToString() + " unavailable: " + s.ToString());
  }
  if (unusable.empty()) return;
  const Status erased = ssd_->Erase(unusable);
  if (!erased.ok()) {
    LogTo(logger_, LogLevel::kWarn, "engine: erasing unreadable SSD blocks: " + erased.ToString());
  }
}

Status EngineImpl::WriteToSsd(std::span<SsdWriteItem> items,
                              std::span<const std::span<std::byte>> encode_buffers) {
  Status first;
  Result<CodecLease> ctx = contexts_->Acquire();
  KV_RETURN_IF_ERROR(ctx.status());
  const uint64_t now = NowWallUs();
  const bool given = !encode_buffers.empty();
  KV_CHECK(!given || encode_buffers.size() >= items.size());
  for (size_t base = 0; base < items.size(); base += kLoadStagingBatchMax) {
    const size_t n = std::min<size_t>(kLoadStagingBatchMax, items.size() - base);
    std::optional<StagingLease> own;
    if (!given) own.emplace(staging_->Acquire(static_cast<uint32_t>(n)));
    std::vector<SsdBlockWrite> writes;
    std::vector<size_t> which;
    for (size_t i = 0; i < n; ++i) {
      SsdWriteItem& item = items[base + i];
      const uint64_t expiry = item.expiry_wall_us;
      if (expiry != 0 && expiry <= now) {
        item.status = Status::Ok();  // Expired: nothing worth keeping.
        continue;
      }
      if (item.raw.size() != block_bytes_) {
        item.status = Status::IoError("no bytes to write for " + item.key.ToString());
        continue;
      }
      const std::span<std::byte> out = given ? encode_buffers[base + i] : own->buffer(i);
      Result<size_t> bytes =
          codecs::EncodeBlock(options_.ssd_codec, geometry_, item.raw, out, ctx->get());
      if (!bytes.ok()) {
        item.status = bytes.status();
        continue;
      }
      ratio_->Record(options_.ssd_codec.codec, item.key.layer, block_bytes_, *bytes);
      writes.push_back(SsdBlockWrite{.key = item.key,
                                     .layout_digest = layout_digest_,
                                     .codec_id = static_cast<uint8_t>(options_.ssd_codec.codec),
                                     .raw_bytes = static_cast<uint32_t>(block_bytes_),
                                     .payload = out.first(*bytes),
                                     .ttl_us = expiry == 0 ? 0 : expiry - now});
      which.push_back(base + i);
    }
    const Status s = writes.empty() ? Status::Ok() : ssd_->WriteBatchSync(writes);
    if (!s.ok() && first.ok()) first = s;
    for (size_t w = 0; w < writes.size(); ++w) {
      items[which[w]].status = writes[w].status;
      items[which[w]].skipped = writes[w].skipped;
    }
  }
  // Every item that is not on the SSD and was not deliberately skipped is an error, whatever
  // the batch said (an encode failure, a copy that produced no bytes).
  uint64_t failed = 0;
  for (const SsdWriteItem& item : items) {
    if (item.status.ok() || item.skipped) continue;
    ++failed;
    if (first.ok()) first = item.status;
  }
  if (failed != 0) {
    MutexLock lock(&mu_);
    counters_[kSsdCounters].write_failures += failed;
  }
  return first;
}

Status EngineImpl::PromoteFromSsd(const BlockKey& key) {
  uint32_t slot = 0;
  std::optional<SsdBlockInfo> info = ssd_ != nullptr ? ssd_->Lookup(key) : std::nullopt;
  if (!info.has_value()) return Status::NotFound("not on SSD: " + key.ToString());
  {
    MutexLock lock(&mu_);
    BlockEntry* e = index_.Find(key);
    if (e != nullptr && (e->AnyReadable() || e->state == BlockState::kWriting)) {
      return Status::Ok();  // Already (or about to be) in memory.
    }
    KV_ASSIGN_OR_RETURN(slot,
                        AllocateSlot(MemTier::kHost, VictimFilter::kAny, EvictWrites::kToCleaner));
    e = index_.Find(key);
    if (e != nullptr && (e->AnyReadable() || e->state == BlockState::kWriting ||
                         e->copy[TierIndex(MemTier::kHost)] != CopyState::kNone)) {
      // While the lock was dropped another promotion or a Store took the key: theirs wins (a
      // reserved entry's slots belong to its writer).
      host_->Free(slot);
      return Status::Ok();
    }
    if (e == nullptr) e = index_.Insert(key);
    e->slot[TierIndex(MemTier::kHost)] = slot;
    e->copy[TierIndex(MemTier::kHost)] = CopyState::kFilling;
    e->on_ssd = true;
    e->expiry_wall_us = info->expiry_wall_us;
    clocks_[TierIndex(MemTier::kHost)]->Assign(slot, key, e->expiry_wall_us != 0);
  }
  SsdReadItem item{.key = key, .dst = {host_->SlotData(slot), block_bytes_}};
  ReadFromSsd(std::span(&item, 1));
  MutexLock lock(&mu_);
  BlockEntry* e = index_.Find(key);
  if (item.corrupt) ++stats_.corrupt_blocks;
  if (!item.status.ok()) {
    DropCopy(key, e, MemTier::kHost);
    return item.status;
  }
  e->copy[TierIndex(MemTier::kHost)] = CopyState::kReady;
  e->state = BlockState::kReady;
  ++counters_[TierIndex(MemTier::kHost)].promotions;
  return Status::Ok();
}

}  // namespace kvtier
