// VerifyDir and AnalyzeCache (see ssd_tools.h, ssd_tools_scan.h and docs/ssd_format.md §11):
// every record of every segment, then every checkpoint entry against the record it points at.
#include <algorithm>
#include <array>
#include <unordered_map>
#include <utility>

#include "core/sha256.h"
#include "tiers/ssd/ssd_dir_lock.h"
#include "tiers/ssd_record.h"
#include "tiers/ssd/ssd_recovery.h"
#include "tiers/ssd/ssd_tools.h"
#include "tiers/ssd/ssd_tools_scan.h"

namespace kvtier::ssd {
namespace {

std::string Num(uint64_t v) { return std::to_string(v); }

std::string Describe(const BlockKey& key) {
  return "block " + ToHex(key.chunk_hash).substr(0, 16) + ".. layer " + Num(key.layer);
}

// The segment size the cache was configured with: the MANIFEST's, else the newest good
// segment's (segments are created with the configured size; older ones may predate a change).
uint64_t CacheSegmentBytes(const ToolListing& listing) {
  if (listing.manifest.has_value()) return listing.manifest->segment_bytes;
  for (auto it = listing.segments.rbegin(); it != listing.segments.rend(); ++it) {
    if (it->bad.ok()) return it->segment_bytes;
  }
  return 0;
}

void CheckSegments(CacheAnalysis* a) {
  for (SegmentFile& seg : a->listing.segments) {
    ++a->report.segments;
    if (!seg.bad.ok()) {
      a->report.problems.push_back({.path = seg.path, .what = "bad segment: " + seg.bad.message()});
    }
  }
}

Status ScanSegments(CacheAnalysis* a) {
  for (SegmentFile& seg : a->listing.segments) {
    if (!seg.bad.ok()) continue;
    KV_ASSIGN_OR_RETURN(SegmentCheck check, CheckSegment(seg));
    a->report.records_verified += check.records.size();
    for (const BadRegion& r : check.regions) {
      a->report.problems.push_back({.path = seg.path,
                                    .offset_begin = r.begin,
                                    .offset_end = r.end,
                                    .what = "damaged bytes (" + Num(r.end - r.begin) +
                                            "): " + r.reason});
    }
    a->checks.emplace(seg.segment_id, std::move(check));
  }
  return Status::Ok();
}

// Loads dirs[0]'s checkpoint; a problem when it is there but unusable.
void LoadCheckpoint(Env* env, size_t dir_count, CacheAnalysis* a) {
  VerifyReport& rep = a->report;
  rep.checkpoint_present = a->listing.checkpoint_present;
  if (!rep.checkpoint_present) return;
  const std::string& path = a->listing.checkpoint_path;
  const auto problem = [&](const std::string& what) {
    rep.problems.push_back(
        {.path = path, .what = what + " (the tier ignores it and scans every segment)"});
  };
  Status regular = CheckRegularFile(env, path);
  if (!regular.ok()) return problem("checkpoint unusable: " + regular.message());
  Result<Checkpoint> ck = ReadCheckpointFile(env, path);
  if (!ck.ok()) return problem("checkpoint invalid: " + ck.status().message());
  if (ck->dir_count != dir_count) {
    return problem("checkpoint written for " + Num(ck->dir_count) + " directories, " +
                   Num(dir_count) + " given");
  }
  if (a->segment_bytes != 0 && ck->segment_bytes != a->segment_bytes) {
    return problem("checkpoint written for segments of " + Num(ck->segment_bytes) + " bytes, " +
                   (a->listing.manifest.has_value() ? "the MANIFEST says "
                                                    : "the newest segment has ") +
                   Num(a->segment_bytes));
  }
  const std::array<uint8_t, 16> none{};
  if (a->listing.manifest.has_value() && ck->cache_id != none &&
      ck->cache_id != a->listing.manifest->cache_id) {
    return problem("checkpoint written for cache " + CacheIdHex(ck->cache_id) +
                   ", the directories belong to cache " + CacheIdHex(*a->listing.manifest));
  }
  rep.checkpoint_valid = true;
  a->checkpoint = std::move(*ck);
}

const SegmentFile* FindSegment(const ToolListing& listing, uint64_t id) {
  auto it = std::lower_bound(
      listing.segments.begin(), listing.segments.end(), id,
      [](const SegmentFile& s, uint64_t want) { return s.segment_id < want; });
  return it != listing.segments.end() && it->segment_id == id ? &*it : nullptr;
}

// Why the checkpoint's segment entry `s` is wrong, or "" when it is right.
std::string SegmentEntryProblem(const CheckpointSegment& s, const SegmentFile* seg,
                                uint64_t entries) {
  const std::string listed = "checkpoint lists segment " + Num(s.segment_id) + " (" +
                             Num(entries) + " entries), ";
  if (seg == nullptr) return listed + "which is not on disk";
  if (seg->dir_index != s.dir_index) {
    return listed + "in directory " + Num(s.dir_index) + ", but it is in directory " +
           Num(seg->dir_index);
  }
  if (!seg->bad.ok()) return listed + "which is a bad segment";
  if (s.scan_from > seg->file_bytes || s.scan_from < kSegmentHeaderBytes ||
      s.scan_from % kDirectIoAlignment != 0) {
    return "checkpoint: scan_from " + Num(s.scan_from) + " of segment " + Num(s.segment_id) +
           " is not a record boundary within its " + Num(seg->file_bytes) + " bytes";
  }
  return "";
}

// Why entry (key, e) disagrees with its segment, or "" when the record there matches it.
std::string EntryProblem(const BlockKey& key, const IndexEntry& e, const SegmentFile& seg,
                         const SegmentCheck& check) {
  const std::string at = "checkpoint entry for " + Describe(key) + " at segment " +
                         Num(e.segment_id) + " offset " + Num(e.segment_offset) + ": ";
  if (e.segment_offset + uint64_t{e.record_bytes()} > seg.file_bytes) {
    return at + "past the end of " + seg.path + " (" + Num(seg.file_bytes) + " bytes)";
  }
  auto it = check.records.find(e.segment_offset);
  if (it == check.records.end()) {
    const bool damaged = std::any_of(check.regions.begin(), check.regions.end(), [&](auto& r) {
      return e.segment_offset >= r.begin && e.segment_offset < r.end;
    });
    return at + (damaged ? "the record there is damaged" : "no valid record starts there");
  }
  const RecordSummary& r = it->second;
  if (r.key != key) return at + "the record there is " + Describe(r.key);
  if (r.tombstone) return at + "the record there is a tombstone";
  if (r.payload_bytes != e.payload_bytes || r.raw_bytes != e.raw_bytes ||
      r.codec_id != e.codec_id) {
    return at + "the record there has payload " + Num(r.payload_bytes) + " bytes, raw " +
           Num(r.raw_bytes) + ", codec " + Num(r.codec_id) + "; the checkpoint says " +
           Num(e.payload_bytes) + ", " + Num(e.raw_bytes) + ", " + Num(e.codec_id);
  }
  if (r.sequence != e.sequence) {
    return at + "the record there has sequence " + Num(r.sequence) + ", the checkpoint says " +
           Num(e.sequence);
  }
  return "";
}

std::string TombstoneProblem(const BlockKey& key, const LiveTombstone& t,
                             const SegmentCheck& check) {
  for (const auto& [offset, r] : check.records) {
    if (r.tombstone && r.sequence == t.sequence && r.key == key) return "";
  }
  return "checkpoint tombstone for " + Describe(key) + " (sequence " + Num(t.sequence) +
         "): segment " + Num(t.segment_id) + " holds no such tombstone record";
}

void CrossCheck(CacheAnalysis* a) {
  const Checkpoint& ck = *a->checkpoint;
  VerifyReport& rep = a->report;
  const std::string& path = a->listing.checkpoint_path;
  std::unordered_map<uint64_t, uint64_t> entries_per_segment;
  for (const auto& [key, e] : ck.entries) ++entries_per_segment[e.segment_id];
  std::unordered_map<uint64_t, bool> usable;  // Segment id -> its entries can be checked.
  for (const CheckpointSegment& s : ck.segments) {
    const SegmentFile* seg = FindSegment(a->listing, s.segment_id);
    std::string why = SegmentEntryProblem(s, seg, entries_per_segment[s.segment_id]);
    usable[s.segment_id] = why.empty() || (seg != nullptr && a->checks.count(s.segment_id) != 0 &&
                                           seg->dir_index == s.dir_index);
    if (!why.empty()) rep.problems.push_back({.path = path, .what = std::move(why)});
  }
  for (const auto& [key, e] : ck.entries) {
    if (!usable[e.segment_id]) continue;
    const SegmentFile& seg = *FindSegment(a->listing, e.segment_id);
    std::string why = EntryProblem(key, e, seg, a->checks.at(e.segment_id));
    if (why.empty()) {
      ++rep.checkpoint_entries_verified;
    } else {
      rep.problems.push_back({.path = path, .what = std::move(why)});
    }
  }
  for (const auto& [key, t] : ck.tombstones) {
    if (!usable[t.segment_id]) continue;
    std::string why = TombstoneProblem(key, t, a->checks.at(t.segment_id));
    if (!why.empty()) rep.problems.push_back({.path = path, .what = std::move(why)});
  }
}

}  // namespace

Result<CacheAnalysis> AnalyzeCache(Env* env, const std::vector<std::string>& dirs) {
  CacheAnalysis a;
  KV_ASSIGN_OR_RETURN(a.listing, ListCache(env, dirs));
  a.segment_bytes = CacheSegmentBytes(a.listing);
  CheckSegments(&a);
  KV_RETURN_IF_ERROR(ScanSegments(&a));
  LoadCheckpoint(env, dirs.size(), &a);
  if (a.checkpoint.has_value()) CrossCheck(&a);
  return a;
}

Result<VerifyReport> VerifyDir(Env* env, const std::vector<std::string>& dirs) {
  KV_RETURN_IF_ERROR(CheckDirList(dirs));
  // Shared: other readers may look too, but no tier may be writing (Busy names its pid).
  KV_ASSIGN_OR_RETURN(std::vector<DirLock> locks, AcquireAll(env, dirs, DirLockMode::kShared));
  KV_ASSIGN_OR_RETURN(CacheAnalysis a, AnalyzeCache(env, dirs));
  return std::move(a.report);
}

}  // namespace kvtier::ssd
