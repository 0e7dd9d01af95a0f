// Recovery of the SSD tier's index at open (docs/ssd_format.md §5), and the segment scanner that
// recovery, `kvtier inspect` and `kvtier verify` share.
//
// Why: restart loss of the SSD index is the most repeated bug of peer systems; here the index
// is rebuilt from a checkpoint plus a scan of the records written after it, and every record
// that is installed passed its CRCs.
//
// Thread safety: free functions without shared state. Ownership: the Env and Logger are
// borrowed for the call; RecoveredSegment owns its open File.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/block_key.h"
#include "core/huge_page_buffer.h"
#include "env/env.h"
#include "tiers/ssd/ssd_checkpoint.h"
#include "tiers/ssd_record.h"

namespace kvtier::ssd {

enum class ScanStop : uint8_t {
  kEndOfFile = 0,  // The file ended (or the segment's size was reached) on a record boundary.
  kZeroTail = 1,   // An all-zero header: the unwritten tail.
  kInvalid = 2,    // A torn or corrupt record; `reason` says which check failed.
};

struct SegmentScan {
  uint64_t end_offset = 0;  // Offset of the first byte after the last valid record.
  ScanStop stop = ScanStop::kEndOfFile;
  Status reason;  // Why a kInvalid record was rejected.
};

// Calls `visit` with each valid record (header and payload CRC verified) of `file` from
// `start_offset` in order, until the first invalid one or the end. Fails only on read errors.
// Reads the segment sequentially in chunks of up to 8 MiB (aligned for O_DIRECT) and parses the
// records out of them, so a scan runs at the disk's sequential speed.
Result<SegmentScan> ScanSegment(
    File& file, uint64_t segment_id, uint64_t segment_bytes, uint64_t start_offset,
    const std::function<void(const RecordHeader&, uint64_t offset)>& visit);
// The same, with the read window in `scratch` (grown as needed and kept by the caller, so that
// scanning many segments allocates it once; on huge pages, so that each 8 MiB O_DIRECT read is a
// few segments for the device, core/huge_page_buffer.h).
Result<SegmentScan> ScanSegment(
    File& file, uint64_t segment_id, uint64_t segment_bytes, uint64_t start_offset,
    const std::function<void(const RecordHeader&, uint64_t offset)>& visit,
    HugePageBuffer* scratch);

struct SegmentFile {
  uint64_t segment_id = 0;
  uint32_t dir_index = 0;
  std::string path;
  uint64_t segment_bytes = 0;  // From its header block; 0 for a bad segment.
  uint64_t file_bytes = 0;     // The file's size at open; 0 for a bad segment.
  uint64_t created_wall_us = 0;  // From its header block (informational); 0 for a bad segment.
  // Not OK for a bad segment (§2): why. Anything named like a segment that is not a regular file
  // (a directory, FIFO, socket, device, or a symlink to one) is a bad segment too, opened
  // without blocking and never read.
  Status bad;
  std::unique_ptr<File> file;  // Open for reading; null for a bad segment.
};

struct DirListing {
  std::vector<SegmentFile> segments;  // Sorted by segment id.
  // Paths of files that are not segments and not the tier's own (checkpoint, MANIFEST, LOCK).
  std::vector<std::string> other_files;
};

// Lists and opens every segment of `dirs` and checks its header block.
Result<DirListing> ListSegments(Env* env, const std::vector<std::string>& dirs, DirectIo direct);

struct RecoveryStats {
  uint64_t records_scanned = 0;
  uint64_t tombstones_seen = 0;
  uint64_t torn_or_corrupt_tails = 0;
  uint64_t corrupt_segments = 0;
  uint64_t checkpoint_entries = 0;
  // Sealed records the scan met (docs/ssd_format.md §3): a cache sealed by a build whose MANIFEST
  // had no sealed flag is still known as sealed when one is scanned.
  uint64_t sealed_records = 0;
  bool checkpoint_used = false;
  bool checkpoint_rejected = false;
};

struct RecoveredSegment {
  SegmentFile segment;
  uint64_t end_offset = 0;  // Where its scan stopped.
};

struct RecoveredState {
  std::unordered_map<BlockKey, IndexEntry> index;
  // The newest tombstone of each key seen in the checkpoint or the scan (docs/ssd_format.md §7).
  std::unordered_map<BlockKey, LiveTombstone> tombstones;
  std::vector<RecoveredSegment> segments;  // Good segments, by increasing id.
  uint64_t next_sequence = 1;
  uint64_t next_segment_id = 1;
  RecoveryStats stats;
};

struct RecoverOptions {
  std::vector<std::string> dirs;  // In the cache's order; the checkpoint is in dirs[0].
  uint64_t segment_bytes = 0;     // The configured size, as in the MANIFEST.
  uint64_t capacity_bytes = 0;    // Bounds the checkpoint's size (CheckpointBytesMax).
  DirectIo direct = DirectIo::kOff;
  // The MANIFEST's cache id: a version 3 checkpoint naming another cache is rejected. All zero:
  // not checked (a caller that has no MANIFEST to go by).
  std::array<uint8_t, 16> cache_id{};
};

// Rebuilds the index from the directories (checkpoint in dirs[0], then scans), as §5 specifies.
// Removes a leftover checkpoint temp file. Every checkpoint field is checked against the
// configuration and the segments found before it is used; a checkpoint failing any check is
// rejected (logged, stats.checkpoint_rejected) and every segment is scanned from its start.
// Fails only on I/O errors listing or reading.
Result<RecoveredState> Recover(Env* env, const RecoverOptions& options, Logger* logger);
// The same for read-only callers (tools): the checkpoint is bounded by kSsdCheckpointBytesMax
// and checked against the cache id of dirs[0]'s MANIFEST when it has one.
Result<RecoveredState> Recover(Env* env, const std::vector<std::string>& dirs,
                               uint64_t segment_bytes, DirectIo direct, Logger* logger);

// Reads and decodes `path` as a checkpoint of at most `max_bytes` bytes. NotFound when it does
// not exist; Corruption when it is not a regular file, is larger than `max_bytes` (checked before
// any of it is read), or its header's counts do not match its size (checked before the entries
// are read), or it fails DecodeCheckpoint.
Result<Checkpoint> ReadCheckpointFile(Env* env, const std::string& path,
                                      uint64_t max_bytes = kSsdCheckpointBytesMax);

}  // namespace kvtier::ssd
