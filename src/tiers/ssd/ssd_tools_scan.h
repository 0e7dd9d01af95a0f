// The offline tools' view of an SSD tier cache (`kvtier inspect`, `verify`, `repair`, `clear`):
// a listing that opens only regular files, and a segment check that keeps going past a bad
// record, so that every damaged region and every valid record after it is found. Recovery's
// scanner (ScanSegment) does the reading between damaged regions; this adds what an offline
// check needs and recovery must not do (resynchronising after damage, docs/ssd_format.md §11).
//
// Thread safety: free functions without shared state. Ownership: the Env is borrowed for the
// call; the listing owns its open Files.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/block_key.h"
#include "env/env.h"
#include "kvtier/result.h"
#include "tiers/ssd/ssd_checkpoint.h"
#include "tiers/ssd/ssd_manifest.h"
#include "tiers/ssd_record.h"
#include "tiers/ssd/ssd_recovery.h"
#include "tiers/ssd/ssd_tools.h"

namespace kvtier::ssd {

// OK when `path` names a regular file, checked through the Env with FileKind::kRegular and
// Links::kRefuse, so a FIFO or device is never waited on and a link is never followed;
// InvalidArgument "<path> is not a regular file (<what it is>)" or "<path> is a symbolic link"
// otherwise, NotFound when it does not exist.
Status CheckRegularFile(Env* env, const std::string& path);

// True for the names kvtier writes in a cache directory (segments, index.ckpt, its temporaries)
// and for the "<name>.bad" and "<name>.bad.<n>" names RepairDir renames them to.
bool IsCacheFileName(std::string_view name);

struct ToolListing {
  std::optional<Manifest> manifest;   // dirs[0]'s, when it has one.
  // Sorted by segment id; anything named like a segment that is not a regular file, or whose
  // header block fails a check, is a bad segment (ListSegments).
  std::vector<SegmentFile> segments;
  bool checkpoint_present = false;    // dirs[0] has an entry named index.ckpt.
  std::string checkpoint_path;
  std::vector<std::string> temp_files;   // index.ckpt.tmp entries (removed at open).
  std::vector<std::string> other_files;  // Everything but MANIFEST and LOCK, as paths.
};

// InvalidArgument when `dirs` is empty or names a directory twice. The tools check this before
// taking the locks (a second lock on one directory would conflict with the first).
Status CheckDirList(const std::vector<std::string>& dirs);

// InvalidArgument naming the mismatch when `dirs` cannot be the directories of one cache in
// their configured order: their MANIFESTs disagree (CheckManifestSet, when any has one), a
// directory is given twice, a segment id is in two directories (ids are unique across a cache),
// or an index.ckpt is outside directory 0 (only directory 0 holds one).
Status CheckOneCache(Env* env, const std::vector<std::string>& dirs);

// Lists `dirs` (after CheckOneCache) with recovery's ListSegments, which opens only regular files
// and checks each segment's header block, and sorts the other names.
Result<ToolListing> ListCache(Env* env, const std::vector<std::string>& dirs);

// What a valid record says about itself, for comparing with checkpoint entries and for the
// summaries of inspect and stats.
struct RecordSummary {
  BlockKey key;
  uint32_t payload_bytes = 0;
  uint32_t raw_bytes = 0;
  uint8_t codec_id = 0;
  bool tombstone = false;
  bool sealed = false;
  uint64_t sequence = 0;
  uint64_t expiry_wall_us = 0;  // 0 = never expires.
  Hash256 layout_digest{};
};

RecordSummary SummarizeRecord(const RecordHeader& h);

// The newest record of each key among the records of a cache, as recovery would index them:
// a key is live when its newest record is not a tombstone.
struct NewestRecord {
  RecordSummary record;
  uint64_t segment_id = 0;  // The segment holding it.
};
using NewestRecords = std::unordered_map<BlockKey, NewestRecord>;

// Keeps `r`, found in segment `segment_id`, when it is newer than what `newest` holds for its key.
void KeepNewest(const RecordSummary& r, uint64_t segment_id, NewestRecords* newest);

// A damaged byte range [begin, end) of a segment file, with why its first record is invalid.
struct BadRegion {
  uint64_t begin = 0;
  uint64_t end = 0;
  std::string reason;
};

struct SegmentCheck {
  std::map<uint64_t, RecordSummary> records;  // Every valid record, by offset.
  std::vector<BadRegion> regions;             // In file order, disjoint, not adjacent.
};

// Checks every record of a good segment (seg.file open). After an invalid record whose header
// is valid (a payload CRC mismatch, a truncated payload) the check goes on after it; after an
// invalid header it tries each following 4 KiB boundary for a valid record header. An all-zero
// header followed by no valid record is the unwritten tail, not damage. Fails only on read errors.
Result<SegmentCheck> CheckSegment(SegmentFile& seg);

// Everything VerifyDir found, kept for RepairDir.
struct CacheAnalysis {
  ToolListing listing;
  std::map<uint64_t, SegmentCheck> checks;  // Good segments, by id.
  std::optional<Checkpoint> checkpoint;     // When present and decodable.
  uint64_t segment_bytes = 0;  // The cache's segment size (0 when nothing tells it).
  VerifyReport report;
};

// VerifyDir without taking the directories' locks (the caller holds them).
Result<CacheAnalysis> AnalyzeCache(Env* env, const std::vector<std::string>& dirs);

}  // namespace kvtier::ssd
