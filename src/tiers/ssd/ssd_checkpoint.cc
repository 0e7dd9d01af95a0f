// Implements docs/ssd_format.md §4; see ssd_checkpoint.h.
#include "tiers/ssd/ssd_checkpoint.h"

#include <algorithm>
#include <cstring>

#include "core/assert.h"
#include "core/coding.h"
#include "core/crc32c.h"

namespace kvtier::ssd {
namespace {

void PutHash(std::string* dst, const Hash256& h) {
  dst->append(reinterpret_cast<const char*>(h.data()), h.size());
}

void PutBlockEntry(std::string* dst, const BlockKey& key, const IndexEntry& e) {
  PutHash(dst, key.chunk_hash);
  PutFixed32(dst, key.layer);
  PutFixed32(dst, e.payload_bytes);
  PutFixed32(dst, e.raw_bytes);
  PutFixed8(dst, e.codec_id);
  PutFixed8(dst, e.referenced ? kCheckpointFlagReferenced : 0);
  PutFixed16(dst, 0);
  PutFixed64(dst, e.segment_id);
  PutFixed32(dst, e.segment_offset);
  PutFixed32(dst, 0);
  PutFixed64(dst, e.sequence);
  PutFixed64(dst, e.expiry_wall_us);
}

bool GetBlockEntry(ByteReader* r, BlockKey* key, IndexEntry* e) {
  std::span<const std::byte> hash;
  uint8_t flags = 0;
  uint16_t reserved16 = 0;
  uint32_t reserved32 = 0;
  if (!r->GetBytes(32, &hash)) return false;
  std::memcpy(key->chunk_hash.data(), hash.data(), 32);
  if (!r->GetFixed32(&key->layer) || !r->GetFixed32(&e->payload_bytes) ||
      !r->GetFixed32(&e->raw_bytes) || !r->GetFixed8(&e->codec_id) || !r->GetFixed8(&flags) ||
      !r->GetFixed16(&reserved16) || !r->GetFixed64(&e->segment_id) ||
      !r->GetFixed32(&e->segment_offset) || !r->GetFixed32(&reserved32) ||
      !r->GetFixed64(&e->sequence) || !r->GetFixed64(&e->expiry_wall_us)) {
    return false;
  }
  e->referenced = (flags & kCheckpointFlagReferenced) != 0;
  return reserved16 == 0 && reserved32 == 0 && (flags & ~kCheckpointFlagReferenced) == 0;
}

void PutTombstoneEntry(std::string* dst, const BlockKey& key, const LiveTombstone& t) {
  PutHash(dst, key.chunk_hash);
  PutFixed32(dst, key.layer);
  PutFixed32(dst, 0);
  PutFixed64(dst, t.segment_id);
  PutFixed64(dst, t.sequence);
}

bool GetTombstoneEntry(ByteReader* r, BlockKey* key, LiveTombstone* t) {
  std::span<const std::byte> hash;
  uint32_t reserved = 0;
  if (!r->GetBytes(32, &hash)) return false;
  std::memcpy(key->chunk_hash.data(), hash.data(), 32);
  if (!r->GetFixed32(&key->layer) || !r->GetFixed32(&reserved) || !r->GetFixed64(&t->segment_id) ||
      !r->GetFixed64(&t->sequence)) {
    return false;
  }
  return reserved == 0;
}

}  // namespace

std::string EncodeCheckpoint(const Checkpoint& c) {
  std::string out;
  out.reserve(kCheckpointHeaderBytes + kCheckpointCacheIdBytes + c.segments.size() * kCheckpointSegmentEntryBytes +
              c.entries.size() * kCheckpointBlockEntryBytes +
              c.tombstones.size() * kCheckpointTombstoneEntryBytes + kCheckpointTrailerBytes);
  // One tombstone record per entry lives on disk, so the count is far below the u32 limit.
  KV_CHECK(c.tombstones.size() <= UINT32_MAX);
  PutFixed32(&out, kCheckpointMagic);
  PutFixed16(&out, kCheckpointVersion);
  PutFixed16(&out, 0);
  PutFixed32(&out, c.dir_count);
  PutFixed32(&out, static_cast<uint32_t>(c.tombstones.size()));
  PutFixed64(&out, c.segment_bytes);
  PutFixed64(&out, c.next_sequence);
  PutFixed64(&out, c.next_segment_id);
  PutFixed64(&out, c.written_wall_us);
  PutFixed32(&out, static_cast<uint32_t>(c.segments.size()));
  PutFixed32(&out, 0);
  PutFixed64(&out, c.entries.size());
  KV_DCHECK(out.size() == kCheckpointHeaderBytes);
  out.append(reinterpret_cast<const char*>(c.cache_id.data()), c.cache_id.size());
  for (const CheckpointSegment& s : c.segments) {
    PutFixed64(&out, s.segment_id);
    PutFixed32(&out, s.dir_index);
    PutFixed32(&out, 0);
    PutFixed64(&out, s.scan_from);
  }
  for (const auto& [key, entry] : c.entries) PutBlockEntry(&out, key, entry);
  for (const auto& [key, t] : c.tombstones) PutTombstoneEntry(&out, key, t);
  PutFixed32(&out, crc32c::Mask(crc32c::Value(out)));
#ifndef NDEBUG
  // Pair assertion: the checkpoint we write decodes to the one we meant.
  Result<Checkpoint> back = DecodeCheckpoint(
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(out.data()), out.size()));
  KV_DCHECK(back.ok());
  KV_DCHECK(back->entries.size() == c.entries.size());
  KV_DCHECK(back->tombstones.size() == c.tombstones.size());
#endif
  return out;
}

