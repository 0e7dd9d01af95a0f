// KvBlockSource: how the forward pass reaches a sequence's KV cache. The cache is FP16, held in
// blocks of `block_tokens` tokens, one block per (layer, chunk), each in kvtier's canonical
// layout [k|v][token][kv_head][head_dim] (core/kv_layout.h). Chunk c holds positions
// [c * block_tokens, (c + 1) * block_tokens).
//
// Why an interface: the runtime must not care where blocks live. The engine's device tier will
// implement it (loading offloaded blocks before it hands them out); InMemoryKvBlocks is the
// plain in-process implementation used until then and by tests.
//
// Contract: the model calls MutableBlock(layer, c) before writing positions of chunk c, and
// Block(layer, c) only for chunks it has written. Every span handed out for a layer must stay
// valid until the source is asked for a block of another layer: the model fetches all spans of
// one layer first, then computes with them.
//
// Thread safety: implementations need not be synchronized; one forward pass uses a source at a
// time. Ownership: the source owns block memory; callers borrow spans.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/kv_layout.h"
#include "kvtier/result.h"

namespace kvtier::runtime {

struct AttentionKernels;

// One decoded token's attention over the chunks of one layer, offered to the source
// (KvBlockSource::AttendDecode). The token attends rows [c * block_tokens, context_tokens) of
// each chunk c in `chunks`, as the model would with the blocks Block() hands out.
struct DecodeAttention {
  uint32_t layer = 0;
  std::span<const uint32_t> chunks;  // Ascending, as SelectChunks left them; the last is the
                                     // chunk holding the token.
  uint32_t context_tokens = 0;       // Positions attended (the token's position + 1).
  uint32_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  const float* q = nullptr;                   // [n_heads][head_dim], scaled by 1/sqrt(head_dim).
  const AttentionKernels* kernels = nullptr;  // For the FP16 blocks.
  float* out = nullptr;                       // [n_heads][head_dim]
  float* chunk_mass = nullptr;  // [chunks.size()]: as AttendArgs::run_mass (kernels.h).
};

class KvBlockSource {
 public:
  virtual ~KvBlockSource() = default;

  // The geometry of every block; dtype is kF16.
  virtual const KvLayout& Layout() const = 0;
  // Positions this source can hold (a multiple of block_tokens).
  virtual uint32_t CapacityTokens() const = 0;
  // A written block, for reading. NotFound when the chunk was never written.
  virtual Result<std::span<const uint16_t>> Block(uint32_t layer, uint32_t chunk_index) = 0;
  // A block for writing (created zeroed on first use). NoSpace beyond the capacity.
  virtual Result<std::span<uint16_t>> MutableBlock(uint32_t layer, uint32_t chunk_index) = 0;

  // Attention-guided selection (optional; docs/offload.md). When the model decodes one token
  // it calls this after computing the token's query for `layer` (post-RoPE, [n_heads][head_dim]
  // floats, unscaled) and before any Block(layer, ...) call; the token then attends only to the
  // chunks left in *selected (ascending, each < `chunks`, the last chunk included since it holds
  // the token itself). The default keeps all `chunks`, i.e. full attention.
  virtual Status SelectChunks(uint32_t layer, std::span<const float> query, uint32_t n_heads,
                              uint32_t chunks, std::vector<uint32_t>* selected);

  // Attention feedback (optional; docs/engine.md, heat). After the model decodes one token
  // it reports, per attended chunk of `layer` (`chunks`, ascending, as SelectChunks left them),
  // the attention mass the token gave it: mass[i] is the softmax probability summed over the
  // rows of chunks[i], averaged over the query heads, so the masses sum to about 1. Sources
  // that place blocks by heat use it; the default ignores it.
  virtual void ObserveAttention(uint32_t layer, std::span<const uint32_t> chunks,
                                std::span<const float> mass);

  // Decode attention by the source (optional). When the model decodes one token it offers the
  // layer's attention here after SelectChunks and before any Block(layer, ...) call. A source
  // that holds blocks in a form Block() would have to convert (quantized blocks: it attends them
  // from their codes, runtime/quant_attention.h) computes the attention and the chunk masses and
  // returns true; false (the default) leaves it to the model, which then reads FP16 blocks
  // through Block(). An error fails the forward pass (a block that does not verify: Corruption).
  virtual Result<bool> AttendDecode(const DecodeAttention& attention);
};

// A source that forwards every call to another one: the base of decorators that add to a
// source (selection, measurements) and override only what they change. `inner` is borrowed and
// must outlive it.
class ForwardingKvBlocks : public KvBlockSource {
 public:
  explicit ForwardingKvBlocks(KvBlockSource* inner) : inner_(inner) {}

  const KvLayout& Layout() const override { return inner_->Layout(); }
  uint32_t CapacityTokens() const override { return inner_->CapacityTokens(); }
  Result<std::span<const uint16_t>> Block(uint32_t layer, uint32_t chunk_index) override {
    return inner_->Block(layer, chunk_index);
  }
  Result<std::span<uint16_t>> MutableBlock(uint32_t layer, uint32_t chunk_index) override {
    return inner_->MutableBlock(layer, chunk_index);
  }
  Status SelectChunks(uint32_t layer, std::span<const float> query, uint32_t n_heads,
                      uint32_t chunks, std::vector<uint32_t>* selected) override {
    return inner_->SelectChunks(layer, query, n_heads, chunks, selected);
  }
  void ObserveAttention(uint32_t layer, std::span<const uint32_t> chunks,
                        std::span<const float> mass) override {
    inner_->ObserveAttention(layer, chunks, mass);
  }
  Result<bool> AttendDecode(const DecodeAttention& attention) override {
    return inner_->AttendDecode(attention);
  }

 protected:
  KvBlockSource* inner() const { return inner_; }

 private:
  KvBlockSource* inner_;
};

// Every block in host memory, allocated on first write. Capacity is fixed at Create, but memory
// follows use: a source created for a model's whole declared context (up to 1M tokens) holds
// nothing until positions are written, and then only the chunks up to the highest one written,
// so a long declared context costs nothing until it is used. Each block is its own allocation,
// never moved, so a span stays valid however far the table grows (until Clear()).
class InMemoryKvBlocks final : public KvBlockSource {
 public:
  // `layout` must be valid with dtype kF16; capacity is rounded up to whole blocks.
  static Result<std::unique_ptr<InMemoryKvBlocks>> Create(const KvLayout& layout,
                                                          uint32_t capacity_tokens);

  const KvLayout& Layout() const override { return layout_; }
  uint32_t CapacityTokens() const override { return chunks_max_ * layout_.block_tokens; }
  Result<std::span<const uint16_t>> Block(uint32_t layer, uint32_t chunk_index) override;
  Result<std::span<uint16_t>> MutableBlock(uint32_t layer, uint32_t chunk_index) override;

  // Drops every block (a new sequence starts).
  void Clear();
  // Bytes this source holds on the heap: its blocks' allocations plus its table of them. Zero
  // right after Create, whatever the capacity.
  uint64_t AllocatedBytes() const;

 private:
  InMemoryKvBlocks(const KvLayout& layout, uint32_t chunks_max);
  Status CheckIndex(uint32_t layer, uint32_t chunk_index) const;

  KvLayout layout_;
  uint32_t chunks_max_;
  // [chunk * layers + layer]; empty = not written. Grows a whole chunk (all layers) at a time up
  // to the highest chunk written, never beyond chunks_max_.
  std::vector<AlignedBuffer> blocks_;
};

}  // namespace kvtier::runtime
