// What lossy KV coding does to a whole sequence, accumulated block by block, for `kvtier bench
// codec`: the relative RMSE over many blocks, and the attention output of one query per KV head
// over every block of a sequence, so that a 32k-token sequence is never held in F32 at once.
// And what it does to the model's predictions, for `kvtier bench quality`: NextTokenAgreement
// compares next-token distributions computed over the exact KV and over the decoded KV.
//
// Why not codecs::MeasureQuality: it takes one block; a sequence's attention mixes all blocks
// through one softmax, which the running maximum and sum here merge exactly (log-sum-exp).
//
// Thread safety: plain values, one thread each. Ownership: spans are read during the call only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "codecs/block_geometry.h"

namespace kvtier::cli {

// Sums of squared errors and of squared originals over everything added.
class ErrorSums {
 public:
  void Add(std::span<const float> ref, std::span<const float> got);
  // sqrt(sum (ref - got)^2 / sum ref^2); 0 when nothing nonzero was added.
  double RelRmse() const;

 private:
  double err2_ = 0, ref2_ = 0;
};

// out[h] = sum over every token t added: softmax_t(q[h] . k[t][h] / sqrt(head_dim)) v[t][h], the
// softmax taken over all of them: codecs::AttentionOutputF32 over the concatenated blocks.
class SequenceAttention {
 public:
  // `g` is the shape of each block added (tokens per block, heads, head_dim); `query` holds
  // g.channels() floats ([kv_heads][head_dim]).
  SequenceAttention(const codecs::BlockGeometry& g, std::span<const float> query);
  // One block in F32: its K half ([tokens][kv_heads][head_dim]) then its V half.
  void Add(std::span<const float> block);
  // [kv_heads][head_dim]; zeros before any block.
  std::vector<float> Output() const;

 private:
  codecs::BlockGeometry g_;
  std::vector<float> q_;
  std::vector<double> max_, sum_, acc_;
};

// Next-token distributions over exact and decoded KV, compared row by row (one row per position
// of a teacher-forced text): the KL divergence KL(exact || decoded) in nats, whether the top-1
// tokens agree, and each side's negative log-likelihood of the text's actual next token.
class NextTokenAgreement {
 public:
  // Logits of one position (vocabulary-sized each) and the token the text has next.
  void Add(std::span<const float> exact, std::span<const float> decoded, uint32_t next_token);

  size_t rows() const { return rows_; }
  double KlMean() const;
  double KlMax() const { return kl_max_; }
  double Top1Agreement() const;  // In [0, 1]; 1 with no row.
  // Rows whose top-1 token differs from the exact one's.
  size_t Flips() const { return rows_ - agree_; }
  // Rows where the exact logits' best two tokens are within kNearTieLogits of each other: the
  // predictions any perturbation of the KV may flip (how fine a top-1 agreement can resolve).
  static constexpr float kNearTieLogits = 0.01f;
  size_t NearTies() const { return near_ties_; }
  // Flips at rows that are not near ties: the exact KV's choice was clear and the decoded KV
  // changed it.
  size_t FlipsBeyondNearTies() const { return flips_beyond_ties_; }
  // The largest gap between the exact logits' best two tokens at a flipped row (0 without a
  // flip): how clear the clearest prediction a codec flipped was, in logits.
  double FlipGapMax() const { return flip_gap_max_; }
  double PerplexityExact() const;
  double Perplexity() const;
  // Perplexity() / PerplexityExact() - 1: the relative change (0.001 is 0.1 %).
  double PerplexityChange() const;

 private:
  size_t rows_ = 0, agree_ = 0, near_ties_ = 0, flips_beyond_ties_ = 0;
  double kl_sum_ = 0, kl_max_ = 0, nll_exact_ = 0, nll_ = 0, flip_gap_max_ = 0;
};

}  // namespace kvtier::cli