Result<CheckpointHeader> DecodeCheckpointHeader(std::span<const std::byte> header,
                                                uint64_t file_bytes) {
  if (header.size() < kCheckpointHeaderBytes) return Status::Corruption("checkpoint: short");
  ByteReader r(header.first(kCheckpointHeaderBytes));
  uint32_t magic = 0, reserved32 = 0;
  uint16_t reserved16 = 0;
  uint64_t ignored = 0;
  CheckpointHeader h;
  const bool whole = r.GetFixed32(&magic) && r.GetFixed16(&h.version) &&
                     r.GetFixed16(&reserved16) && r.GetFixed32(&h.dir_count) &&
                     r.GetFixed32(&h.tombstone_count) && r.GetFixed64(&h.segment_bytes) &&
                     r.GetFixed64(&ignored) && r.GetFixed64(&ignored) && r.GetFixed64(&ignored) &&
                     r.GetFixed32(&h.segment_count) && r.GetFixed32(&reserved32) &&
                     r.GetFixed64(&h.entry_count);
  KV_CHECK(whole);  // The span holds the whole header.
  if (magic != kCheckpointMagic) return Status::Corruption("checkpoint: bad magic");
  if (h.version < kCheckpointVersionMin || h.version > kCheckpointVersion) {
    return Status::Corruption("checkpoint: unknown version " + std::to_string(h.version));
  }
  // In version 1 the tombstone count was a reserved field.
  if (reserved16 != 0 || reserved32 != 0 || (h.version == 1 && h.tombstone_count != 0)) {
    return Status::Corruption("checkpoint: reserved field set");
  }
  h.prefix_bytes = kCheckpointHeaderBytes +
                   (h.version >= kCheckpointVersionCacheId ? kCheckpointCacheIdBytes : 0);
  // The counts must account for every byte, which also bounds every allocation of the decoder.
  // Each term is below 2^40 (u32 counts times small sizes) except the u64 entry count, which is
  // checked against the room left first, so no sum overflows.
  const uint64_t fixed = h.prefix_bytes + kCheckpointTrailerBytes +
                         uint64_t{h.segment_count} * kCheckpointSegmentEntryBytes +
                         uint64_t{h.tombstone_count} * kCheckpointTombstoneEntryBytes;
  if (file_bytes < fixed || h.entry_count > (file_bytes - fixed) / kCheckpointBlockEntryBytes ||
      fixed + h.entry_count * kCheckpointBlockEntryBytes != file_bytes) {
    return Status::Corruption("checkpoint: counts (" + std::to_string(h.segment_count) +
                              " segments, " + std::to_string(h.entry_count) + " entries, " +
                              std::to_string(h.tombstone_count) + " tombstones) do not match the " +
                              std::to_string(file_bytes) + "-byte file");
  }
  return h;
}

