// Index math between kvtier's canonical block layout and inference engines' paged KV layouts,
// shared by the gather/scatter kernels (cuda_kernels.cu) and their host reference
// (paged_layout.cc), so the arithmetic the GPU runs is the arithmetic the CPU tests check.
//
// Canonical block (core/kv_layout.h), one layer, T tokens:   [k|v][token][kv_head][head_dim]
// Engine layouts (one layer; a "page" is one engine block of page_tokens tokens, P pages):
//   kVllmLegacy  key cache   [P][kv_heads][head_dim / x][page_tokens][x]   (x = 16 / elem_bytes)
//                value cache [P][kv_heads][head_dim][page_tokens]
//   kFlash       key cache   [P][page_tokens][kv_heads][head_dim]   (value cache the same)
// A block table row maps the T tokens of one kvtier block to ceil(T / page_tokens) pages: token t
// lives in page table[t / page_tokens] at in-page slot t % page_tokens. A negative entry means
// "no page": gather leaves those tokens untouched and scatter skips them.
//
// Thread safety: value types and pure functions. Compiles as CUDA (host and device) and as C++.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define KV_HOST_DEVICE __host__ __device__
#else
#define KV_HOST_DEVICE
#endif

namespace kvtier::cuda {

enum class PagedLayoutKind : uint8_t {
  kVllmLegacy = 0,  // vLLM's paged-attention layout (split x for keys, token-minor values).
  kFlash = 1,       // vLLM FlashAttention / FlashInfer NHD layout.
};

struct PagedGeometry {
  PagedLayoutKind kind = PagedLayoutKind::kFlash;
  uint32_t page_tokens = 0;  // Tokens per engine page (vLLM block_size).
  uint32_t kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t elem_bytes = 2;  // 2 (f16/bf16) or 4 (f32).

  // vLLM's x: elements per 16 bytes; head_dim must be a multiple of it for kVllmLegacy.
  KV_HOST_DEVICE uint32_t x() const { return 16u / elem_bytes; }
  // Elements of one page of the key (or value) cache.
  KV_HOST_DEVICE uint64_t page_elements() const {
    return uint64_t{page_tokens} * kv_heads * head_dim;
  }
};

// Element index of (page, slot, head, dim) in the key cache.
KV_HOST_DEVICE inline uint64_t PagedKeyIndex(const PagedGeometry& g, uint64_t page, uint32_t slot,
                                             uint32_t head, uint32_t dim) {
  if (g.kind == PagedLayoutKind::kFlash) {
    return ((page * g.page_tokens + slot) * g.kv_heads + head) * g.head_dim + dim;
  }
  const uint32_t x = g.x();
  const uint64_t groups = g.head_dim / x;
  return (((page * g.kv_heads + head) * groups + dim / x) * g.page_tokens + slot) * x + dim % x;
}

// Element index of (page, slot, head, dim) in the value cache.
KV_HOST_DEVICE inline uint64_t PagedValueIndex(const PagedGeometry& g, uint64_t page, uint32_t slot,
                                               uint32_t head, uint32_t dim) {
  if (g.kind == PagedLayoutKind::kFlash) {
    return ((page * g.page_tokens + slot) * g.kv_heads + head) * g.head_dim + dim;
  }
  return ((page * g.kv_heads + head) * g.head_dim + dim) * g.page_tokens + slot;
}

// Element index of (kv, token, head, dim) in a canonical block of `tokens` tokens.
KV_HOST_DEVICE inline uint64_t CanonicalIndex(uint32_t tokens, uint32_t kv_heads, uint32_t head_dim,
                                              uint32_t kv, uint32_t token, uint32_t head,
                                              uint32_t dim) {
  return ((uint64_t{kv} * tokens + token) * kv_heads + head) * head_dim + dim;
}

// One gather (paged -> blocks) or scatter (blocks -> paged) of `block_count` kvtier blocks of one
// layer. Every pointer is a device address for the kernels (host addresses for the reference).
struct PagedTransfer {
  PagedGeometry geometry;
  std::byte* k_cache = nullptr;          // The layer's key cache, pages_total pages.
  std::byte* v_cache = nullptr;          // The layer's value cache.
  uint32_t pages_total = 0;              // Pages in each cache; larger table entries are skipped.
  const int32_t* block_table = nullptr;  // [block_count][pages_per_block()] page numbers.
  std::byte* const* blocks = nullptr;    // [block_count] canonical blocks (one layer each).
  uint32_t block_count = 0;
  uint32_t block_tokens = 0;  // T.

  KV_HOST_DEVICE uint32_t pages_per_block() const {
    return (block_tokens + geometry.page_tokens - 1) / geometry.page_tokens;
  }
  KV_HOST_DEVICE uint64_t block_elements() const {
    return 2ull * block_tokens * geometry.kv_heads * geometry.head_dim;
  }
};

enum class TransferDirection : uint8_t {
  kGather = 0,   // Paged caches -> canonical blocks (store path).
  kScatter = 1,  // Canonical blocks -> paged caches (load path).
};

// Host reference of the kernels: the same loop, element by element, with the functions above.
void PagedTransferHost(const PagedTransfer& transfer, TransferDirection direction);

// Empty when `transfer` is consistent (sizes, x divides head_dim for the legacy layout, pointers
// present); otherwise the reason. Checked by the launchers before any kernel runs.
const char* CheckPagedTransfer(const PagedTransfer& transfer);

}  // namespace kvtier::cuda
