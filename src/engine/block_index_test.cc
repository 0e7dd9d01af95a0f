// Goal: show that BlockIndex keeps one entry per key, that its copy-state helpers say which copy
// may be read (only kReady and kEvicting copies, never a kFilling one), and that an entry is
// erased only once it holds no copy and no pin.
// Method: direct calls on a BlockIndex with hand-made keys; no tiers involved.
#include "engine/block_index.h"

#include <gtest/gtest.h>

namespace kvtier {
namespace {

BlockKey Key(uint8_t b, uint32_t layer = 0) {
  BlockKey k;
  k.chunk_hash.fill(b);
  k.layer = layer;
  return k;
}

TEST(BlockIndexTest, InsertFindErase) {
  BlockIndex index;
  BlockEntry* e = index.Insert(Key(1));
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->state, BlockState::kWriting);
  EXPECT_EQ(index.Insert(Key(1)), nullptr);  // A second writer of the same key is refused.
  EXPECT_NE(index.Find(Key(1)), nullptr);
  EXPECT_EQ(index.Find(Key(1, 1)), nullptr);  // The layer is part of the key.
  index.Erase(Key(1));
  EXPECT_EQ(index.Find(Key(1)), nullptr);
}

TEST(BlockIndexTest, FillingCopyIsNotReadable) {
  BlockEntry e;
  e.copy[TierIndex(MemTier::kDevice)] = CopyState::kFilling;
  EXPECT_FALSE(e.AnyReadable());
  EXPECT_FALSE(e.Empty());
  e.copy[TierIndex(MemTier::kHost)] = CopyState::kReady;
  MemTier t;
  ASSERT_TRUE(e.FastestReadable(&t));
  EXPECT_EQ(t, MemTier::kHost);
  EXPECT_FALSE(e.ReadableBelow(MemTier::kHost));
  EXPECT_TRUE(e.ReadableBelow(MemTier::kDevice));
  e.copy[TierIndex(MemTier::kDevice)] = CopyState::kEvicting;  // Still readable while written down.
  ASSERT_TRUE(e.FastestReadable(&t));
  EXPECT_EQ(t, MemTier::kDevice);
}

TEST(BlockIndexTest, EraseIfEmptyRespectsPinsAndCopies) {
  BlockIndex index;
  BlockEntry* e = index.Insert(Key(2));
  e->pins = 1;
  index.EraseIfEmpty(Key(2));
  ASSERT_NE(index.Find(Key(2)), nullptr);
  e = index.Find(Key(2));
  e->pins = 0;
  e->copy[TierIndex(MemTier::kCxl)] = CopyState::kReady;
  index.EraseIfEmpty(Key(2));
  ASSERT_NE(index.Find(Key(2)), nullptr);
  index.Find(Key(2))->copy[TierIndex(MemTier::kCxl)] = CopyState::kNone;
  index.EraseIfEmpty(Key(2));
  EXPECT_EQ(index.Find(Key(2)), nullptr);
}

TEST(BlockIndexTest, Expiry) {
  BlockEntry e;
  EXPECT_FALSE(e.Expired(UINT64_MAX));  // 0 means never.
  e.expiry_wall_us = 100;
  EXPECT_FALSE(e.Expired(99));
  EXPECT_TRUE(e.Expired(100));
}

}  // namespace
}  // namespace kvtier
