// Index math between kvtier's canonical block layout and inference engines' paged KV layouts,
// shared by the CPU gather/scatter (engine/paged_kv.cc), the CUDA kernels (cuda/paged_kernels.cu)
// and their host reference (cuda/paged_layout.cc): the arithmetic the GPU runs is the arithmetic
// the CPU runs and the tests check.
//
// Canonical block (core/kv_layout.h), one layer, T tokens:   [k|v][token][kv_head][head_dim]
// Engine layouts (one layer; a "page" is one engine block of N = page_tokens tokens, P pages,
// H kv heads, C = head_dim). Every layout but the legacy one addresses an element as
//   base(k or v) + page * page_stride + slot * slot_stride + head * head_stride + dim,
// with K and V at two base addresses (two tensors, or two offsets into one):
//   kVllmLegacy     key [P][H][C / x][N][x] (x = 16 / elem_bytes), value [P][H][C][N]
//   kFlash          key and value [P][N][H][C] each (FlashAttention NHD before vLLM 0.12: one
//                   tensor [2][P][N][H][C], K and V its two halves)
//   kFlashHnd       key and value [P][H][N][C] each
//   kFlashInferNhd  [P][2][N][H][C]   (FlashInfer NHD: a page holds K, then V)
//   kFlashInferHnd  [P][2][H][N][C]
//   kVllmCpu        [P][H][2][N][C]   (vLLM's CPU attention: per page and head, K's N x C rows,
//                                      then V's; vLLM shows the layer as [P][H][N][2C]). Byte
//                                      for byte: which element of K is which is the attention
//                                      ISA's (below), so K's rows are not tokens for every ISA
//   kVllmCpuVec     the same page, K per head [C][N] (dimension-major), V [N][C]: how vLLM's CPU
//                   attention with its "vec" ISA (x86 without AMX, or AMX with f16/f32 pages)
//                   writes a page; gathered into true canonical blocks, so a lossy codec sees
//                   tokens as tokens and channels as channels
//   kPackedNhd      [P][N][H][2][C]   (vLLM >= 0.30 GPU backends, cache layout LBNHC: K and V
//                                      side by side in each token's content [2C])
//   kPackedHnd      [P][H][N][2][C]   (the same, cache layout LBHNC)
//   kLatent         [P][N][C]         (multi-head latent attention, vLLM's MLA backends: one
//                                      latent vector per token, kv_lora_rank + rope dim, H = 1,
//                                      no V: the canonical block is [token][C], one plane)
// An engine may interleave layers inside a page (vLLM's BLHNC layouts): page_stride_elements
// then says how far apart two pages of one layer are (0: the layout's dense stride).
// A block table row maps the T tokens of one kvtier block to ceil(T / page_tokens) pages: token t
// lives in page table[t / page_tokens] at in-page slot t % page_tokens. A negative entry means
// "no page": gather leaves those tokens untouched and scatter skips them.
//
// Thread safety: value types and pure functions. Compiles as CUDA (host and device) and as C++17.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define KV_HOST_DEVICE __host__ __device__
#else
#define KV_HOST_DEVICE
#endif

namespace kvtier {

enum class PagedLayoutKind : uint8_t {
  kVllmLegacy = 0,     // vLLM's paged-attention layout (split x for keys, token-minor values).
  kFlash = 1,          // K and V caches [P][N][H][C].
  kFlashHnd = 2,       // K and V caches [P][H][N][C].
  kFlashInferNhd = 3,  // [P][2][N][H][C].
  kFlashInferHnd = 4,  // [P][2][H][N][C].
  kVllmCpu = 5,        // [P][H][2][N][C].
  kPackedNhd = 6,      // [P][N][H][2][C].
  kPackedHnd = 7,      // [P][H][N][2][C].
  kLatent = 8,         // [P][N][C], H = 1, no V (MLA).
  kVllmCpuVec = 9,     // [P][H][2][.][.]: K [C][N], V [N][C] per head.
};
inline constexpr uint32_t kPagedLayoutKinds = 10;

// The layout's name as kvtier's APIs spell it ("vllm_legacy", "flash", "flash_hnd",
// "flashinfer_nhd", "flashinfer_hnd", "vllm_cpu", "packed_nhd", "packed_hnd", "latent",
// "vllm_cpu_vec"); nullptr for an unknown value.
const char* PagedLayoutName(PagedLayoutKind kind);

struct PagedGeometry {
  PagedLayoutKind kind = PagedLayoutKind::kFlash;
  uint32_t page_tokens = 0;  // Tokens per engine page (vLLM block_size).
  uint32_t kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t elem_bytes = 2;  // 2 (f16/bf16) or 4 (f32).
  // Elements between two pages of this layer; 0: dense (dense_page_stride()). Not for kVllmLegacy.
  uint64_t page_stride_elements = 0;

