#include "core/block_key.h"

#include <algorithm>
#include <charconv>
#include <string>
#include <system_error>
#include <utility>

#include "core/assert.h"
#include "core/coding.h"
#include "core/limits.h"

namespace kvtier {
namespace {

Status CheckSize(std::string_view what, size_t size, size_t max) {
  if (size <= max) return Status::Ok();
  return Status::InvalidArgument(std::string(what) + " is " + std::to_string(size) +
                                 " bytes, above the limit " + std::to_string(max));
}

// block_tokens for hashing alone: the same rule as KvLayout::Validate applies to it.
Status CheckBlockTokens(uint32_t block_tokens) {
  if (block_tokens >= kBlockTokensMin && block_tokens <= kBlockTokensMax &&
      block_tokens % kBlockTokensMultiple == 0) {
    return Status::Ok();
  }
  return Status::InvalidArgument("block_tokens is " + std::to_string(block_tokens) +
                                 ", not a multiple of " + std::to_string(kBlockTokensMultiple) +
                                 " in [" + std::to_string(kBlockTokensMin) + ", " +
                                 std::to_string(kBlockTokensMax) + "]");
}

Status CheckTokenCount(size_t count) {
  if (count <= kTokensPerCallMax) return Status::Ok();
  return Status::InvalidArgument(std::to_string(count) + " tokens, above the limit " +
                                 std::to_string(kTokensPerCallMax) + " per call");
}

std::string_view AsChars(const Hash256& h) {
  return {reinterpret_cast<const char*>(h.data()), h.size()};
}

}  // namespace

Result<std::string> EncodeNamespaceForDigest(const ModelIdentity& model, const KvLayout& layout,
                                             std::string_view salt,
                                             std::span<const std::string> extra_keys) {
  KV_RETURN_IF_ERROR(layout.Validate());
  KV_RETURN_IF_ERROR(CheckSize("model name", model.name.size(), kModelNameBytesMax));
  KV_RETURN_IF_ERROR(CheckSize("salt", salt.size(), kSaltBytesMax));
  if (extra_keys.size() > kExtraKeysMax) {
    return Status::InvalidArgument(std::to_string(extra_keys.size()) +
                                   " extra keys, above the limit " + std::to_string(kExtraKeysMax));
  }
  for (const std::string& key : extra_keys) {
    KV_RETURN_IF_ERROR(CheckSize("extra key", key.size(), kExtraKeyBytesMax));
  }
  std::string out;
  PutLengthPrefixed(&out, kNamespaceDigestTag);
  PutFixed32(&out, kNamespaceDigestVersion);
  PutLengthPrefixed(&out, model.name);
  out.append(AsChars(model.weights_digest));
  out.append(AsChars(LayoutDigest(layout)));
  PutLengthPrefixed(&out, salt);
  PutFixed32(&out, static_cast<uint32_t>(extra_keys.size()));
  for (const std::string& key : extra_keys) PutLengthPrefixed(&out, key);
  return out;
}

Result<Hash256> NamespaceDigest(const ModelIdentity& model, const KvLayout& layout,
                                std::string_view salt, std::span<const std::string> extra_keys) {
  KV_ASSIGN_OR_RETURN(std::string encoded,
                      EncodeNamespaceForDigest(model, layout, salt, extra_keys));
  return Sha256Of(encoded);
}

Hash256 ChunkHash(const Hash256& ns_digest, const Hash256& parent,
                  std::span<const uint32_t> chunk_tokens) {
  KV_CHECK(!chunk_tokens.empty());
  KV_CHECK(chunk_tokens.size() <= kBlockTokensMax);
  // Tokens are encoded field by field so the hash does not depend on the host's byte order.
  std::array<std::byte, size_t{kBlockTokensMax} * 4> buf;
  for (size_t i = 0; i < chunk_tokens.size(); ++i) EncodeFixed32(&buf[4 * i], chunk_tokens[i]);
  Sha256 sha;
  sha.Update(ns_digest.data(), ns_digest.size());
  sha.Update(parent.data(), parent.size());
  sha.Update(buf.data(), 4 * chunk_tokens.size());
  return sha.Finish();
}

Result<std::vector<Hash256>> ChunkHashes(const Hash256& ns_digest, std::span<const uint32_t> tokens,
                                         uint32_t block_tokens) {
  std::vector<Hash256> hashes;
  KV_RETURN_IF_ERROR(ExtendChunkHashes(ns_digest, tokens, block_tokens, &hashes));
  return hashes;
}

Status ExtendChunkHashes(const Hash256& ns_digest, std::span<const uint32_t> tokens,
                         uint32_t block_tokens, std::vector<Hash256>* hashes) {
  KV_RETURN_IF_ERROR(CheckBlockTokens(block_tokens));
  KV_RETURN_IF_ERROR(CheckTokenCount(tokens.size()));
  const size_t full_chunks = tokens.size() / block_tokens;
  if (hashes->size() > full_chunks) {
    return Status::InvalidArgument(std::to_string(hashes->size()) + " known hashes but only " +
                                   std::to_string(full_chunks) + " full chunks of tokens");
  }
  hashes->reserve(full_chunks);
  Hash256 parent = hashes->empty() ? Hash256{} : hashes->back();
  for (size_t i = hashes->size(); i < full_chunks; ++i) {
    parent = ChunkHash(ns_digest, parent, tokens.subspan(i * block_tokens, block_tokens));
    hashes->push_back(parent);
  }
  return Status::Ok();
}

ChainHasher::ChainHasher(const Hash256& ns_digest, uint32_t block_tokens, const Hash256& parent,
                         uint64_t chunks_done)
    : ns_digest_(ns_digest),
      block_tokens_(block_tokens),
      parent_(parent),
      chunks_done_(chunks_done) {
  pending_.reserve(block_tokens);
}

Result<ChainHasher> ChainHasher::Create(const Hash256& ns_digest, uint32_t block_tokens) {
  return Resume(ns_digest, block_tokens, Hash256{}, 0);
}

Result<ChainHasher> ChainHasher::Resume(const Hash256& ns_digest, uint32_t block_tokens,
                                        const Hash256& parent, uint64_t chunks_done) {
  KV_RETURN_IF_ERROR(CheckBlockTokens(block_tokens));
  if (chunks_done == 0 && parent != Hash256{}) {
    return Status::InvalidArgument("a chain with no chunk done must start from the zero parent");
  }
  return ChainHasher(ns_digest, block_tokens, parent, chunks_done);
}

Status ChainHasher::Append(std::span<const uint32_t> tokens, std::vector<Hash256>* out) {
  KV_RETURN_IF_ERROR(CheckTokenCount(tokens.size()));
  // Top up the pending chunk first, then hash whole chunks straight from `tokens`.
  size_t pos = 0;
  if (!pending_.empty()) {
    const size_t take = std::min(tokens.size(), block_tokens_ - pending_.size());
    pending_.insert(pending_.end(), tokens.begin(), tokens.begin() + static_cast<ptrdiff_t>(take));
    pos = take;
    if (pending_.size() < block_tokens_) return Status::Ok();
    parent_ = ChunkHash(ns_digest_, parent_, pending_);
    out->push_back(parent_);
    ++chunks_done_;
    pending_.clear();
  }
  while (tokens.size() - pos >= block_tokens_) {
    parent_ = ChunkHash(ns_digest_, parent_, tokens.subspan(pos, block_tokens_));
    out->push_back(parent_);
    ++chunks_done_;
    pos += block_tokens_;
  }
  pending_.insert(pending_.end(), tokens.begin() + static_cast<ptrdiff_t>(pos), tokens.end());
  KV_DCHECK(pending_.size() < block_tokens_);
  return Status::Ok();
}

std::string BlockKey::ToString() const { return ToHex(chunk_hash) + ":" + std::to_string(layer); }

std::array<std::byte, kBlockKeyEncodedBytes> EncodeBlockKey(const BlockKey& key) {
  std::array<std::byte, kBlockKeyEncodedBytes> out;
  for (size_t i = 0; i < key.chunk_hash.size(); ++i) out[i] = std::byte{key.chunk_hash[i]};
  EncodeFixed32(&out[key.chunk_hash.size()], key.layer);
  return out;
}

Result<BlockKey> DecodeBlockKey(std::span<const std::byte> bytes) {
  if (bytes.size() != kBlockKeyEncodedBytes) {
    return Status::Corruption("encoded block key is " + std::to_string(bytes.size()) +
                              " bytes, expected " + std::to_string(kBlockKeyEncodedBytes));
  }
  BlockKey key;
  for (size_t i = 0; i < key.chunk_hash.size(); ++i) {
    key.chunk_hash[i] = std::to_integer<uint8_t>(bytes[i]);
  }
  key.layer = DecodeFixed32(&bytes[key.chunk_hash.size()]);
  return key;
}

Result<BlockKey> ParseBlockKey(std::string_view text) {
  const size_t colon = text.find(':');
  BlockKey key;
  if (colon == std::string_view::npos || !FromHex(text.substr(0, colon), &key.chunk_hash)) {
    return Status::InvalidArgument("block key '" + std::string(text) +
                                   "' is not <64 hex digits>:<layer>");
  }
  const std::string_view layer = text.substr(colon + 1);
  const char* end = layer.data() + layer.size();
  auto [ptr, ec] = std::from_chars(layer.data(), end, key.layer);
  if (layer.empty() || ec != std::errc() || ptr != end) {
    return Status::InvalidArgument("block key '" + std::string(text) + "' has a bad layer");
  }
  return key;
}

size_t BlockKeyHash::operator()(const BlockKey& key) const noexcept {
  uint64_t x = 0;
  for (size_t i = 0; i < 8; ++i) x |= uint64_t{key.chunk_hash[i]} << (8 * i);
  // Spread the layer over all bits (golden-ratio multiply), then a splitmix64 finalizer so keys
  // of one chunk at neighbouring layers land in unrelated buckets.
  x ^= uint64_t{key.layer} * 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return static_cast<size_t>(x ^ (x >> 31));
}

}  // namespace kvtier
