// BlockTable: the engine's map from block key to where the block's copies live in the memory
// tiers (device, host, CXL), in which state each copy is, and the block's eviction metadata
// (pins, CLOCK reference bits, expiry, dirty bits, priority). It is the one mutation point of that
// metadata: a BlockEntry's fields are private, readers get `const BlockEntry*`, and every change
// is one of the named transitions below, each of which checks its precondition (KV_CHECK: a wrong
// transition is a bug in the engine, never an operating error).
//
// Why a separate map: the tiers know only slots, the SSD tier knows only its own records. The
// engine needs one place that says, for a key, "which copy may be read now" and "which copy may
// be dropped now"; the state machine below is what keeps a Load from ever reading a copy that is
// still being written (docs/engine.md).
//
// Copy states, per memory tier, and the transition that makes each step:
//   kNone -> kFilling     Reserve (a slot allocated, bytes in flight; inserts the entry if absent)
//   kFilling -> kReady    Publish / PublishPromoted (readable, evictable; the block becomes kReady)
//   kFilling -> kNone     Abort (the bytes never arrived; the slot is handed back)
//   kReady -> kEvicting   BeginEviction (being written down; still readable)
//   kEvicting -> kReady   EndEviction(kept = true)
//   kEvicting -> kNone    EndEviction(kept = false) (the slot is handed back)
//   kReady -> kNone       Drop (a clean copy given up without a write; the slot is handed back)
// The transitions that end a copy erase the entry when it then holds no copy and no pin, as Unpin
// does; the slot they return is the caller's to free (the table never touches slot memory).
// A block is visible to Lookup and Load only when some copy is kReady or kEvicting. Copies in the
// tiers below memory (SSD, remote) are not tracked here beyond one dirty bit per tier: each tier's
// own index is the truth for them, and it survives restarts.
//
// Thread safety: none; the engine guards the table (and every BlockEntry) with its mutex.
// Ownership: the table owns its entries; pointers returned by Find() are valid until the entry is
// erased or another entry is inserted (rehash), i.e. only while the engine mutex stays held and
// no transition that inserts or erases has run since.
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
// The dirty bits of a BlockEntry: one per tier below memory.
inline constexpr size_t kDirtyBits = 8;

inline size_t TierIndex(MemTier t) { return static_cast<size_t>(t); }
inline MemTier MemTierAt(size_t i) { return static_cast<MemTier>(i); }
TierKind ToTierKind(MemTier t);

enum class CopyState : uint8_t { kNone = 0, kFilling = 1, kReady = 2, kEvicting = 3 };

// Whether the block as a whole has completed its first write (the spec's {writing, ready}).
enum class BlockState : uint8_t { kWriting = 0, kReady = 1 };

// Why a memory copy was promoted ahead of need, until a Load serves it (docs/engine.md, "Access
// prediction": the useful-block counters).
enum class PromotedBy : uint8_t { kNone = 0, kPrediction = 1, kHint = 2, kPrefetch = 3 };

// One block's metadata; read-only outside BlockTable.
class BlockEntry {
 public:
  BlockState state() const { return state_; }
  uint32_t slot(MemTier t) const { return slot_[TierIndex(t)]; }
  CopyState copy(MemTier t) const { return copy_[TierIndex(t)]; }
  bool referenced(MemTier t) const { return referenced_[TierIndex(t)]; }  // CLOCK bit.
  // Bit i: the block must still be written to the engine's i-th tier below memory (write-back,
  // or a write that failed) before its last memory copy goes. 0: clean.
  uint8_t dirty() const { return dirty_; }
  bool DirtyFor(size_t below) const { return (dirty_ >> below) & 1u; }
  bool flushing() const { return flushing_; }  // A Flush is writing it down; not chosen again.
  // Monotonic time (Clock::NowMicros) from which its dirty bits count for the write-back age
  // limit (EngineOptions::writeback_age_ms_max): when its Store published it. Meaningless while
  // clean.
  uint64_t dirty_since_us() const { return dirty_since_us_; }
  uint32_t pins() const { return pins_; }  // PinHandles, Loads and writers in flight.
  uint64_t expiry_wall_us() const { return expiry_wall_us_; }  // 0: never expires.
  BlockPriority priority() const { return priority_; }
  PromotedBy promoted_by() const { return promoted_by_; }  // Cleared by a Load from memory.

