// The SSD tier's index entry and the encoding of its index checkpoint (docs/ssd_format.md §4).
//
// Why: the index lives in memory; the checkpoint lets a restart find every block without reading
// every segment, and a scan of what was written after it fills in the rest. Any checkpoint that
// decodes is a correct starting point (see the doc), so it never has to be fresh.
//
// Thread safety: value types and pure functions. Ownership: spans are borrowed for the call.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/block_key.h"
#include "kvtier/result.h"
#include "tiers/ssd_record.h"

namespace kvtier::ssd {

// Where one block lives and what it is. The directory follows from the segment.
struct IndexEntry {
  uint64_t segment_id = 0;
  uint32_t segment_offset = 0;
  uint32_t payload_bytes = 0;
  uint32_t raw_bytes = 0;
  uint8_t codec_id = 0;
  bool referenced = false;  // CLOCK reference bit: read since the last reclaim pass.
  uint64_t sequence = 0;
  uint64_t expiry_wall_us = 0;  // 0 = never.

  uint32_t record_bytes() const {
    return static_cast<uint32_t>(RecordBytesForPayload(payload_bytes));
  }
  bool Expired(uint64_t now_wall_us) const {
    return expiry_wall_us != 0 && now_wall_us >= expiry_wall_us;
  }
  friend bool operator==(const IndexEntry&, const IndexEntry&) = default;
};

struct CheckpointSegment {
  uint64_t segment_id = 0;
  uint32_t dir_index = 0;
  uint64_t scan_from = 0;  // First offset not covered by the checkpoint's entries.
  friend bool operator==(const CheckpointSegment&, const CheckpointSegment&) = default;
};

// An erase whose tombstone record must outlive its segment: a segment that may hold an older
// record of the key still exists (docs/ssd_format.md §7).
struct LiveTombstone {
  uint64_t segment_id = 0;  // Where the tombstone record is.
  uint64_t sequence = 0;    // The tombstone record's sequence.
  friend bool operator==(const LiveTombstone&, const LiveTombstone&) = default;
};

struct Checkpoint {
  uint32_t dir_count = 0;
  uint64_t segment_bytes = 0;
  uint64_t next_sequence = 1;
  uint64_t next_segment_id = 1;
  uint64_t written_wall_us = 0;
  std::vector<CheckpointSegment> segments;
  std::vector<std::pair<BlockKey, IndexEntry>> entries;
  std::vector<std::pair<BlockKey, LiveTombstone>> tombstones;  // Empty in a version 1 file.
  // The cache id of the directory set's MANIFEST (version 3); all zero in older files.
  std::array<uint8_t, 16> cache_id{};
  friend bool operator==(const Checkpoint&, const Checkpoint&) = default;
};

// What the fixed header says about a checkpoint file, enough to check its size before reading.
struct CheckpointHeader {
  uint16_t version = 0;
  uint32_t dir_count = 0;
  uint64_t segment_bytes = 0;
  uint32_t segment_count = 0;
  uint64_t entry_count = 0;
  uint32_t tombstone_count = 0;
  size_t prefix_bytes = 0;  // Bytes before the segment entries: the header, and the cache id.
};

// The whole checkpoint file (version kCheckpointVersion), trailer CRC included.
std::string EncodeCheckpoint(const Checkpoint& checkpoint);

// Checks the first kCheckpointHeaderBytes of a checkpoint file of `file_bytes` bytes: magic,
// version, reserved fields, and that the counts account for exactly `file_bytes` (header, cache
// id, entries and trailer), so the rest can be read with a known, bounded size. The trailer CRC
// is not checked here. Corruption naming the first problem.
Result<CheckpointHeader> DecodeCheckpointHeader(std::span<const std::byte> header,
                                                uint64_t file_bytes);

// Decodes and checks a whole checkpoint file (version 1, 2 or 3): the header as above, the
// trailer CRC, and every field against the others before anything uses it: segment_bytes in
// [kSegmentBytesMin, kSegmentBytesMax], dir_index < dir_count, scan_from 4 KiB-aligned in
// [4096, segment_bytes], segment ids unique and below next_segment_id, every entry's record
// 4 KiB-aligned inside its segment, payload_bytes and raw_bytes bounded, and every entry and
// tombstone naming a listed segment. Corruption naming the problem otherwise.
Result<Checkpoint> DecodeCheckpoint(std::span<const std::byte> bytes);

// The largest checkpoint a tier of this configuration writes (every record one 4 KiB block, as
// many tombstones, every segment on disk listed, the reclaim slack of one segment per directory
// included), capped at kSsdCheckpointBytesMax. Reopen refuses a larger file before reading it.
uint64_t CheckpointBytesMax(uint64_t capacity_bytes, uint64_t segment_bytes, size_t dir_count);

}  // namespace kvtier::ssd
