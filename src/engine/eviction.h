// Eviction for the memory tiers: CLOCK with reference bits, TTL, pins and priorities
// (docs/engine.md).
//
// A SlotClock belongs to one memory tier. It records which key owns each slot and sweeps a CLOCK
// hand over the slots to choose a victim:
//   1. an expired, unpinned block is taken first (a full scan, only while the tier holds blocks
//      with a TTL);
//   2. otherwise a referenced block gets a second chance (its bit is cleared);
//   3. among unreferenced candidates the lowest priority wins; an unreferenced kNormal block ends
//      the sweep early.
// The sweep visits at most 2 x slots slots, so a victim is found in bounded time or none exists
// (every slot pinned, being written or being evicted): the caller then returns Busy instead of
// waiting.
//
// Choosing is separate from acting: the engine decides whether a victim is dropped (clean, or a
// copy exists below), demoted to the next memory tier, or written back to the SSD first (dirty).
//
// Thread safety: none; the engine's mutex guards a SlotClock together with the BlockTable.
// Ownership: the clock stores keys by value; it never touches slot memory.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "engine/block_table.h"

namespace kvtier {

enum class VictimFilter : uint8_t {
  kAny = 0,        // Dirty blocks qualify (the caller writes them back first).
  kCleanOnly = 1,  // Only blocks that can be dropped without a write (promotions use this).
  // kCleanOnly, and never a block promoted ahead of need that no Load has used yet: promotions
  // ahead of need (prediction, hints) use it, so they never displace one another's blocks
  // before their requests arrive. Other allocations still evict such blocks.
  kCleanNotAhead = 2,
};

class SlotClock {
 public:
  explicit SlotClock(uint32_t slots);

  // `has_ttl`: the block may expire; while any such block is in the tier, victim selection first
  // scans every slot for an expired one (O(slots)), so expired blocks always go first.
  void Assign(uint32_t slot, const BlockKey& key, bool has_ttl);
  void Release(uint32_t slot);
  // The owner of a used slot, nullptr for a free one.
  const BlockKey* Owner(uint32_t slot) const;
  uint32_t used() const { return used_count_; }
  uint32_t slots() const { return static_cast<uint32_t>(owner_.size()); }

  // Chooses a victim among this tier's slots (see the file comment). Clears the reference bits it
  // passes (BlockTable::ClearReference). nullopt when no slot is evictable.
  std::optional<uint32_t> PickVictim(MemTier tier, BlockTable* table, uint64_t now_wall_us,
                                     VictimFilter filter);

 private:
  std::vector<BlockKey> owner_;
  std::vector<bool> used_;
  std::vector<bool> has_ttl_;
  uint32_t used_count_ = 0;
  uint32_t ttl_count_ = 0;
  uint32_t hand_ = 0;
};

// True when `entry`'s copy in `tier` may be chosen as a victim under `filter`.
bool Evictable(const BlockEntry& entry, MemTier tier, VictimFilter filter);
// True when dropping `entry`'s copy in `tier` needs no write (not dirty, or another copy below).
bool CleanToDrop(const BlockEntry& entry, MemTier tier);

}  // namespace kvtier
