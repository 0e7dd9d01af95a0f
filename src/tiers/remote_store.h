// RemoteStore: the seam between the engine and a shared remote tier (Redis, Redis Cluster, or a
// fake in tests). Batch-first: every call takes a span of entries and reports a Status per entry,
// so one slow or dead node turns only its own entries into misses. docs/remote_tier.md has the
// design, the key names and the value format.
//
// Values: a remote value is exactly the SSD tier's record (docs/ssd_format.md §3) without the
// alignment padding: the 128-byte header (key, layout digest, codec id, sizes, CRC32C of payload
// and header) followed by the payload. segment_id and segment_offset have no meaning remotely and
// are written as 0. A value that fails any check (corrupt, truncated, for another key or another
// layout digest) is never returned: Get reports a miss and counts it.
//
// Keys: "<prefix>:{<64 hex digits of chunk_hash>}:<layer>". The chunk hash already covers the
// namespace digest and so the tenant salt (core/block_key.h): tenants never share a remote value
// unless they share a salt. The braces make the chunk hash the Redis Cluster hash tag, so all
// layers of one chunk live on one slot.
//
// Thread safety: implementations are safe for concurrent calls. Ownership: entries and the
// buffers they point to are borrowed for the duration of a call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/block_key.h"
#include "core/sha256.h"
#include "kvtier/result.h"
#include "tiers/circuit_breaker.h"
#include "tiers/ssd_record.h"

