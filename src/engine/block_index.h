// BlockIndex: the engine's map from block key to where the block's copies live in the memory
// tiers (device, host, CXL), in which state each copy is, and the block's eviction metadata
// (pins, CLOCK reference bits, expiry, dirty bits, priority).
//
// Why a separate map: the tiers know only slots, the SSD tier knows only its own records. The
// engine needs one place that says, for a key, "which copy may be read now" and "which copy may
// be dropped now"; the state machine below is what keeps a Load from ever reading a copy that is
// still being written (docs/engine.md).
//
// Copy states, per memory tier:
//   kNone -> kFilling (slot allocated, bytes in flight) -> kReady (readable, evictable)
//   kReady -> kEvicting (being written down; still readable) -> kNone (slot freed) or kReady
// A block is visible to Lookup and Load only when some copy is kReady or kEvicting. Copies in the
// tiers below memory (SSD, remote) are not tracked here beyond one dirty bit per tier: each tier's
// own index is the truth for them, and it survives restarts.
//
// Thread safety: none; the engine guards the index (and every BlockEntry) with its mutex.
// Ownership: the index owns its entries; pointers returned by Find() are valid until the entry is
// erased or another entry is inserted (rehash), i.e. only while the engine mutex stays held.
#pragma once

#include <array>
#include <cstdint>
#include <unordered_map>

#include "core/block_key.h"
#include "engine/engine.h"

namespace kvtier {

// The memory tiers, fastest first. Index into BlockEntry's per-tier arrays.
enum class MemTier : uint8_t { kDevice = 0, kHost = 1, kCxl = 2 };
inline constexpr size_t kMemTiers = 3;
inline constexpr uint32_t kNoSlot = UINT32_MAX;

inline size_t TierIndex(MemTier t) { return static_cast<size_t>(t); }
inline MemTier MemTierAt(size_t i) { return static_cast<MemTier>(i); }
TierKind ToTierKind(MemTier t);

enum class CopyState : uint8_t { kNone = 0, kFilling = 1, kReady = 2, kEvicting = 3 };

// Whether the block as a whole has completed its first write (the spec's {writing, ready}).
enum class BlockState : uint8_t { kWriting = 0, kReady = 1 };

// Why a memory copy was promoted ahead of need, until a Load serves it (docs/engine.md, "Access
// prediction": the useful-block counters).
enum class PromotedBy : uint8_t { kNone = 0, kPrediction = 1, kHint = 2, kPrefetch = 3 };

struct BlockEntry {
  BlockState state = BlockState::kWriting;
  std::array<uint32_t, kMemTiers> slot{kNoSlot, kNoSlot, kNoSlot};
  std::array<CopyState, kMemTiers> copy{CopyState::kNone, CopyState::kNone, CopyState::kNone};
  std::array<bool, kMemTiers> referenced{false, false, false};  // CLOCK bits.
  // Bit i: the block must still be written to the engine's i-th tier below memory (write-back,
  // or a write that failed) before its last memory copy goes. 0: clean.
  uint8_t dirty = 0;
  bool flushing = false;        // A Flush is writing it down; not chosen again meanwhile.
  uint32_t pins = 0;            // PinHandles and Loads in flight. Pinned blocks are never evicted.
  uint64_t expiry_wall_us = 0;  // 0: never expires.
  BlockPriority priority = BlockPriority::kNormal;
  PromotedBy promoted_by = PromotedBy::kNone;  // Cleared by the first Load served from memory.

  bool Readable(MemTier t) const {
    const CopyState c = copy[TierIndex(t)];
    return c == CopyState::kReady || c == CopyState::kEvicting;
  }
  // The fastest readable memory copy, if any.
  bool FastestReadable(MemTier* out) const;
  bool AnyReadable() const;
  // True when no copy exists or is in flight (the entry may be erased once unpinned).
  bool Empty() const;
  bool Expired(uint64_t now_wall_us) const {
    return expiry_wall_us != 0 && expiry_wall_us <= now_wall_us;
  }
  bool DirtyFor(size_t below) const { return (dirty >> below) & 1u; }
  void SetDirty(size_t below, bool on) {
    const auto bit = static_cast<uint8_t>(1u << below);
    dirty = static_cast<uint8_t>(on ? (dirty | bit) : (dirty & ~bit));
  }
  // Another readable copy exists in a memory tier below `t`.
  bool ReadableBelow(MemTier t) const;
};

class BlockIndex {
 public:
  BlockEntry* Find(const BlockKey& key);
  // Inserts a fresh kWriting entry; nullptr when the key is already present.
  BlockEntry* Insert(const BlockKey& key);
  void Erase(const BlockKey& key);
  // Erases the entry when it holds no copy and no pin.
  void EraseIfEmpty(const BlockKey& key);
  size_t size() const { return map_.size(); }

  template <typename Fn>
  void ForEach(Fn&& fn) {
    for (auto& [key, entry] : map_) fn(key, entry);
  }

 private:
  std::unordered_map<BlockKey, BlockEntry> map_;
};

}  // namespace kvtier
