// Goal: show that BlockTable is a state machine that accepts only the documented copy
// transitions (block_table.h): every legal one moves the copy (and the block) to the documented
// state, every illegal one is refused (a check failure, never a silent change), an entry is
// erased exactly when it holds no copy and no pin, pins keep a copy from being chosen for
// eviction, and the dirty bits and the flush claim change only through their transitions. Also
// that the copy-state readers say which copy may be read (kReady and kEvicting, never kFilling).
// Method: direct calls on a BlockTable with hand-made keys and slots; no tiers involved. Refusals
// are death tests (KV_CHECK aborts with "check failed"); that no code outside the table can write
// an entry is checked at compile time (static_assert below).
#include "engine/block_table.h"

#include <gtest/gtest.h>

#include <type_traits>
#include <utility>

#include "engine/eviction.h"

namespace kvtier {
namespace {

constexpr MemTier kHost = MemTier::kHost;
constexpr MemTier kCxl = MemTier::kCxl;
constexpr char kRefused[] = "check failed";

BlockKey Key(uint8_t b, uint32_t layer = 0) {
  BlockKey k;
  k.chunk_hash.fill(b);
  k.layer = layer;
  return k;
}

// The table is the one mutation point: outside it an entry is reachable only as const, and its
// fields are private (a write from elsewhere does not compile; these fail if that changes).
template <typename E>
concept AnyFieldReachable =
    requires(E& e) { e.state_; } || requires(E& e) { e.slot_; } || requires(E& e) { e.copy_; } ||
    requires(E& e) { e.referenced_; } || requires(E& e) { e.dirty_; } ||
    requires(E& e) { e.flushing_; } || requires(E& e) { e.pins_; } ||
    requires(E& e) { e.expiry_wall_us_; } || requires(E& e) { e.priority_; } ||
    requires(E& e) { e.promoted_by_; } || requires(E& e) { e.dirty_since_us_; };
static_assert(!AnyFieldReachable<BlockEntry>);
static_assert(std::is_same_v<decltype(std::declval<const BlockTable&>().Find(BlockKey{})),
                             const BlockEntry*>);
static_assert(std::is_same_v<decltype(std::declval<BlockTable&>().Reserve(BlockKey{}, kHost, 0)),
                             const BlockEntry*>);
static_assert(
    std::is_same_v<decltype(std::declval<BlockTable&>().Claim(BlockKey{}, BlockPriority{}, 0)),
                   const BlockEntry*>);

// A table holding Key(1) with a kReady host copy at slot 7.
BlockTable ReadyTable() {
  BlockTable table;
  table.Reserve(Key(1), kHost, 7);
  table.Publish(Key(1), kHost);
  return table;
}

TEST(BlockTableTest, ReserveInsertsAndPublishMakesReadable) {
  BlockTable table;
  const BlockEntry* e = table.Reserve(Key(1), kHost, 7);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(table.Find(Key(1)), e);
  EXPECT_EQ(table.Find(Key(1, 1)), nullptr);  // The layer is part of the key.
  EXPECT_EQ(e->state(), BlockState::kWriting);
  EXPECT_EQ(e->copy(kHost), CopyState::kFilling);
  EXPECT_EQ(e->slot(kHost), 7u);
  EXPECT_FALSE(e->AnyReadable());  // A filling copy is never read.
  table.Publish(Key(1), kHost);
  e = table.Find(Key(1));
  EXPECT_EQ(e->state(), BlockState::kReady);
  EXPECT_EQ(e->copy(kHost), CopyState::kReady);
  MemTier t;
  ASSERT_TRUE(e->FastestReadable(&t));
  EXPECT_EQ(t, kHost);
  // A second copy of the same block in another tier (a demotion): Reserve on the existing entry.
  table.Reserve(Key(1), kCxl, 3);
  EXPECT_EQ(table.size(), 1u);
  EXPECT_EQ(table.Find(Key(1))->copy(kCxl), CopyState::kFilling);
  EXPECT_FALSE(table.Find(Key(1))->ReadableBelow(kHost));
  table.Publish(Key(1), kCxl);
  EXPECT_TRUE(table.Find(Key(1))->ReadableBelow(kHost));
}

TEST(BlockTableTest, AbortErasesAnEmptyUnpinnedEntry) {
  BlockTable table;
  table.Reserve(Key(1), kHost, 7);
  EXPECT_EQ(table.Abort(Key(1), kHost), 7u);  // The slot is handed back to the caller.
  EXPECT_EQ(table.Find(Key(1)), nullptr);
  EXPECT_EQ(table.size(), 0u);
}

TEST(BlockTableTest, ClaimPinsUntilTheWriterUnpins) {
  BlockTable table;
  const BlockEntry* e = table.Claim(Key(2), BlockPriority::kHigh, /*expiry_wall_us=*/500);
  EXPECT_EQ(e->pins(), 1u);
  EXPECT_EQ(e->priority(), BlockPriority::kHigh);
  EXPECT_EQ(e->expiry_wall_us(), 500u);
  EXPECT_EQ(e->state(), BlockState::kWriting);
  table.Reserve(Key(2), kHost, 1);
  EXPECT_EQ(table.Abort(Key(2), kHost), 1u);
  ASSERT_NE(table.Find(Key(2)), nullptr);  // Empty but pinned: kept.
  table.Unpin(Key(2));
  EXPECT_EQ(table.Find(Key(2)), nullptr);  // Empty and unpinned: erased.
}

TEST(BlockTableTest, UnpinKeepsAnEntryWithACopy) {
  BlockTable table = ReadyTable();
  table.Pin(Key(1));
  table.Pin(Key(1));
  EXPECT_EQ(table.Find(Key(1))->pins(), 2u);
  table.Unpin(Key(1));
  table.Unpin(Key(1));
  ASSERT_NE(table.Find(Key(1)), nullptr);
  EXPECT_EQ(table.Find(Key(1))->pins(), 0u);
  EXPECT_EQ(table.Drop(Key(1), kHost), 7u);
  EXPECT_EQ(table.Find(Key(1)), nullptr);
}

TEST(BlockTableTest, EvictionKeptOrEnded) {
  BlockTable table = ReadyTable();
  table.BeginEviction(Key(1), kHost);
  EXPECT_EQ(table.Find(Key(1))->copy(kHost), CopyState::kEvicting);
  EXPECT_TRUE(table.Find(Key(1))->Readable(kHost));  // Still readable while written down.
  EXPECT_EQ(table.EndEviction(Key(1), kHost, /*kept=*/true), kNoSlot);
  EXPECT_EQ(table.Find(Key(1))->copy(kHost), CopyState::kReady);
  table.BeginEviction(Key(1), kHost);
  EXPECT_EQ(table.EndEviction(Key(1), kHost, /*kept=*/false), 7u);
  EXPECT_EQ(table.Find(Key(1)), nullptr);
}

TEST(BlockTableTest, EndingOneCopyKeepsTheOthers) {
  BlockTable table = ReadyTable();
  table.Reserve(Key(1), kCxl, 3);
  table.Publish(Key(1), kCxl);
  table.Touch(Key(1), kHost);
  EXPECT_EQ(table.Drop(Key(1), kHost), 7u);
  const BlockEntry* e = table.Find(Key(1));
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->copy(kHost), CopyState::kNone);
  EXPECT_EQ(e->slot(kHost), kNoSlot);
  EXPECT_FALSE(e->referenced(kHost));  // A dropped copy's CLOCK bit goes with it.
  EXPECT_EQ(e->copy(kCxl), CopyState::kReady);
}

TEST(BlockTableTest, PromotionAndReferenceBits) {
  BlockTable table;
  table.Reserve(Key(1), kHost, 7);
  table.SetExpiry(Key(1), 100);
  table.PublishPromoted(Key(1), kHost, PromotedBy::kHint);
  const BlockEntry* e = table.Find(Key(1));
  EXPECT_EQ(e->state(), BlockState::kReady);
  EXPECT_TRUE(e->referenced(kHost));  // A second chance.
  EXPECT_EQ(e->promoted_by(), PromotedBy::kHint);
  EXPECT_TRUE(e->Expired(100));
  EXPECT_FALSE(e->Expired(99));
  table.ClearPromotedBy(Key(1));
  table.ClearReference(Key(1), kHost);
  EXPECT_EQ(e->promoted_by(), PromotedBy::kNone);
  EXPECT_FALSE(e->referenced(kHost));
  table.Touch(Key(1), kHost);
  EXPECT_TRUE(e->referenced(kHost));
}

TEST(BlockTableTest, DirtyBits) {
  BlockTable table = ReadyTable();
  const BlockEntry* e = table.Find(Key(1));
  EXPECT_EQ(e->dirty(), 0u);
  table.MarkDirty(Key(1), 0);
  table.MarkDirty(Key(1), 2);
  EXPECT_TRUE(e->DirtyFor(0));
  EXPECT_FALSE(e->DirtyFor(1));
  EXPECT_TRUE(e->DirtyFor(2));
  table.MarkClean(Key(1), 0);
  EXPECT_EQ(e->dirty(), 1u << 2);
  table.MarkClean(Key(1), 0);  // Clean already: no change.
  EXPECT_EQ(e->dirty(), 1u << 2);
  EXPECT_FALSE(CleanToDrop(*e, kHost));  // A dirty last copy needs a write first.
}

// The write-back age limit counts from the time SetDirtySince gives; marking bits keeps it.
TEST(BlockTableTest, DirtySinceIsKeptUntilSetAgain) {
  BlockTable table = ReadyTable();
  const BlockEntry* e = table.Find(Key(1));
  table.MarkDirty(Key(1), 0);
  table.SetDirtySince(Key(1), 1234);
  table.MarkDirty(Key(1), 1);
  table.BeginFlush(Key(1));
  table.EndFlush(Key(1), 0, /*written=*/false);
  EXPECT_EQ(e->dirty_since_us(), 1234u);
  table.SetDirtySince(Key(1), 5678);  // Refused by the tier: counted again from now.
  EXPECT_EQ(e->dirty_since_us(), 5678u);
}

TEST(BlockTableTest, FlushClaimPinsAndCleansOnlyWhenWritten) {
  BlockTable table = ReadyTable();
  table.MarkDirty(Key(1), 0);
  table.MarkDirty(Key(1), 1);
  table.BeginFlush(Key(1));
  const BlockEntry* e = table.Find(Key(1));
  EXPECT_TRUE(e->flushing());
  EXPECT_EQ(e->pins(), 1u);
  table.EndFlush(Key(1), 0, /*written=*/false);
  EXPECT_FALSE(e->flushing());
  EXPECT_EQ(e->pins(), 0u);
  EXPECT_TRUE(e->DirtyFor(0));  // A failed write leaves it dirty.
  table.BeginFlush(Key(1));
  table.EndFlush(Key(1), 0, /*written=*/true);
  EXPECT_FALSE(e->DirtyFor(0));
  EXPECT_TRUE(e->DirtyFor(1));
}

TEST(BlockTableTest, PinsAndFlushesBlockEviction) {
  BlockTable table = ReadyTable();
  SlotClock clock(8);
  clock.Assign(7, Key(1), /*has_ttl=*/false);
  table.Pin(Key(1));
  EXPECT_FALSE(Evictable(*table.Find(Key(1)), kHost, VictimFilter::kAny));
  EXPECT_FALSE(clock.PickVictim(kHost, &table, 0, VictimFilter::kAny).has_value());
  table.Unpin(Key(1));
  table.BeginFlush(Key(1));
  EXPECT_FALSE(clock.PickVictim(kHost, &table, 0, VictimFilter::kAny).has_value());
  table.EndFlush(Key(1), 0, /*written=*/false);
  EXPECT_EQ(clock.PickVictim(kHost, &table, 0, VictimFilter::kAny), 7u);
}

// --- Refusals: each transition from a state it does not start from is a bug. ---

TEST(BlockTableDeathTest, TransitionsOnAnAbsentKey) {
  BlockTable table;
  EXPECT_DEATH(table.Publish(Key(9), kHost), kRefused);
  EXPECT_DEATH(table.Abort(Key(9), kHost), kRefused);
  EXPECT_DEATH(table.Drop(Key(9), kHost), kRefused);
  EXPECT_DEATH(table.BeginEviction(Key(9), kHost), kRefused);
  EXPECT_DEATH(table.EndEviction(Key(9), kHost, true), kRefused);
  EXPECT_DEATH(table.Pin(Key(9)), kRefused);
  EXPECT_DEATH(table.Unpin(Key(9)), kRefused);
  EXPECT_DEATH(table.Touch(Key(9), kHost), kRefused);
  EXPECT_DEATH(table.MarkDirty(Key(9), 0), kRefused);
  EXPECT_DEATH(table.BeginFlush(Key(9)), kRefused);
}

TEST(BlockTableDeathTest, FromNone) {
  BlockTable table = ReadyTable();  // Key(1) has no CXL copy.
  EXPECT_DEATH(table.Publish(Key(1), kCxl), kRefused);
  EXPECT_DEATH(table.Abort(Key(1), kCxl), kRefused);
  EXPECT_DEATH(table.Drop(Key(1), kCxl), kRefused);
  EXPECT_DEATH(table.BeginEviction(Key(1), kCxl), kRefused);
  EXPECT_DEATH(table.EndEviction(Key(1), kCxl, true), kRefused);
  EXPECT_DEATH(table.EndEviction(Key(1), kCxl, false), kRefused);
  EXPECT_DEATH(table.Touch(Key(1), kCxl), kRefused);
  EXPECT_DEATH(table.Reserve(Key(1), kCxl, kNoSlot), kRefused);
}

TEST(BlockTableDeathTest, FromFilling) {
  BlockTable table;
  table.Reserve(Key(1), kHost, 7);
  EXPECT_DEATH(table.Reserve(Key(1), kHost, 8), kRefused);
  EXPECT_DEATH(table.Drop(Key(1), kHost), kRefused);
  EXPECT_DEATH(table.BeginEviction(Key(1), kHost), kRefused);
  EXPECT_DEATH(table.EndEviction(Key(1), kHost, true), kRefused);
  EXPECT_DEATH(table.EndEviction(Key(1), kHost, false), kRefused);
  EXPECT_DEATH(table.Touch(Key(1), kHost), kRefused);
  EXPECT_DEATH(table.PublishPromoted(Key(1), kHost, PromotedBy::kNone), kRefused);
}

TEST(BlockTableDeathTest, FromReady) {
  BlockTable table = ReadyTable();
  EXPECT_DEATH(table.Reserve(Key(1), kHost, 8), kRefused);
  EXPECT_DEATH(table.Publish(Key(1), kHost), kRefused);
  EXPECT_DEATH(table.Abort(Key(1), kHost), kRefused);
  EXPECT_DEATH(table.EndEviction(Key(1), kHost, true), kRefused);
  EXPECT_DEATH(table.EndEviction(Key(1), kHost, false), kRefused);
}

TEST(BlockTableDeathTest, FromEvicting) {
  BlockTable table = ReadyTable();
  table.BeginEviction(Key(1), kHost);
  EXPECT_DEATH(table.Reserve(Key(1), kHost, 8), kRefused);
  EXPECT_DEATH(table.Publish(Key(1), kHost), kRefused);
  EXPECT_DEATH(table.Abort(Key(1), kHost), kRefused);
  EXPECT_DEATH(table.Drop(Key(1), kHost), kRefused);
  EXPECT_DEATH(table.BeginEviction(Key(1), kHost), kRefused);
}

TEST(BlockTableDeathTest, EntriesPinsAndFlushes) {
  BlockTable table = ReadyTable();
  EXPECT_DEATH(table.Claim(Key(1), BlockPriority::kNormal, 0), kRefused);  // Present already.
  EXPECT_DEATH(table.Unpin(Key(1)), kRefused);                              // Not pinned.
  EXPECT_DEATH(table.EndFlush(Key(1), 0, true), kRefused);                  // Not claimed.
  EXPECT_DEATH(table.MarkDirty(Key(1), kDirtyBits), kRefused);             // No such bit.
  table.BeginFlush(Key(1));
  EXPECT_DEATH(table.BeginFlush(Key(1)), kRefused);  // One flush at a time.
}

}  // namespace
}  // namespace kvtier
