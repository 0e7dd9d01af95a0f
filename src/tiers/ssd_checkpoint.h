// The SSD tier's index entry and the encoding of its index checkpoint (docs/ssd_format.md §4).
//
// Why: the index lives in memory; the checkpoint lets a restart find every block without reading
// every segment, and a scan of what was written after it fills in the rest. Any checkpoint that
// decodes is a correct starting point (see the doc), so it never has to be fresh.
//
// Thread safety: value types and pure functions. Ownership: spans are borrowed for the call.
#pragma once

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
  friend bool operator==(const Checkpoint&, const Checkpoint&) = default;
};

// The whole checkpoint file (version kCheckpointVersion), trailer CRC included.
std::string EncodeCheckpoint(const Checkpoint& checkpoint);

// Decodes and checks a whole checkpoint file (version 1 or 2): magic, version, reserved fields,
// sizes, that every entry and tombstone names a listed segment, and the trailer CRC. Corruption
// otherwise.
Result<Checkpoint> DecodeCheckpoint(std::span<const std::byte> bytes);

}  // namespace kvtier::ssd
