// Goal: the access predictor learns repeating patterns (multi-turn sessions coming back in the
// same order, a sequence's chunks read in order, an agent's loop of steps that sometimes branches
// back) to high accuracy, stays near chance on random accesses, honours caller hints and drops
// stale ones, and respects its bounds. Method: synthetic access traces from a
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

TEST(AccessPredictorTest, AgentLoopWithBranchesIsMostlyPredicted) {
  // An agent cycles plan -> code -> test; a failing test (30 %) goes back to code, else to plan.
  // Order-1 transitions: plan->code and code->test are certain, test->plan is 70 %: with one
  // guess the best possible accuracy is about (1 + 1 + 0.7) / 3 = 0.9 per step.
  const uint32_t seed = 99;
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  enum : uint64_t { kPlan = 1, kCode = 2, kTest = 3 };
  AccessPredictor one({.window = 1, .predict_k = 1});
  AccessPredictor two({.window = 1, .predict_k = 2});
  uint64_t step = kPlan;
  for (int i = 0; i < 3000; ++i) {
    one.Observe(step);
    two.Observe(step);
    if (step == kPlan) {
      step = kCode;
    } else if (step == kCode) {
      step = kTest;
    } else {
      step = u(rng) < 0.3 ? kCode : kPlan;
    }
  }
  std::printf("agent loop: accuracy %.3f (k=1), %.3f (k=2)\n", one.stats().accuracy(),
              two.stats().accuracy());
  EXPECT_GT(one.stats().accuracy(), 0.8);
  EXPECT_GT(two.stats().accuracy(), 0.99);  // Both branches are guessed.
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

TEST(AccessPredictorTest, StaleHintsExpire) {
  AccessPredictor p({.hint_accesses_max = 4});
  p.Hint(42);  // A request that is cancelled and never arrives.
  for (uint64_t i = 0; i < 4; ++i) p.Observe(1 + i % 2);
  EXPECT_EQ(p.Predict(1).at(0), 42u);
  p.Observe(1);  // The fifth access since the hint: it is dropped.
  EXPECT_EQ(p.hints(), 0u);
  EXPECT_EQ(p.Predict(1).at(0), 2u);
  // Observing a later hint drops the ones queued before it (they were skipped).
  p.Hint(7);
  p.Hint(8);
  p.Observe(8);
  EXPECT_EQ(p.hints(), 0u);
}

TEST(AccessPredictorTest, BoundsAndValidation) {
  AccessPredictor p({.items_max = 100});
  for (uint64_t i = 0; i < 1000; ++i) p.Observe(i);
  EXPECT_LE(p.items(), 100u);
  EXPECT_FALSE(AccessPredictorOptions{.window = 0}.Validate().ok());
  EXPECT_FALSE(AccessPredictorOptions{.successors_max = 65}.Validate().ok());
  EXPECT_FALSE(AccessPredictorOptions{.hint_accesses_max = 0}.Validate().ok());
  EXPECT_TRUE(AccessPredictorOptions{}.Validate().ok());
}

}  // namespace
}  // namespace kvtier
