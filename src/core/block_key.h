// Block keys: how kvtier names a block (the K and V of one chunk of tokens for one layer) in
// every tier, in every process and across versions.
//
//   ns_digest      = SHA-256(canonical encoding of model identity, layout digest, tenant salt,
//                            extra keys)
//   chunk_hash[i]  = SHA-256(ns_digest || chunk_hash[i-1] || tokens of chunk i as u32 LE),
//                    chunk_hash[-1] = 32 zero bytes
//   BlockKey       = (chunk_hash[i], layer)
//
// Why: a chunk's hash covers its whole prefix, so equal hashes mean equal prefixes and a lookup
// walks the chain until the first miss. The namespace digest puts the salt in every key, so two
// tenants never share a block unless they share a salt. The encodings are explicit and
// versioned in docs/key_format.md, with test vectors, so any language computes the same keys.
// Only full chunks are hashed: the partial tail of a sequence has no key.
//
// Thread safety: the free functions are pure; a ChainHasher is a value owned by one thread.
// Ownership: spans passed in are only read during the call.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/kv_layout.h"
#include "core/sha256.h"
#include "kvtier/result.h"

namespace kvtier {

// Which weights produced the KV. Both fields enter the namespace digest.
struct ModelIdentity {
  std::string name;          // e.g. "meta-llama/Llama-2-7b-hf"; at most kModelNameBytesMax.
  Hash256 weights_digest{};  // SHA-256 of the weights or of a revision id; zeros if unknown.
};

inline constexpr uint32_t kNamespaceDigestVersion = 1;
inline constexpr std::string_view kNamespaceDigestTag = "kvtier.ns";

// The exact bytes the namespace digest is taken over (all integers little-endian):
//   u32 len(tag) | tag | u32 version | u32 len(name) | name | weights_digest[32] |
//   layout_digest[32] | u32 len(salt) | salt | u32 count | count * (u32 len(key) | key)
// Extra keys (LoRA id, media hashes) keep their order. InvalidArgument when the layout is
// invalid or a size exceeds core/limits.h (model name, salt, extra key count or length).
Result<std::string> EncodeNamespaceForDigest(const ModelIdentity& model, const KvLayout& layout,
                                             std::string_view salt,
                                             std::span<const std::string> extra_keys);
// SHA-256 of EncodeNamespaceForDigest(...); the same errors.
Result<Hash256> NamespaceDigest(const ModelIdentity& model, const KvLayout& layout,
                                std::string_view salt, std::span<const std::string> extra_keys);

// One link of the chain: SHA-256(ns_digest || parent || chunk_tokens as u32 LE). The chunk must
// hold between 1 and kBlockTokensMax tokens (checked); callers pass exactly block_tokens.
Hash256 ChunkHash(const Hash256& ns_digest, const Hash256& parent,
                  std::span<const uint32_t> chunk_tokens);

// The hashes of every full chunk of `tokens`; a partial last chunk gets none. InvalidArgument
// for a bad block_tokens or more than kTokensPerCallMax tokens.
Result<std::vector<Hash256>> ChunkHashes(const Hash256& ns_digest, std::span<const uint32_t> tokens,
                                         uint32_t block_tokens);

// Extends `*hashes`, the hashes of the first hashes->size() chunks of `tokens`, to every full
// chunk of `tokens`, hashing only the new chunks. Equals ChunkHashes(ns, tokens, block_tokens)
// when the given hashes are right. InvalidArgument if *hashes has more entries than `tokens`
// has full chunks, and for the errors of ChunkHashes.
Status ExtendChunkHashes(const Hash256& ns_digest, std::span<const uint32_t> tokens,
                         uint32_t block_tokens, std::vector<Hash256>* hashes);

// A streaming form for decode: tokens arrive in pieces of any size, and a hash is produced each
// time a chunk fills. Holds at most block_tokens - 1 pending tokens.
class ChainHasher {
 public:
  // A new chain: parent is 32 zero bytes, no chunk done yet.
  static Result<ChainHasher> Create(const Hash256& ns_digest, uint32_t block_tokens);
  // Continues a chain of which `chunks_done` chunks are hashed, the last to `parent`. With
  // chunks_done == 0 the parent must be all zero.
  static Result<ChainHasher> Resume(const Hash256& ns_digest, uint32_t block_tokens,
                                    const Hash256& parent, uint64_t chunks_done);

  // Feeds `tokens` (at most kTokensPerCallMax); appends one hash to *out per completed chunk.
  Status Append(std::span<const uint32_t> tokens, std::vector<Hash256>* out);

  uint64_t chunks_done() const { return chunks_done_; }
  size_t pending_tokens() const { return pending_.size(); }
  // The last hash produced (or given to Resume); zeros before the first chunk.
  const Hash256& parent() const { return parent_; }

 private:
  ChainHasher(const Hash256& ns_digest, uint32_t block_tokens, const Hash256& parent,
              uint64_t chunks_done);

  Hash256 ns_digest_;
  uint32_t block_tokens_;
  Hash256 parent_;
  uint64_t chunks_done_;
  std::vector<uint32_t> pending_;  // Capacity block_tokens_, reserved at creation.
};

// The key of one block in every tier.
struct BlockKey {
  Hash256 chunk_hash{};
  uint32_t layer = 0;

  // "<64 hex digits>:<layer>".
  std::string ToString() const;

  friend bool operator==(const BlockKey&, const BlockKey&) = default;
};

// Encoded form: chunk_hash[32] | u32 layer LE.
inline constexpr size_t kBlockKeyEncodedBytes = 36;
std::array<std::byte, kBlockKeyEncodedBytes> EncodeBlockKey(const BlockKey& key);
// Corruption unless `bytes` is exactly kBlockKeyEncodedBytes long.
Result<BlockKey> DecodeBlockKey(std::span<const std::byte> bytes);
// Inverse of BlockKey::ToString; InvalidArgument on any other text.
Result<BlockKey> ParseBlockKey(std::string_view text);

// For unordered containers: the first 8 bytes of the hash (already uniform) mixed with the layer.
struct BlockKeyHash {
  size_t operator()(const BlockKey& key) const noexcept;
};

}  // namespace kvtier

template <>
struct std::hash<kvtier::BlockKey> {
  size_t operator()(const kvtier::BlockKey& key) const noexcept {
    return kvtier::BlockKeyHash{}(key);
  }
};
