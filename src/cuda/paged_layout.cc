#include "cuda/paged_layout.h"

#include <cstring>

namespace kvtier::cuda {

const char* CheckPagedTransfer(const PagedTransfer& t) {
  const PagedGeometry& g = t.geometry;
  if (g.elem_bytes != 2 && g.elem_bytes != 4) return "elem_bytes must be 2 or 4";
  if (g.page_tokens == 0 || g.kv_heads == 0 || g.head_dim == 0) return "zero dimension";
  if (g.kind == PagedLayoutKind::kLatent) return "latent (MLA) pages are not in the CUDA path yet";
  if (g.kind == PagedLayoutKind::kVllmLegacy && g.head_dim % g.x() != 0) {
    return "head_dim must be a multiple of x = 16 / elem_bytes for the vLLM legacy layout";
  }
  if (t.block_tokens == 0) return "block_tokens is 0";
  if (t.block_count == 0) return nullptr;
  if (t.k_cache == nullptr || t.v_cache == nullptr) return "null cache pointer";
  if (t.block_table == nullptr || t.blocks == nullptr) return "null block table or block list";
  return nullptr;
}

void PagedTransferHost(const PagedTransfer& t, TransferDirection direction) {
  const PagedGeometry& g = t.geometry;
  const size_t e = g.elem_bytes;
  const uint32_t pages_per_block = t.pages_per_block();
  for (uint32_t b = 0; b < t.block_count; ++b) {
    for (uint32_t kv = 0; kv < 2; ++kv) {
      std::byte* cache = kv == 0 ? t.k_cache : t.v_cache;
      for (uint32_t tok = 0; tok < t.block_tokens; ++tok) {
        const int32_t page = t.block_table[size_t{b} * pages_per_block + tok / g.page_tokens];
        if (page < 0 || static_cast<uint32_t>(page) >= t.pages_total) continue;
        const uint32_t slot = tok % g.page_tokens;
        for (uint32_t h = 0; h < g.kv_heads; ++h) {
          for (uint32_t d = 0; d < g.head_dim; ++d) {
            const uint64_t paged =
                kv == 0 ? PagedKeyIndex(g, static_cast<uint64_t>(page), slot, h, d)
                        : PagedValueIndex(g, static_cast<uint64_t>(page), slot, h, d);
            const uint64_t canonical =
                CanonicalIndex(t.block_tokens, g.kv_heads, g.head_dim, kv, tok, h, d);
            std::byte* p = cache + paged * e;
            std::byte* c = t.blocks[b] + canonical * e;
            if (direction == TransferDirection::kGather) {
              std::memcpy(c, p, e);
            } else {
              std::memcpy(p, c, e);
            }
          }
        }
      }
    }
  }
}

}  // namespace kvtier::cuda
