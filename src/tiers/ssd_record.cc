// Implements docs/ssd_format.md §2 and §3; see ssd_record.h.
#include "tiers/ssd_record.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "core/assert.h"
#include "core/coding.h"
#include "core/crc32c.h"

namespace kvtier::ssd {
namespace {

void EncodeHash(std::byte* dst, const Hash256& h) { std::memcpy(dst, h.data(), h.size()); }
Hash256 DecodeHash(const std::byte* src) {
  Hash256 h;
  std::memcpy(h.data(), src, h.size());
  return h;
}

uint32_t MaskedCrc(const std::byte* data, size_t n) { return crc32c::Mask(crc32c::Value(data, n)); }

}  // namespace

SealedAad SealedRecordAad(const BlockKey& key, const Hash256& layout_digest, uint8_t codec_id,
                          uint32_t raw_bytes, uint8_t flags, uint64_t expiry_wall_us) {
  SealedAad aad;
  std::byte* p = aad.bytes.data();
  const bool with_expiry = (flags & kRecordFlagSealedExpiry) != 0;
  // The label differs too, so that the two layouts can never be taken for each other.
  std::memcpy(p, with_expiry ? "kvtier-ssd-rec-2" : "kvtier-ssd-rec-1", 16);
  std::memcpy(p + 16, key.chunk_hash.data(), 32);
  EncodeFixed32(p + 48, key.layer);
  std::memcpy(p + 52, layout_digest.data(), 32);
  p[84] = std::byte{codec_id};
  EncodeFixed32(p + 85, raw_bytes);
  aad.size = kSealedRecordAadBytesV1;
  if (with_expiry) {
    EncodeFixed64(p + kSealedRecordAadBytesV1, expiry_wall_us);
    aad.size = kSealedRecordAadBytes;
  }
  return aad;
}

uint32_t PayloadCrc(std::span<const std::byte> payload) { return crc32c::Value(payload); }

void EncodeRecordHeader(const RecordHeader& h, std::span<std::byte> dst) {
  KV_CHECK(dst.size() >= kRecordHeaderBytes);
  KV_DCHECK((h.flags & ~kRecordFlagsKnown) == 0);
  std::byte* p = dst.data();
  EncodeFixed32(p + 0, kRecordMagic);
  EncodeFixed16(p + 4, kFormatVersion);
  EncodeFixed8(p + 6, h.codec_id);
  EncodeFixed8(p + 7, h.flags);
  EncodeHash(p + 8, h.layout_digest);
  EncodeHash(p + 40, h.key.chunk_hash);
  EncodeFixed32(p + 72, h.key.layer);
  EncodeFixed32(p + 76, h.raw_bytes);
  EncodeFixed32(p + 80, h.payload_bytes);
  EncodeFixed32(p + 84, 0);
  EncodeFixed64(p + 88, h.sequence);
  EncodeFixed64(p + 96, h.expiry_wall_us);
  EncodeFixed64(p + 104, h.segment_id);
  EncodeFixed32(p + 112, h.segment_offset);
  EncodeFixed32(p + 116, crc32c::Mask(h.payload_crc));
  EncodeFixed32(p + 120, 0);
  EncodeFixed32(p + kRecordHeaderCrcOffset, MaskedCrc(p, kRecordHeaderCrcOffset));
}

Result<RecordHeader> DecodeRecordHeader(std::span<const std::byte> src) {
  if (src.size() < kRecordHeaderBytes) return Status::Corruption("record header: short");
  const std::byte* p = src.data();
  if (DecodeFixed32(p + 0) != kRecordMagic) return Status::Corruption("record header: bad magic");
  if (DecodeFixed32(p + kRecordHeaderCrcOffset) != MaskedCrc(p, kRecordHeaderCrcOffset)) {
    return Status::Corruption("record header: crc mismatch");
  }
  if (DecodeFixed16(p + 4) != kFormatVersion) {
    return Status::Corruption("record header: unknown version");
  }
  if (DecodeFixed32(p + 84) != 0 || DecodeFixed32(p + 120) != 0) {
    return Status::Corruption("record header: reserved field set");
  }
  RecordHeader h;
  h.codec_id = DecodeFixed8(p + 6);
  h.flags = DecodeFixed8(p + 7);
  if ((h.flags & ~kRecordFlagsKnown) != 0) return Status::Corruption("record header: bad flags");
  h.layout_digest = DecodeHash(p + 8);
  h.key.chunk_hash = DecodeHash(p + 40);
  h.key.layer = DecodeFixed32(p + 72);
  h.raw_bytes = DecodeFixed32(p + 76);
  h.payload_bytes = DecodeFixed32(p + 80);
  h.sequence = DecodeFixed64(p + 88);
  h.expiry_wall_us = DecodeFixed64(p + 96);
  h.segment_id = DecodeFixed64(p + 104);
  h.segment_offset = DecodeFixed32(p + 112);
  h.payload_crc = crc32c::Unmask(DecodeFixed32(p + 116));
  if (h.sealed() && (h.tombstone() || h.payload_bytes < kSealedRecordOverheadBytes)) {
    return Status::Corruption("record header: sealed record without room for its seal");
  }
  if (h.expiry_sealed() && !h.sealed()) {
    return Status::Corruption("record header: sealed expiry on a record that is not sealed");
  }
  if (h.tombstone() && h.payload_bytes != 0) {
    return Status::Corruption("record header: tombstone with payload");
  }
  return h;
}

bool IsZeroHeader(std::span<const std::byte> src) {
  const size_t n = std::min(src.size(), kRecordHeaderBytes);
  return std::all_of(src.begin(), src.begin() + static_cast<std::ptrdiff_t>(n),
                     [](std::byte b) { return b == std::byte{0}; });
}

Status CheckRecordPlacement(const RecordHeader& h, uint64_t segment_id, uint64_t segment_offset,
                            uint64_t segment_bytes) {
  if (h.segment_id != segment_id || h.segment_offset != segment_offset) {
    return Status::Corruption("record: placed at a different segment or offset");
  }
  if (segment_offset < kSegmentHeaderBytes || segment_offset % kDirectIoAlignment != 0 ||
      h.payload_bytes > PayloadBytesMax(segment_bytes) ||
      segment_offset + RecordBytesForPayload(h.payload_bytes) > segment_bytes) {
    return Status::Corruption("record: does not fit its segment");
  }
  return Status::Ok();
}

Status CheckPayload(const RecordHeader& h, std::span<const std::byte> payload) {
  if (payload.size() != h.payload_bytes) return Status::Corruption("record: payload size");
  if (PayloadCrc(payload) != h.payload_crc) return Status::Corruption("record: payload crc");
  return Status::Ok();
}

void EncodeRecord(const RecordHeader& header, std::span<const std::byte> payload,
                  std::span<std::byte> dst) {
  KV_CHECK(header.payload_bytes == payload.size());
  KV_CHECK(dst.size() >= RecordBytesForPayload(payload.size()));
  if (!payload.empty()) {
    std::memcpy(dst.data() + kRecordPayloadOffset, payload.data(), payload.size());
  }
  EncodeRecordAroundPayload(header, dst);
}

void EncodeRecordAroundPayload(const RecordHeader& header, std::span<std::byte> dst) {
  const uint64_t record_bytes = RecordBytesForPayload(header.payload_bytes);
  KV_CHECK(dst.size() >= record_bytes);
  RecordHeader h = header;
  h.payload_crc = PayloadCrc(dst.subspan(kRecordPayloadOffset, header.payload_bytes));
  EncodeRecordHeader(h, dst);
  const size_t end = kRecordPayloadOffset + header.payload_bytes;
  std::memset(dst.data() + end, 0, record_bytes - end);
#ifndef NDEBUG
  // Pair assertion at the disk boundary: what we write decodes to what we meant.
  Result<RecordHeader> back = DecodeRecordHeader(dst);
  KV_DCHECK(back.ok());
  KV_DCHECK(*back == h);
#endif
}

Result<RecordHeader> DecodeRecord(std::span<const std::byte> record, uint64_t segment_id,
                                  uint64_t segment_offset, uint64_t segment_bytes,
                                  std::span<const std::byte>* payload) {
  KV_ASSIGN_OR_RETURN(RecordHeader h, DecodeRecordHeader(record));
  KV_RETURN_IF_ERROR(CheckRecordPlacement(h, segment_id, segment_offset, segment_bytes));
  if (record.size() < kRecordPayloadOffset + h.payload_bytes) {
    return Status::Corruption("record: truncated payload");
  }
  std::span<const std::byte> p = record.subspan(kRecordPayloadOffset, h.payload_bytes);
  KV_RETURN_IF_ERROR(CheckPayload(h, p));
  *payload = p;
  return h;
}

void EncodeSegmentHeader(const SegmentHeader& h, std::span<std::byte> dst) {
  KV_CHECK(dst.size() >= kSegmentHeaderBytes);
  std::memset(dst.data(), 0, kSegmentHeaderBytes);
  std::byte* p = dst.data();
  EncodeFixed32(p + 0, kSegmentMagic);
  EncodeFixed16(p + 4, kFormatVersion);
  EncodeFixed16(p + 6, 0);
  EncodeFixed64(p + 8, h.segment_id);
  EncodeFixed64(p + 16, h.segment_bytes);
  EncodeFixed64(p + 24, h.created_wall_us);
  EncodeFixed32(p + kSegmentHeaderCrcOffset, MaskedCrc(p, kSegmentHeaderCrcOffset));
}

Result<SegmentHeader> DecodeSegmentHeader(std::span<const std::byte> src) {
  if (src.size() < kSegmentHeaderEncodedBytes) return Status::Corruption("segment header: short");
  const std::byte* p = src.data();
  if (DecodeFixed32(p) != kSegmentMagic) return Status::Corruption("segment header: bad magic");
  if (DecodeFixed32(p + kSegmentHeaderCrcOffset) != MaskedCrc(p, kSegmentHeaderCrcOffset)) {
    return Status::Corruption("segment header: crc mismatch");
  }
  if (DecodeFixed16(p + 4) != kFormatVersion || DecodeFixed16(p + 6) != 0) {
    return Status::Corruption("segment header: unknown version");
  }
  SegmentHeader h;
  h.segment_id = DecodeFixed64(p + 8);
  h.segment_bytes = DecodeFixed64(p + 16);
  h.created_wall_us = DecodeFixed64(p + 24);
  return h;
}

std::string SegmentFileName(uint64_t segment_id) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%s%016" PRIx64 "%s", kSegmentPrefix, segment_id, kSegmentSuffix);
  return buf;
}

bool IsTempFileName(std::string_view name, std::string_view base) {
  if (name == base) return true;
  if (name.size() != base.size() + 17 || name.substr(0, base.size()) != base) return false;
  if (name[base.size()] != '.') return false;
  return std::all_of(name.begin() + static_cast<std::ptrdiff_t>(base.size()) + 1, name.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool ParseSegmentFileName(std::string_view name, uint64_t* segment_id) {
  const std::string_view prefix = kSegmentPrefix;
  const std::string_view suffix = kSegmentSuffix;
  if (name.size() != prefix.size() + 16 + suffix.size()) return false;
  if (name.substr(0, prefix.size()) != prefix) return false;
  if (name.substr(prefix.size() + 16) != suffix) return false;
  uint64_t v = 0;
  for (char c : name.substr(prefix.size(), 16)) {
    uint64_t digit;
    if (c >= '0' && c <= '9') {
      digit = static_cast<uint64_t>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      digit = static_cast<uint64_t>(c - 'a' + 10);
    } else {
      return false;
    }
    v = (v << 4) | digit;
  }
  *segment_id = v;
  return true;
}

}  // namespace kvtier::ssd
