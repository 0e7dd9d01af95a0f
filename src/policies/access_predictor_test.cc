// Goal: the access predictor learns repeating patterns (multi-turn sessions coming back in the
// same order, a sequence's chunks read in order) to high accuracy, stays near chance on random
// accesses, honours caller hints, and respects its bounds. Method: synthetic access traces from a
// seeded generator (seed printed), fed through Observe(); accuracy read from stats().
#include "policies/access_predictor.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <random>

namespace kvtier {
namespace {

TEST(AccessPredictorTest, RepeatingSessionsAreLearned) {
  AccessPredictor p({.window = 2, .predict_k = 1});
  // Eight sessions visited round-robin, each turn reading its 4 chunks in order.
  for (int round = 0; round < 50; ++round) {
    for (uint64_t session = 0; session < 8; ++session) {
      for (uint64_t chunk = 0; chunk < 4; ++chunk) p.Observe(session * 100 + chunk);
    }
  }
  std::printf("repeating sessions: accuracy %.3f over %llu\n", p.stats().accuracy(),
              static_cast<unsigned long long>(p.stats().predicted));
  EXPECT_GT(p.stats().accuracy(), 0.95);
}

TEST(AccessPredictorTest, RandomAccessesStayLow) {
  const uint32_t seed = 12345;
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  AccessPredictor p({.window = 2, .predict_k = 1});
  std::uniform_int_distribution<uint64_t> id(0, 999);
  for (int i = 0; i < 20000; ++i) p.Observe(id(rng));
  std::printf("random: accuracy %.4f\n", p.stats().accuracy());
  EXPECT_LT(p.stats().accuracy(), 0.05);
}

TEST(AccessPredictorTest, NoisyRepetitionStillMostlyPredicted) {
  std::mt19937 rng(7);
  AccessPredictor p({.window = 3, .predict_k = 2});
  std::uniform_real_distribution<double> u(0, 1);
  for (int round = 0; round < 200; ++round) {
    for (uint64_t step = 0; step < 10; ++step) {
      if (u(rng) < 0.1) continue;  // An agent step skipped now and then.
      p.Observe(step);
    }
  }
  EXPECT_GT(p.stats().accuracy(), 0.8);
}

TEST(AccessPredictorTest, HintsComeFirstUntilObserved) {
  AccessPredictor p({});
  for (int i = 0; i < 10; ++i) {
    p.Observe(1);
    p.Observe(2);
  }
  p.Hint(42);
  p.Hint(43);
  std::vector<uint64_t> next = p.Predict(3);
  ASSERT_EQ(next.size(), 3u);
  EXPECT_EQ(next[0], 42u);
  EXPECT_EQ(next[1], 43u);
  p.Observe(42);
  EXPECT_EQ(p.Predict(1).at(0), 43u);
}

TEST(AccessPredictorTest, BoundsAndValidation) {
  AccessPredictor p({.items_max = 100});
  for (uint64_t i = 0; i < 1000; ++i) p.Observe(i);
  EXPECT_LE(p.items(), 100u);
  EXPECT_FALSE(AccessPredictorOptions{.window = 0}.Validate().ok());
  EXPECT_FALSE(AccessPredictorOptions{.successors_max = 65}.Validate().ok());
  EXPECT_TRUE(AccessPredictorOptions{}.Validate().ok());
}

}  // namespace
}  // namespace kvtier
