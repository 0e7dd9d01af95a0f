#include "engine/paged_kv.h"

#include <algorithm>
#include <cstring>
#include <string>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace kvtier {
namespace {

std::string Dims(std::span<const int64_t> v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

Status Mismatch(std::string_view backend, const PagedTensor& t, std::string_view expected) {
  return Status::InvalidArgument("kvtier does not know this " + std::string(backend) +
                                 " KV cache layout: shape " + Dims(t.shape) + ", strides " +
                                 Dims(t.strides) + " (elements); expected " +
                                 std::string(expected));
}

// Last element (plus one) reached from `base_offset` by the geometry's K or V index math.
uint64_t Extent(const PagedGeometry& g, uint64_t pages, uint64_t base_offset) {
  if (pages == 0) return base_offset;
  return base_offset + (pages - 1) * g.page_stride() + (g.page_tokens - 1) * g.slot_stride() +
         (g.kv_heads - 1) * g.head_stride() + g.head_dim;
}

// The checks every backend's tensor passes first: element size, data, rank, positive sizes.
Status CheckPagedTensor(std::string_view backend, const PagedTensor& t) {
  if (t.elem_bytes != 2 && t.elem_bytes != 4) {
    return Status::InvalidArgument("paged KV cache elements must be 2 or 4 bytes, not " +
                                   std::to_string(t.elem_bytes));
  }
  if (t.data == nullptr) return Status::InvalidArgument("paged KV cache tensor has no data");
  if (t.shape.size() != t.strides.size()) {
    return Status::InvalidArgument("paged KV cache tensor: shape and strides differ in rank");
  }
  for (size_t i = 0; i < t.shape.size(); ++i) {
    if (t.shape[i] <= 0 || t.strides[i] <= 0 || t.shape[i] > (int64_t{1} << 40)) {
      return Mismatch(backend, t, "positive sizes and strides");
    }
  }
  return Status::Ok();
}

// The backend-specific part of DescribePagedLayer: fills layer->pages and the geometry's kind,
// page_tokens and page stride (kv_heads, head_dim and elem_bytes are set), and *v_offset, the
// elements from K's base to V's. H: kv heads, C: head_dim.

// vllm_cpu, vllm_cpu_vec and vllm_packed: [pages, H, page_tokens, 2 * C].
Status DescribeVllmPages(std::string_view backend, const PagedTensor& t, int64_t H, int64_t C,
                         PagedLayer* layer, uint64_t* v_offset) {
  const auto& s = t.shape;
  const auto& st = t.strides;
  PagedGeometry& g = layer->geometry;
  if (s.size() != 4 || s[1] != H || s[3] != 2 * C) {
    return Mismatch(
        backend, t,
        "shape [pages, " + std::to_string(H) + ", page_tokens, " + std::to_string(2 * C) + "]");
  }
  const int64_t N = s[2];
  const bool hnd = st[3] == 1 && st[2] == 2 * C && st[1] == N * 2 * C;
  const bool nhd = st[3] == 1 && st[1] == 2 * C && st[2] == H * 2 * C;
  if (backend == "vllm_cpu" || backend == "vllm_cpu_vec") {
    if (!hnd) return Mismatch(backend, t, "dense [pages][heads][tokens][2 * head_dim] pages");
    g.kind = backend == "vllm_cpu" ? PagedLayoutKind::kVllmCpu : PagedLayoutKind::kVllmCpuVec;
    *v_offset = static_cast<uint64_t>(N * C);
  } else {
    if (!hnd && !nhd) {
      return Mismatch(backend, t, "the NHD or HND order inside a page, content innermost");
    }
    g.kind = hnd ? PagedLayoutKind::kPackedHnd : PagedLayoutKind::kPackedNhd;
    *v_offset = static_cast<uint64_t>(C);
  }
  g.page_tokens = static_cast<uint32_t>(N);
  if (st[0] < 2 * H * N * C) return Mismatch(backend, t, "pages at least a page apart");
  g.page_stride_elements = static_cast<uint64_t>(st[0]);
  layer->pages = static_cast<uint64_t>(s[0]);
  return Status::Ok();
}

// flash [2, P, N, H, C] and flashinfer [P, 2, N, H, C].
Status DescribeFlashPages(std::string_view backend, const PagedTensor& t, int64_t H, int64_t C,
                          PagedLayer* layer, uint64_t* v_offset) {
  const auto& s = t.shape;
  const auto& st = t.strides;
  PagedGeometry& g = layer->geometry;
  const bool flash = backend == "flash";
  // Axes: flash [2, P, N, H, C], flashinfer [P, 2, N, H, C].
  const size_t kv_axis = flash ? 0 : 1;
  const size_t page_axis = flash ? 1 : 0;
  if (s.size() != 5 || s[kv_axis] != 2 || s[3] != H || s[4] != C) {
    return Mismatch(backend, t,
                    flash ? "shape [2, pages, page_tokens, " + std::to_string(H) + ", " +
                                std::to_string(C) + "]"
                          : "shape [pages, 2, page_tokens, " + std::to_string(H) + ", " +
                                std::to_string(C) + "]");
  }
  const int64_t N = s[2];
  const bool nhd = st[4] == 1 && st[3] == C && st[2] == H * C;
  const bool hnd = st[4] == 1 && st[2] == C && st[3] == N * C;
  if (!nhd && !hnd) return Mismatch(backend, t, "the NHD or HND order inside a page");
  g.kind = flash ? (nhd ? PagedLayoutKind::kFlash : PagedLayoutKind::kFlashHnd)
                 : (nhd ? PagedLayoutKind::kFlashInferNhd : PagedLayoutKind::kFlashInferHnd);
  g.page_tokens = static_cast<uint32_t>(N);
  const int64_t half = N * H * C;  // One of K or V of a page.
  const int64_t pages = s[page_axis];
  const int64_t page_stride = st[page_axis];
  const int64_t kv_stride = st[kv_axis];
  // K and V of a page side by side inside it, or the V pages after all the K pages.
  const bool inside = kv_stride >= half && kv_stride + half <= page_stride;
  const bool after = page_stride >= half && kv_stride >= pages * page_stride;
  if (!inside && !after) return Mismatch(backend, t, "K and V pages that do not overlap");
  g.page_stride_elements = static_cast<uint64_t>(page_stride);
  *v_offset = static_cast<uint64_t>(kv_stride);
  layer->pages = static_cast<uint64_t>(pages);
  return Status::Ok();
}

// vllm_mla: [P, N, C], or [P, 1, N, C] (vLLM's CPU_MLA shows a head axis of size 1): axis 1
// skipped. One latent vector per token; V is K (*v_offset stays 0).
Status DescribeLatentPages(std::string_view backend, const PagedTensor& t, int64_t H, int64_t C,
                           PagedLayer* layer) {
  const auto& s = t.shape;
  const auto& st = t.strides;
  PagedGeometry& g = layer->geometry;
  const size_t x = s.size() == 4 && s[1] == 1 ? 1 : 0;
  if (H != 1 || s.size() != 3 + x || s[2 + x] != C) {
    return Mismatch(backend, t,
                    "shape [pages, (1,) page_tokens, " + std::to_string(C) + "], 1 head");
  }
  if (st[2 + x] != 1 || st[1 + x] != C || st[0] < s[1 + x] * C) {
    return Mismatch(backend, t, "dense [pages][tokens][latent] pages");
  }
  g.kind = PagedLayoutKind::kLatent;
  g.page_tokens = static_cast<uint32_t>(s[1 + x]);
  g.page_stride_elements = static_cast<uint64_t>(st[0]);
  layer->pages = static_cast<uint64_t>(s[0]);
  return Status::Ok();
}

}  // namespace

Result<PagedLayer> DescribePagedLayer(std::string_view backend, const PagedTensor& t,
                                      uint32_t kv_heads, uint32_t head_dim) {
  if (Status st = CheckPagedTensor(backend, t); !st.ok()) return st;
  const int64_t H = kv_heads;
  const int64_t C = head_dim;
  PagedLayer layer;
  PagedGeometry& g = layer.geometry;
  g.kv_heads = kv_heads;
  g.head_dim = head_dim;
  g.elem_bytes = t.elem_bytes;
  uint64_t v_offset = 0;  // Elements from K's base to V's.
  Status described;
  if (backend == "vllm_cpu" || backend == "vllm_cpu_vec" || backend == "vllm_packed") {
    described = DescribeVllmPages(backend, t, H, C, &layer, &v_offset);
  } else if (backend == "flash" || backend == "flashinfer") {
    described = DescribeFlashPages(backend, t, H, C, &layer, &v_offset);
  } else if (backend == "vllm_mla") {
    described = DescribeLatentPages(backend, t, H, C, &layer);
  } else {
    return Status::InvalidArgument("unknown paged KV cache backend \"" + std::string(backend) +
                                   "\" (known: vllm_cpu, vllm_cpu_vec, vllm_packed, vllm_mla, "
                                   "flash, flashinfer)");
  }
  if (!described.ok()) return described;
  if (layer.pages > (uint64_t{1} << 31)) {
    return Status::InvalidArgument("paged KV cache has more than 2^31 pages");
  }
  const uint64_t needed =
      std::max(Extent(g, layer.pages, 0), Extent(g, layer.pages, v_offset)) * t.elem_bytes;
  if (needed > t.bytes) {
    return Status::InvalidArgument("paged KV cache tensor reaches " + std::to_string(needed) +
                                   " bytes past its start but its storage has " +
                                   std::to_string(t.bytes));
  }
  layer.k = t.data;
  layer.v = t.data + v_offset * t.elem_bytes;
  return layer;
}

namespace {

enum class Direction { kGather, kScatter };

Status CheckTransfer(const PagedLayer& layer, uint32_t block_tokens, std::span<const int32_t> table,
                     size_t blocks, std::span<const size_t> block_sizes) {
  const PagedGeometry& g = layer.geometry;
  if (g.page_tokens == 0 || g.kv_heads == 0 || g.head_dim == 0 || layer.k == nullptr ||
      layer.v == nullptr) {
    return Status::InvalidArgument("paged layer is not described");
  }
  if (block_tokens == 0) return Status::InvalidArgument("block_tokens is 0");
  const uint32_t ppb = (block_tokens + g.page_tokens - 1) / g.page_tokens;
  if (table.size() != blocks * ppb) {
    return Status::InvalidArgument(
        "block table has " + std::to_string(table.size()) + " entries; " + std::to_string(blocks) +
        " blocks of " + std::to_string(ppb) + " pages need " + std::to_string(blocks * ppb));
  }
  for (size_t i = 0; i < table.size(); ++i) {
    if (table[i] >= 0 && static_cast<uint64_t>(table[i]) >= layer.pages) {
      return Status::InvalidArgument("page " + std::to_string(table[i]) + " (table entry " +
                                     std::to_string(i) + ") is out of range: the layer has " +
                                     std::to_string(layer.pages) + " pages");
    }
  }
  const uint64_t block_bytes =
      uint64_t{g.planes()} * block_tokens * g.kv_heads * g.head_dim * g.elem_bytes;
  for (size_t b = 0; b < block_sizes.size(); ++b) {
    if (block_sizes[b] != block_bytes) {
      return Status::InvalidArgument("block " + std::to_string(b) + " is " +
                                     std::to_string(block_sizes[b]) + " bytes, not " +
                                     std::to_string(block_bytes));
    }
  }
  return Status::Ok();
}

// dst[r * dst_stride + c] = src[c * src_stride + r] for r < rows, c < cols: a transpose of
// elements of E bytes (strides in elements). Tiles of 16 bytes square (8 x 8 for 2-byte
// elements, 4 x 4 for 4-byte ones) go through SSE2 unpacks, the edges element by element.
template <size_t E>
void Transpose(const std::byte* src, uint64_t src_stride, std::byte* dst, uint64_t dst_stride,
               uint32_t rows, uint32_t cols) {
  static_assert(E == 2 || E == 4);
  const auto one = [&](uint32_t r, uint32_t c) {
    std::memcpy(dst + (r * dst_stride + c) * E, src + (c * src_stride + r) * E, E);
  };
  uint32_t tiled_rows = 0, tiled_cols = 0;
#if defined(__SSE2__)
  constexpr uint32_t kT = 16 / E;
  tiled_rows = rows / kT * kT;
  tiled_cols = cols / kT * kT;
  for (uint32_t r0 = 0; r0 < tiled_rows; r0 += kT) {
    for (uint32_t c0 = 0; c0 < tiled_cols; c0 += kT) {
      __m128i a[kT];  // a[i]: elements r0.. of source row c0 + i.
      for (uint32_t i = 0; i < kT; ++i) {
        a[i] = _mm_loadu_si128(
            reinterpret_cast<const __m128i*>(src + ((c0 + i) * src_stride + r0) * E));
      }
      __m128i out[kT];  // out[j]: elements c0.. of destination row r0 + j.
      if constexpr (E == 2) {
        __m128i b[8], c[8];
        for (int i = 0; i < 4; ++i) {
          b[2 * i] = _mm_unpacklo_epi16(a[2 * i], a[2 * i + 1]);
          b[2 * i + 1] = _mm_unpackhi_epi16(a[2 * i], a[2 * i + 1]);
        }
        for (int i = 0; i < 2; ++i) {  // Pairs of b 2 apart, within each half of the rows.
          for (int k = 0; k < 2; ++k) {
            c[4 * i + 2 * k] = _mm_unpacklo_epi32(b[4 * i + k], b[4 * i + k + 2]);
            c[4 * i + 2 * k + 1] = _mm_unpackhi_epi32(b[4 * i + k], b[4 * i + k + 2]);
          }
        }
        for (int j = 0; j < 4; ++j) {
          out[2 * j] = _mm_unpacklo_epi64(c[j], c[j + 4]);
          out[2 * j + 1] = _mm_unpackhi_epi64(c[j], c[j + 4]);
        }
      } else {
        const __m128i b0 = _mm_unpacklo_epi32(a[0], a[1]), b1 = _mm_unpackhi_epi32(a[0], a[1]);
        const __m128i b2 = _mm_unpacklo_epi32(a[2], a[3]), b3 = _mm_unpackhi_epi32(a[2], a[3]);
        out[0] = _mm_unpacklo_epi64(b0, b2);
        out[1] = _mm_unpackhi_epi64(b0, b2);
        out[2] = _mm_unpacklo_epi64(b1, b3);
        out[3] = _mm_unpackhi_epi64(b1, b3);
      }
      for (uint32_t j = 0; j < kT; ++j) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + ((r0 + j) * dst_stride + c0) * E),
                         out[j]);
      }
    }
  }
