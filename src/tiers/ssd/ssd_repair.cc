// RepairDir and ClearDir (see ssd_tools.h and docs/ssd_format.md §11).
//
// Repair never writes a byte of an existing segment again (the log stays append-only): a damaged
// segment's valid records are copied into a new segment and the old file is renamed aside, and
// the checkpoint is rebuilt by the tier's own recovery scanning every (now clean) segment. Each
// step leaves a cache that recovery opens correctly if the process dies there: the copies carry
// the same sequences as the originals, so either one may win, and any checkpoint is a correct
// starting point.
#include <algorithm>
#include <cstring>
#include <utility>

#include "core/aligned_buffer.h"
#include "core/assert.h"
#include "tiers/ssd/ssd_dir_lock.h"
#include "tiers/ssd/ssd_manifest.h"
#include "tiers/ssd_record.h"
#include "tiers/ssd/ssd_recovery.h"
#include "tiers/ssd/ssd_tools.h"
#include "tiers/ssd/ssd_tools_scan.h"

namespace kvtier::ssd {
namespace {

// Bounds the search for a free "<name>.bad.<n>" name.
constexpr uint32_t kAsideNamesMax = 1000;

std::string Num(uint64_t v) { return std::to_string(v); }

// Renames `path` to "<path>.bad" (or "<path>.bad.<n>" when taken) and returns the new path.
Result<std::string> MoveAside(Env* env, const std::string& path) {
  for (uint32_t n = 0; n < kAsideNamesMax; ++n) {
    const std::string to = path + ".bad" + (n == 0 ? "" : "." + Num(n));
    if (env->FileExists(to)) continue;
    KV_RETURN_IF_ERROR(env->RenameFile(path, to));
    return to;
  }
  return Status::InvalidArgument(path + ": " + Num(kAsideNamesMax) + " .bad copies exist already");
}

struct CopyTarget {
  std::string path;
  uint64_t segment_id = 0;
  uint64_t segment_bytes = 0;
};

// Copies the valid records `check` found in `seg` into a new segment file `to`: same headers
// and payloads, each placed at its new segment id and offset. Syncs the new file.
Status CopyRecords(Env* env, const SegmentFile& seg, const SegmentCheck& check,
                   const CopyTarget& to) {
  KV_ASSIGN_OR_RETURN(
      std::unique_ptr<File> out,
      env->OpenFile(to.path, {.mode = OpenMode::kCreateExclusive, .links = Links::kRefuse}));
  KV_ASSIGN_OR_RETURN(AlignedBuffer buf, AlignedBuffer::Allocate(kSegmentHeaderBytes));
  EncodeSegmentHeader({.segment_id = to.segment_id,
                       .segment_bytes = to.segment_bytes,
                       .created_wall_us = env->clock()->WallMicros()},
                      buf.span());
  KV_RETURN_IF_ERROR(out->WriteAt(0, buf.span()));
  uint64_t at = kSegmentHeaderBytes;
  for (const auto& [offset, summary] : check.records) {
    const size_t record_bytes = RecordBytesForPayload(summary.payload_bytes);
    if (buf.size() < record_bytes) {
      KV_ASSIGN_OR_RETURN(buf, AlignedBuffer::Allocate(record_bytes));
    }
    const std::span<std::byte> record = buf.span().first(record_bytes);
    size_t got = 0;
    KV_RETURN_IF_ERROR(seg.file->ReadAt(offset, record, &got));
    std::span<const std::byte> payload;
    KV_ASSIGN_OR_RETURN(RecordHeader h, DecodeRecord(record.first(got), seg.segment_id, offset,
                                                     seg.segment_bytes, &payload));
    h.segment_id = to.segment_id;
    h.segment_offset = static_cast<uint32_t>(at);
    EncodeRecordHeader(h, record);
    const size_t used = kRecordPayloadOffset + h.payload_bytes;
    std::memset(record.data() + used, 0, record_bytes - used);
    KV_CHECK(at + record_bytes <= to.segment_bytes);  // Compacted from a segment of this size.
    KV_RETURN_IF_ERROR(out->WriteAt(at, record));
    at += record_bytes;
  }
  KV_RETURN_IF_ERROR(out->Sync());
  return out->Close();
}

// Replaces every bad segment and every segment with damaged regions (see the file comment).
// New segments take ids from `next_id` on.
Status RepairSegments(Env* env, const std::vector<std::string>& dirs, uint64_t next_id,
                      CacheAnalysis& a, std::vector<std::string>* actions) {
  for (SegmentFile& seg : a.listing.segments) {
    auto check = a.checks.find(seg.segment_id);
    if (check != a.checks.end() && check->second.regions.empty()) continue;
    if (check != a.checks.end()) {
      for (const BadRegion& r : check->second.regions) {
        actions->push_back("dropped bytes " + Num(r.begin) + ".." + Num(r.end) + " of " +
                           seg.path + ": " + r.reason);
      }
      if (!check->second.records.empty()) {
        const CopyTarget to{.path = dirs[seg.dir_index] + "/" + SegmentFileName(next_id),
                            .segment_id = next_id++,
                            .segment_bytes = seg.segment_bytes};
        KV_RETURN_IF_ERROR(CopyRecords(env, seg, check->second, to));
        actions->push_back("copied the " + Num(check->second.records.size()) +
                           " valid records of " + seg.path + " to " + to.path);
      }
    }
    seg.file.reset();
    KV_ASSIGN_OR_RETURN(std::string aside, MoveAside(env, seg.path));
    actions->push_back("moved " + seg.path + " aside to " + aside +
                       (seg.bad.ok() ? "" : " (bad segment: " + seg.bad.message() + ")"));
  }
  for (const std::string& dir : dirs) KV_RETURN_IF_ERROR(env->SyncDir(dir));
  return Status::Ok();
}

// Removes dirs[0]'s checkpoint and temp files (moved aside when they are not regular files).
Status DropCheckpoint(Env* env, const std::vector<std::string>& dirs, const CacheAnalysis& a,
                      std::vector<std::string>* actions) {
  for (const VerifyProblem& p : a.report.problems) {
    if (p.path == a.listing.checkpoint_path) actions->push_back("dropped: " + p.what);
  }
  std::vector<std::string> paths = a.listing.temp_files;
  if (a.listing.checkpoint_present) paths.push_back(a.listing.checkpoint_path);
  for (const std::string& path : paths) {
    if (CheckRegularFile(env, path).ok()) {
      KV_RETURN_IF_ERROR(env->RemoveFile(path));
      actions->push_back("removed " + path);
    } else {
      KV_ASSIGN_OR_RETURN(std::string aside, MoveAside(env, path));
      actions->push_back("moved " + path + " aside to " + aside + " (not a regular file)");
    }
  }
  return env->SyncDir(dirs[0]);
}

// Rebuilds the index with the tier's recovery (no checkpoint: every segment scanned) and writes
// it as the checkpoint, the way the tier does: temp file, sync, rename, sync of the directory.
Result<uint64_t> WriteFreshCheckpoint(Env* env, const std::vector<std::string>& dirs,
                                      const CacheAnalysis& a, uint64_t segment_bytes,
                                      uint64_t next_segment_id) {
  RecoverOptions options{.dirs = dirs, .segment_bytes = segment_bytes};
  if (a.listing.manifest.has_value()) options.cache_id = a.listing.manifest->cache_id;
  KV_ASSIGN_OR_RETURN(RecoveredState st, Recover(env, options, /*logger=*/nullptr));
  Checkpoint ck;
  ck.cache_id = options.cache_id;
  ck.dir_count = static_cast<uint32_t>(dirs.size());
  ck.segment_bytes = segment_bytes;
  ck.next_sequence = st.next_sequence;
  ck.next_segment_id = std::max(st.next_segment_id, next_segment_id);
  ck.written_wall_us = env->clock()->WallMicros();
  for (const RecoveredSegment& s : st.segments) {
    ck.segments.push_back({.segment_id = s.segment.segment_id,
                           .dir_index = s.segment.dir_index,
                           .scan_from = s.end_offset});
  }
  ck.entries.assign(st.index.begin(), st.index.end());
  ck.tombstones.assign(st.tombstones.begin(), st.tombstones.end());
  const std::string bytes = EncodeCheckpoint(ck);
  KV_RETURN_IF_ERROR(
      ReplaceFileDurably(env, dirs[0], kCheckpointName, kCheckpointTempName, bytes, 0600));
  return ck.entries.size();
}

}  // namespace

Result<RepairReport> RepairDir(Env* env, const std::vector<std::string>& dirs) {
  KV_RETURN_IF_ERROR(CheckDirList(dirs));
  KV_ASSIGN_OR_RETURN(std::vector<DirLock> locks, AcquireAll(env, dirs, DirLockMode::kExclusive));
  KV_ASSIGN_OR_RETURN(CacheAnalysis a, AnalyzeCache(env, dirs));
  RepairReport rep;
  rep.before = a.report;
  if (a.report.problems.empty()) {
    rep.after = std::move(a.report);  // Nothing to drop; the checkpoint (and its bits) stays.
    rep.blocks_indexed = a.checkpoint.has_value() ? a.checkpoint->entries.size() : 0;
    return rep;
  }
  const uint64_t segment_bytes =
      a.segment_bytes != 0 ? a.segment_bytes
      : a.checkpoint.has_value() ? a.checkpoint->segment_bytes
                                 : kSegmentBytesDefault;
  uint64_t next_segment_id = a.checkpoint.has_value() ? a.checkpoint->next_segment_id : 1;
  for (const SegmentFile& s : a.listing.segments) {
    if (!SegmentIdInRange(s.segment_id)) continue;  // A bad segment that never counts (§1).
    next_segment_id = std::max(next_segment_id, s.segment_id + 1);
  }
  KV_RETURN_IF_ERROR(RepairSegments(env, dirs, next_segment_id, a, &rep.actions));
  KV_RETURN_IF_ERROR(DropCheckpoint(env, dirs, a, &rep.actions));
  KV_ASSIGN_OR_RETURN(rep.blocks_indexed,
                      WriteFreshCheckpoint(env, dirs, a, segment_bytes, next_segment_id));
  rep.actions.push_back("wrote " + dirs[0] + "/" + kCheckpointName + " from a scan of every " +
                        "segment: " + Num(rep.blocks_indexed) + " blocks");
  KV_ASSIGN_OR_RETURN(CacheAnalysis after, AnalyzeCache(env, dirs));
  rep.after = std::move(after.report);
  return rep;
}

Result<ClearReport> ClearDir(Env* env, const std::vector<std::string>& dirs) {
  KV_RETURN_IF_ERROR(CheckDirList(dirs));
  KV_ASSIGN_OR_RETURN(std::vector<DirLock> locks, AcquireAll(env, dirs, DirLockMode::kExclusive));
  KV_RETURN_IF_ERROR(CheckOneCache(env, dirs));
  ClearReport rep;
  for (const std::string& dir : dirs) {
    KV_ASSIGN_OR_RETURN(std::vector<std::string> names, env->ListDir(dir));
    for (const std::string& name : names) {
      if (!IsCacheFileName(name)) continue;
      const std::string path = dir + "/" + name;
      Status s = env->RemoveFile(path);
      if (s.ok()) {
        rep.removed.push_back(path);
      } else {
        rep.failed.push_back(s.message());
      }
    }
    KV_RETURN_IF_ERROR(env->SyncDir(dir));
  }
  return rep;
}

}  // namespace kvtier::ssd
