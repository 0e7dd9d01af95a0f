// Layout: the KV geometry of a model as kvtier caches it, a public value type
// (docs/key_format.md). One block is K and V of one chunk of block_tokens tokens for one layer, in
// the canonical layout [k|v][token][kv_head][head_dim], little-endian elements of `dtype`; for a
// latent layout (multi-head latent attention: DeepSeek-V2/V3), the one latent vector per token,
// [token][head_dim] with kv_heads = 1.
//
// Why a copy of the engine's internal layout type: this header is installed and may include only
// other installed headers and the standard library. The engine validates a Layout when it opens
// (Engine::Open returns InvalidArgument naming the field).
//
// Thread safety: a value type.
#pragma once

#include <cstdint>

namespace kvtier::api {

// Element types; the values are those of the C API's kvtier_dtype_t.
enum class DType : uint8_t {
  kF16 = 1,
  kBF16 = 2,
  kF32 = 3,
};

// What one token's KV is; the values are those of the C API's kvtier_layout_kind_t.
enum class LayoutKind : uint8_t {
  kKv = 0,      // K and V per KV head: the block [k|v][token][kv_head][head_dim].
  kLatent = 1,  // One latent vector per token (MLA): the block [token][head_dim], kv_heads = 1.
};

// Bytes of one element: 2 for kF16 and kBF16, 4 for kF32 (0 for a value outside the enum).
constexpr uint32_t DTypeSizeBytes(DType dtype) {
  switch (dtype) {
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kF32:
      return 4;
  }
  return 0;
}

struct Layout {
  uint32_t layers = 0;
  uint32_t kv_heads = 0;
  uint32_t head_dim = 0;
  DType dtype = DType::kF16;
  uint32_t block_tokens = 256;  // A multiple of 16 in [16, 1024].
  LayoutKind kind = LayoutKind::kKv;  // kLatent: kv_heads must be 1; it enters every key.

  // One chunk for one layer: 2 planes (K and V), or 1 for a latent layout, of
  // block_tokens * kv_heads * head_dim elements. Meaningful for a layout the engine accepted (no
  // overflow then).
  constexpr uint64_t BlockBytes() const {
    const uint64_t planes = kind == LayoutKind::kLatent ? 1 : 2;
    return planes * block_tokens * kv_heads * head_dim * DTypeSizeBytes(dtype);
  }

  friend bool operator==(const Layout&, const Layout&) = default;
};

}  // namespace kvtier::api