#endif
  for (uint32_t r = 0; r < rows; ++r) {
    for (uint32_t c = r < tiled_rows ? tiled_cols : 0; c < cols; ++c) one(r, c);
  }
}

// The dimension-major keys of a kVllmCpuVec page: per head, dimension d's slots are contiguous
// in the page and a token's dimensions in the block.
template <size_t E>
void CopyDimMajorKeys(const PagedLayer& layer, Direction dir, uint64_t page, uint32_t slots,
                      std::byte* canon) {
  const PagedGeometry& g = layer.geometry;
  const uint64_t heads_row = uint64_t{g.kv_heads} * g.head_dim;
  for (uint32_t h = 0; h < g.kv_heads; ++h) {
    std::byte* paged = layer.k + PagedKeyIndex(g, page, 0, h, 0) * E;
    std::byte* head = canon + uint64_t{h} * g.head_dim * E;
    if (dir == Direction::kGather) {  // head[s][d] = paged[d][s]
      Transpose<E>(paged, g.page_tokens, head, heads_row, slots, g.head_dim);
    } else {  // paged[d][s] = head[s][d]
      Transpose<E>(head, heads_row, paged, g.page_tokens, g.head_dim, slots);
    }
  }
}

// Copies one page's share of a block: `slots` tokens from in-page slot 0, block tokens from
// `first_token`. Rows of head_dim elements are contiguous in every layout but the legacy one
// and kVllmCpuVec's keys; heads of a slot (NHD) and slots of a page (dense NHD) are merged into
// longer copies.
void CopyPage(const PagedLayer& layer, Direction dir, uint64_t page, uint32_t slots,
              uint32_t first_token, uint32_t block_tokens, std::byte* block) {
  const PagedGeometry& g = layer.geometry;
  const size_t e = g.elem_bytes;
  const size_t row = size_t{g.head_dim} * e;
  const uint64_t heads_row = uint64_t{g.kv_heads} * g.head_dim;  // Canonical elements per token.
  for (uint32_t kv = 0; kv < g.planes(); ++kv) {
    std::byte* base = kv == 0 ? layer.k : layer.v;
    std::byte* canon = block + (uint64_t{kv} * block_tokens + first_token) * heads_row * e;
    if (g.kind == PagedLayoutKind::kVllmCpuVec && kv == 0) {
      e == 2 ? CopyDimMajorKeys<2>(layer, dir, page, slots, canon)
             : CopyDimMajorKeys<4>(layer, dir, page, slots, canon);
      continue;
    }
    if (g.kind == PagedLayoutKind::kVllmLegacy) {
      for (uint32_t s = 0; s < slots; ++s) {
        for (uint32_t h = 0; h < g.kv_heads; ++h) {
          for (uint32_t d = 0; d < g.head_dim; ++d) {
            const uint64_t idx =
                kv == 0 ? PagedKeyIndex(g, page, s, h, d) : PagedValueIndex(g, page, s, h, d);
            std::byte* p = base + idx * e;
            std::byte* c = canon + ((uint64_t{s} * g.kv_heads + h) * g.head_dim + d) * e;
            dir == Direction::kGather ? std::memcpy(c, p, e) : std::memcpy(p, c, e);
          }
        }
      }
      continue;
    }
    std::byte* page_base = base + page * g.page_stride() * e;
    const bool heads_contiguous = g.head_stride() == g.head_dim;
    if (heads_contiguous && g.slot_stride() == heads_row) {  // Dense NHD: one copy.
      const size_t n = slots * heads_row * e;
      dir == Direction::kGather ? std::memcpy(canon, page_base, n)
                                : std::memcpy(page_base, canon, n);
      continue;
    }
    for (uint32_t s = 0; s < slots; ++s) {
      std::byte* slot_base = page_base + s * g.slot_stride() * e;
      std::byte* c = canon + s * heads_row * e;
      if (heads_contiguous) {
        const size_t n = heads_row * e;
        dir == Direction::kGather ? std::memcpy(c, slot_base, n) : std::memcpy(slot_base, c, n);
        continue;
      }
      for (uint32_t h = 0; h < g.kv_heads; ++h) {
        std::byte* p = slot_base + h * g.head_stride() * e;
        dir == Direction::kGather ? std::memcpy(c + h * row, p, row)
                                  : std::memcpy(p, c + h * row, row);
      }
    }
  }
}

