// The CUDA backend's view of the paged layouts (core/paged_layout.h holds the index math, shared
// with the CPU gather/scatter in engine/paged_kv.cc): the transfer the gather/scatter kernels
// (paged_kernels.cu) run, and its host reference (paged_layout.cc), element by element.
//
// Thread safety: value types and pure functions. Compiles as CUDA (host and device) and as C++17.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/paged_layout.h"

namespace kvtier::cuda {

using kvtier::CanonicalIndex;
using kvtier::PagedGeometry;
using kvtier::PagedKeyIndex;
using kvtier::PagedLayoutKind;
using kvtier::PagedValueIndex;

// One gather (paged -> blocks) or scatter (blocks -> paged) of `block_count` kvtier blocks of one
// layer. Every pointer is a device address for the kernels (host addresses for the reference).
struct PagedTransfer {
  PagedGeometry geometry;
  std::byte* k_cache = nullptr;  // Base of the layer's keys (PagedKeyIndex), pages_total pages.
  std::byte* v_cache = nullptr;  // Base of its values (PagedValueIndex): k_cache + value_offset()
                                 // elements for the layouts with K and V in one page.
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
