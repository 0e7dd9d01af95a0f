#include "runtime/kv_blocks.h"

#include <numeric>
#include <string>

#include "runtime/runtime_limits.h"

namespace kvtier::runtime {

Status KvBlockSource::SelectChunks(uint32_t /*layer*/, std::span<const float> /*query*/,
                                   uint32_t /*n_heads*/, uint32_t chunks,
                                   std::vector<uint32_t>* selected) {
  selected->resize(chunks);
  std::iota(selected->begin(), selected->end(), 0u);
  return Status::Ok();
}

void KvBlockSource::ObserveAttention(uint32_t /*layer*/, std::span<const uint32_t> /*chunks*/,
                                     std::span<const float> /*mass*/) {}

Result<bool> KvBlockSource::AttendDecode(const DecodeAttention& /*attention*/) { return false; }

InMemoryKvBlocks::InMemoryKvBlocks(const KvLayout& layout, uint32_t chunks_max)
    : layout_(layout), chunks_max_(chunks_max) {}

Result<std::unique_ptr<InMemoryKvBlocks>> InMemoryKvBlocks::Create(const KvLayout& layout,
                                                                   uint32_t capacity_tokens) {
  KV_RETURN_IF_ERROR(layout.Validate());
  if (layout.dtype != DType::kF16) {
    return Status::InvalidArgument("InMemoryKvBlocks holds FP16 blocks only");
  }
  if (capacity_tokens == 0 || capacity_tokens > kContextTokensMax) {
    return Status::InvalidArgument("capacity_tokens " + std::to_string(capacity_tokens) +
                                   " is outside [1, " + std::to_string(kContextTokensMax) + "]");
  }
  const uint32_t chunks = (capacity_tokens + layout.block_tokens - 1) / layout.block_tokens;
  return std::unique_ptr<InMemoryKvBlocks>(new InMemoryKvBlocks(layout, chunks));
}

Status InMemoryKvBlocks::CheckIndex(uint32_t layer, uint32_t chunk_index) const {
  if (layer >= layout_.layers) {
    return Status::InvalidArgument("layer " + std::to_string(layer) + " out of range");
  }
  if (chunk_index >= chunks_max_) {
    return Status::NoSpace("chunk " + std::to_string(chunk_index) + " beyond capacity of " +
                           std::to_string(chunks_max_) + " chunks");
  }
  return Status::Ok();
}

Result<std::span<const uint16_t>> InMemoryKvBlocks::Block(uint32_t layer, uint32_t chunk_index) {
  KV_RETURN_IF_ERROR(CheckIndex(layer, chunk_index));
  const size_t index = size_t{chunk_index} * layout_.layers + layer;
  if (index >= blocks_.size() || blocks_[index].empty()) {
    return Status::NotFound("block (layer " + std::to_string(layer) + ", chunk " +
                            std::to_string(chunk_index) + ") was never written");
  }
  const AlignedBuffer& b = blocks_[index];
  return std::span<const uint16_t>(reinterpret_cast<const uint16_t*>(b.data()),
                                   b.size() / sizeof(uint16_t));
}

Result<std::span<uint16_t>> InMemoryKvBlocks::MutableBlock(uint32_t layer, uint32_t chunk_index) {
  KV_RETURN_IF_ERROR(CheckIndex(layer, chunk_index));
  const size_t index = size_t{chunk_index} * layout_.layers + layer;
  // Moving the table's entries keeps every block where it is: spans handed out stay valid.
  if (index >= blocks_.size()) blocks_.resize((size_t{chunk_index} + 1) * layout_.layers);
  AlignedBuffer& b = blocks_[index];
  if (b.empty()) {
    KV_ASSIGN_OR_RETURN(b, AlignedBuffer::Allocate(static_cast<size_t>(layout_.BlockBytes()), 64));
  }
  return std::span<uint16_t>(reinterpret_cast<uint16_t*>(b.data()), b.size() / sizeof(uint16_t));
}

void InMemoryKvBlocks::Clear() {
  blocks_.clear();
  blocks_.shrink_to_fit();
}

uint64_t InMemoryKvBlocks::AllocatedBytes() const {
  uint64_t total = uint64_t{blocks_.capacity()} * sizeof(AlignedBuffer);
  for (const AlignedBuffer& b : blocks_) total += b.capacity();
  return total;
}

}  // namespace kvtier::runtime
