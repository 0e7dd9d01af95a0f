// Implements docs/ssd_format.md §4; see ssd_checkpoint.h.
#include "tiers/ssd_checkpoint.h"

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
  out.reserve(kCheckpointHeaderBytes + c.segments.size() * kCheckpointSegmentEntryBytes +
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

Result<Checkpoint> DecodeCheckpoint(std::span<const std::byte> bytes) {
  if (bytes.size() < kCheckpointHeaderBytes + kCheckpointTrailerBytes) {
    return Status::Corruption("checkpoint: short");
  }
  const size_t body = bytes.size() - kCheckpointTrailerBytes;
  if (crc32c::Mask(crc32c::Value(bytes.first(body))) != DecodeFixed32(bytes.data() + body)) {
    return Status::Corruption("checkpoint: crc mismatch");
  }
  ByteReader r(bytes.first(body));
  uint32_t magic = 0, tombstone_count = 0, reserved32b = 0, segment_count = 0;
  uint16_t version = 0, reserved16 = 0;
  uint64_t entry_count = 0;
  Checkpoint c;
  if (!r.GetFixed32(&magic) || !r.GetFixed16(&version) || !r.GetFixed16(&reserved16) ||
      !r.GetFixed32(&c.dir_count) || !r.GetFixed32(&tombstone_count) ||
      !r.GetFixed64(&c.segment_bytes) || !r.GetFixed64(&c.next_sequence) ||
      !r.GetFixed64(&c.next_segment_id) || !r.GetFixed64(&c.written_wall_us) ||
      !r.GetFixed32(&segment_count) || !r.GetFixed32(&reserved32b) || !r.GetFixed64(&entry_count)) {
    return Status::Corruption("checkpoint: short header");
  }
  if (magic != kCheckpointMagic) return Status::Corruption("checkpoint: bad magic");
  if (version < kCheckpointVersionMin || version > kCheckpointVersion) {
    return Status::Corruption("checkpoint: unknown version");
  }
  // In version 1 the tombstone count was a reserved field.
  if (reserved16 != 0 || reserved32b != 0 || (version == 1 && tombstone_count != 0)) {
    return Status::Corruption("checkpoint: reserved field set");
  }
  // The sizes must account for every byte, which also bounds the allocations below.
  const uint64_t expect = uint64_t{segment_count} * kCheckpointSegmentEntryBytes +
                          uint64_t{tombstone_count} * kCheckpointTombstoneEntryBytes;
  if (entry_count > r.remaining() / kCheckpointBlockEntryBytes ||
      expect + entry_count * kCheckpointBlockEntryBytes != r.remaining()) {
    return Status::Corruption("checkpoint: sizes do not match the file");
  }
  c.segments.resize(segment_count);
  for (CheckpointSegment& s : c.segments) {
    uint32_t reserved = 0;
    if (!r.GetFixed64(&s.segment_id) || !r.GetFixed32(&s.dir_index) || !r.GetFixed32(&reserved) ||
        !r.GetFixed64(&s.scan_from) || reserved != 0) {
      return Status::Corruption("checkpoint: bad segment entry");
    }
  }
  std::vector<uint64_t> ids;
  ids.reserve(c.segments.size());
  for (const CheckpointSegment& s : c.segments) ids.push_back(s.segment_id);
  std::sort(ids.begin(), ids.end());
  c.entries.resize(entry_count);
  for (auto& [key, entry] : c.entries) {
    if (!GetBlockEntry(&r, &key, &entry)) return Status::Corruption("checkpoint: bad block entry");
    if (!std::binary_search(ids.begin(), ids.end(), entry.segment_id)) {
      return Status::Corruption("checkpoint: entry names an unlisted segment");
    }
  }
  c.tombstones.resize(tombstone_count);
  for (auto& [key, t] : c.tombstones) {
    if (!GetTombstoneEntry(&r, &key, &t)) return Status::Corruption("checkpoint: bad tombstone");
    if (!std::binary_search(ids.begin(), ids.end(), t.segment_id)) {
      return Status::Corruption("checkpoint: tombstone names an unlisted segment");
    }
  }
  return c;
}

}  // namespace kvtier::ssd
