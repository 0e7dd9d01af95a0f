// Layout: the KV geometry of a model as kvtier caches it, a public value type
// (docs/key_format.md). One block is K and V of one chunk of block_tokens tokens for one layer, in
// the canonical layout [k|v][token][kv_head][head_dim], little-endian elements of `dtype`.
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

  // K and V of one chunk for one layer: 2 * block_tokens * kv_heads * head_dim * element bytes.
  // Meaningful for a layout the engine accepted (no overflow then).
  constexpr uint64_t BlockBytes() const {
    return 2ull * block_tokens * kv_heads * head_dim * DTypeSizeBytes(dtype);
  }

  friend bool operator==(const Layout&, const Layout&) = default;
};

}  // namespace kvtier::api
