#include "runtime/offloaded_kv.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "core/assert.h"

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

Status OffloadedKvBlocks::AcquireFor(uint32_t layer) {
  if (acquired_layer_ == layer) return Status::Ok();
  if (has_selection_[layer] != 0) {
    acquire_chunks_ = selection_[layer];
    has_selection_[layer] = 0;
  } else {
    acquire_chunks_.resize(seq_->chunks_written(layer));
    std::iota(acquire_chunks_.begin(), acquire_chunks_.end(), 0u);
  }
  KV_RETURN_IF_ERROR(seq_->AcquireLayer(layer, acquire_chunks_));
  acquired_layer_ = layer;
  decoded_used_ = 0;
  return Status::Ok();
}

Result<std::span<const uint16_t>> OffloadedKvBlocks::Block(uint32_t layer, uint32_t chunk_index) {
  if (layer >= seq_->layout().layers || chunk_index >= seq_->chunks_written(layer)) {
    return Status::NotFound("OffloadedKvBlocks: chunk never written");
  }
  KV_RETURN_IF_ERROR(AcquireFor(layer));
  if (!std::binary_search(acquire_chunks_.begin(), acquire_chunks_.end(), chunk_index)) {
    return Status::InvalidArgument("OffloadedKvBlocks: Block of a chunk outside the selection");
  }
  KV_ASSIGN_OR_RETURN(const DeviceBlockView view, seq_->DeviceView(layer, chunk_index));
  if (view.codec == 0) return AsHalves(view.bytes);
  // Held quantized: an FP16 copy for this layer's readers.
  const KvLayout& l = seq_->layout();
  const codecs::BlockGeometry g{
      .tokens = l.block_tokens, .kv_heads = l.kv_heads, .head_dim = l.head_dim, .dtype = l.dtype};
  if (codec_ == nullptr) {
    KV_ASSIGN_OR_RETURN(codecs::CodecContext ctx, codecs::CodecContext::Create());
    codec_ = std::make_unique<codecs::CodecContext>(std::move(ctx));
  }
  if (decoded_used_ == decoded_.size()) {
    KV_ASSIGN_OR_RETURN(AlignedBuffer buffer, AlignedBuffer::Allocate(l.BlockBytes()));
    decoded_.push_back(std::move(buffer));
  }
  const std::span<std::byte> out = decoded_[decoded_used_++].span().first(l.BlockBytes());
  const Status s = codecs::DecodeBlock(view.bytes, g, out, codec_.get());
  if (!s.ok()) {
    return Status::Corruption("offloaded block (layer " + std::to_string(layer) + ", chunk " +
                              std::to_string(chunk_index) + ") does not decode: " + s.message());
  }
  return AsHalves(out);
}

OffloadedKvBlocks::Part& OffloadedKvBlocks::PartFor(uint32_t bits, uint32_t group_size) {
  for (size_t k = 0; k < parts_used_; ++k) {
    if (parts_[k].bits == bits && parts_[k].group_size == group_size) return parts_[k];
  }
  if (parts_used_ == parts_.size()) parts_.emplace_back();
  Part& p = parts_[parts_used_++];
  p.bits = bits;
  p.group_size = group_size;
  p.raw.clear();
  p.quant.clear();
  p.position.clear();
  return p;
}

void OffloadedKvBlocks::AttendPart(const DecodeAttention& a, Part& p, float* out,
                                   float* head_lse) {
  const size_t runs = p.position.size();
  part_run_lse_.resize(runs * a.n_heads);
  if (p.bits == 0) {
    scratch_.resize(std::max(scratch_.size(), AttendScratchFloats(a.n_heads, runs)));
    const AttentionKernels& k = a.kernels != nullptr ? *a.kernels : GetAttentionKernels();
    k.attend_f16({.n_heads = a.n_heads,
                  .n_kv_heads = a.n_kv_heads,
                  .head_dim = a.head_dim,
                  .q = a.q,
                  .runs = p.raw.data(),
                  .n_runs = runs,
                  .out = out,
                  .head_lse = head_lse,
                  .run_lse = part_run_lse_.data(),
                  .scratch = scratch_.data()});
  } else {
    QuantAttendArgs qa{.n_heads = a.n_heads,
                       .n_kv_heads = a.n_kv_heads,
                       .head_dim = a.head_dim,
                       .bits = p.bits,
                       .group_size = p.group_size,
                       .q = a.q,
                       .runs = p.quant.data(),
                       .n_runs = runs,
                       .out = out,
                       .head_lse = head_lse,
                       .run_lse = part_run_lse_.data()};
    scratch_.resize(std::max(scratch_.size(), QuantAttendScratchFloats(qa)));
    qa.scratch = scratch_.data();
    // The widest kernel the CPU has (on AVX-512 VNNI integer scores, and integer weights for P.V
    // of 15 bits per step, head and value group). 8-bit weights were tried and withdrawn: they
    // kept a whole attention's output but not a part merged with others under top-k selection
    // (cosine 0.938 against dequantize-then-AttendF16 in
    // OffloadedKvTest.QuantizedAttentionFollowsTheSelection; 15 bits keep 0.99999997).
    const bool scalar = a.kernels != nullptr && a.kernels->isa == KernelIsa::kScalar;
    GetQuantAttentionKernels(scalar ? QuantKernelIsa::kScalar : QuantKernelIsa::kAuto)
        .attend_quant(qa);
  }
  for (size_t r = 0; r < runs; ++r) {
    std::copy_n(part_run_lse_.data() + r * a.n_heads, a.n_heads,
                run_lse_.data() + size_t{p.position[r]} * a.n_heads);
  }
}

