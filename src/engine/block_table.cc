// BlockTable and BlockEntry helpers (see block_table.h).
#include "engine/block_table.h"

#include "core/assert.h"

namespace kvtier {

TierKind ToTierKind(MemTier t) {
  switch (t) {
    case MemTier::kDevice:
      return TierKind::kDevice;
    case MemTier::kHost:
      return TierKind::kHost;
    case MemTier::kCxl:
      return TierKind::kCxl;
  }
  return TierKind::kNone;
}

bool BlockEntry::FastestReadable(MemTier* out) const {
  for (size_t i = 0; i < kMemTiers; ++i) {
    if (Readable(MemTierAt(i))) {
      *out = MemTierAt(i);
      return true;
    }
  }
  return false;
}

bool BlockEntry::AnyReadable() const {
  MemTier unused;
  return FastestReadable(&unused);
}

bool BlockEntry::Empty() const {
  for (size_t i = 0; i < kMemTiers; ++i) {
    if (copy_[i] != CopyState::kNone) return false;
  }
  return true;
}

bool BlockEntry::ReadableBelow(MemTier t) const {
  for (size_t i = TierIndex(t) + 1; i < kMemTiers; ++i) {
    if (Readable(MemTierAt(i))) return true;
  }
  return false;
}

const BlockEntry* BlockTable::Find(const BlockKey& key) const {
  auto it = map_.find(key);
  return it == map_.end() ? nullptr : &it->second;
}

BlockEntry& BlockTable::Get(const BlockKey& key) {
  auto it = map_.find(key);
  KV_CHECK(it != map_.end());
  return it->second;
}

void BlockTable::EraseIfEmpty(const BlockKey& key, const BlockEntry& e) {
  if (e.Empty() && e.pins_ == 0) map_.erase(key);
}

const BlockEntry* BlockTable::Claim(const BlockKey& key, BlockPriority priority,
                                    uint64_t expiry_wall_us) {
  auto [it, inserted] = map_.try_emplace(key);
  KV_CHECK(inserted);
  BlockEntry& e = it->second;
  e.pins_ = 1;
  e.priority_ = priority;
  e.expiry_wall_us_ = expiry_wall_us;
  return &e;
}

void BlockTable::Pin(const BlockKey& key) { ++Get(key).pins_; }

void BlockTable::Unpin(const BlockKey& key) {
  BlockEntry& e = Get(key);
  KV_CHECK(e.pins_ > 0);
  --e.pins_;
  EraseIfEmpty(key, e);
}

const BlockEntry* BlockTable::Reserve(const BlockKey& key, MemTier t, uint32_t slot) {
  KV_CHECK(slot != kNoSlot);
  BlockEntry& e = map_[key];
  const size_t i = TierIndex(t);
  KV_CHECK(e.copy_[i] == CopyState::kNone);
  e.slot_[i] = slot;
  e.copy_[i] = CopyState::kFilling;
  return &e;
}

void BlockTable::Publish(const BlockKey& key, MemTier t) {
  BlockEntry& e = Get(key);
  KV_CHECK(e.copy_[TierIndex(t)] == CopyState::kFilling);
  e.copy_[TierIndex(t)] = CopyState::kReady;
  e.state_ = BlockState::kReady;
}

void BlockTable::PublishPromoted(const BlockKey& key, MemTier t, PromotedBy by) {
  KV_CHECK(by != PromotedBy::kNone);
  Publish(key, t);
  BlockEntry& e = Get(key);
  e.referenced_[TierIndex(t)] = true;
  e.promoted_by_ = by;
}

uint32_t BlockTable::EndCopy(const BlockKey& key, MemTier t, CopyState from) {
  BlockEntry& e = Get(key);
  const size_t i = TierIndex(t);
  KV_CHECK(e.copy_[i] == from);
  const uint32_t slot = e.slot_[i];
  KV_CHECK(slot != kNoSlot);
  e.slot_[i] = kNoSlot;
  e.copy_[i] = CopyState::kNone;
  e.referenced_[i] = false;
  EraseIfEmpty(key, e);
  return slot;
}

uint32_t BlockTable::Abort(const BlockKey& key, MemTier t) {
  return EndCopy(key, t, CopyState::kFilling);
}

uint32_t BlockTable::Drop(const BlockKey& key, MemTier t) {
  return EndCopy(key, t, CopyState::kReady);
}

void BlockTable::BeginEviction(const BlockKey& key, MemTier t) {
  BlockEntry& e = Get(key);
  KV_CHECK(e.copy_[TierIndex(t)] == CopyState::kReady);
  e.copy_[TierIndex(t)] = CopyState::kEvicting;
}

uint32_t BlockTable::EndEviction(const BlockKey& key, MemTier t, bool kept) {
  if (!kept) return EndCopy(key, t, CopyState::kEvicting);
  BlockEntry& e = Get(key);
  KV_CHECK(e.copy_[TierIndex(t)] == CopyState::kEvicting);
  e.copy_[TierIndex(t)] = CopyState::kReady;
  return kNoSlot;
}

void BlockTable::Touch(const BlockKey& key, MemTier t) {
  BlockEntry& e = Get(key);
  KV_CHECK(e.Readable(t));
  e.referenced_[TierIndex(t)] = true;
}

void BlockTable::ClearReference(const BlockKey& key, MemTier t) {
  Get(key).referenced_[TierIndex(t)] = false;
}

void BlockTable::SetExpiry(const BlockKey& key, uint64_t expiry_wall_us) {
  Get(key).expiry_wall_us_ = expiry_wall_us;
}

void BlockTable::ClearPromotedBy(const BlockKey& key) {
  Get(key).promoted_by_ = PromotedBy::kNone;
}

void BlockTable::MarkDirty(const BlockKey& key, size_t below) {
  KV_CHECK(below < kDirtyBits);
  BlockEntry& e = Get(key);
  e.dirty_ = static_cast<uint8_t>(e.dirty_ | (1u << below));
}

void BlockTable::MarkClean(const BlockKey& key, size_t below) {
  KV_CHECK(below < kDirtyBits);
  BlockEntry& e = Get(key);
  e.dirty_ = static_cast<uint8_t>(e.dirty_ & ~(1u << below));
}

void BlockTable::SetDirtySince(const BlockKey& key, uint64_t now_us) {
  Get(key).dirty_since_us_ = now_us;
}

void BlockTable::BeginFlush(const BlockKey& key) {
  BlockEntry& e = Get(key);
  KV_CHECK(!e.flushing_);
  e.flushing_ = true;
  ++e.pins_;
}

void BlockTable::EndFlush(const BlockKey& key, size_t below, bool written) {
  BlockEntry& e = Get(key);
  KV_CHECK(e.flushing_);
  e.flushing_ = false;
  if (written) MarkClean(key, below);
  Unpin(key);
}

}  // namespace kvtier
