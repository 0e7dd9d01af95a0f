// OffloadedKvBlocks: the KvBlockSource over an engine OffloadedSequence, so Model::Forward
// decodes with a KV cache larger than the device budget (docs/offload.md, offloaded-sequence
// mode), optionally with Quest-style attention-guided selection (§6).
//
// Block(layer, c): the first request of a layer asks the sequence to acquire that layer's chunks
// (the Quest selection when there is one, else every written chunk); the sequence waits for their
// copy events and starts prefetching the next layers, and the spans handed out stay valid until
// the model moves to another layer (the KvBlockSource contract).
//
// Selection (QuestOptions.top_k > 0): for each full chunk the source keeps a key summary in host
// memory, the per-channel min and max of K over the chunk's tokens for every KV head, computed
// when the model moves on to the next chunk (the block is still on the device then). At decode
// SelectChunks() ranks chunks by an upper bound of q.k, sum over channels of max(q_i * min_i,
// q_i * max_i), summed over the query heads; keeps the top_k, the sink chunks and the recent
// window; and, with preselect_next, plans the same ranking against layer N+1's summaries so the
// sequence starts loading N+1's likely chunks while N computes. A chunk without a valid summary
// is always kept. top_k == 0 keeps full attention (the default).
//
// Heat: at decode the model reports each attended chunk's attention mass (ObserveAttention);
// the source hands it to the sequence, which keeps hot chunks on the device longest among blocks
// needed equally soon.
//
// Thread safety: none (one forward pass at a time, as KvBlockSource). Ownership: borrows the
// sequence, which must outlive this source; owns the summaries.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/offload_sequence.h"
#include "runtime/kv_blocks.h"
#include "runtime/quest.h"

namespace kvtier::runtime {

class OffloadedKvBlocks final : public KvBlockSource, private OffloadObserver {
 public:
  // The sequence's layout must be FP16. `seq` is borrowed.
  static Result<std::unique_ptr<OffloadedKvBlocks>> Create(OffloadedSequence* seq,
                                                           const QuestOptions& quest);

  ~OffloadedKvBlocks() override;
  OffloadedKvBlocks(const OffloadedKvBlocks&) = delete;
  OffloadedKvBlocks& operator=(const OffloadedKvBlocks&) = delete;

  const KvLayout& Layout() const override { return seq_->layout(); }
  uint32_t CapacityTokens() const override {
    return seq_->chunks_max() * seq_->layout().block_tokens;
  }
  Result<std::span<const uint16_t>> Block(uint32_t layer, uint32_t chunk_index) override;
  Result<std::span<uint16_t>> MutableBlock(uint32_t layer, uint32_t chunk_index) override;
  Status SelectChunks(uint32_t layer, std::span<const float> query, uint32_t n_heads,
                      uint32_t chunks, std::vector<uint32_t>* selected) override;
  // Passes each attended chunk's attention mass to the sequence as heat (victim order).
  void ObserveAttention(uint32_t layer, std::span<const uint32_t> chunks,
                        std::span<const float> mass) override;

  const QuestStats& quest_stats() const { return quest_.stats(); }

 private:
  OffloadedKvBlocks(OffloadedSequence* seq, const QuestOptions& quest);
  // A written block leaving the device is summarized while its bytes are at hand.
  void OnWrittenBlockLeavesDevice(uint32_t layer, uint32_t chunk,
                                  std::span<const std::byte> block) override;

  OffloadedSequence* seq_;
  QuestSelector quest_;
  std::vector<uint8_t> has_selection_;  // Per layer: selection_[layer] applies to its acquire.
  std::vector<std::vector<uint32_t>> selection_;
  std::vector<uint32_t> acquire_chunks_;
  std::vector<uint32_t> plan_;
  uint32_t acquired_layer_ = UINT32_MAX;  // Layer whose blocks are pinned; max = none.
};

}  // namespace kvtier::runtime
