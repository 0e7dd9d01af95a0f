// BlockIndex and BlockEntry helpers (see block_index.h).
#include "engine/block_index.h"

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
    if (copy[i] != CopyState::kNone) return false;
  }
  return true;
}

bool BlockEntry::ReadableBelow(MemTier t) const {
  for (size_t i = TierIndex(t) + 1; i < kMemTiers; ++i) {
    if (Readable(MemTierAt(i))) return true;
  }
  return false;
}

BlockEntry* BlockIndex::Find(const BlockKey& key) {
  auto it = map_.find(key);
  return it == map_.end() ? nullptr : &it->second;
}

BlockEntry* BlockIndex::Insert(const BlockKey& key) {
  auto [it, inserted] = map_.try_emplace(key);
  return inserted ? &it->second : nullptr;
}

void BlockIndex::Erase(const BlockKey& key) { map_.erase(key); }

void BlockIndex::EraseIfEmpty(const BlockKey& key) {
  auto it = map_.find(key);
  if (it != map_.end() && it->second.Empty() && it->second.pins == 0) map_.erase(it);
}

}  // namespace kvtier
