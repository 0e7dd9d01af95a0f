// Encoding and decoding of the SSD tier's segment header blocks and records, byte for byte as
// docs/ssd_format.md specifies. Pure functions over caller-owned buffers: the log, recovery,
// the tools and the tests all go through these, so there is exactly one codec.
//
// Why separate: the codec is the disk boundary. Every decode validates everything it can (magic,
// version, reserved fields, CRCs, bounds) and reports Corruption; callers never see a header
// that did not pass. Encoders assert (in debug builds) that decoding what they wrote gives back
// the same value, so corruption is caught on both sides.
//
// Thread safety: pure functions. Ownership: spans are borrowed for the duration of the call.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/block_key.h"
#include "core/sha256.h"
#include "kvtier/result.h"
#include "tiers/ssd_format.h"

namespace kvtier::ssd {

// The decoded fields of a record header (docs/ssd_format.md §3). CRCs are held unmasked.
struct RecordHeader {
  uint8_t codec_id = 0;
  uint8_t flags = 0;
  Hash256 layout_digest{};
  BlockKey key;
  uint32_t raw_bytes = 0;
  uint32_t payload_bytes = 0;
  uint64_t sequence = 0;
  uint64_t expiry_wall_us = 0;  // 0 = never expires.
  uint64_t segment_id = 0;
  uint32_t segment_offset = 0;
  uint32_t payload_crc = 0;  // CRC32C of the payload, unmasked.

  bool tombstone() const { return (flags & kRecordFlagTombstone) != 0; }
  bool sealed() const { return (flags & kRecordFlagSealed) != 0; }
  bool expiry_sealed() const { return (flags & kRecordFlagSealedExpiry) != 0; }
  friend bool operator==(const RecordHeader&, const RecordHeader&) = default;
};

// Bytes a record with `payload_bytes` of payload occupies on disk: header plus payload, rounded
// up to 4096.
constexpr uint64_t RecordBytesForPayload(uint64_t payload_bytes) {
  return (kRecordHeaderBytes + payload_bytes + kDirectIoAlignment - 1) &
         ~uint64_t{kDirectIoAlignment - 1};
}

// The largest payload a segment of `segment_bytes` can hold in one record.
constexpr uint64_t PayloadBytesMax(uint64_t segment_bytes) {
  return segment_bytes - kSegmentHeaderBytes - kRecordHeaderBytes;
}

uint32_t PayloadCrc(std::span<const std::byte> payload);

// The associated data that binds a sealed record's payload to the block it holds, and (with
// kRecordFlagSealedExpiry in `flags`) to its expiry: docs/ssd_format.md §3, "Sealed records".
struct SealedAad {
  std::array<std::byte, kSealedRecordAadBytes> bytes{};
  size_t size = 0;
  std::span<const std::byte> span() const { return std::span(bytes).first(size); }
};
SealedAad SealedRecordAad(const BlockKey& key, const Hash256& layout_digest, uint8_t codec_id,
                          uint32_t raw_bytes, uint8_t flags, uint64_t expiry_wall_us);

// Writes the 128-byte header (computing the header CRC) into dst[0, 128). `header.payload_crc`
// must already be set.
void EncodeRecordHeader(const RecordHeader& header, std::span<std::byte> dst);

// Decodes and checks dst[0, 128): magic, version, flags, reserved fields and header CRC.
// Corruption on any mismatch. Does not check placement or the payload.
Result<RecordHeader> DecodeRecordHeader(std::span<const std::byte> src);

// True when the 128 header bytes are all zero: the unwritten tail of a segment.
bool IsZeroHeader(std::span<const std::byte> src);

// Corruption unless the record claims to be at (segment_id, segment_offset) and fits in a
// segment of `segment_bytes`.
Status CheckRecordPlacement(const RecordHeader& header, uint64_t segment_id,
                            uint64_t segment_offset, uint64_t segment_bytes);

// Corruption unless CRC32C(payload) matches and payload.size() == header.payload_bytes.
Status CheckPayload(const RecordHeader& header, std::span<const std::byte> payload);

// Encodes a whole record into dst: header (payload CRC computed here), the payload, and zero
// padding up to RecordBytesForPayload(payload.size()) bytes, which dst must hold.
// `header.payload_bytes` must equal payload.size().
void EncodeRecord(const RecordHeader& header, std::span<const std::byte> payload,
                  std::span<std::byte> dst);

// EncodeRecord for a payload that is already in place at dst[kRecordPayloadOffset,
// + header.payload_bytes): the writer encoded it there, so the record is written without copying
// it. Writes the header (payload CRC computed here) and the zero padding around it.
void EncodeRecordAroundPayload(const RecordHeader& header, std::span<std::byte> dst);

// Decodes and fully verifies a record read into `record` (which holds at least the header and
// the payload) found at (segment_id, segment_offset). On success *payload spans the payload
// inside `record`.
Result<RecordHeader> DecodeRecord(std::span<const std::byte> record, uint64_t segment_id,
                                  uint64_t segment_offset, uint64_t segment_bytes,
                                  std::span<const std::byte>* payload);

// The segment header block (docs/ssd_format.md §2).
struct SegmentHeader {
  uint64_t segment_id = 0;
  uint64_t segment_bytes = 0;
  uint64_t created_wall_us = 0;
  friend bool operator==(const SegmentHeader&, const SegmentHeader&) = default;
};

// Fills dst[0, kSegmentHeaderBytes) (the header, then zeros).
void EncodeSegmentHeader(const SegmentHeader& header, std::span<std::byte> dst);
// Checks magic, version, reserved and CRC of src[0, 36); Corruption otherwise.
Result<SegmentHeader> DecodeSegmentHeader(std::span<const std::byte> src);

// Whether `segment_id` is one a cache gives out: [kSegmentIdMin, kSegmentIdMax].
constexpr bool SegmentIdInRange(uint64_t segment_id) {
  return segment_id >= kSegmentIdMin && segment_id <= kSegmentIdMax;
}

// "seg-<16 hex digits>.kvs".
std::string SegmentFileName(uint64_t segment_id);
// Parses a name made by SegmentFileName; false for any other name.
bool ParseSegmentFileName(std::string_view name, uint64_t* segment_id);
// True for the temporaries written beside `base` (kCheckpointTempName, kManifestTempName):
// "<base>.<16 hex digits>" as UniqueTempPath makes them, and `base` itself, the fixed name
// earlier versions used.
bool IsTempFileName(std::string_view name, std::string_view base);

}  // namespace kvtier::ssd
