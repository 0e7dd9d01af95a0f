// Helpers shared by the SSD tier's tests: deterministic keys and payloads, and synchronous
// put/get wrappers that check what comes back. Test-only (included by *_test.cc files).
#pragma once

#include <cstring>
#include <optional>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/assert.h"
#include "tiers/ssd_tier.h"

namespace kvtier::ssd_test {

inline Hash256 Layout(uint8_t v = 0x42) {
  Hash256 h;
  h.fill(v);
  return h;
}

inline BlockKey Key(uint64_t i) {
  BlockKey k;
  for (size_t b = 0; b < 32; ++b) {
    k.chunk_hash[b] = static_cast<uint8_t>((i >> ((b % 8) * 8)) ^ (b * 37));
  }
  k.layer = static_cast<uint32_t>(i % 7);
  return k;
}

// Payload bytes of block i (deterministic, differs per block and version).
inline std::vector<std::byte> Payload(uint64_t i, size_t size, uint32_t version = 0) {
  std::vector<std::byte> p(size);
  uint64_t x = i * 0x9E3779B97F4A7C15ull + version + 1;
  for (size_t b = 0; b < size; ++b) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    p[b] = static_cast<std::byte>(x);
  }
  return p;
}

inline Status Put(SsdTier& tier, uint64_t first, uint64_t count, size_t size, uint64_t ttl_us = 0,
                  uint32_t version = 0) {
  std::vector<std::vector<std::byte>> payloads;
  std::vector<SsdBlockWrite> writes(count);
  for (uint64_t i = 0; i < count; ++i) payloads.push_back(Payload(first + i, size, version));
  for (uint64_t i = 0; i < count; ++i) {
    writes[i].key = Key(first + i);
    writes[i].layout_digest = Layout();
    writes[i].codec_id = 3;
    writes[i].raw_bytes = static_cast<uint32_t>(size * 2);
    writes[i].payload = payloads[i];
    writes[i].ttl_us = ttl_us;
  }
  KV_RETURN_IF_ERROR(tier.WriteBatchSync(writes));
  for (const SsdBlockWrite& w : writes) KV_RETURN_IF_ERROR(w.status);
  return Status::Ok();
}

// Reads block i; NotFound on a miss; Corruption if the bytes differ from Payload(i, ...).
inline Status Get(SsdTier& tier, uint64_t i, size_t size, uint32_t version = 0,
                  const Hash256& layout = Layout()) {
  Result<AlignedBuffer> buf = AlignedBuffer::Allocate(ssd::RecordBytesForPayload(size));
  KV_CHECK(buf.ok());
  SsdBlockRead r;
  r.key = Key(i);
  r.layout_digest = layout;
  r.buffer = buf->span();
  KV_RETURN_IF_ERROR(tier.ReadBatchSync(std::span(&r, 1)));
  KV_RETURN_IF_ERROR(r.status);
  const std::vector<std::byte> want = Payload(i, size, version);
  if (r.payload.size() != want.size() || r.codec_id != 3 || r.raw_bytes != size * 2 ||
      std::memcmp(r.payload.data(), want.data(), want.size()) != 0 ||
      r.payload.data() != buf->data() + ssd::kRecordPayloadOffset) {
    return Status::Corruption("payload differs");
  }
  return Status::Ok();
}

}  // namespace kvtier::ssd_test