namespace {

// The header fields DecodeCheckpointHeader does not keep.
void GetHeaderFields(std::span<const std::byte> bytes, const CheckpointHeader& h, Checkpoint* c) {
  c->dir_count = h.dir_count;
  c->segment_bytes = h.segment_bytes;
  c->next_sequence = DecodeFixed64(bytes.data() + 24);
  c->next_segment_id = DecodeFixed64(bytes.data() + 32);
  c->written_wall_us = DecodeFixed64(bytes.data() + 40);
  if (h.version >= kCheckpointVersionCacheId) {
    for (size_t i = 0; i < kCheckpointCacheIdBytes; ++i) {
      c->cache_id[i] = DecodeFixed8(bytes.data() + kCheckpointHeaderBytes + i);
    }
  }
}

// The checks of one segment entry against the header (docs/ssd_format.md §4).
Status CheckSegmentEntry(const Checkpoint& c, const CheckpointSegment& s) {
  if (s.dir_index >= c.dir_count) {
    return Status::Corruption("checkpoint: segment " + std::to_string(s.segment_id) +
                              " in directory " + std::to_string(s.dir_index) + " of " +
                              std::to_string(c.dir_count));
  }
  if (s.segment_id == 0 || s.segment_id >= c.next_segment_id) {
    return Status::Corruption("checkpoint: segment id " + std::to_string(s.segment_id) +
                              " outside [1, next_segment_id)");
  }
  if (s.scan_from < kSegmentHeaderBytes || s.scan_from > c.segment_bytes ||
      s.scan_from % kDirectIoAlignment != 0) {
    return Status::Corruption("checkpoint: segment " + std::to_string(s.segment_id) +
                              " scan_from " + std::to_string(s.scan_from) +
                              " is not a 4 KiB-aligned offset in [4096, " +
                              std::to_string(c.segment_bytes) + "]");
  }
  return Status::Ok();
}

// The checks of one block entry: the record it names fits its segment. Overflow-safe: the
// payload is bounded first, so record_bytes() and the subtraction cannot wrap.
Status CheckBlockEntry(const Checkpoint& c, const IndexEntry& e) {
  if (e.payload_bytes > PayloadBytesMax(c.segment_bytes) || e.raw_bytes > kBlockBytesMax) {
    return Status::Corruption("checkpoint: entry sizes out of range (payload " +
                              std::to_string(e.payload_bytes) + ", raw " +
                              std::to_string(e.raw_bytes) + " bytes)");
  }
  if (e.segment_offset < kSegmentHeaderBytes || e.segment_offset % kDirectIoAlignment != 0 ||
      e.segment_offset > c.segment_bytes - e.record_bytes()) {
    return Status::Corruption("checkpoint: entry at offset " + std::to_string(e.segment_offset) +
                              " of segment " + std::to_string(e.segment_id) +
                              " does not fit the segment");
  }
  return Status::Ok();
}

// Decodes the segment entries from `r` and returns their sorted ids.
Result<std::vector<uint64_t>> GetSegments(ByteReader* r, Checkpoint* c) {
  for (CheckpointSegment& s : c->segments) {
    uint32_t reserved = 0;
    if (!r->GetFixed64(&s.segment_id) || !r->GetFixed32(&s.dir_index) ||
        !r->GetFixed32(&reserved) || !r->GetFixed64(&s.scan_from) || reserved != 0) {
      return Status::Corruption("checkpoint: bad segment entry");
    }
    KV_RETURN_IF_ERROR(CheckSegmentEntry(*c, s));
  }
  std::vector<uint64_t> ids;
  ids.reserve(c->segments.size());
  for (const CheckpointSegment& s : c->segments) ids.push_back(s.segment_id);
  std::sort(ids.begin(), ids.end());
  if (std::adjacent_find(ids.begin(), ids.end()) != ids.end()) {
    return Status::Corruption("checkpoint: a segment is listed twice");
  }
  return ids;
}

}  // namespace

