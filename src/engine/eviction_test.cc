// Goal: show that SlotClock picks victims by the rules of eviction.h: expired first, pinned and
// in-flight blocks never, referenced blocks get a second chance, lower priorities go first, clean
// blocks only when asked, blocks promoted ahead of need are spared by other such promotions until
// used, and "no victim" (so the engine answers Busy) when all are protected.
// Method: a BlockIndex and a SlotClock filled by hand; the tier itself is not needed.
#include "engine/eviction.h"

#include <gtest/gtest.h>

namespace kvtier {
namespace {

constexpr MemTier kTier = MemTier::kHost;

BlockKey Key(uint32_t i) {
  BlockKey k;
  k.chunk_hash.fill(static_cast<uint8_t>(i));
  k.layer = i;
  return k;
}

class EvictionTest : public ::testing::Test {
 protected:
  // Fills `n` slots with ready, unreferenced, unpinned normal blocks.
  void Fill(uint32_t n) {
    clock_.emplace(n);
    for (uint32_t i = 0; i < n; ++i) {
      BlockEntry* e = index_.Insert(Key(i));
      e->state = BlockState::kReady;
      e->slot[TierIndex(kTier)] = i;
      e->copy[TierIndex(kTier)] = CopyState::kReady;
      clock_->Assign(i, Key(i), /*has_ttl=*/true);
    }
  }
  BlockEntry& E(uint32_t i) { return *index_.Find(Key(i)); }
  std::optional<uint32_t> Pick(uint64_t now = 0, VictimFilter f = VictimFilter::kAny) {
    return clock_->PickVictim(kTier, &index_, now, f);
  }

  BlockIndex index_;
  std::optional<SlotClock> clock_;
};

TEST_F(EvictionTest, SecondChanceForReferencedBlocks) {
  Fill(3);
  E(0).referenced[TierIndex(kTier)] = true;
  EXPECT_EQ(Pick(), 1u);
  EXPECT_FALSE(E(0).referenced[TierIndex(kTier)]);  // The hand cleared it on the way.
}

TEST_F(EvictionTest, ExpiredFirst) {
  Fill(4);
  E(3).expiry_wall_us = 50;
  E(3).priority = BlockPriority::kPinnedPrompt;
  EXPECT_EQ(Pick(/*now=*/100), 3u);
}

TEST_F(EvictionTest, LowerPriorityFirst) {
  Fill(4);
  for (uint32_t i = 0; i < 4; ++i) E(i).priority = BlockPriority::kHigh;
  E(2).priority = BlockPriority::kNormal;
  E(2).referenced[TierIndex(kTier)] = true;  // Even referenced, normal beats high.
  EXPECT_EQ(Pick(), 2u);
  E(2).priority = BlockPriority::kPinnedPrompt;
  E(1).priority = BlockPriority::kPinnedPrompt;
  const std::optional<uint32_t> v = Pick();
  ASSERT_TRUE(v.has_value());
  EXPECT_TRUE(*v == 0u || *v == 3u);
}

TEST_F(EvictionTest, PinsFillingAndFlushingAreNeverVictims) {
  Fill(3);
  E(0).pins = 1;
  E(1).copy[TierIndex(kTier)] = CopyState::kFilling;
  E(2).flushing = true;
  EXPECT_FALSE(Pick().has_value());
  E(2).copy[TierIndex(kTier)] = CopyState::kEvicting;
  E(2).flushing = false;
  EXPECT_FALSE(Pick().has_value());  // Already being evicted by someone else.
  E(0).pins = 0;
  EXPECT_EQ(Pick(), 0u);
}

TEST_F(EvictionTest, CleanOnlySkipsDirtyLastCopies) {
  Fill(2);
  E(0).dirty = true;
  E(1).dirty = true;
  EXPECT_FALSE(Pick(0, VictimFilter::kCleanOnly).has_value());
  EXPECT_TRUE(Pick(0, VictimFilter::kAny).has_value());
  // A dirty copy with a readable copy below it may be dropped without a write.
  E(1).copy[TierIndex(MemTier::kCxl)] = CopyState::kReady;
  EXPECT_EQ(Pick(0, VictimFilter::kCleanOnly), 1u);
}

TEST_F(EvictionTest, CleanNotAheadSparesUnusedPromotions) {
  Fill(3);
  E(0).promoted_by = PromotedBy::kPrediction;
  E(1).promoted_by = PromotedBy::kHint;
  E(2).dirty = true;
  EXPECT_FALSE(Pick(0, VictimFilter::kCleanNotAhead).has_value());
  EXPECT_EQ(Pick(0, VictimFilter::kCleanOnly), 0u);  // Other allocations still take them.
  E(1).promoted_by = PromotedBy::kNone;              // A Load used it.
  EXPECT_EQ(Pick(0, VictimFilter::kCleanNotAhead), 1u);
}

TEST_F(EvictionTest, ReleaseFreesOwnership) {
  Fill(2);
  EXPECT_EQ(clock_->used(), 2u);
  clock_->Release(1);
  EXPECT_EQ(clock_->Owner(1), nullptr);
  EXPECT_EQ(clock_->used(), 1u);
}

}  // namespace
}  // namespace kvtier