void Transfer(const PagedLayer& layer, uint32_t block_tokens, std::span<const int32_t> table,
              Direction dir, size_t blocks, std::byte* const* block_ptrs) {
  const PagedGeometry& g = layer.geometry;
  const uint32_t ppb = (block_tokens + g.page_tokens - 1) / g.page_tokens;
  for (size_t b = 0; b < blocks; ++b) {
    for (uint32_t i = 0; i < ppb; ++i) {
      const int32_t page = table[b * ppb + i];
      if (page < 0) continue;
      const uint32_t first = i * g.page_tokens;
      const uint32_t slots = std::min(g.page_tokens, block_tokens - first);
      CopyPage(layer, dir, static_cast<uint64_t>(page), slots, first, block_tokens, block_ptrs[b]);
    }
  }
}

template <typename Byte>
Status CheckedTransfer(const PagedLayer& layer, uint32_t block_tokens,
                       std::span<const int32_t> table, std::span<const std::span<Byte>> blocks,
                       Direction dir) {
  std::vector<size_t> sizes;
  std::vector<std::byte*> ptrs;
  sizes.reserve(blocks.size());
  ptrs.reserve(blocks.size());
  for (const auto& b : blocks) {
    sizes.push_back(b.size());
    // A scatter only reads the blocks; Transfer shares one pointer type for both directions.
    ptrs.push_back(
        const_cast<std::byte*>(b.data()));  // NOLINT(cppcoreguidelines-pro-type-const-cast)
  }
  KV_RETURN_IF_ERROR(CheckTransfer(layer, block_tokens, table, blocks.size(), sizes));
  Transfer(layer, block_tokens, table, dir, blocks.size(), ptrs.data());
  return Status::Ok();
}

}  // namespace

Status GatherPages(const PagedLayer& layer, uint32_t block_tokens, std::span<const int32_t> table,
                   std::span<const std::span<std::byte>> blocks) {
  return CheckedTransfer(layer, block_tokens, table, blocks, Direction::kGather);
}

Status ScatterPages(const PagedLayer& layer, uint32_t block_tokens, std::span<const int32_t> table,
                    std::span<const std::span<const std::byte>> blocks) {
  return CheckedTransfer(layer, block_tokens, table, blocks, Direction::kScatter);
}

}  // namespace kvtier