namespace kvtier {

// Bounds of the remote tier (kept beside the interface while it is the only user; they move to
// core/limits.h when the engine integrates the tier).
inline constexpr size_t kRemoteBatchMax = 4096;                   // Entries per call.
inline constexpr uint64_t kRemoteValueBytesMax = kBlockBytesMax;  // Payload per value.
inline constexpr size_t kRemoteKeyPrefixBytesMax = 64;
static_assert(kRemoteValueBytesMax <= UINT32_MAX);

// Writes one block. `status` is set by the call: Ok, or Unavailable / TimedOut / IoError.
struct RemotePut {
  BlockKey key;
  uint8_t codec_id = 0;                // Opaque; stored in the record header.
  uint32_t raw_bytes = 0;              // Size before encoding; stored in the record header.
  std::span<const std::byte> payload;  // Borrowed; at most kRemoteValueBytesMax bytes.
  uint64_t ttl_ms = 0;                 // 0 = no expiry (SET without PX).
  Status status;
};

// Reads one block into `dst`. On Ok, dst[0, payload_bytes) holds the verified payload. NotFound
// for a miss, Corruption for a value that failed verification (also a miss), InvalidArgument when
// dst is too small, Unavailable / TimedOut when the store could not answer.
struct RemoteGet {
  BlockKey key;
  std::span<std::byte> dst;  // Borrowed; the caller sizes it for the block.
  uint8_t codec_id = 0;
  uint32_t raw_bytes = 0;
  uint32_t payload_bytes = 0;
  Status status;
};

// Exists: `exists` is meaningful only when status is Ok.
struct RemoteExists {
  BlockKey key;
  bool exists = false;
  Status status;
};

// Delete: Ok whether or not the key was present.
struct RemoteDelete {
  BlockKey key;
  Status status;
};

// Counters since open. gets = hits + misses; corrupt and mismatched reads are also misses;
// errors and timeouts count entries (of any call) that failed without an answer from the store.
struct RemoteStoreStats {
  uint64_t gets = 0;
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t corrupt = 0;     // Values that failed their CRC, size or format checks.
  uint64_t mismatched = 0;  // Well-formed values for another key or another layout digest.
  // Sealed values refused: failed authentication (forged, moved from another key, damaged) or
  // named a key id the keyring does not hold. Also misses.
  uint64_t auth_failures = 0;
  uint64_t puts = 0;
  uint64_t errors = 0;    // Entries that failed with Unavailable or another error.
  uint64_t timeouts = 0;  // Entries that failed with TimedOut.
  uint64_t reconnects = 0;
  uint64_t breaker_trips = 0;
  uint32_t breakers_open = 0;                          // Nodes whose breaker is not closed now.
  BreakerState breaker_state = BreakerState::kClosed;  // The worst state over all nodes.
  uint64_t redirects_moved = 0;
  uint64_t redirects_ask = 0;
  uint64_t redirects_refused = 0;  // MOVED/ASK refused: a foreign host, or outside the slot map.
  // Endpoints named by CLUSTER SLOTS, MOVED or ASK whose host is neither a seed's nor allowed
  // (RedisStoreOptions::cluster_allowed_hosts): never connected to.
  uint64_t endpoints_refused = 0;
  uint64_t topology_refreshes = 0;
};

class RemoteStore {
 public:
  virtual ~RemoteStore() = default;
  // Each returns InvalidArgument (and touches no entry) for more than kRemoteBatchMax entries or
  // an oversized value; otherwise Ok, with the outcome of each entry in its `status`.
  virtual Status Put(std::span<RemotePut> entries) = 0;
  virtual Status Get(std::span<RemoteGet> entries) = 0;
  virtual Status Exists(std::span<RemoteExists> entries) = 0;
  virtual Status Delete(std::span<RemoteDelete> entries) = 0;
  virtual RemoteStoreStats Stats() const = 0;
  // What the store holds, for stores that know it and remove values themselves (the fs tier's
  // directory); a server that evicts on its own (Redis) reports zeros: not known.
  struct Usage {
    uint64_t capacity_bytes = 0;
    uint64_t used_bytes = 0;
    uint64_t removed = 0;  // Values the store removed for room or age, since open.
  };
  virtual Usage StoreUsage() const { return {}; }
};

// "<prefix>:{<hex chunk hash>}:<layer>".
std::string RemoteKeyName(std::string_view prefix, const BlockKey& key);

// Header fields of a remote value that are not its payload.
struct RemoteValueInfo {
  BlockKey key;
  Hash256 layout_digest{};
  uint8_t codec_id = 0;
  uint32_t raw_bytes = 0;
  uint64_t expiry_wall_us = 0;  // Informational; Redis enforces the TTL.
};

inline constexpr size_t kRemoteValueHeaderBytes = ssd::kRecordHeaderBytes;

// Encodes header + payload into *dst (resized to kRemoteValueHeaderBytes + payload.size()).
void EncodeRemoteValue(const RemoteValueInfo& info, std::span<const std::byte> payload,
                       std::vector<std::byte>* dst);
// Encodes only the header of that value (payload CRC included) into `dst`
// (kRemoteValueHeaderBytes bytes), for callers that send the payload from where it is.
void EncodeRemoteValueHeader(const RemoteValueInfo& info, std::span<const std::byte> payload,
                             std::span<std::byte> dst);

// Why a value was rejected, so the caller can count it.
enum class RemoteValueCheck : uint8_t { kOk = 0, kCorrupt = 1, kMismatched = 2 };

// Verifies `value` as the value of `key` written under `layout_digest`: header CRC and fields,
// zero placement, exact length, payload CRC, key and layout digest. On success *header is the
// decoded header and *payload spans the payload inside `value`. Corruption otherwise, with *check
// telling a damaged value from a foreign one.
Status VerifyRemoteValue(std::span<const std::byte> value, const BlockKey& key,
                         const Hash256& layout_digest, ssd::RecordHeader* header,
                         std::span<const std::byte>* payload, RemoteValueCheck* check);

// VerifyRemoteValue for a value received in two parts: its header (`header_bytes`, normally
// kRemoteValueHeaderBytes bytes) and its payload, each in its own buffer (RedisStore's get reads
// the payload straight into the caller's block). The same checks in the same order.
Status VerifyRemoteValueParts(std::span<const std::byte> header_bytes,
                              std::span<const std::byte> payload, const BlockKey& key,
                              const Hash256& layout_digest, ssd::RecordHeader* header,
                              RemoteValueCheck* check);

// The checks of VerifyRemoteValue that need only the header (its first kRemoteValueHeaderBytes
// bytes) and the value's total length; the payload CRC is then ssd::CheckPayload's. For values
// whose payload was decrypted straight into the caller's buffer.
Status VerifyRemoteHeader(std::span<const std::byte> header_bytes, uint64_t value_bytes,
                          const BlockKey& key, const Hash256& layout_digest,
                          ssd::RecordHeader* header, RemoteValueCheck* check);

}  // namespace kvtier
