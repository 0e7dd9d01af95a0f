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
    : seq_(seq), quest_(seq->layout(), seq->chunks_max(), quest) {
  has_selection_.assign(seq->layout().layers, 0);
  selection_.resize(seq->layout().layers);
  if (quest.top_k > 0) seq->SetObserver(this);
}

OffloadedKvBlocks::~OffloadedKvBlocks() { seq_->SetObserver(nullptr); }

void OffloadedKvBlocks::OnWrittenBlockLeavesDevice(uint32_t layer, uint32_t chunk,
                                                   std::span<const std::byte> block) {
  quest_.Observe(layer, chunk, AsHalves(block));
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
  // The previous chunk is complete; its block is still on the device (not loaded back if not).
  quest_.OnWrite(layer, chunk_index,
                 [this](uint32_t l, uint32_t c) { return AsHalves(seq_->PeekDeviceBlock(l, c)); });
  KV_ASSIGN_OR_RETURN(std::span<std::byte> bytes, seq_->MutableBlock(layer, chunk_index));
  return std::span<uint16_t>(reinterpret_cast<uint16_t*>(bytes.data()), bytes.size() / 2);
}

Status OffloadedKvBlocks::SelectChunks(uint32_t layer, std::span<const float> query,
                                       uint32_t n_heads, uint32_t chunks,
                                       std::vector<uint32_t>* selected) {
  acquired_layer_ = UINT32_MAX;
  if (quest_.options().top_k == 0 || layer >= seq_->layout().layers) {
    return KvBlockSource::SelectChunks(layer, query, n_heads, chunks, selected);
  }
  quest_.Rank(layer, query, n_heads, chunks, selected);
  selection_[layer] = *selected;
  has_selection_[layer] = 1;
  seq_->PlanLayer(layer, *selected);  // Narrowed by ObserveAttention once the masses are known.
  if (quest_.options().preselect_next && layer + 1 < seq_->layout().layers) {
    std::vector<uint32_t>& next = selection_[layer + 1];  // Overwritten by its own selection.
    quest_.Rank(layer + 1, query, n_heads, chunks, &next, QuestSelector::Purpose::kPlan);
    seq_->PlanLayer(layer + 1, next);
  }
  return Status::Ok();
}

void OffloadedKvBlocks::ObserveAttention(uint32_t layer, std::span<const uint32_t> chunks,
                                         std::span<const float> mass) {
  if (layer >= seq_->layout().layers) return;
  for (size_t i = 0; i < chunks.size() && i < mass.size(); ++i) {
    if (chunks[i] < seq_->chunks_written(layer)) seq_->ObserveHeat(layer, chunks[i], mass[i]);
  }
  if (quest_.options().top_k == 0 || chunks.empty() || mass.size() != chunks.size()) return;
  // The plan for this layer at the next token: the chunks that took a real share of this
  // token's attention (at least half an even share), and the sink and the recent window, which
  // are always attended. Picks that got next to nothing rarely come back, and reading them
  // ahead would only take bandwidth from the reads that matter.
  const float floor_mass = 0.5f / static_cast<float>(chunks.size());
  const uint32_t last = chunks.back();
  const uint32_t recent_start =
      last + 1 > quest_.options().recent_chunks ? last + 1 - quest_.options().recent_chunks : 0;
  plan_.clear();
  for (size_t i = 0; i < chunks.size(); ++i) {
    const uint32_t c = chunks[i];
    if (c < quest_.options().sink_chunks || c >= recent_start || mass[i] >= floor_mass) {
      plan_.push_back(c);
    }
  }
  seq_->PlanLayer(layer, plan_);
}

}  // namespace kvtier::runtime
