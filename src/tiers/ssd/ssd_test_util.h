// Helpers shared by the SSD tier's tests: deterministic keys and payloads, and synchronous
// put/get wrappers that check what comes back. Test-only (included by *_test.cc files).
#pragma once

#include <cstring>
#include <optional>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/assert.h"
#include "tiers/ssd/ssd_tier.h"

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

// Put, with the payloads of the blocks where `in_place(i)` says so laid out in record buffers
// (SsdBlockWrite::record: 4 KiB-aligned, the payload at kRecordPayloadOffset), as the engine
// encodes them. `misalign(i)`: that record buffer starts 64 bytes past an aligned address.
template <typename InPlace, typename Misalign>
Status PutInPlace(SsdTier& tier, uint64_t first, uint64_t count, size_t size, InPlace in_place,
                  Misalign misalign, uint64_t ttl_us = 0, uint32_t version = 0) {
  std::vector<std::vector<std::byte>> payloads;
  std::vector<AlignedBuffer> records;
  std::vector<SsdBlockWrite> writes(count);
  for (uint64_t i = 0; i < count; ++i) payloads.push_back(Payload(first + i, size, version));
  for (uint64_t i = 0; i < count; ++i) {
    writes[i].key = Key(first + i);
    writes[i].layout_digest = Layout();
    writes[i].codec_id = 3;
    writes[i].raw_bytes = static_cast<uint32_t>(size * 2);
    writes[i].payload = payloads[i];
    writes[i].ttl_us = ttl_us;
    if (!in_place(first + i)) continue;
    const size_t shift = misalign(first + i) ? 64 : 0;
    const size_t bytes = ssd::RecordBytesForPayload(size);
    KV_ASSIGN_OR_RETURN(AlignedBuffer b, AlignedBuffer::Allocate(bytes + kDirectIoAlignment));
    writes[i].record = b.span().subspan(shift, bytes);
    std::byte* at = writes[i].record.data() + ssd::kRecordPayloadOffset;
    std::memcpy(at, payloads[i].data(), size);
    writes[i].payload = std::span<const std::byte>(at, size);
    records.push_back(std::move(b));
  }
  KV_RETURN_IF_ERROR(tier.WriteBatchSync(writes));
  for (const SsdBlockWrite& w : writes) KV_RETURN_IF_ERROR(w.status);
  return Status::Ok();
}

// Writes blocks [first, first + count) with Payload(i, size, version), copied by the tier.
inline Status Put(SsdTier& tier, uint64_t first, uint64_t count, size_t size, uint64_t ttl_us = 0,
                  uint32_t version = 0) {
  const auto no = [](uint64_t) { return false; };
  return PutInPlace(tier, first, count, size, no, no, ttl_us, version);
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
