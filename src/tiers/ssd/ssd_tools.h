// Library side of `kvtier inspect`, `stats`, `verify`, `repair`, `clear` and
// `bench ssd|ssd-reopen` for the SSD tier. InspectDir, StatsDir and VerifyDir are read-only walks
// over the directories of one cache with the scanner recovery uses (VerifyDir and StatsDir going
// on past damage); RepairDir and ClearDir change it (docs/ssd_format.md §11). BenchSsd and
// BenchReopen drive a real SsdTier in a fresh subdirectory of each given directory and remove it
// afterwards (unless asked to keep it). The CLI formats the results.
//
// Thread safety: free functions. The cache tools take the directories' LOCK (ssd_dir_lock.h):
// VerifyDir and StatsDir shared, RepairDir and ClearDir exclusive, all refusing (Busy) a running
// tier; InspectDir reads a running tier's directories as a snapshot that may miss the newest
// records and says so (InspectReport::in_use). The benchmarks use only the directories they
// create. Ownership: the Env is borrowed.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/limits.h"
#include "core/sha256.h"
#include "env/env.h"
#include "kvtier/result.h"

namespace kvtier::ssd {

struct InspectSegment {
  std::string path;
  uint64_t segment_id = 0;
  uint64_t file_bytes = 0;
  uint64_t valid_bytes = 0;  // Header block plus valid records.
  uint64_t records = 0;
  uint64_t tombstones = 0;
  bool bad = false;
  std::string stop_reason;  // Why the scan ended ("" at end of file or unwritten tail).
};

struct InspectReport {
  std::vector<InspectSegment> segments;
  uint64_t blocks = 0;      // Distinct keys whose newest record is not a tombstone.
  uint64_t live_bytes = 0;  // Record bytes of those newest records.
  uint64_t dead_bytes = 0;  // Record bytes superseded, erased or unreachable past a bad record.
  // Records per layout digest (hex): a namespace view (keys are salted hashes, so the layout is
  // the only namespace a record shows).
  std::map<std::string, uint64_t> records_per_layout;
  bool checkpoint_present = false;
  bool checkpoint_valid = false;
  std::string checkpoint_problem;  // Why it is not valid, when present.
  std::vector<std::string> other_files;
  // Set when a running tier holds the directories: the report is a snapshot that may miss the
  // newest records or show a record still being written as damage.
  std::string in_use;
};

// OK when every one of `dirs` is a directory holding a segment file, a checkpoint, a MANIFEST or
// a file RepairDir moved aside;
// NotFound (missing) or InvalidArgument (not a kvtier cache directory) naming the first that is
// not. InspectDir and VerifyDir do not require it (an empty directory is a valid empty cache);
// the CLI does, to catch a mistyped path.
Status CheckCacheDirs(Env* env, const std::vector<std::string>& dirs);

// InvalidArgument when `dirs` are not one cache (as VerifyDir); fails otherwise only on I/O errors.
Result<InspectReport> InspectDir(Env* env, const std::vector<std::string>& dirs);

// `kvtier stats`: the live blocks of a cache by age, layout and codec. Keys are salted hashes
// (docs/key_format.md), so a record shows no tenant: the layout digest is its only namespace, and
// no key material appears in a report.
struct StatsAgeBucket {
  uint64_t max_age_s = 0;  // Blocks younger than this; 0 for the last bucket (older than all).
  uint64_t blocks = 0;
  uint64_t live_bytes = 0;
};

// The bucket bounds of StatsReport::age: 1 minute, 10 minutes, 1 hour, 1 day, 7 days, 30 days.
inline constexpr uint64_t kStatsAgeBoundsS[] = {60, 600, 3600, 86400, 7 * 86400, 30 * 86400};

struct StatsLayout {
  std::string id;  // The first 16 hex digits of the layout digest (KvLayout::LayoutDigest).
  uint64_t blocks = 0;
  uint64_t chunks = 0;  // Distinct chunk hashes among them.
  uint32_t layers = 0;  // Distinct layer indexes among them.
  uint64_t live_bytes = 0;
  uint64_t raw_bytes = 0;  // Their size before encoding.
  uint64_t sealed_blocks = 0;
  std::map<uint8_t, uint64_t> blocks_per_codec;  // Record codec id -> blocks.
};

struct StatsReport {
  std::string cache_id;       // The MANIFEST's (32 hex digits); "" for a cache without one.
  uint64_t segment_bytes = 0;  // The configured segment size (0 when no segment tells it).
  uint64_t segments = 0;
  uint64_t disk_bytes = 0;  // Bytes of the segment files.
  // As InspectDir counts them: live is the record bytes of the newest record of each key that is
  // not a tombstone; dead is the rest of the segment files after their header blocks.
  uint64_t blocks = 0;
  uint64_t chunks = 0;  // Distinct chunk hashes of the live blocks.
  uint64_t live_bytes = 0;
  uint64_t dead_bytes = 0;
  uint64_t raw_bytes = 0;        // The live blocks' size before encoding.
  uint64_t expired_blocks = 0;   // Live blocks past their TTL at `now` (a read misses them).
  uint64_t erased_keys = 0;      // Keys whose newest record is a tombstone.
  uint64_t sequence_min = 0, sequence_max = 0;  // Of the live blocks (0, 0 when none).
  // Creation times of the oldest and newest segment holding a live block (0 when none).
  uint64_t oldest_segment_wall_us = 0, newest_segment_wall_us = 0;
  // Live blocks by age. Records carry no write time: a block's age is taken from the creation
  // time of the segment holding it, which is at or before its write, so a block is at most as
  // old as its bucket says. Reclaim re-appends the blocks it keeps, which makes them young again.
  std::vector<StatsAgeBucket> age;
  std::vector<StatsLayout> layouts;  // Most blocks first.
  bool checkpoint_present = false;
};

// Reads every record of the cache in `dirs` (in their configured order) and summarizes its live
// blocks; `now_wall_us` is the wall clock the ages and expiries are measured at. Read-only: takes
// the directories' shared lock, as VerifyDir does, and refuses what VerifyDir refuses (Busy
// naming the holder's pid for a cache a tier holds; InvalidArgument for directories that are not
// one cache). A cache VerifyDir finds a problem in is refused too: Corruption naming the first
// problem and how many there are.
Result<StatsReport> StatsDir(Env* env, const std::vector<std::string>& dirs,
                             uint64_t now_wall_us);

// One finding of VerifyDir: a bad segment, a damaged byte range of a segment, or a disagreement
// between the checkpoint and the segments.
struct VerifyProblem {
  std::string path;           // The segment file, or the checkpoint for checkpoint findings.
  uint64_t offset_begin = 0;  // The damaged byte range [begin, end) of a segment; 0, 0 if none.
  uint64_t offset_end = 0;
  std::string what;  // A sentence saying what is wrong.
};

struct VerifyReport {
  uint64_t segments = 0;
  uint64_t records_verified = 0;  // Valid records (CRCs, header fields, placement), all segments.
  bool checkpoint_present = false;
  bool checkpoint_valid = false;  // Present, decodes, and fits these directories.
  uint64_t checkpoint_entries_verified = 0;  // Entries whose record is there and agrees.
  std::vector<VerifyProblem> problems;       // Empty when everything verified.
};

// Checks every record of every segment, going on past damage (docs/ssd_format.md §11), and every
// checkpoint entry against the record it points at. A damaged region, a bad segment, an invalid
// checkpoint and each disagreement is one problem. InvalidArgument when `dirs` are not one cache
// (CheckOneCache); Busy naming the holder's pid when a tier holds a directory (a live writer's
// newest records would read as damage); fails otherwise only on I/O errors. A torn tail left by
// a crash is a problem too (recovery drops it). Takes the directories' shared lock.
Result<VerifyReport> VerifyDir(Env* env, const std::vector<std::string>& dirs);

struct RepairReport {
  std::vector<std::string> actions;  // One sentence per thing dropped, moved aside or rewritten.
  VerifyReport before;
  VerifyReport after;  // Verification after the repair: no problems unless the repair failed.
  uint64_t blocks_indexed = 0;  // Entries of the new checkpoint.
};

// Makes the cache consistent (docs/ssd_format.md §11): a segment with damaged regions is rewritten
// as a new segment holding its valid records (same sequences, new places), and the old file is
// renamed to "<name>.bad"; a bad segment or a checkpoint that is not a regular file is renamed
// the same way; the checkpoint is rebuilt from a full scan. Then verifies again. Nothing that
// verified is lost. A cache that verifies is left as it is (no actions). Same refusals as
// VerifyDir; takes the directories' exclusive lock, so it is also refused while anything else (a
// tier, a verify) holds one.
Result<RepairReport> RepairDir(Env* env, const std::vector<std::string>& dirs);

struct ClearReport {
  std::vector<std::string> removed;  // Paths removed.
  std::vector<std::string> failed;   // Why each entry that could not be removed was not.
};

// Empties a cache: removes its segments, checkpoint, checkpoint temp file and the ".bad" files
// RepairDir left, and nothing else (other files, the directories themselves stay). Takes the
// exclusive lock, as RepairDir does. InvalidArgument when `dirs` are not one cache. An entry it
// cannot remove (a directory named like a segment) is listed in `failed`, and the rest is still
// removed.
Result<ClearReport> ClearDir(Env* env, const std::vector<std::string>& dirs);

inline constexpr uint64_t kBenchBlockBytesMax = 64 * kMiB;
inline constexpr uint32_t kBenchQueueDepthMax = 256;
inline constexpr uint64_t kBenchBlocksMax = 1u << 24;

struct BenchSsdOptions {
  std::vector<std::string> dirs;  // Each gets a fresh kvtier-bench-XXXXXX subdirectory.
  // Bytes of one record on disk (header + payload), so one write or read is exactly this size,
  // as in fio. Multiple of 4 KiB, at most kBenchBlockBytesMax.
  uint64_t block_bytes = 1 * kMiB;
  uint32_t queue_depth = 16;        // Blocks in flight, 1..kBenchQueueDepthMax.
  uint64_t total_bytes = 1 * kGiB;  // Rounded down to whole blocks; at least one block.
  bool keep_dirs = false;           // Keep the subdirectories (tests inspect them).
  // Polled on the calling thread before each block is submitted; once it returns true no block
  // is started, those in flight are awaited, and the run ends with Aborted (the subdirectories
  // are removed as on any other failure). Unset: runs to the end.
  std::function<bool()> cancelled;
  // Called on the calling thread as blocks complete: bytes written plus bytes read back so far,
  // out of 2 x the total (the write phase, then the read phase). Unset: none.
  std::function<void(uint64_t done_bytes, uint64_t total_bytes)> progress;

