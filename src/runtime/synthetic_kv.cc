#include "runtime/synthetic_kv.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/assert.h"
#include "core/splitmix.h"
#include "runtime/kernels.h"

namespace kvtier::runtime {
namespace {

uint64_t Seed(uint64_t seed, uint64_t a, uint64_t b, uint64_t c) {
  const uint64_t h = SplitMix64(SplitMix64(SplitMix64(seed ^ 0x6b76746965720001ull) ^ a) ^ (b << 1));
  return h ^ (c * 0x2545f4914f6cdd1dull);
}

// Unit-variance uniform noise: four values per 64-bit draw.
void FillNoise(uint64_t seed, float* out, size_t n) {
  constexpr float kScale = 3.4641016f / 65536.0f;  // 2 * sqrt(3) over the 16-bit range.
  uint64_t counter = seed;
  size_t i = 0;
  while (i < n) {
    uint64_t bits = SplitMix64(counter++);
    for (int k = 0; k < 4 && i < n; ++k, ++i, bits >>= 16) {
      out[i] = (static_cast<float>(bits & 0xffff) - 32767.5f) * kScale;
    }
  }
}

}  // namespace

Status SyntheticKvOptions::Validate() const {
  if (context_tokens == 0) {
    return Status::InvalidArgument("SyntheticKvOptions.context_tokens must be >= 1");
  }
  if (salient_tokens > kSyntheticSalientTokensMax) {
    return Status::InvalidArgument("SyntheticKvOptions.salient_tokens above " +
                                   std::to_string(kSyntheticSalientTokensMax));
  }
  if (salient_tokens > 0 && sink_tokens + salient_tokens > context_tokens) {
    return Status::InvalidArgument(
        "SyntheticKvOptions: sink_tokens + salient_tokens exceed context_tokens");
  }
  if (!(salient_scale >= 0.0f) || salient_scale > 1000.0f) {
    return Status::InvalidArgument("SyntheticKvOptions.salient_scale outside [0, 1000]");
  }
  return Status::Ok();
}

SyntheticKvContext::SyntheticKvContext(const KvLayout& layout, const SyntheticKvOptions& options)
    : layout_(layout),
      options_(options),
      chunks_((options.context_tokens + layout.block_tokens - 1) / layout.block_tokens) {}

Result<SyntheticKvContext> SyntheticKvContext::Create(const KvLayout& layout,
                                                      const SyntheticKvOptions& options) {
  KV_RETURN_IF_ERROR(layout.Validate());
  if (layout.dtype != DType::kF16) {
    return Status::InvalidArgument("SyntheticKvContext: the layout must be FP16");
  }
  KV_RETURN_IF_ERROR(options.Validate());
  SyntheticKvContext c(layout, options);
  c.salient_.resize(layout.layers);
  const uint32_t span = options.context_tokens - options.sink_tokens;
  for (uint32_t l = 0; l < layout.layers; ++l) {
    std::vector<uint32_t>& pos = c.salient_[l];
    for (uint64_t draw = 0; pos.size() < options.salient_tokens; ++draw) {
      const auto p =
          static_cast<uint32_t>(options.sink_tokens + Seed(options.seed, l, draw, 0x5a) % span);
      if (std::find(pos.begin(), pos.end(), p) == pos.end()) pos.push_back(p);
    }
    std::sort(pos.begin(), pos.end());
  }
  return c;
}

// Adds salient token `index`'s planted component to every KV head of a key row.
void SyntheticKvContext::AddSalient(uint32_t layer, uint32_t pos, uint32_t index,
                                    float* row) const {
  const uint32_t d = layout_.head_dim;
  std::vector<float> dir(d);
  for (uint32_t h = 0; h < layout_.kv_heads; ++h) {
    FillNoise(Seed(options_.seed, layer, (uint64_t{index} << 20) | h, 0xd1 + pos), dir.data(), d);
    double norm = 0.0;
    for (const float x : dir) norm += double{x} * x;
    const auto scale = static_cast<float>(options_.salient_scale / std::sqrt(norm + 1e-30));
    float* head = row + size_t{h} * d;
    for (uint32_t i = 0; i < d; ++i) head[i] += scale * dir[i];
  }
}

void SyntheticKvContext::FillBlock(uint32_t layer, uint32_t chunk, std::span<uint16_t> out,
                                   std::vector<float>* scratch) const {
  KV_CHECK(layer < layout_.layers);
  KV_CHECK(chunk < chunks_);
  const size_t kv_dim = size_t{layout_.kv_heads} * layout_.head_dim;
  const uint32_t bt = layout_.block_tokens;
  KV_CHECK(out.size() == 2 * size_t{bt} * kv_dim);
  const uint32_t first = chunk * bt;
  const uint32_t rows = std::min(bt, options_.context_tokens - first);
  scratch->resize(size_t{rows} * kv_dim);
  const AttentionKernels& kernels = GetAttentionKernels();
  const std::span<const uint32_t> salient = salient_[layer];
  for (uint32_t half = 0; half < 2; ++half) {  // 0: K, 1: V.
    FillNoise(Seed(options_.seed, layer, chunk, half), scratch->data(), scratch->size());
    if (half == 0) {
      const auto lo = std::lower_bound(salient.begin(), salient.end(), first);
      for (auto it = lo; it != salient.end() && *it < first + rows; ++it) {
        const auto index = static_cast<uint32_t>(it - salient.begin());
        AddSalient(layer, *it, index, scratch->data() + size_t{*it - first} * kv_dim);
      }
    }
    uint16_t* dst = out.data() + size_t{half} * bt * kv_dim;
    kernels.float_to_half(scratch->data(), scratch->size(), dst);
    std::memset(dst + size_t{rows} * kv_dim, 0, size_t{bt - rows} * kv_dim * sizeof(uint16_t));
  }
}

Status FillSyntheticContext(const SyntheticKvContext& context, KvBlockSource& kv) {
  const KvLayout& l = context.layout();
  const KvLayout& target = kv.Layout();
  if (target.layers != l.layers || target.kv_heads != l.kv_heads || target.head_dim != l.head_dim ||
      target.block_tokens != l.block_tokens || target.dtype != l.dtype) {
    return Status::InvalidArgument("FillSyntheticContext: the source's layout " +
                                   target.ToString() + " differs from the context's " +
                                   l.ToString());
  }
  std::vector<float> scratch;
  for (uint32_t c = 0; c < context.chunks(); ++c) {
    for (uint32_t layer = 0; layer < l.layers; ++layer) {
      KV_ASSIGN_OR_RETURN(std::span<uint16_t> block, kv.MutableBlock(layer, c));
      context.FillBlock(layer, c, block, &scratch);
    }
  }
  return Status::Ok();
}

GeneratedKvBlocks::GeneratedKvBlocks(const SyntheticKvContext* context, uint32_t chunks_max)
    : context_(context),
      chunks_max_(chunks_max),
      full_chunks_(context->options().context_tokens / context->layout().block_tokens) {
  layer_blocks_.resize(context->chunks());
  layer_valid_.assign(context->chunks(), 0);
}

Result<std::unique_ptr<GeneratedKvBlocks>> GeneratedKvBlocks::Create(
    const SyntheticKvContext* context, uint32_t capacity_tokens) {
  if (context == nullptr) return Status::InvalidArgument("GeneratedKvBlocks: null context");
  const uint32_t bt = context->layout().block_tokens;
  const uint32_t chunks_max = (capacity_tokens + bt - 1) / bt;
  if (chunks_max < context->chunks()) {
    return Status::InvalidArgument("GeneratedKvBlocks: capacity below the context");
  }
  return std::unique_ptr<GeneratedKvBlocks>(new GeneratedKvBlocks(context, chunks_max));
}

Result<std::span<const uint16_t>> GeneratedKvBlocks::Block(uint32_t layer, uint32_t chunk_index) {
  if (layer >= Layout().layers || chunk_index >= chunks_max_) {
    return Status::InvalidArgument("GeneratedKvBlocks: block out of range");
  }
  const auto it = written_.find({layer, chunk_index});
  if (it != written_.end()) {
    return std::span<const uint16_t>(reinterpret_cast<const uint16_t*>(it->second.data()),
                                     it->second.size() / 2);
  }
  if (chunk_index >= context_->chunks()) {
    return Status::NotFound("GeneratedKvBlocks: chunk never written");
  }
  if (layer != layer_) {
    std::fill(layer_valid_.begin(), layer_valid_.end(), 0);
    layer_ = layer;
  }
  AlignedBuffer& b = layer_blocks_[chunk_index];
  if (b.empty()) {
    KV_ASSIGN_OR_RETURN(b, AlignedBuffer::Allocate(static_cast<size_t>(Layout().BlockBytes()), 64));
  }
  const std::span<uint16_t> halves(reinterpret_cast<uint16_t*>(b.data()), b.size() / 2);
  if (layer_valid_[chunk_index] == 0) {
    context_->FillBlock(layer, chunk_index, halves, &scratch_);
    layer_valid_[chunk_index] = 1;
  }
  return std::span<const uint16_t>(halves);
}

Result<std::span<uint16_t>> GeneratedKvBlocks::MutableBlock(uint32_t layer, uint32_t chunk_index) {
  if (layer >= Layout().layers) return Status::InvalidArgument("GeneratedKvBlocks: bad layer");
  if (chunk_index >= chunks_max_) return Status::NoSpace("GeneratedKvBlocks: beyond capacity");
  if (chunk_index < full_chunks_) {
    return Status::InvalidArgument("GeneratedKvBlocks: context chunks are read-only");
  }
  auto it = written_.find({layer, chunk_index});
  if (it == written_.end()) {
    KV_ASSIGN_OR_RETURN(AlignedBuffer b,
                        AlignedBuffer::Allocate(static_cast<size_t>(Layout().BlockBytes()), 64));
    if (chunk_index < context_->chunks()) {  // The partial last context chunk.
      context_->FillBlock(layer, chunk_index,
                          std::span<uint16_t>(reinterpret_cast<uint16_t*>(b.data()), b.size() / 2),
                          &scratch_);
    }
    it = written_.emplace(std::make_pair(layer, chunk_index), std::move(b)).first;
  }
  return std::span<uint16_t>(reinterpret_cast<uint16_t*>(it->second.data()), it->second.size() / 2);
}

}  // namespace kvtier::runtime
