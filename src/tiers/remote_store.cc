// See remote_store.h. The record codec itself is ssd_record.{h,cc}; this file only fixes the
// fields that have no meaning remotely and adds the checks a shared store needs (key and layout).
#include "tiers/remote_store.h"

#include <algorithm>
#include <cstring>

#include "core/assert.h"

namespace kvtier {

std::string RemoteKeyName(std::string_view prefix, const BlockKey& key) {
  std::string name;
  name.reserve(prefix.size() + 80);
  name.append(prefix);
  name.append(":{");
  name.append(ToHex(key.chunk_hash));
  name.append("}:");
  name.append(std::to_string(key.layer));
  return name;
}

namespace {

ssd::RecordHeader RemoteHeader(const RemoteValueInfo& info, std::span<const std::byte> payload) {
  KV_CHECK(payload.size() <= kRemoteValueBytesMax);
  ssd::RecordHeader h;
  h.codec_id = info.codec_id;
  h.layout_digest = info.layout_digest;
  h.key = info.key;
  h.raw_bytes = info.raw_bytes;
  h.payload_bytes = static_cast<uint32_t>(payload.size());
  h.expiry_wall_us = info.expiry_wall_us;
  h.payload_crc = ssd::PayloadCrc(payload);
  return h;
}

}  // namespace

void EncodeRemoteValueHeader(const RemoteValueInfo& info, std::span<const std::byte> payload,
                             std::span<std::byte> dst) {
  KV_CHECK(dst.size() == kRemoteValueHeaderBytes);
  ssd::EncodeRecordHeader(RemoteHeader(info, payload), dst);
}

void EncodeRemoteValue(const RemoteValueInfo& info, std::span<const std::byte> payload,
                       std::vector<std::byte>* dst) {
  const ssd::RecordHeader h = RemoteHeader(info, payload);
  dst->resize(kRemoteValueHeaderBytes + payload.size());
  ssd::EncodeRecordHeader(h, *dst);
  if (!payload.empty()) {
    std::memcpy(dst->data() + kRemoteValueHeaderBytes, payload.data(), payload.size());
  }
#ifndef NDEBUG
  // Pair assertion at the network boundary: what we send verifies as what we meant.
  ssd::RecordHeader back;
  std::span<const std::byte> back_payload;
  RemoteValueCheck check;
  KV_DCHECK(
      VerifyRemoteValue(*dst, info.key, info.layout_digest, &back, &back_payload, &check).ok());
  KV_DCHECK(back == h);
#endif
}

Status VerifyRemoteHeader(std::span<const std::byte> header_bytes, uint64_t value_bytes,
                          const BlockKey& key, const Hash256& layout_digest,
                          ssd::RecordHeader* header, RemoteValueCheck* check) {
  *check = RemoteValueCheck::kCorrupt;
  Result<ssd::RecordHeader> h = ssd::DecodeRecordHeader(header_bytes);
  if (!h.ok()) return h.status();
  if (h->segment_id != 0 || h->segment_offset != 0 || h->sequence != 0 || h->tombstone()) {
    return Status::Corruption("remote value: header fields not used remotely are set");
  }
  if (value_bytes != kRemoteValueHeaderBytes + uint64_t{h->payload_bytes}) {
    return Status::Corruption("remote value: length does not match payload_bytes");
  }
  if (h->key != key) {
    *check = RemoteValueCheck::kMismatched;
    return Status::Corruption("remote value: written for another key");
  }
  if (h->layout_digest != layout_digest) {
    *check = RemoteValueCheck::kMismatched;
    return Status::Corruption("remote value: written under another layout digest");
  }
  *check = RemoteValueCheck::kOk;
  *header = *h;
  return Status::Ok();
}

Status VerifyRemoteValue(std::span<const std::byte> value, const BlockKey& key,
                         const Hash256& layout_digest, ssd::RecordHeader* header,
                         std::span<const std::byte>* payload, RemoteValueCheck* check) {
  const size_t head_bytes = std::min(value.size(), kRemoteValueHeaderBytes);
  const std::span<const std::byte> p = value.subspan(head_bytes);
  KV_RETURN_IF_ERROR(
      VerifyRemoteValueParts(value.first(head_bytes), p, key, layout_digest, header, check));
  *payload = p;
  return Status::Ok();
}

Status VerifyRemoteValueParts(std::span<const std::byte> header_bytes,
                              std::span<const std::byte> payload, const BlockKey& key,
                              const Hash256& layout_digest, ssd::RecordHeader* header,
                              RemoteValueCheck* check) {
  *check = RemoteValueCheck::kCorrupt;
  ssd::RecordHeader h;
  RemoteValueCheck header_check = RemoteValueCheck::kCorrupt;
  // The payload CRC is checked before the key and digest, so damage counts as corrupt even in
  // a value that also names another key.
  const Status head = VerifyRemoteHeader(header_bytes, header_bytes.size() + payload.size(), key,
                                         layout_digest, &h, &header_check);
  if (!head.ok() && header_check == RemoteValueCheck::kCorrupt) return head;
  Result<ssd::RecordHeader> decoded = ssd::DecodeRecordHeader(header_bytes);
  KV_CHECK(decoded.ok());  // VerifyRemoteHeader decoded it.
  KV_RETURN_IF_ERROR(ssd::CheckPayload(*decoded, payload));
  *check = header_check;
  if (!head.ok()) return head;
  *header = h;
  return Status::Ok();
}

}  // namespace kvtier