  // vLLM's x: elements per 16 bytes; head_dim must be a multiple of it for kVllmLegacy.
  KV_HOST_DEVICE uint32_t x() const { return 16u / elem_bytes; }
  // Elements of one page of the key (or value) cache.
  KV_HOST_DEVICE uint64_t page_elements() const {
    return uint64_t{page_tokens} * kv_heads * head_dim;
  }
  // Planes of the canonical block: 1 for kLatent (no V), else 2 (K and V).
  KV_HOST_DEVICE uint32_t planes() const { return kind == PagedLayoutKind::kLatent ? 1u : 2u; }
  // Whether a page holds both K and V (else two caches, one for each, or no V at all).
  KV_HOST_DEVICE bool KvInOnePage() const {
    return kind != PagedLayoutKind::kVllmLegacy && kind != PagedLayoutKind::kFlash &&
           kind != PagedLayoutKind::kFlashHnd && kind != PagedLayoutKind::kLatent;
  }
  // Strides in elements (all layouts but kVllmLegacy).
  KV_HOST_DEVICE uint64_t dense_page_stride() const {
    return KvInOnePage() ? 2 * page_elements() : page_elements();
  }
  KV_HOST_DEVICE uint64_t page_stride() const {
    return page_stride_elements != 0 ? page_stride_elements : dense_page_stride();
  }
  KV_HOST_DEVICE uint64_t slot_stride() const {
    switch (kind) {
      case PagedLayoutKind::kFlash:
      case PagedLayoutKind::kFlashInferNhd:
      case PagedLayoutKind::kLatent:
        return uint64_t{kv_heads} * head_dim;
      case PagedLayoutKind::kPackedNhd:
        return 2ull * kv_heads * head_dim;
      case PagedLayoutKind::kPackedHnd:
        return 2ull * head_dim;
      default:  // kFlashHnd, kFlashInferHnd, kVllmCpu, kVllmCpuVec (V; K: PagedKeyIndex).
        return head_dim;
    }
  }
  KV_HOST_DEVICE uint64_t head_stride() const {
    switch (kind) {
      case PagedLayoutKind::kFlash:
      case PagedLayoutKind::kFlashInferNhd:
      case PagedLayoutKind::kLatent:
        return head_dim;
      case PagedLayoutKind::kPackedNhd:
        return 2ull * head_dim;
      case PagedLayoutKind::kPackedHnd:
      case PagedLayoutKind::kVllmCpu:
      case PagedLayoutKind::kVllmCpuVec:
        return 2ull * page_tokens * head_dim;
      default:  // kFlashHnd, kFlashInferHnd.
        return uint64_t{page_tokens} * head_dim;
    }
  }
  // Where V starts relative to K, in elements, for the layouts with both in one page (0 for
  // kFlash, kFlashHnd and kVllmLegacy: two separate caches; kLatent has no V).
  KV_HOST_DEVICE uint64_t value_offset() const {
    switch (kind) {
      case PagedLayoutKind::kFlashInferNhd:
      case PagedLayoutKind::kFlashInferHnd:
        return page_elements();
      case PagedLayoutKind::kVllmCpu:
      case PagedLayoutKind::kVllmCpuVec:
        return uint64_t{page_tokens} * head_dim;
      case PagedLayoutKind::kPackedNhd:
      case PagedLayoutKind::kPackedHnd:
        return head_dim;
      default:
        return 0;
    }
  }
};

// Element index of (page, slot, head, dim) in the key cache (relative to the K base).
KV_HOST_DEVICE inline uint64_t PagedKeyIndex(const PagedGeometry& g, uint64_t page, uint32_t slot,
                                             uint32_t head, uint32_t dim) {
  if (g.kind == PagedLayoutKind::kVllmCpuVec) {  // Dimension-major keys.
    return page * g.page_stride() + head * g.head_stride() + uint64_t{dim} * g.page_tokens + slot;
  }
  if (g.kind != PagedLayoutKind::kVllmLegacy) {
    return page * g.page_stride() + slot * g.slot_stride() + head * g.head_stride() + dim;
  }
  const uint32_t x = g.x();
  const uint64_t groups = g.head_dim / x;
  return (((page * g.kv_heads + head) * groups + dim / x) * g.page_tokens + slot) * x + dim % x;
}

// Element index of (page, slot, head, dim) in the value cache (relative to the V base).
KV_HOST_DEVICE inline uint64_t PagedValueIndex(const PagedGeometry& g, uint64_t page, uint32_t slot,
                                               uint32_t head, uint32_t dim) {
  if (g.kind != PagedLayoutKind::kVllmLegacy) {
    return page * g.page_stride() + slot * g.slot_stride() + head * g.head_stride() + dim;
  }
  return ((page * g.kv_heads + head) * g.head_dim + dim) * g.page_tokens + slot;
}

// Element index of (kv, token, head, dim) in a canonical block of `tokens` tokens.
KV_HOST_DEVICE inline uint64_t CanonicalIndex(uint32_t tokens, uint32_t kv_heads, uint32_t head_dim,
                                              uint32_t kv, uint32_t token, uint32_t head,
                                              uint32_t dim) {
  return ((uint64_t{kv} * tokens + token) * kv_heads + head) * head_dim + dim;
}

}  // namespace kvtier
