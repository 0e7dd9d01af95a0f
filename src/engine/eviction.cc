// SlotClock: CLOCK victim selection with TTL, pins and priorities (see eviction.h).
#include "engine/eviction.h"

#include "core/assert.h"

namespace kvtier {

SlotClock::SlotClock(uint32_t slots) : owner_(slots), used_(slots, false), has_ttl_(slots, false) {}

void SlotClock::Assign(uint32_t slot, const BlockKey& key, bool has_ttl) {
  KV_CHECK(slot < owner_.size());
  KV_CHECK(!used_[slot]);
  owner_[slot] = key;
  used_[slot] = true;
  has_ttl_[slot] = has_ttl;
  ++used_count_;
  if (has_ttl) ++ttl_count_;
}

void SlotClock::Release(uint32_t slot) {
  KV_CHECK(slot < owner_.size());
  KV_CHECK(used_[slot]);
  used_[slot] = false;
  --used_count_;
  if (has_ttl_[slot]) --ttl_count_;
  has_ttl_[slot] = false;
}

const BlockKey* SlotClock::Owner(uint32_t slot) const {
  if (slot >= owner_.size() || !used_[slot]) return nullptr;
  return &owner_[slot];
}

bool CleanToDrop(const BlockEntry& entry, MemTier tier) {
  return entry.dirty() == 0 || entry.ReadableBelow(tier);
}

bool Evictable(const BlockEntry& entry, MemTier tier, VictimFilter filter) {
  if (entry.copy(tier) != CopyState::kReady) return false;
  if (entry.pins() != 0 || entry.flushing()) return false;
  if (filter != VictimFilter::kAny && !CleanToDrop(entry, tier)) return false;
  if (filter == VictimFilter::kCleanNotAhead && entry.promoted_by() != PromotedBy::kNone)
    return false;
  return true;
}

std::optional<uint32_t> SlotClock::PickVictim(MemTier tier, BlockTable* table, uint64_t now_wall_us,
                                              VictimFilter filter) {
  const uint32_t n = slots();
  if (n == 0) return std::nullopt;
  std::optional<uint32_t> best;
  BlockPriority best_priority = BlockPriority::kPinnedPrompt;
  for (uint32_t slot = 0; slot < n && ttl_count_ != 0; ++slot) {
    if (!used_[slot] || !has_ttl_[slot]) continue;
    const BlockEntry* e = table->Find(owner_[slot]);
    KV_CHECK(e != nullptr);  // A used slot always has its entry.
    if (Evictable(*e, tier, filter) && e->Expired(now_wall_us)) return slot;
  }
  for (uint64_t step = 0; step < 2ull * n; ++step) {
    const uint32_t slot = hand_;
    hand_ = (hand_ + 1) % n;
    if (!used_[slot]) continue;
    const BlockEntry* e = table->Find(owner_[slot]);
    KV_CHECK(e != nullptr);  // A used slot always has its entry.
    if (!Evictable(*e, tier, filter)) continue;
    if (e->Expired(now_wall_us)) return slot;
    if (e->referenced(tier)) {
      table->ClearReference(owner_[slot], tier);
      continue;
    }
    if (e->priority() == BlockPriority::kNormal) return slot;
    if (!best.has_value() || e->priority() < best_priority) {
      best = slot;
      best_priority = e->priority();
    }
  }
  return best;
}

}  // namespace kvtier
