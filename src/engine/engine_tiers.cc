// Slot allocation, eviction (drop, demotion, write-back to the tiers below memory) and Pin's
// promotion of EngineImpl. See engine_impl.h for the locking rules and eviction.h for victim
// selection.
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
  const BlockEntry* e = table_.Find(key);
  if (e == nullptr || e->Expired(now_wall_us)) return std::nullopt;
  MemTier t;
  if (!e->FastestReadable(&t)) return std::nullopt;
  return t;
}

void EngineImpl::FreeSlot(MemTier t, uint32_t slot) {
  const size_t i = TierIndex(t);
  KV_CHECK(slot != kNoSlot);
  clocks_[i]->Release(slot);
  FreeRaw(t, slot);
  ++counters_[i].evictions;
}

Result<uint32_t> EngineImpl::AllocateClean(MemTier t, VictimFilter filter) {
  KV_CHECK(filter != VictimFilter::kAny);
  if (!HasTier(t)) return Status::Busy("tier absent");
  Result<uint32_t> slot = AllocateRaw(t);
  if (slot.ok()) return slot;
  std::optional<uint32_t> victim =
      clocks_[TierIndex(t)]->PickVictim(t, &table_, NowWallUs(), filter);
  if (!victim.has_value()) return Status::Busy("no clean slot");
  const BlockKey key = *clocks_[TierIndex(t)]->Owner(*victim);
  FreeSlot(t, table_.Drop(key, t));
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
  std::optional<uint32_t> victim = clocks_[i]->PickVictim(t, &table_, NowWallUs(), filter);
  if (!victim.has_value()) {
    return Status::Busy(std::string(TierKindName(ToTierKind(t))) +
                        " tier: every slot is pinned, being written or being evicted");
  }
  const BlockKey key = *clocks_[i]->Owner(*victim);
  const BlockEntry* e = table_.Find(key);
  bool lower_tier = false;
  for (size_t u = i + 1; u < kMemTiers; ++u) lower_tier = lower_tier || HasTier(MemTierAt(u));
  const bool demote = !e->ReadableBelow(t) && lower_tier;
  if (e->Expired(NowWallUs()) || (CleanToDrop(*e, t) && !demote)) {
    FreeSlot(t, table_.Drop(key, t));
    return Status::Ok();
  }
  // The only memory copy: demote it to a lower memory tier when one has room (a cascade, like a
  // CPU cache), and if it is dirty and cannot be demoted, write it back to the tiers below memory
  // it is dirty for before its slot is reused (docs/engine.md). A caller's thread never writes:
  // the cleaner does.
  table_.BeginEviction(key, t);
  Status s;
  bool left_to_cleaner = false;
  if (writes == EvictWrites::kHere) {
    s = WriteDown(key, t, *victim);
  } else {
    bool demoted = false;
    s = Demote(key, t, *victim, &demoted);
    const BlockEntry* d = table_.Find(key);
    left_to_cleaner = !demoted && d->dirty() != 0;
  }
  // Still there and still kEvicting: a kEvicting copy is never chosen again, and its entry is
  // never erased while it has one.
  e = table_.Find(key);
  KV_CHECK(e != nullptr);
  if (left_to_cleaner || e->pins() != 0) {
    table_.EndEviction(key, t, /*kept=*/true);
  }
  if (left_to_cleaner) {
    // The cleaner evicts it (or another victim) with its write-back; this caller takes a clean
    // victim if there is one, else gets Busy and tries again later.
    if (cleaner_.joinable()) {
      evict_wanted_[i] = std::max<uint32_t>(evict_wanted_[i], 1);
      cleaner_kick_ = true;
      cleaner_cv_.Signal();
    }
    std::optional<uint32_t> clean =
        clocks_[i]->PickVictim(t, &table_, NowWallUs(), VictimFilter::kCleanOnly);
    if (!clean.has_value()) {
      return Status::Busy(std::string(TierKindName(ToTierKind(t))) +
                          " tier: every evictable block must be written back first; the cleaner "
                          "is writing them, try again");
    }
    const BlockKey owner = *clocks_[i]->Owner(*clean);
    FreeSlot(t, table_.Drop(owner, t));
    return Status::Ok();
  }
  if (e->pins() != 0) return Status::Ok();  // A Load took it meanwhile; the caller retries.
  // Refusals by the admission filter or the write budget are policy, not faults: no log line.
  if (!s.ok() && !s.IsAborted() && !s.IsBusy()) {
    LogTo(logger_, LogLevel::kWarn,
          "engine: write-back of " + key.ToString() +
              " failed, dropping it from memory: " + s.ToString());
  }
  if (!s.ok() && !s.IsAborted() && DirtyForLocal(*e)) ++dirty_dropped_;
  FreeSlot(t, table_.EndEviction(key, t, /*kept=*/false));
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
    const BlockEntry* e = table_.Reserve(key, lower, *dst);
    clocks_[u]->Assign(*dst, key, e->expiry_wall_us() != 0);
    mu_.Unlock();
    const Status s = CopySlotToHost(t, slot, SlotData(lower, *dst));
    mu_.Lock();
    if (!s.ok()) {
      FreeSlot(lower, table_.Abort(key, lower));
      return s;
    }
    table_.Publish(key, lower);
    if (DirtyForLocal(*table_.Find(key))) ++counters_[TierIndex(t)].writebacks;
    *demoted = true;
    return Status::Ok();
  }
  return Status::Ok();
}

Status EngineImpl::WriteBack(const BlockKey& key, MemTier t, uint32_t slot) {
  const BlockEntry* e = table_.Find(key);
  const uint8_t todo = e->dirty();
  // Clean, or nothing below: a cache may drop it.
  if (todo == 0) return Status::Ok();
  const uint64_t expiry = e->expiry_wall_us();
  mu_.Unlock();
  // One lease for all buffers (raw copy, encoded record): never wait while holding one. A device
  // slot is copied out first; a host or CXL slot (kEvicting, so it stays put) is encoded where it
  // is and needs only the encode buffer, the lease's last, which each tier's write reuses after
  // the previous one returned (the tier copied or sent the payload).
  StagingLease lease = staging_->Acquire(t == MemTier::kDevice ? 2 : 1);
  Status copied;
  const std::span<const std::byte> raw = RawForWrite(t, slot, lease.buffer(0), &copied);
  // The first error of a local tier's write; a best-effort tier's failure is never one (its
  // write counted and logged it).
  Status result = copied;
  uint8_t written = 0;
  for (size_t below = 0; below < tiers_.size() && copied.ok(); ++below) {
    if (((todo >> below) & 1u) == 0) continue;
    TierWriteItem item{.key = key, .raw = raw, .expiry_wall_us = expiry};
    Status s = WriteToTier(below, std::span(&item, 1), lease.buffers().last(1));
    if (s.ok()) s = item.status;
    if (item.status.ok()) written = static_cast<uint8_t>(written | (1u << below));
    if (!tiers_[below].best_effort && result.ok()) result = s;
  }
  mu_.Lock();
  for (size_t below = 0; below < tiers_.size(); ++below) {
    if (((written >> below) & 1u) != 0) table_.MarkClean(key, below);
  }
  if (written != 0) ++counters_[TierIndex(t)].writebacks;
  return result;
}

bool EngineImpl::DirtyForLocal(const BlockEntry& e) const {
  for (size_t below = 0; below < tiers_.size(); ++below) {
    if (!tiers_[below].best_effort && e.DirtyFor(below)) return true;
  }
  return false;
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

}  // namespace kvtier
