// Goal: the figures `kvtier bench codec` reports are computed right: the attention of a query
// over a sequence fed block by block equals the attention over the whole sequence at once (also
// when a later block holds a much larger score, which rescales what was summed), the relative
// RMSE over many blocks is the whole data's, and the median of repetitions is the middle value;
// `kvtier bench quality`'s NextTokenAgreement gives KL 0, full agreement and equal perplexities
// for equal logits, the KL, top-1 agreement and perplexities of hand-computed distributions, the
// flips beyond the near ties with the largest flipped gap, and no overflow on logits in the
// thousands.
// Method: SequenceAttention over random blocks (with planted keys aligned with the query, early
// and late) against codecs::AttentionOutputF32 over the concatenated K and V; ErrorSums and
// Median against hand-computed values; NextTokenAgreement against two-token distributions
// worked out by hand, and its flip, near-tie and flipped-gap figures on hand-made rows.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "bench_util.h"
#include "codecs/precision_ladder.h"
#include "kv_quality.h"

namespace kvtier::cli {
namespace {

TEST(SequenceAttentionTest, BlockByBlockEqualsWholeSequence) {
  const codecs::BlockGeometry block{.tokens = 16, .kv_heads = 2, .head_dim = 8};
  constexpr size_t kBlocks = 5;
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> query(block.channels());
  for (float& q : query) q = dist(rng);
  std::vector<std::vector<float>> blocks(kBlocks, std::vector<float>(block.elements()));
  for (auto& b : blocks) {
    for (float& x : b) x = dist(rng);
  }
  // Keys of head 0 aligned with its query: a large score in block 1, a larger one in block 4.
  for (const auto& [b, t, scale] :
       {std::tuple{size_t{1}, size_t{3}, 4.0f}, std::tuple{size_t{4}, size_t{9}, 12.0f}}) {
    for (size_t d = 0; d < block.head_dim; ++d) {
      blocks[b][t * block.channels() + d] = scale * query[d];
    }
  }
  SequenceAttention seq(block, query);
  std::vector<float> k, v;
  for (const auto& b : blocks) {
    seq.Add(b);
    k.insert(k.end(), b.begin(), b.begin() + static_cast<long>(block.half_elements()));
    v.insert(v.end(), b.begin() + static_cast<long>(block.half_elements()), b.end());
  }
  codecs::BlockGeometry whole = block;
  whole.tokens = block.tokens * kBlocks;
  std::vector<float> want(block.channels());
  codecs::AttentionOutputF32(whole, query, k, v, want);
  const std::vector<float> got = seq.Output();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << "element " << i;
  }
  EXPECT_NEAR(codecs::CosineSimilarity(got, want), 1.0, 1e-9);
}

TEST(SequenceAttentionTest, NothingAddedIsZero) {
  const codecs::BlockGeometry block{.tokens = 16, .kv_heads = 1, .head_dim = 4};
  const std::vector<float> query(4, 1.0f);
  const SequenceAttention seq(block, query);
  EXPECT_EQ(seq.Output(), std::vector<float>(4, 0.0f));
}

TEST(ErrorSumsTest, RelativeRmseOverEverythingAdded) {
  ErrorSums e;
  EXPECT_EQ(e.RelRmse(), 0);
  e.Add(std::vector<float>{3, 0}, std::vector<float>{3, 0});
  EXPECT_EQ(e.RelRmse(), 0);
  e.Add(std::vector<float>{0, 4}, std::vector<float>{0, 0});  // err 16 over 9 + 16.
  EXPECT_DOUBLE_EQ(e.RelRmse(), 0.8);
}

TEST(NextTokenAgreementTest, EqualLogitsAgreeFully) {
  NextTokenAgreement a;
  EXPECT_EQ(a.Top1Agreement(), 1);
  const std::vector<float> logits = {1.0f, 3.0f, -2.0f};
  a.Add(logits, logits, 1);
  a.Add(logits, logits, 0);
  EXPECT_EQ(a.rows(), 2u);
  EXPECT_EQ(a.KlMean(), 0);
  EXPECT_EQ(a.KlMax(), 0);
  EXPECT_EQ(a.Top1Agreement(), 1);
  EXPECT_DOUBLE_EQ(a.Perplexity(), a.PerplexityExact());
  EXPECT_EQ(a.PerplexityChange(), 0);
}

TEST(NextTokenAgreementTest, HandComputedDistributions) {
  // exact: p = (0.5, 0.5); decoded: q = (0.2, 0.8) (logits 0 and log 4). KL = 0.5 log(0.5/0.2)
  // + 0.5 log(0.5/0.8); top-1 differ (a tie resolves to token 0); next token 0: NLL log 2 vs
  // -log 0.2.
  NextTokenAgreement a;
  const std::vector<float> p = {0.0f, 0.0f};
  const std::vector<float> q = {0.0f, static_cast<float>(std::log(4.0))};
  a.Add(p, q, 0);
  const double kl = 0.5 * std::log(0.5 / 0.2) + 0.5 * std::log(0.5 / 0.8);
  EXPECT_NEAR(a.KlMean(), kl, 1e-6);
  EXPECT_NEAR(a.KlMax(), kl, 1e-6);
  EXPECT_EQ(a.Top1Agreement(), 0);
  EXPECT_NEAR(a.PerplexityExact(), 2.0, 1e-6);
  EXPECT_NEAR(a.Perplexity(), 5.0, 1e-5);
  EXPECT_NEAR(a.PerplexityChange(), 1.5, 1e-5);
  a.Add(p, p, 1);  // A second row, equal: the means halve.
  EXPECT_NEAR(a.KlMean(), kl / 2, 1e-6);
  EXPECT_EQ(a.Top1Agreement(), 0.5);
}

TEST(NextTokenAgreementTest, LargeLogitsDoNotOverflow) {
  NextTokenAgreement a;
  a.Add(std::vector<float>{5000.0f, 4990.0f}, std::vector<float>{5000.0f, 4999.0f}, 0);
  EXPECT_TRUE(std::isfinite(a.KlMean()) && a.KlMean() > 0);
  EXPECT_TRUE(std::isfinite(a.Perplexity()));
}

// Flips count the rows whose top-1 differs; near ties the rows whose exact best two logits are
// within 0.01 of each other (ties in the decoded logits do not count), whatever the decoded ones.
TEST(NextTokenAgreementTest, FlipsAndNearTies) {
  NextTokenAgreement a;
  a.Add(std::vector<float>{2.0f, 2.005f, 0.0f}, std::vector<float>{2.01f, 2.0f, 0.0f}, 0);
  a.Add(std::vector<float>{5.0f, 1.0f, 4.995f}, std::vector<float>{5.0f, 1.0f, 4.0f}, 0);
  a.Add(std::vector<float>{0.0f, 3.0f, 1.0f}, std::vector<float>{0.0f, 1.0f, 1.001f}, 1);
  a.Add(std::vector<float>{1.0f, 0.0f, 0.0f}, std::vector<float>{1.0f, 0.0f, 0.0f}, 0);
  EXPECT_EQ(a.rows(), 4u);
  EXPECT_EQ(a.Flips(), 2u);     // Rows 0 and 2.
  EXPECT_EQ(a.NearTies(), 2u);  // Rows 0 and 1.
  EXPECT_DOUBLE_EQ(a.Top1Agreement(), 0.5);
  // Row 0's flip is at a near tie; row 2's is not, and its exact best two are 2 apart.
  EXPECT_EQ(a.FlipsBeyondNearTies(), 1u);
  EXPECT_DOUBLE_EQ(a.FlipGapMax(), 2.0);
}

// Without a flip the largest flipped gap is 0, however far apart the exact best two are; a flip
// at a near tie sets it to that tie's gap and counts no flip beyond the ties.
TEST(NextTokenAgreementTest, FlipGapWithoutFlipsAndAtATie) {
  NextTokenAgreement a;
  a.Add(std::vector<float>{9.0f, 0.0f}, std::vector<float>{8.0f, 0.0f}, 0);
  EXPECT_EQ(a.FlipsBeyondNearTies(), 0u);
  EXPECT_EQ(a.FlipGapMax(), 0.0);
  a.Add(std::vector<float>{1.0f, 1.004f}, std::vector<float>{1.0f, 0.5f}, 0);
  EXPECT_EQ(a.Flips(), 1u);
  EXPECT_EQ(a.FlipsBeyondNearTies(), 0u);
  EXPECT_NEAR(a.FlipGapMax(), 0.004, 1e-6);
}

TEST(MedianTest, MiddleValue) {
  EXPECT_EQ(Median({}), 0);
  EXPECT_EQ(Median({5}), 5);
  EXPECT_EQ(Median({9, 1, 5}), 5);
  EXPECT_EQ(Median({4, 1, 3, 2}), 2.5);
}

}  // namespace
}  // namespace kvtier::cli
