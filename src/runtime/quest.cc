#include "runtime/quest.h"

#include <algorithm>

#include "core/assert.h"
#include "runtime/kernels.h"

namespace kvtier::runtime {

QuestSelector::QuestSelector(const KvLayout& layout, uint32_t chunks_max,
                             const QuestOptions& options)
    : layout_(layout), chunks_max_(chunks_max), options_(options) {
  // Without selection (top_k 0) nothing is summarized: the summaries take no memory.
  const size_t blocks = options.top_k > 0 ? size_t{layout.layers} * chunks_max : 0;
  summaries_.assign(blocks * 2 * layout.kv_heads * layout.head_dim, 0.0f);
  summary_ok_.assign(blocks, 0);
  last_written_.assign(layout.layers, UINT32_MAX);
  half_scratch_.resize(size_t{layout.kv_heads} * layout.head_dim);
}

size_t QuestSelector::SummaryOffset(uint32_t layer, uint32_t chunk) const {
  return (size_t{layer} * chunks_max_ + chunk) * 2 * layout_.kv_heads * layout_.head_dim;
}

void QuestSelector::OnWrite(
    uint32_t layer, uint32_t chunk,
    const std::function<std::span<const uint16_t>(uint32_t, uint32_t)>& peek) {
  if (layer >= layout_.layers || summary_ok_.empty()) return;
  const uint32_t last = last_written_[layer];
  if (last != UINT32_MAX && last < chunk && last < chunks_max_) {
    Summarize(layer, last, peek(layer, last));  // `last` is complete.
  }
  if (chunk < chunks_max_) summary_ok_[size_t{layer} * chunks_max_ + chunk] = 0;
  last_written_[layer] = chunk;
}

void QuestSelector::Observe(uint32_t layer, uint32_t chunk, std::span<const uint16_t> block) {
  if (layer < layout_.layers && chunk < chunks_max_ && !summary_ok_.empty()) {
    Summarize(layer, chunk, block);
  }
}

// Per-channel min and max of the chunk's keys (the K half of the block).
void QuestSelector::Summarize(uint32_t layer, uint32_t chunk, std::span<const uint16_t> block) {
  if (block.empty()) return;  // Left invalid: such a chunk is always attended.
  const size_t kv_dim = size_t{layout_.kv_heads} * layout_.head_dim;
  KV_CHECK(block.size() >= size_t{layout_.block_tokens} * kv_dim);
  float* mins = summaries_.data() + SummaryOffset(layer, chunk);
  float* maxs = mins + kv_dim;
  const AttentionKernels& kernels = GetAttentionKernels();
  for (uint32_t t = 0; t < layout_.block_tokens; ++t) {
    kernels.half_to_float(block.data() + t * kv_dim, kv_dim, half_scratch_.data());
    for (size_t i = 0; i < kv_dim; ++i) {
      const float k = half_scratch_[i];
      mins[i] = t == 0 ? k : std::min(mins[i], k);
      maxs[i] = t == 0 ? k : std::max(maxs[i], k);
    }
  }
  summary_ok_[size_t{layer} * chunks_max_ + chunk] = 1;
}

float QuestSelector::UpperBound(uint32_t layer, uint32_t chunk, std::span<const float> query,
                                uint32_t n_heads) const {
  const size_t kv_dim = size_t{layout_.kv_heads} * layout_.head_dim;
  const float* mins = summaries_.data() + SummaryOffset(layer, chunk);
  const float* maxs = mins + kv_dim;
  const uint32_t group = n_heads / layout_.kv_heads;
  float total = 0.0f;
  for (uint32_t h = 0; h < n_heads; ++h) {
    const float* q = query.data() + size_t{h} * layout_.head_dim;
    const size_t base = size_t{h / group} * layout_.head_dim;
    float bound = 0.0f;
    for (uint32_t d = 0; d < layout_.head_dim; ++d) {
      bound += std::max(q[d] * mins[base + d], q[d] * maxs[base + d]);
    }
    total += bound;
  }
  return total;
}

void QuestSelector::Rank(uint32_t layer, std::span<const float> query, uint32_t n_heads,
                         uint32_t chunks, std::vector<uint32_t>* selected, Purpose purpose) {
  selected->clear();
  ranked_.clear();
  const uint32_t sink = std::min(options_.sink_chunks, chunks);
  const uint32_t recent_start =
      chunks > options_.recent_chunks ? chunks - options_.recent_chunks : 0;
  for (uint32_t c = 0; c < chunks; ++c) {
    const bool always = c < sink || c >= recent_start || c >= chunks_max_ || summary_ok_.empty() ||
                        summary_ok_[size_t{layer} * chunks_max_ + c] == 0;
    if (always) {
      selected->push_back(c);
    } else {
      ranked_.emplace_back(-UpperBound(layer, c, query, n_heads), c);
    }
  }
  const size_t keep = std::min<size_t>(options_.top_k, ranked_.size());
  std::partial_sort(ranked_.begin(), ranked_.begin() + static_cast<std::ptrdiff_t>(keep),
                    ranked_.end());
  for (size_t i = 0; i < keep; ++i) selected->push_back(ranked_[i].second);
  std::sort(selected->begin(), selected->end());
  if (purpose == Purpose::kSelect) {
    ++stats_.selections;
    stats_.chunks_considered += chunks;
    stats_.chunks_selected += selected->size();
  }
}

SelectingKvBlocks::SelectingKvBlocks(KvBlockSource* inner, const QuestOptions& options)
    : ForwardingKvBlocks(inner),
      quest_(inner->Layout(), inner->CapacityTokens() / inner->Layout().block_tokens, options) {}

Result<std::unique_ptr<SelectingKvBlocks>> SelectingKvBlocks::Create(KvBlockSource* inner,
                                                                     const QuestOptions& options) {
  if (inner == nullptr) return Status::InvalidArgument("SelectingKvBlocks: null source");
  if (options.top_k == 0 || options.recent_chunks == 0) {
    return Status::InvalidArgument("SelectingKvBlocks: top_k and recent_chunks must be >= 1");
  }
  return std::unique_ptr<SelectingKvBlocks>(new SelectingKvBlocks(inner, options));
}

Result<std::span<uint16_t>> SelectingKvBlocks::MutableBlock(uint32_t layer, uint32_t chunk_index) {
  quest_.OnWrite(layer, chunk_index, [this](uint32_t l, uint32_t c) {
    Result<std::span<const uint16_t>> b = inner()->Block(l, c);
    return b.ok() ? *b : std::span<const uint16_t>();
  });
  return ForwardingKvBlocks::MutableBlock(layer, chunk_index);
}

Status SelectingKvBlocks::SelectChunks(uint32_t layer, std::span<const float> query,
                                       uint32_t n_heads, uint32_t chunks,
                                       std::vector<uint32_t>* selected) {
  quest_.Rank(layer, query, n_heads, chunks, selected);
  return Status::Ok();
}

}  // namespace kvtier::runtime