  bool Readable(MemTier t) const {
    const CopyState c = copy(t);
    return c == CopyState::kReady || c == CopyState::kEvicting;
  }
  // The fastest readable memory copy, if any.
  bool FastestReadable(MemTier* out) const;
  bool AnyReadable() const;
  // True when no copy exists or is in flight (the entry may be erased once unpinned).
  bool Empty() const;
  bool Expired(uint64_t now_wall_us) const {
    return expiry_wall_us_ != 0 && expiry_wall_us_ <= now_wall_us;
  }
  // Another readable copy exists in a memory tier below `t`.
  bool ReadableBelow(MemTier t) const;

 private:
  friend class BlockTable;

  BlockState state_ = BlockState::kWriting;
  std::array<uint32_t, kMemTiers> slot_{kNoSlot, kNoSlot, kNoSlot};
  std::array<CopyState, kMemTiers> copy_{CopyState::kNone, CopyState::kNone, CopyState::kNone};
  std::array<bool, kMemTiers> referenced_{false, false, false};
  uint8_t dirty_ = 0;
  bool flushing_ = false;
  uint32_t pins_ = 0;
  uint64_t expiry_wall_us_ = 0;
  uint64_t dirty_since_us_ = 0;
  BlockPriority priority_ = BlockPriority::kNormal;
  PromotedBy promoted_by_ = PromotedBy::kNone;
};

class BlockTable {
 public:
  const BlockEntry* Find(const BlockKey& key) const;
  size_t size() const { return map_.size(); }

  template <typename Fn>
  void ForEach(Fn&& fn) const {
    for (const auto& [key, entry] : map_) fn(key, entry);
  }

  // --- Entries ---
  // A Store's reservation of an absent key: a fresh kWriting entry with its priority and expiry,
  // pinned once (the writer's pin: never erased or evicted until it is unpinned).
  const BlockEntry* Claim(const BlockKey& key, BlockPriority priority, uint64_t expiry_wall_us);
  void Pin(const BlockKey& key);
  // Erases the entry when it then holds no copy and no pin.
  void Unpin(const BlockKey& key);

  // --- Copies (the state machine of the file comment) ---
  // kNone -> kFilling in `t` at `slot`; inserts a kWriting entry when the key is absent.
  const BlockEntry* Reserve(const BlockKey& key, MemTier t, uint32_t slot);
  // kFilling -> kReady; the block becomes kReady.
  void Publish(const BlockKey& key, MemTier t);
  // Publish of a copy promoted ahead of need by `by` (not kNone): it also gets its reference bit
  // (a second chance) and stays promoted_by `by` until a Load serves it.
  void PublishPromoted(const BlockKey& key, MemTier t, PromotedBy by);
  // kFilling -> kNone; returns the slot to free.
  uint32_t Abort(const BlockKey& key, MemTier t);
  // kReady -> kNone (a copy dropped without a write); returns the slot to free.
  uint32_t Drop(const BlockKey& key, MemTier t);
  // kReady -> kEvicting.
  void BeginEviction(const BlockKey& key, MemTier t);
  // kEvicting -> kReady when `kept`, else kEvicting -> kNone. Returns the slot to free (kNoSlot
  // when kept).
  uint32_t EndEviction(const BlockKey& key, MemTier t, bool kept);

  // --- Eviction metadata ---
  // Sets the CLOCK reference bit of a readable copy (a Load used it).
  void Touch(const BlockKey& key, MemTier t);
  void ClearReference(const BlockKey& key, MemTier t);
  void SetExpiry(const BlockKey& key, uint64_t expiry_wall_us);
  // A Load served the block: it no longer counts as promoted ahead of need.
  void ClearPromotedBy(const BlockKey& key);
  void MarkDirty(const BlockKey& key, size_t below);
  void MarkClean(const BlockKey& key, size_t below);
  // Sets the time the write-back age limit counts from (a Store published the block, or the tier
  // refused it and it is retried one age later).
  void SetDirtySince(const BlockKey& key, uint64_t now_us);
  // A Flush claims the block (flushing, pinned once); not while another one holds it.
  void BeginFlush(const BlockKey& key);
  // Ends BeginFlush; `written`: the block reached tier `below` (clean for it now).
  void EndFlush(const BlockKey& key, size_t below, bool written);

 private:
  BlockEntry& Get(const BlockKey& key);
  // Erases the entry when it holds no copy and no pin.
  void EraseIfEmpty(const BlockKey& key, const BlockEntry& e);
  // Sets copy `t` of `key` to kNone; returns its slot.
  uint32_t EndCopy(const BlockKey& key, MemTier t, CopyState from);

  std::unordered_map<BlockKey, BlockEntry> map_;
};

}  // namespace kvtier
