#include "runtime/offloaded_kv.h"

#include <algorithm>
#include <numeric>

#include "core/assert.h"
#include "runtime/kernels.h"

namespace kvtier::runtime {
namespace {

std::span<const uint16_t> AsHalves(std::span<const std::byte> bytes) {
  return {reinterpret_cast<const uint16_t*>(bytes.data()), bytes.size() / 2};
}

}  // namespace

OffloadedKvBlocks::OffloadedKvBlocks(OffloadedSequence* seq, const QuestOptions& quest)
    : seq_(seq), quest_(quest) {
  const KvLayout& l = seq->layout();
  const size_t blocks = size_t{l.layers} * seq->chunks_max();
  summaries_.assign(blocks * 2 * l.kv_heads * l.head_dim, 0.0f);
  summary_ok_.assign(blocks, 0);
  last_written_.assign(l.layers, UINT32_MAX);
  has_selection_.assign(l.layers, 0);
  selection_.resize(l.layers);
  half_scratch_.resize(size_t{l.kv_heads} * l.head_dim);
}

Result<std::unique_ptr<OffloadedKvBlocks>> OffloadedKvBlocks::Create(OffloadedSequence* seq,
                                                                     const QuestOptions& quest) {
  if (seq == nullptr) return Status::InvalidArgument("OffloadedKvBlocks: null sequence");
  if (seq->layout().dtype != DType::kF16) {
    return Status::InvalidArgument("OffloadedKvBlocks: the layout must be FP16");
  }
  if (quest.top_k > 0 && quest.recent_chunks == 0) {
    return Status::InvalidArgument("QuestOptions.recent_chunks must be >= 1 with selection");
  }
  return std::unique_ptr<OffloadedKvBlocks>(new OffloadedKvBlocks(seq, quest));
}

size_t OffloadedKvBlocks::SummaryOffset(uint32_t layer, uint32_t chunk) const {
  const KvLayout& l = seq_->layout();
  return (size_t{layer} * seq_->chunks_max() + chunk) * 2 * l.kv_heads * l.head_dim;
}

Result<std::span<const uint16_t>> OffloadedKvBlocks::Block(uint32_t layer, uint32_t chunk_index) {
  if (layer >= seq_->layout().layers || chunk_index >= seq_->chunks_written(layer)) {
    return Status::NotFound("OffloadedKvBlocks: chunk never written");
  }
  if (acquired_layer_ != layer) {
    if (has_selection_[layer] != 0) {
      acquire_chunks_ = selection_[layer];
      has_selection_[layer] = 0;
    } else {
      acquire_chunks_.resize(seq_->chunks_written(layer));
      std::iota(acquire_chunks_.begin(), acquire_chunks_.end(), 0u);
    }
    KV_RETURN_IF_ERROR(seq_->AcquireLayer(layer, acquire_chunks_));
    acquired_layer_ = layer;
  }
  if (!std::binary_search(acquire_chunks_.begin(), acquire_chunks_.end(), chunk_index)) {
    return Status::InvalidArgument("OffloadedKvBlocks: Block of a chunk outside the selection");
  }
  return AsHalves(seq_->DeviceBlock(layer, chunk_index));
}

Result<std::span<uint16_t>> OffloadedKvBlocks::MutableBlock(uint32_t layer, uint32_t chunk_index) {
  if (layer >= seq_->layout().layers) return Status::NoSpace("OffloadedKvBlocks: bad layer");
  acquired_layer_ = UINT32_MAX;  // The sequence unpins on MutableBlock.
  const uint32_t last = last_written_[layer];
  if (last != UINT32_MAX && last < chunk_index) Summarize(layer, last);  // `last` is complete.
  if (chunk_index < seq_->chunks_max()) {
    summary_ok_[size_t{layer} * seq_->chunks_max() + chunk_index] = 0;
  }
  last_written_[layer] = chunk_index;
  KV_ASSIGN_OR_RETURN(std::span<std::byte> bytes, seq_->MutableBlock(layer, chunk_index));
  return std::span<uint16_t>(reinterpret_cast<uint16_t*>(bytes.data()), bytes.size() / 2);
}

// Per-channel min and max of the chunk's keys (K half of the block), from its device copy.
void OffloadedKvBlocks::Summarize(uint32_t layer, uint32_t chunk) {
  const std::span<const uint16_t> block = AsHalves(seq_->PeekDeviceBlock(layer, chunk));
  if (block.empty()) return;  // Left invalid: such a chunk is always attended.
  const KvLayout& l = seq_->layout();
  const size_t kv_dim = size_t{l.kv_heads} * l.head_dim;
  float* mins = summaries_.data() + SummaryOffset(layer, chunk);
  float* maxs = mins + kv_dim;
  const AttentionKernels& kernels = GetAttentionKernels();
  for (uint32_t t = 0; t < l.block_tokens; ++t) {
    kernels.half_to_float(block.data() + t * kv_dim, kv_dim, half_scratch_.data());
    for (size_t i = 0; i < kv_dim; ++i) {
      const float k = half_scratch_[i];
      mins[i] = t == 0 ? k : std::min(mins[i], k);
      maxs[i] = t == 0 ? k : std::max(maxs[i], k);
    }
  }
  summary_ok_[size_t{layer} * seq_->chunks_max() + chunk] = 1;
}

float OffloadedKvBlocks::UpperBound(uint32_t layer, uint32_t chunk, std::span<const float> query,
                                    uint32_t n_heads) const {
  const KvLayout& l = seq_->layout();
  const size_t kv_dim = size_t{l.kv_heads} * l.head_dim;
  const float* mins = summaries_.data() + SummaryOffset(layer, chunk);
  const float* maxs = mins + kv_dim;
  const uint32_t group = n_heads / l.kv_heads;
  float total = 0.0f;
  for (uint32_t h = 0; h < n_heads; ++h) {
    const float* q = query.data() + size_t{h} * l.head_dim;
    const size_t base = size_t{h / group} * l.head_dim;
    float bound = 0.0f;
    for (uint32_t d = 0; d < l.head_dim; ++d) {
      bound += std::max(q[d] * mins[base + d], q[d] * maxs[base + d]);
    }
    total += bound;
  }
  return total;
}

// Sink + recent window + chunks without a summary + the top_k others by upper bound.
void OffloadedKvBlocks::Rank(uint32_t layer, std::span<const float> query, uint32_t n_heads,
                             uint32_t chunks, std::vector<uint32_t>* selected) {
  selected->clear();
  ranked_.clear();
  const uint32_t sink = std::min(quest_.sink_chunks, chunks);
  const uint32_t recent_start = chunks > quest_.recent_chunks ? chunks - quest_.recent_chunks : 0;
  for (uint32_t c = 0; c < chunks; ++c) {
    const bool always =
        c < sink || c >= recent_start || summary_ok_[size_t{layer} * seq_->chunks_max() + c] == 0;
    if (always) {
      selected->push_back(c);
    } else {
      ranked_.emplace_back(-UpperBound(layer, c, query, n_heads), c);
    }
  }
  const size_t keep = std::min<size_t>(quest_.top_k, ranked_.size());
  std::partial_sort(ranked_.begin(), ranked_.begin() + static_cast<std::ptrdiff_t>(keep),
                    ranked_.end());
  for (size_t i = 0; i < keep; ++i) selected->push_back(ranked_[i].second);
  std::sort(selected->begin(), selected->end());
}

Status OffloadedKvBlocks::SelectChunks(uint32_t layer, std::span<const float> query,
                                       uint32_t n_heads, uint32_t chunks,
                                       std::vector<uint32_t>* selected) {
  acquired_layer_ = UINT32_MAX;
  if (quest_.top_k == 0 || layer >= seq_->layout().layers) {
    return KvBlockSource::SelectChunks(layer, query, n_heads, chunks, selected);
  }
  Rank(layer, query, n_heads, chunks, selected);
  selection_[layer] = *selected;
  has_selection_[layer] = 1;
  ++stats_.selections;
  stats_.chunks_considered += chunks;
  stats_.chunks_selected += selected->size();
  seq_->PlanLayer(layer, *selected);  // Best guess for this layer at the next token.
  if (quest_.preselect_next && layer + 1 < seq_->layout().layers) {
    std::vector<uint32_t>& next = selection_[layer + 1];  // Overwritten by its own selection.
    Rank(layer + 1, query, n_heads, chunks, &next);
    seq_->PlanLayer(layer + 1, next);
  }
  return Status::Ok();
}

}  // namespace kvtier::runtime
