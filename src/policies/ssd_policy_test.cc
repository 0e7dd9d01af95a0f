// Goal: the write-side policies protect the drive without any tier around them: the admission
// filter admits a block only once it was requested `threshold` times (everything with threshold
// 0 or 1), and the write budget grants bytes at its rate from a full burst, refills only with
// time given by the caller (never from a time earlier than one already seen), and never limits
// when unlimited.
// Method: AdmissionFilter on distinct synthetic keys; WriteBudget with explicit microsecond
// times (no clock, no sleeping: the times are given, not measured).
#include "policies/ssd_policy.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace kvtier::ssd {
namespace {

BlockKey Key(uint64_t seed, uint32_t layer) {
  BlockKey key;
  uint64_t x = seed;
  for (uint8_t& b : key.chunk_hash) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    b = static_cast<uint8_t>(x >> 56);
  }
  key.layer = layer;
  return key;
}

TEST(AdmissionFilterTest, ThresholdZeroOrOneAdmitsEverything) {
  for (uint32_t threshold : {0u, 1u}) {
    AdmissionFilter filter(threshold, 64);
    for (uint64_t i = 0; i < 100; ++i) EXPECT_TRUE(filter.RecordAndAdmit(Key(i, 0))) << threshold;
  }
}

TEST(AdmissionFilterTest, AdmitsOnTheThresholdthRequest) {
  AdmissionFilter filter(3, 1 << 12);
  const BlockKey key = Key(7, 2);
  EXPECT_FALSE(filter.RecordAndAdmit(key));
  EXPECT_FALSE(filter.RecordAndAdmit(key));
  EXPECT_TRUE(filter.RecordAndAdmit(key));
  // A lookup miss counts as a request too.
  const BlockKey other = Key(8, 2);
  filter.Record(other);
  EXPECT_FALSE(filter.RecordAndAdmit(other));
  EXPECT_TRUE(filter.RecordAndAdmit(other));
}

TEST(AdmissionFilterTest, OneRequestPerKeyAdmitsAlmostNothing) {
  AdmissionFilter filter(2, 1 << 16);
  int admitted = 0;
  for (uint64_t i = 0; i < 1000; ++i) admitted += filter.RecordAndAdmit(Key(i, 1)) ? 1 : 0;
  // A count-min sketch only overestimates: a few collisions, never most keys.
  EXPECT_LT(admitted, 20);
}

TEST(WriteBudgetTest, UnlimitedNeverRefuses) {
  WriteBudget budget(0, 0, 0);
  EXPECT_TRUE(budget.TryTake(uint64_t{1} << 40, 0));
  EXPECT_TRUE(budget.TryTake(uint64_t{1} << 40, 0));
}

TEST(WriteBudgetTest, GrantsTheBurstThenRefillsWithGivenTime) {
  WriteBudget budget(1000, 500, 1'000'000);  // 1000 B/s, 500 B burst, full at t = 1 s.
  EXPECT_TRUE(budget.TryTake(300, 1'000'000));
  EXPECT_FALSE(budget.TryTake(300, 1'000'000));  // 200 left; nothing taken.
  EXPECT_TRUE(budget.TryTake(200, 1'000'000));
  EXPECT_FALSE(budget.TryTake(1, 1'000'000));
  EXPECT_TRUE(budget.TryTake(100, 1'100'000));  // 0.1 s later: 100 B more.
  EXPECT_FALSE(budget.TryTake(1, 1'100'000));
  // An earlier time adds nothing (and is no error).
  EXPECT_FALSE(budget.TryTake(1, 1'050'000));
  // Refill stops at the burst.
  EXPECT_TRUE(budget.TryTake(500, 60'000'000));
  EXPECT_FALSE(budget.TryTake(1, 60'000'000));
}

TEST(WriteBudgetTest, ZeroBurstIsOneSecondOfBudget) {
  WriteBudget budget(4096, 0, 0);
  EXPECT_TRUE(budget.TryTake(4096, 0));
  EXPECT_FALSE(budget.TryTake(1, 0));
  EXPECT_FALSE(budget.TryTake(4097, 10'000'000));
  EXPECT_TRUE(budget.TryTake(4096, 10'000'000));
}

}  // namespace
}  // namespace kvtier::ssd