Result<Checkpoint> DecodeCheckpoint(std::span<const std::byte> bytes) {
  KV_ASSIGN_OR_RETURN(const CheckpointHeader h, DecodeCheckpointHeader(bytes, bytes.size()));
  const size_t body = bytes.size() - kCheckpointTrailerBytes;
  if (crc32c::Mask(crc32c::Value(bytes.first(body))) != DecodeFixed32(bytes.data() + body)) {
    return Status::Corruption("checkpoint: crc mismatch");
  }
  Checkpoint c;
  GetHeaderFields(bytes, h, &c);
  if (c.segment_bytes < kSegmentBytesMin || c.segment_bytes > kSegmentBytesMax ||
      c.segment_bytes % kDirectIoAlignment != 0) {
    return Status::Corruption("checkpoint: bad segment_bytes " + std::to_string(c.segment_bytes));
  }
  // At most one past the last id (§1): anything larger would take the counter out of the range.
  if (c.next_segment_id < kSegmentIdMin || c.next_segment_id > kSegmentIdMax + 1) {
    return Status::Corruption("checkpoint: next_segment_id " + std::to_string(c.next_segment_id) +
                              " outside [1, 2^63]");
  }
  ByteReader r(bytes.subspan(h.prefix_bytes, body - h.prefix_bytes));
  c.segments.resize(h.segment_count);
  KV_ASSIGN_OR_RETURN(const std::vector<uint64_t> ids, GetSegments(&r, &c));
  c.entries.resize(h.entry_count);
  for (auto& [key, entry] : c.entries) {
    if (!GetBlockEntry(&r, &key, &entry)) return Status::Corruption("checkpoint: bad block entry");
    if (!std::binary_search(ids.begin(), ids.end(), entry.segment_id)) {
      return Status::Corruption("checkpoint: entry names an unlisted segment");
    }
    KV_RETURN_IF_ERROR(CheckBlockEntry(c, entry));
  }
  c.tombstones.resize(h.tombstone_count);
  for (auto& [key, t] : c.tombstones) {
    if (!GetTombstoneEntry(&r, &key, &t)) return Status::Corruption("checkpoint: bad tombstone");
    if (!std::binary_search(ids.begin(), ids.end(), t.segment_id)) {
      return Status::Corruption("checkpoint: tombstone names an unlisted segment");
    }
  }
  KV_DCHECK(r.remaining() == 0);
  return c;
}

uint64_t CheckpointBytesMax(uint64_t capacity_bytes, uint64_t segment_bytes, size_t dir_count) {
  KV_CHECK(segment_bytes >= kSegmentBytesMin);
  // Segments on disk: the capacity, one per directory over it while reclaiming, and as many
  // again for a capacity lowered since the checkpoint was written (a larger file then costs a
  // scan, never correctness).
  const uint64_t segments = 2 * (capacity_bytes / segment_bytes + dir_count);
  // Past this the cap applies anyway; below it no product can overflow.
  if (segments > kSsdCheckpointBytesMax / segment_bytes) return kSsdCheckpointBytesMax;
  const uint64_t blocks = segments * (segment_bytes / kDirectIoAlignment);
  const uint64_t max = kCheckpointHeaderBytes + kCheckpointCacheIdBytes + kCheckpointTrailerBytes +
                       segments * kCheckpointSegmentEntryBytes +
                       blocks * (kCheckpointBlockEntryBytes + kCheckpointTombstoneEntryBytes);
  return std::min(max, kSsdCheckpointBytesMax);
}

}  // namespace kvtier::ssd