  // InvalidArgument naming the first bad field.
  Status Validate() const;
};

struct BenchSsdReport {
  uint64_t block_bytes = 0, payload_bytes = 0, queue_depth = 0, total_bytes = 0, blocks = 0;
  std::string io_backend;
  bool direct_io = false;
  std::string sync_mode;  // What the write phase promised (see BenchSsd).
  double write_bytes_per_s = 0, read_bytes_per_s = 0;
  double write_s = 0, read_s = 0;
  double read_p50_us = 0, read_p99_us = 0, read_max_us = 0;
  double reopen_ms = 0;                // Open after a clean close (checkpoint used).
  std::vector<std::string> kept_dirs;  // The subdirectories, when keep_dirs.
};

// Writes total_bytes of random blocks with queue_depth single-block WriteBatch calls in flight,
// in SsdSyncMode::kPeriodic (what a production cache runs; the default 100 ms interval), and
// times them up to and including the final Flush. Closes, reopens (timed), then reads every
// block back with queue_depth reads in flight and checks each payload's CRC32C. O_DIRECT is
// required when the filesystem supports it, so reads after the reopen are cold. Corruption when
// a block does not read back intact; NoSpace when the disk lacks room.
Result<BenchSsdReport> BenchSsd(Env* env, const BenchSsdOptions& options);

struct BenchReopenOptions {
  std::vector<std::string> dirs;
  uint64_t blocks = 100'000;
  uint32_t payload_bytes = 4096;
  bool keep_dirs = false;
  // As in BenchSsdOptions, polled between write batches of the fill (the two reopens are not
  // interrupted); progress counts the blocks filled, out of `blocks`.
  std::function<bool()> cancelled;
  std::function<void(uint64_t done_blocks, uint64_t total_blocks)> progress;

  Status Validate() const;
};

struct BenchReopenReport {
  uint64_t blocks = 0, payload_bytes = 0, disk_bytes = 0;
  double fill_s = 0;
  double reopen_checkpoint_ms = 0;  // Clean close: checkpoint read + scan of nothing after it.
  double reopen_scan_ms = 0;        // Checkpoint deleted: every segment scanned.
  uint64_t recovered_checkpoint = 0, recovered_scan = 0;  // Blocks indexed after each reopen.
  bool checkpoint_used = false;
};

// Fills a tier with `blocks` blocks, closes it cleanly, and times a reopen with the checkpoint
// and then one without it (the checkpoint file removed, so recovery scans every segment).
Result<BenchReopenReport> BenchReopen(Env* env, const BenchReopenOptions& options);

}  // namespace kvtier::ssd
