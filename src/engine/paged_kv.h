// Gather and scatter between an inference engine's paged KV cache in host memory and kvtier's
// canonical blocks: the CPU side of core/paged_layout.h (the CUDA kernels run the same index math
// on device memory), and the check that turns an engine's layer tensor into a PagedLayer.
//
// An engine shows each attention layer's cache as one tensor: a shape, element strides and a data
// address. DescribePagedLayer matches that description against the layouts kvtier knows for the
// named backend and returns the geometry, or InvalidArgument naming what does not match: a
// layout kvtier does not know is refused up front, never copied wrongly.
//
// Thread safety: pure functions. Gathers and scatters of disjoint pages or blocks may run
// concurrently; the caller keeps the pages and blocks alive and unchanged during a call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/paged_layout.h"
#include "kvtier/result.h"
#include "kvtier/status.h"

namespace kvtier {

// One layer of a paged cache in host memory.
struct PagedLayer {
  PagedGeometry geometry;
  std::byte* k = nullptr;  // Element (0, 0, 0, 0) of the keys.
  std::byte* v = nullptr;  // Element (0, 0, 0, 0) of the values.
  uint64_t pages = 0;
};

// An engine's layer tensor as the engine shows it.
struct PagedTensor {
  std::byte* data = nullptr;  // Address of element [0, 0, ...].
  uint64_t bytes = 0;         // Bytes addressable from `data` (the tensor's storage from there).
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // In elements.
  uint32_t elem_bytes = 0;
};

// The backends whose layer tensors DescribePagedLayer reads, and how each shows a layer:
//   "vllm_cpu"     vLLM's CPU attention, [P, H, N, 2C] meaning [P][H][2][N][C]     -> kVllmCpu
//                  (byte for byte: the attention ISA decides which element of K is which)
//   "vllm_cpu_vec" the same tensor as vLLM's CPU attention with its "vec" ISA writes it: per
//                  page and head K [C][N], then V [N][C]                      -> kVllmCpuVec
//   "vllm_packed"  vLLM >= 0.30 GPU backends, [P, H, N, 2C] with K and V side by side in the
//                  content, physical order NHD or HND from the strides       -> kPackedNhd/Hnd
//   "flash"        FlashAttention before vLLM 0.30, [2, P, N, H, C]              -> kFlash/Hnd
//   "flashinfer"   FlashInfer before vLLM 0.30, [P, 2, N, H, C]        -> kFlashInferNhd/Hnd
//   "vllm_mla"     vLLM's MLA backends, [P, N, C] or (CPU_MLA) [P, 1, N, C]: H = 1, one latent
//                  vector per token
//                                                                            -> kLatent
// (P pages, N page_tokens, H kv_heads, C head_dim.) Pages may lie further apart than dense (layers
// interleaved in a page); every other stride must be the layout's own.
Result<PagedLayer> DescribePagedLayer(std::string_view backend, const PagedTensor& tensor,
                                      uint32_t kv_heads, uint32_t head_dim);

// Copies pages into canonical blocks (gather) or canonical blocks into pages (scatter) for one
// layer. Block b covers tokens [0, block_tokens) through pages table[b * ppb + i], i < ppb =
// ceil(block_tokens / page_tokens); a negative entry is "no page" (gather leaves those tokens of
// the block untouched, scatter skips them). Each block span is the layer's canonical block of
// block_tokens tokens (planes * block_tokens * kv_heads * head_dim elements: 2 planes, K and V,
// or 1 for kLatent). InvalidArgument, with
// nothing copied, when a page number is out of range or a size does not match.
Status GatherPages(const PagedLayer& layer, uint32_t block_tokens, std::span<const int32_t> table,
                   std::span<const std::span<std::byte>> blocks);
Status ScatterPages(const PagedLayer& layer, uint32_t block_tokens, std::span<const int32_t> table,
                    std::span<const std::span<const std::byte>> blocks);

}  // namespace kvtier
