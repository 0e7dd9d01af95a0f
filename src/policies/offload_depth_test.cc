// Goal: the adaptive prefetch depth moves in the right direction: deeper while compute keeps
// waiting for data, shallower under memory pressure, never outside its bounds, and steady when
// neither happens. Method: feed PrefetchDepthController synthetic per-layer stall measurements
// and pressure flags (no timing: the numbers are given, not measured).
#include "policies/offload_depth.h"

#include <gtest/gtest.h>

namespace kvtier {
namespace {

PrefetchDepthOptions Options() {
  return {.depth_min = 1,
          .depth_max = 4,
          .depth_initial = 1,
          .stall_threshold_us = 50,
          .grow_after_stalls = 2,
          .shrink_after_pressure = 2};
}

TEST(PrefetchDepthTest, StallsGrowDepthUpToMax) {
  PrefetchDepthController c(Options());
  for (int i = 0; i < 20; ++i) c.Observe(1000, false);
  EXPECT_EQ(c.depth(), 4u);
  EXPECT_EQ(c.grows(), 3u);
}

TEST(PrefetchDepthTest, SingleStallDoesNotGrow) {
  PrefetchDepthController c(Options());
  for (int i = 0; i < 10; ++i) {
    c.Observe(1000, false);
    c.Observe(0, false);
  }
  EXPECT_EQ(c.depth(), 1u);
}

TEST(PrefetchDepthTest, PressureShrinksDownToMin) {
  PrefetchDepthOptions o = Options();
  o.depth_initial = 4;
  PrefetchDepthController c(o);
  for (int i = 0; i < 20; ++i) c.Observe(1000, true);
  EXPECT_EQ(c.depth(), 1u);
  EXPECT_EQ(c.shrinks(), 3u);
}

TEST(PrefetchDepthTest, NoStallNoPressureKeepsDepth) {
  PrefetchDepthOptions o = Options();
  o.depth_initial = 2;
  PrefetchDepthController c(o);
  for (int i = 0; i < 50; ++i) c.Observe(10, false);
  EXPECT_EQ(c.depth(), 2u);
}

TEST(PrefetchDepthTest, FixedDepthAndValidation) {
  PrefetchDepthController c({.depth_min = 0, .depth_max = 0, .depth_initial = 0});
  for (int i = 0; i < 5; ++i) c.Observe(1000, false);
  EXPECT_EQ(c.depth(), 0u);
  EXPECT_FALSE((PrefetchDepthOptions{.depth_min = 3, .depth_max = 2}.Validate().ok()));
  EXPECT_FALSE(PrefetchDepthOptions{.depth_max = kPrefetchDepthMax + 1}.Validate().ok());
  EXPECT_FALSE(PrefetchDepthOptions{.depth_initial = 9}.Validate().ok());
  EXPECT_TRUE(Options().Validate().ok());
}

}  // namespace
}  // namespace kvtier
