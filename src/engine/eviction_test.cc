// Goal: show that SlotClock picks victims by the rules of eviction.h: expired first, pinned and
// in-flight blocks never, referenced blocks get a second chance, lower priorities go first, clean
// blocks only when asked, blocks promoted ahead of need are spared by other such promotions until
// used, and "no victim" (so the engine answers Busy) when all are protected.
// Method: a BlockTable filled through its transitions and a SlotClock filled by hand; the tier
// itself is not needed.
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

struct Block {
  BlockPriority priority = BlockPriority::kNormal;
  uint64_t expiry_wall_us = 0;
  PromotedBy promoted_by = PromotedBy::kNone;
  bool publish = true;  // false: the copy stays kFilling.
};

class EvictionTest : public ::testing::Test {
 protected:
  // Fills one slot per block of `blocks` (slot i: Key(i)), ready, unreferenced and unpinned
  // unless the block says otherwise.
  void Fill(const std::vector<Block>& blocks) {
    clock_.emplace(static_cast<uint32_t>(blocks.size()));
    for (uint32_t i = 0; i < blocks.size(); ++i) {
      const Block& b = blocks[i];
      table_.Claim(Key(i), b.priority, b.expiry_wall_us);
      table_.Reserve(Key(i), kTier, i);
      if (b.publish && b.promoted_by != PromotedBy::kNone) {
        table_.PublishPromoted(Key(i), kTier, b.promoted_by);
      } else if (b.publish) {
        table_.Publish(Key(i), kTier);
      }
      table_.Unpin(Key(i));
      clock_->Assign(i, Key(i), /*has_ttl=*/true);
    }
  }
  void Fill(uint32_t n) { Fill(std::vector<Block>(n)); }
  const BlockEntry& E(uint32_t i) { return *table_.Find(Key(i)); }
  std::optional<uint32_t> Pick(uint64_t now = 0, VictimFilter f = VictimFilter::kAny) {
    return clock_->PickVictim(kTier, &table_, now, f);
  }

  BlockTable table_;
  std::optional<SlotClock> clock_;
};

TEST_F(EvictionTest, SecondChanceForReferencedBlocks) {
  Fill(3);
  table_.Touch(Key(0), kTier);
  EXPECT_EQ(Pick(), 1u);
  EXPECT_FALSE(E(0).referenced(kTier));  // The hand cleared it on the way.
}

TEST_F(EvictionTest, ExpiredFirst) {
  Fill({{}, {}, {}, {.priority = BlockPriority::kPinnedPrompt, .expiry_wall_us = 50}});
  EXPECT_EQ(Pick(/*now=*/100), 3u);
}

TEST_F(EvictionTest, LowerPriorityFirst) {
  const Block high{.priority = BlockPriority::kHigh};
  Fill({high, high, {}, high});
  table_.Touch(Key(2), kTier);  // Even referenced, normal beats high.
  EXPECT_EQ(Pick(), 2u);
}

TEST_F(EvictionTest, LowestPriorityAmongProtected) {
  const Block high{.priority = BlockPriority::kHigh};
  const Block prompt{.priority = BlockPriority::kPinnedPrompt};
  Fill({high, prompt, prompt, high});
  const std::optional<uint32_t> v = Pick();
  ASSERT_TRUE(v.has_value());
  EXPECT_TRUE(*v == 0u || *v == 3u);
}

TEST_F(EvictionTest, PinsFillingAndFlushingAreNeverVictims) {
  Fill({{}, {.publish = false}, {}});
  table_.Pin(Key(0));
  table_.BeginFlush(Key(2));
  EXPECT_FALSE(Pick().has_value());
  table_.EndFlush(Key(2), 0, /*written=*/false);
  table_.BeginEviction(Key(2), kTier);
  EXPECT_FALSE(Pick().has_value());  // Already being evicted by someone else.
  table_.Unpin(Key(0));
  EXPECT_EQ(Pick(), 0u);
}

TEST_F(EvictionTest, CleanOnlySkipsDirtyLastCopies) {
  Fill(2);
  table_.MarkDirty(Key(0), 0);
  table_.MarkDirty(Key(1), 0);
  EXPECT_FALSE(Pick(0, VictimFilter::kCleanOnly).has_value());
  EXPECT_TRUE(Pick(0, VictimFilter::kAny).has_value());
  // A dirty copy with a readable copy below it may be dropped without a write.
  table_.Reserve(Key(1), MemTier::kCxl, 0);
  table_.Publish(Key(1), MemTier::kCxl);
  EXPECT_EQ(Pick(0, VictimFilter::kCleanOnly), 1u);
}

TEST_F(EvictionTest, CleanNotAheadSparesUnusedPromotions) {
  Fill({{.promoted_by = PromotedBy::kPrediction}, {.promoted_by = PromotedBy::kHint}, {}});
  table_.MarkDirty(Key(2), 0);
  EXPECT_FALSE(Pick(0, VictimFilter::kCleanNotAhead).has_value());
  EXPECT_EQ(Pick(0, VictimFilter::kCleanOnly), 0u);  // Other allocations still take them.
  table_.ClearPromotedBy(Key(1));                     // A Load used it.
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
