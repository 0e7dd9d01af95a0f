// See kv_quality.h.
#include "kv_quality.h"

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

}  // namespace kvtier::cli
