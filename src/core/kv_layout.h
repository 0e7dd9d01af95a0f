// KvLayout: the geometry of a model's KV cache as kvtier stores it (layers, KV heads, head
// dimension, element type, tokens per block), the canonical byte layout of one block, and a
// stable digest of the geometry that enters every block key's namespace.
//
// Why: layout bugs are silent (a block read with the wrong geometry is still bytes), so the
// geometry is validated once, its strides are spelled out in one place, and its digest makes
// blocks of different geometries land in different key namespaces. The digest's byte-level
// encoding is specified in docs/key_format.md with test vectors.
//
// Canonical block layout (one chunk of `block_tokens` tokens, one layer), row-major:
//
//   [k|v][token][kv_head][head_dim]            little-endian elements of dtype
//   ne = {head_dim, kv_heads, block_tokens, 2}  number of elements, innermost first
//   nb = {elem, elem*head_dim, elem*head_dim*kv_heads, elem*head_dim*kv_heads*block_tokens}
//
// so the element (kv, token, head, dim) lives at byte
//   kv*kv_bytes + token*token_bytes + head*head_bytes + dim*elem_bytes
// with kv = 0 for K and 1 for V. Adapters convert to an engine's paged layout.
//
// A latent layout (kind = kLatent: multi-head latent attention, DeepSeek-V2/V3) caches one
// vector per token and layer, the compressed KV (kv_lora_rank elements) followed by the shared
// rope key (qk_rope_head_dim elements), with no K/V split. It is the same block with one plane:
//
//   [token][head_dim]                           kv_heads = 1, head_dim = kv_lora_rank + rope dim
//   ne = {head_dim, 1, block_tokens, 1}
//
// so everything above holds with kv = 0 only, and the block is half the size a K/V layout of the
// same numbers would have. Its digest differs from every K/V layout's (docs/key_format.md).
//
// Thread safety: KvLayout is a value type; the functions here are pure.
// Ownership: nothing is borrowed or owned beyond the value itself.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/sha256.h"
#include "kvtier/result.h"

namespace kvtier {

// Element type of K and V. Values are stored in keys and on disk: only ever append.
enum class DType : uint8_t {
  kF16 = 1,
  kBF16 = 2,
  kF32 = 3,
};

// 2 for kF16/kBF16, 4 for kF32, 0 for a value outside the enum.
uint32_t DTypeSizeBytes(DType dtype);
// "f16", "bf16", "f32", or "invalid" for a value outside the enum.
std::string_view DTypeName(DType dtype);
// Inverse of DTypeName; InvalidArgument for anything else.
Result<DType> ParseDType(std::string_view name);

// What one token's KV is. Values enter the layout digest: only ever append.
enum class LayoutKind : uint8_t {
  kKv = 0,      // K and V per KV head: the block [k|v][token][kv_head][head_dim].
  kLatent = 1,  // One latent vector per token (MLA): the block [token][head_dim], kv_heads = 1.
};

// "kv" or "latent", or "invalid" for a value outside the enum.
std::string_view LayoutKindName(LayoutKind kind);

// Byte strides of the canonical block layout [k|v][token][kv_head][head_dim].
struct BlockStrides {
  // From the K half to the V half: block_tokens * token_bytes (for a latent layout, the bytes of
  // its one plane).
  uint64_t kv_bytes = 0;
  uint64_t token_bytes = 0;  // From one token to the next: kv_heads * head_bytes.
  uint64_t head_bytes = 0;   // From one KV head to the next: head_dim * elem_bytes.
  uint64_t elem_bytes = 0;   // One element: DTypeSizeBytes(dtype).
};

struct KvLayout {
  uint32_t layers = 0;
  uint32_t kv_heads = 0;
  uint32_t head_dim = 0;
  DType dtype = DType::kF16;
  uint32_t block_tokens = 256;
  LayoutKind kind = LayoutKind::kKv;

  // OK when every field is within core/limits.h and every byte count fits: block_tokens is a
  // multiple of 16 in [16, 1024], block bytes and the bytes of one token across all layers are
  // at most kBlockBytesMax; a latent layout has kv_heads = 1. The message names the offending
  // field.
  Status Validate() const;

  // Planes of a block: 2 (K and V) for kKv, 1 for kLatent.
  uint32_t Planes() const { return kind == LayoutKind::kLatent ? 1 : 2; }

  // The byte counts below assume a valid layout (KV_DCHECKed); they cannot overflow then.
  BlockStrides Strides() const;
  // One chunk for one layer: Planes() * block_tokens * kv_heads * head_dim * elem.
  uint64_t BlockBytes() const;
  // One token for one layer: Planes() * kv_heads * head_dim * elem.
  uint64_t TokenBytesPerLayer() const;
  // One token across all layers: layers * TokenBytesPerLayer().
  uint64_t TokenBytes() const;
  // Byte offset of element (kv, token, head, dim) inside a block; kv is 0 for K, 1 for V (0 only
  // for a latent layout).
  uint64_t ElementOffsetBytes(uint32_t kv, uint32_t token, uint32_t head, uint32_t dim) const;

  // "layers=32,kv_heads=8,head_dim=128,dtype=f16,block_tokens=256", with ",kind=latent" after it
  // for a latent layout; ParseLayout reads it back.
  std::string ToString() const;

  friend bool operator==(const KvLayout&, const KvLayout&) = default;
};

// Parses "key=value" pairs separated by commas. Every key (layers, kv_heads, head_dim, dtype,
// block_tokens) must appear exactly once; numbers are decimal u32 without sign; "kind" (kv or
// latent, default kv) may appear once. The result is validated. Errors are InvalidArgument naming
// the key or the malformed item.
Result<KvLayout> ParseLayout(std::string_view text);

// The format version of the layout digest encoding (docs/key_format.md). A change of the
// encoding bumps it, which changes every digest and so every key: old blocks become misses.
inline constexpr uint32_t kLayoutDigestVersion = 1;
inline constexpr std::string_view kLayoutDigestTag = "kvtier.layout";

// The exact bytes the digest is taken over:
//   u32 len(tag) | tag | u32 version | u32 layers | u32 kv_heads | u32 head_dim |
//   u32 block_tokens | u8 dtype [| u8 kind]           (all integers little-endian)
// where the kind byte is present only for a latent layout: a K/V layout's bytes (and so every
// existing key) are those of version 1 before latent layouts existed.
std::string EncodeLayoutForDigest(const KvLayout& layout);
// SHA-256 of EncodeLayoutForDigest(layout). Callers validate the layout first.
Hash256 LayoutDigest(const KvLayout& layout);

}  // namespace kvtier
