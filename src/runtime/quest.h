// Quest-style attention-guided chunk selection (docs/offload.md), shared by the offloaded
// source (runtime/offloaded_kv.h) and SelectingKvBlocks, which adds selection to any source (the
// all-resident baseline of selection).
//
// For every full chunk QuestSelector keeps a key summary in host memory: the per-channel min and
// max of K over the chunk's tokens, per KV head, taken when the model moves on to the next chunk
// of that layer (the chunk is then complete). At decode Rank() orders chunks by an upper bound of
// q.k, sum over channels of max(q_i * min_i, q_i * max_i), summed over the query heads; keeps the
// top_k, the sink chunks and the recent window, and any chunk without a summary.
//
// Thread safety: none (one forward pass at a time, as KvBlockSource). Ownership: owns the
// summaries; SelectingKvBlocks borrows its inner source, which must outlive it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "core/kv_layout.h"
#include "runtime/kv_blocks.h"

namespace kvtier::runtime {

struct QuestOptions {
  uint32_t top_k = 0;          // Chunks chosen by score; 0 = full attention.
  uint32_t sink_chunks = 1;    // Leading chunks always attended.
  uint32_t recent_chunks = 2;  // Trailing chunks always attended (the last one included).
  bool preselect_next = true;  // Layer N's query plans layer N+1's prefetch (offloaded source).
};

struct QuestStats {
  uint64_t selections = 0;  // Rank calls that narrowed attention.
  uint64_t chunks_considered = 0;
  uint64_t chunks_selected = 0;
};

class QuestSelector {
 public:
  // `layout` FP16; summaries for chunks_max chunks per layer (4 * 2 * kv_dim bytes each).
  QuestSelector(const KvLayout& layout, uint32_t chunks_max, const QuestOptions& options);

  const QuestOptions& options() const { return options_; }
  const QuestStats& stats() const { return stats_; }

  // The model is about to write `chunk` of `layer`: the chunk written before it in that layer
  // is complete and is summarized from `peek(layer, chunk)` (an empty span leaves it without a
  // summary, so it is always attended); `chunk`'s own summary is invalidated.
  void OnWrite(uint32_t layer, uint32_t chunk,
               const std::function<std::span<const uint16_t>(uint32_t, uint32_t)>& peek);
  // The bytes of a written block of `layer` as they are now (a chunk leaving the device):
  // summarized, so a chunk completed while it was away still has a summary. A chunk written
  // again later is invalidated by OnWrite as usual.
  void Observe(uint32_t layer, uint32_t chunk, std::span<const uint16_t> block);

  // Whether a Rank() call is a selection (counted in stats()) or only a plan for prefetch.
  enum class Purpose : uint8_t { kSelect = 0, kPlan = 1 };
  // Sink + recent window + chunks without a summary + the top_k others by upper bound,
  // ascending.
  void Rank(uint32_t layer, std::span<const float> query, uint32_t n_heads, uint32_t chunks,
            std::vector<uint32_t>* selected, Purpose purpose = Purpose::kSelect);

 private:
  void Summarize(uint32_t layer, uint32_t chunk, std::span<const uint16_t> block);
  float UpperBound(uint32_t layer, uint32_t chunk, std::span<const float> query,
                   uint32_t n_heads) const;
  size_t SummaryOffset(uint32_t layer, uint32_t chunk) const;

  KvLayout layout_;
  uint32_t chunks_max_;
  QuestOptions options_;
  QuestStats stats_;
  std::vector<float> summaries_;        // [layer][chunk][min|max][kv_head][head_dim].
  std::vector<uint8_t> summary_ok_;     // [layer][chunk].
  std::vector<uint32_t> last_written_;  // Per layer: chunk of the latest write, or max.
  std::vector<std::pair<float, uint32_t>> ranked_;
  std::vector<float> half_scratch_;
};

// Any KvBlockSource with Quest selection at decode: the all-resident counterpart of the
// offloaded source's selection, so that selection's own cost is measured apart from offloading.
class SelectingKvBlocks final : public ForwardingKvBlocks {
 public:
  // `inner` is borrowed; options.top_k >= 1, recent_chunks >= 1.
  static Result<std::unique_ptr<SelectingKvBlocks>> Create(KvBlockSource* inner,
                                                           const QuestOptions& options);

  Result<std::span<uint16_t>> MutableBlock(uint32_t layer, uint32_t chunk_index) override;
  Status SelectChunks(uint32_t layer, std::span<const float> query, uint32_t n_heads,
                      uint32_t chunks, std::vector<uint32_t>* selected) override;

  const QuestStats& quest_stats() const { return quest_.stats(); }

 private:
  SelectingKvBlocks(KvBlockSource* inner, const QuestOptions& options);
  QuestSelector quest_;
};

}  // namespace kvtier::runtime
