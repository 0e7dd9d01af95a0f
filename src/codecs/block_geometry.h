// BlockGeometry: the shape of one KV block as the codecs see it, and the element types they take.
//
// Why a codec-local struct: the codecs need only four numbers per block (tokens, kv_heads,
// head_dim, dtype), not a whole KvLayout (layers, digest). The element type is core's DType
// (core/kv_layout.h), whose values are stored in encoded headers.
//
// Layout taken in and put out by every codec (the canonical block layout of docs/codecs.md):
//   [k|v][token][kv_head][head_dim], little-endian elements of `dtype`.
// K is the first half of the block and V the second; within a half, the `kv_heads * head_dim`
// values of one token are contiguous ("channels" below). A latent block (kind kLatent, multi-head
// latent attention) has one plane, [token][head_dim] with kv_heads = 1, and no V half; the
// codecs LatentCodecOk names take it (MaxEncodedSize refuses the others).
//
// Thread safety: value types and pure functions.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/kv_layout.h"
#include "kvtier/status.h"

namespace kvtier::codecs {

// Codecs read and write little-endian elements with plain loads; the block layout is
// little-endian by definition, so a big-endian host would need byte swaps that do not exist yet.
static_assert(std::endian::native == std::endian::little, "codecs assume a little-endian host");

// Element type of a block: core's enum. Values are stored in encoded headers.
using DType = ::kvtier::DType;

// Bytes per element, or 0 for a value outside the enum.
size_t DTypeBytes(DType dtype);

struct BlockGeometry {
  uint32_t tokens = 0;    // Tokens in the block (the chunk size, 1..kBlockTokensMax).
  uint32_t kv_heads = 0;  // KV heads of one layer (1..kKvHeadsMax).
  uint32_t head_dim = 0;  // Elements per head (1..kHeadDimMax).
  DType dtype = DType::kF16;
  LayoutKind kind = LayoutKind::kKv;  // kLatent: one plane, no K/V split (kv_heads = 1).

  // Planes of the block: 2 (K and V), 1 for a latent block.
  size_t planes() const { return kind == LayoutKind::kLatent ? 1 : 2; }
  // Channels of one token in one half: kv_heads * head_dim.
  size_t channels() const { return size_t{kv_heads} * head_dim; }
  // Elements of one half (K or V): tokens * channels.
  size_t half_elements() const { return size_t{tokens} * channels(); }
  // Elements of the whole block (K and V, or the one latent plane).
  size_t elements() const { return planes() * half_elements(); }
  // Bytes of the raw (decoded) block.
  size_t raw_bytes() const { return elements() * DTypeBytes(dtype); }

  // InvalidArgument unless every dimension is within src/core/limits.h, the dtype is known and
  // the raw block is at most kBlockBytesMax.
  Status Validate() const;

  std::string ToString() const;

  friend bool operator==(const BlockGeometry&, const BlockGeometry&) = default;
};

}  // namespace kvtier::codecs
