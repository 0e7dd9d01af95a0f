// See kv_quality.h.
#include "kv_quality.h"

#include <algorithm>
#include <cmath>

namespace kvtier::cli {

void ErrorSums::Add(std::span<const float> ref, std::span<const float> got) {
  for (size_t i = 0; i < ref.size(); ++i) {
    const double e = double{ref[i]} - got[i];
    err2_ += e * e;
    ref2_ += double{ref[i]} * ref[i];
  }
}

double ErrorSums::RelRmse() const { return ref2_ == 0 ? 0 : std::sqrt(err2_ / ref2_); }

SequenceAttention::SequenceAttention(const codecs::BlockGeometry& g, std::span<const float> query)
    : g_(g),
      q_(query.begin(), query.end()),
      max_(g.kv_heads, -INFINITY),
      sum_(g.kv_heads, 0),
      acc_(g.channels(), 0) {}

void SequenceAttention::Add(std::span<const float> block) {
  const size_t dim = g_.head_dim, channels = g_.channels();
  const float* k = block.data();
  const float* v = k + g_.half_elements();
  const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
  for (size_t h = 0; h < g_.kv_heads; ++h) {
    double* acc = &acc_[h * dim];
    for (size_t t = 0; t < g_.tokens; ++t) {
      const float* kt = k + t * channels + h * dim;
      const float* vt = v + t * channels + h * dim;
      double s = 0;
      for (size_t d = 0; d < dim; ++d) s += double{q_[h * dim + d]} * kt[d];
      s *= scale;
      if (s > max_[h]) {  // A new maximum: rescale what was summed under the old one.
        const double shrink = std::exp(max_[h] - s);
        sum_[h] *= shrink;
        for (size_t d = 0; d < dim; ++d) acc[d] *= shrink;
        max_[h] = s;
      }
      const double w = std::exp(s - max_[h]);
      sum_[h] += w;
      for (size_t d = 0; d < dim; ++d) acc[d] += w * vt[d];
    }
  }
}

std::vector<float> SequenceAttention::Output() const {
  std::vector<float> out(acc_.size(), 0.0f);
  for (size_t i = 0; i < out.size(); ++i) {
    const double sum = sum_[i / g_.head_dim];
    if (sum > 0) out[i] = static_cast<float>(acc_[i] / sum);
  }
  return out;
}

namespace {

// log(sum exp(x)) without overflow.
double LogSumExp(std::span<const float> x) {
  const float m = *std::max_element(x.begin(), x.end());
  double sum = 0;
  for (const float v : x) sum += std::exp(static_cast<double>(v) - m);
  return m + std::log(sum);
}

}  // namespace

void NextTokenAgreement::Add(std::span<const float> exact, std::span<const float> decoded,
                             uint32_t next_token) {
  const double lse_p = LogSumExp(exact);
  const double lse_q = LogSumExp(decoded);
  double kl = 0;
  for (size_t i = 0; i < exact.size(); ++i) {
    const double log_p = exact[i] - lse_p;
    const double log_q = decoded[i] - lse_q;
    kl += std::exp(log_p) * (log_p - log_q);
  }
  kl = std::max(kl, 0.0);  // Rounding may leave -1e-17 for equal distributions.
  ++rows_;
  kl_sum_ += kl;
  kl_max_ = std::max(kl_max_, kl);
  const auto top = [](std::span<const float> x) {
    return std::max_element(x.begin(), x.end()) - x.begin();
  };
  const bool agree = top(exact) == top(decoded);
  if (agree) ++agree_;
  float best = -INFINITY, second = -INFINITY;
  for (const float v : exact) {
    if (v > best) {
      second = best;
      best = v;
    } else if (v > second) {
      second = v;
    }
  }
  const bool near_tie = best - second < kNearTieLogits;
  if (near_tie) ++near_ties_;
  if (!agree) {
    if (!near_tie) ++flips_beyond_ties_;
    flip_gap_max_ = std::max(flip_gap_max_, static_cast<double>(best - second));
  }
  nll_exact_ += lse_p - exact[next_token];
  nll_ += lse_q - decoded[next_token];
}

double NextTokenAgreement::KlMean() const {
  return rows_ == 0 ? 0 : kl_sum_ / static_cast<double>(rows_);
}

double NextTokenAgreement::Top1Agreement() const {
  return rows_ == 0 ? 1 : static_cast<double>(agree_) / static_cast<double>(rows_);
}

double NextTokenAgreement::PerplexityExact() const {
  return rows_ == 0 ? 1 : std::exp(nll_exact_ / static_cast<double>(rows_));
}

double NextTokenAgreement::Perplexity() const {
  return rows_ == 0 ? 1 : std::exp(nll_ / static_cast<double>(rows_));
}

double NextTokenAgreement::PerplexityChange() const { return Perplexity() / PerplexityExact() - 1; }

}  // namespace kvtier::cli
