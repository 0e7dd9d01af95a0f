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
// Quantized blocks (a sequence with a precision ladder and LadderAttention::kQuantized keeps its
// int8/int4 blocks encoded on the device): AttendDecode attends the layer's raw chunks with
// AttendF16 and its quantized chunks with AttendQuant (GetQuantAttentionKernels: the widest the
// CPU has; one call per bit width), each part giving per-run and per-head log-sum-exps, and
// merges the parts exactly (MergeAttendParts; chunk masses from RunMassFromLse). Every quantized
// block's header is verified first (DeviceView, QuantRunFromEncodedBlock): one that does not
// verify fails the token with Corruption and is never attended. When no chunk of the layer is
// quantized AttendDecode declines and the model attends the FP16 blocks itself, exactly as
// before. Block() of a quantized chunk (prefill, or any reader that needs FP16) decodes it into a
// buffer of the source, valid like any other span until the model moves to another layer.
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

#include "codecs/codec.h"
#include "core/aligned_buffer.h"
#include "engine/offload_sequence.h"
#include "runtime/kernels.h"
#include "runtime/kv_blocks.h"
#include "runtime/quant_attention.h"
#include "runtime/quest.h"

namespace kvtier::runtime {

// What AttendDecode read: layers attended by the source (some chunk quantized) and the blocks and
// bytes of those layers' chunks (a block's bytes: its encoded size when quantized, the FP16 block
// size when raw).
struct DecodeAttentionStats {
  uint64_t layers_attended = 0;
  uint64_t quantized_blocks = 0, raw_blocks = 0;
  uint64_t quantized_bytes = 0, raw_bytes = 0;
};

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
  // Attends the layer itself when one of its chunks is held quantized on the device.
  Result<bool> AttendDecode(const DecodeAttention& attention) override;

  const QuestStats& quest_stats() const { return quest_.stats(); }
  const DecodeAttentionStats& attention_stats() const { return attention_stats_; }

 private:
  // The chunks attended with one kernel: raw FP16 (bits 0) or one bit width and group size.
  struct Part {
    uint32_t bits = 0, group_size = 0;
    std::vector<KvRun> raw;
    std::vector<QuantKvRun> quant;
    std::vector<uint32_t> position;  // Index of each run's chunk in DecodeAttention::chunks.
  };
  OffloadedKvBlocks(OffloadedSequence* seq, const QuestOptions& quest);
  Status AcquireFor(uint32_t layer);
  Part& PartFor(uint32_t bits, uint32_t group_size);
  // Attends `part` (its runs), writing out, head_lse and the runs' log-sum-exps at their chunks'
  // positions in run_lse_.
  void AttendPart(const DecodeAttention& a, Part& part, float* out, float* head_lse);
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
  // Quantized blocks: FP16 copies handed out by Block() for the acquired layer, and what
  // AttendDecode reuses from token to token.
  std::unique_ptr<codecs::CodecContext> codec_;
  std::vector<AlignedBuffer> decoded_;
  size_t decoded_used_ = 0;
  std::vector<Part> parts_;
  size_t parts_used_ = 0;
  std::vector<float> scratch_, part_out_, part_lse_, head_lse_, run_lse_, part_run_lse_;
  DecodeAttentionStats attention_stats_;
};

}  // namespace kvtier::runtime
