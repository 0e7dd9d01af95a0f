// Goal: sampling is greedy at temperature 0, deterministic for a seed, follows the softmax
// distribution, and respects top-p truncation.
// Method: fixed logits; repeated runs with the same seed compare token by token; frequencies
// over 20000 draws are checked against the softmax probabilities (4 standard deviations);
// top-p 0.5 over a peaked distribution must only ever return the top token.
#include "runtime/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace kvtier::runtime {
namespace {

const std::vector<float> kLogits = {0.1f, 2.0f, 1.0f, 2.0f, -1.0f};

TEST(SamplerTest, GreedyPicksFirstMax) {
  Sampler s({.temperature = 0.0f});
  EXPECT_EQ(s.Sample(kLogits), 1u);
}

TEST(SamplerTest, SameSeedSameTokens) {
  Sampler a({.temperature = 1.0f, .top_p = 0.9f, .seed = 42});
  Sampler b({.temperature = 1.0f, .top_p = 0.9f, .seed = 42});
  Sampler c({.temperature = 1.0f, .top_p = 0.9f, .seed = 43});
  std::vector<uint32_t> ta, tb, tc;
  for (int i = 0; i < 200; ++i) {
    ta.push_back(a.Sample(kLogits));
    tb.push_back(b.Sample(kLogits));
    tc.push_back(c.Sample(kLogits));
  }
  EXPECT_EQ(ta, tb);
  EXPECT_NE(ta, tc);
}

TEST(SamplerTest, FrequenciesFollowSoftmax) {
  Sampler s({.temperature = 2.0f, .seed = 7});
  const int draws = 20000;
  std::vector<int> counts(kLogits.size());
  for (int i = 0; i < draws; ++i) ++counts[s.Sample(kLogits)];
  double sum = 0;
  for (float l : kLogits) sum += std::exp(l / 2.0);
  for (size_t i = 0; i < kLogits.size(); ++i) {
    const double p = std::exp(kLogits[i] / 2.0) / sum;
    const double sd = std::sqrt(draws * p * (1 - p));
    EXPECT_NEAR(counts[i], draws * p, 4 * sd) << "token " << i;
  }
}

TEST(SamplerTest, TopPTruncates) {
  const std::vector<float> peaked = {0.0f, 5.0f, 0.0f, 0.0f};
  Sampler s({.temperature = 1.0f, .top_p = 0.5f, .seed = 1});
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(s.Sample(peaked), 1u);
}

TEST(SamplerTest, ValidatesOptions) {
  EXPECT_TRUE(Sampler::Validate({.temperature = -1.0f}).IsInvalidArgument());
  EXPECT_TRUE(Sampler::Validate({.temperature = NAN}).IsInvalidArgument());
  EXPECT_TRUE(Sampler::Validate({.top_p = 0.0f}).IsInvalidArgument());
  EXPECT_TRUE(Sampler::Validate({.top_p = 1.5f}).IsInvalidArgument());
  EXPECT_TRUE(Sampler::Validate({.temperature = 0.8f, .top_p = 0.95f}).ok());
}

}  // namespace
}  // namespace kvtier::runtime