Result<bool> OffloadedKvBlocks::AttendDecode(const DecodeAttention& a) {
  const KvLayout& l = seq_->layout();
  if (a.layer >= l.layers || a.chunks.empty()) return false;
  KV_RETURN_IF_ERROR(AcquireFor(a.layer));
  const size_t kv_dim = size_t{l.kv_heads} * l.head_dim;
  const uint32_t bt = l.block_tokens;
  parts_used_ = 0;
  DecodeAttentionStats read;
  size_t n = 0;  // Chunks with rows before context_tokens (a prefix of a.chunks).
  for (; n < a.chunks.size() && uint64_t{a.chunks[n]} * bt < a.context_tokens; ++n) {
    const uint32_t c = a.chunks[n];
    if (!std::binary_search(acquire_chunks_.begin(), acquire_chunks_.end(), c)) {
      return Status::InvalidArgument("OffloadedKvBlocks: attention over a chunk outside the "
                                     "selection");
    }
    const auto rows = static_cast<uint32_t>(std::min<uint64_t>(bt, a.context_tokens - c * bt));
    KV_ASSIGN_OR_RETURN(const DeviceBlockView view, seq_->DeviceView(a.layer, c));
    if (view.codec == 0) {
      const std::span<const uint16_t> h = AsHalves(view.bytes);
      Part& p = PartFor(0, 0);
      p.raw.push_back({.k = h.data(), .v = h.data() + size_t{bt} * kv_dim, .rows = rows});
      p.position.push_back(static_cast<uint32_t>(n));
      ++read.raw_blocks;
      read.raw_bytes += view.bytes.size();
      continue;
    }
    const uint32_t bits = view.params.bits();
    Result<QuantKvRun> run = QuantRunFromEncodedBlock(view.bytes, a.n_kv_heads, a.head_dim, bits,
                                                      view.params.group_size, rows);
    if (!run.ok()) {
      return Status::Corruption("offloaded block (layer " + std::to_string(a.layer) + ", chunk " +
                                std::to_string(c) +
                                ") cannot be attended quantized: " + run.status().message());
    }
    Part& p = PartFor(bits, view.params.group_size);
    p.quant.push_back(*run);
    p.position.push_back(static_cast<uint32_t>(n));
    ++read.quantized_blocks;
    read.quantized_bytes += view.bytes.size();
  }
  if (read.quantized_blocks == 0) return false;  // All FP16: the model attends as always.
  const size_t q_dim = size_t{a.n_heads} * a.head_dim;
  run_lse_.resize(n * a.n_heads);
  head_lse_.resize(a.n_heads);
  part_out_.resize(q_dim);
  part_lse_.resize(a.n_heads);
  for (size_t k = 0; k < parts_used_; ++k) {
    if (k == 0) {
      AttendPart(a, parts_[k], a.out, head_lse_.data());
      continue;
    }
    AttendPart(a, parts_[k], part_out_.data(), part_lse_.data());
    MergeAttendParts(a.n_heads, a.head_dim, part_out_.data(), part_lse_.data(), a.out,
                     head_lse_.data());
  }
  RunMassFromLse(a.n_heads, n, run_lse_.data(), head_lse_.data(), a.chunk_mass);
  ++attention_stats_.layers_attended;
  attention_stats_.quantized_blocks += read.quantized_blocks;
  attention_stats_.raw_blocks += read.raw_blocks;
  attention_stats_.quantized_bytes += read.quantized_bytes;
  attention_stats_.raw_bytes += read.raw_bytes;
  return true;
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
