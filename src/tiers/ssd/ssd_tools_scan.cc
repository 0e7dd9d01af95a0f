// See ssd_tools_scan.h and docs/ssd_format.md §2, §3 and §11.
#include "tiers/ssd/ssd_tools_scan.h"

#include <algorithm>
#include <utility>

#include "core/aligned_buffer.h"
#include "core/assert.h"
#include "tiers/ssd/ssd_dir_lock.h"
#include "tiers/ssd/ssd_manifest.h"
#include "tiers/ssd_record.h"
#include "tiers/ssd/ssd_recovery.h"

namespace kvtier::ssd {
namespace {

// Bytes read at a time while looking for the next valid record header after damage.
constexpr size_t kResyncReadBytes = 1 * kMiB;
static_assert(kResyncReadBytes % kDirectIoAlignment == 0);

std::string JoinPath(const std::string& dir, const std::string& name) { return dir + "/" + name; }

// Reads the 4 KiB block at `offset` into `block`; *got is how much of it the file holds.
Status ReadBlock(File& file, uint64_t offset, AlignedBuffer& block, size_t* got) {
  return file.ReadAt(offset, block.span(), got);
}

bool AllZero(std::span<const std::byte> bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](std::byte b) { return b == std::byte{0}; });
}

struct Resync {
  uint64_t next = 0;         // Offset of the next valid record header; 0 when there is none.
  uint64_t nonzero_end = 0;  // End of the last non-zero block read before it (0 if none).
};

// Tries each 4 KiB boundary from `from` for a record header that decodes and is placed right,
// reading kResyncReadBytes at a time (an unwritten tail is read to its end this way).
Result<Resync> FindNextRecord(SegmentFile& seg, uint64_t from, AlignedBuffer& chunk) {
  Resync r;
  const uint64_t limit = std::min(seg.file_bytes, seg.segment_bytes);
  for (uint64_t base = from; base < limit; base += kResyncReadBytes) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(kResyncReadBytes, limit - base));
    size_t got = 0;
    KV_RETURN_IF_ERROR(seg.file->ReadAt(base, chunk.span().first(want), &got));
    for (size_t at = 0; at < got; at += kDirectIoAlignment) {
      const std::span<const std::byte> bytes =
          chunk.span().subspan(at, std::min<size_t>(kDirectIoAlignment, got - at));
      if (AllZero(bytes)) continue;
      r.nonzero_end = base + at + bytes.size();
      if (bytes.size() < kRecordHeaderBytes) return r;
      Result<RecordHeader> h = DecodeRecordHeader(bytes);
      if (h.ok() && CheckRecordPlacement(*h, seg.segment_id, base + at, seg.segment_bytes).ok()) {
        r.next = base + at;
        return r;
      }
    }
    if (got < want) break;
  }
  return r;
}

void AddRegion(SegmentCheck* check, uint64_t begin, uint64_t end, std::string reason) {
  if (end <= begin) return;
  if (!check->regions.empty() && check->regions.back().end >= begin) {
    check->regions.back().end = std::max(check->regions.back().end, end);
    return;
  }
  check->regions.push_back({.begin = begin, .end = end, .reason = std::move(reason)});
}

// Handles the invalid record at `offset` that stopped a scan; returns where to scan next
// (0: nothing valid follows).
Result<uint64_t> SkipInvalid(SegmentFile& seg, uint64_t offset, const Status& why,
                             AlignedBuffer& block, AlignedBuffer& chunk, SegmentCheck* check) {
  size_t got = 0;
  KV_RETURN_IF_ERROR(ReadBlock(*seg.file, offset, block, &got));
  Result<RecordHeader> h = got == kDirectIoAlignment ? DecodeRecordHeader(block.span())
                                                     : Result<RecordHeader>(why);
  if (h.ok() && CheckRecordPlacement(*h, seg.segment_id, offset, seg.segment_bytes).ok()) {
    // The header is intact (its CRC matched), so its length can be trusted: skip the record.
    const uint64_t end = offset + RecordBytesForPayload(h->payload_bytes);
    AddRegion(check, offset, std::min(end, seg.file_bytes), why.message());
    return end;
  }
  KV_ASSIGN_OR_RETURN(Resync r, FindNextRecord(seg, offset + kDirectIoAlignment, chunk));
  const uint64_t end = r.next != 0 ? r.next
                                   : std::max(r.nonzero_end, std::min(offset + kDirectIoAlignment,
                                                                      seg.file_bytes));
  AddRegion(check, offset, end, why.message());
  return r.next;
}

// The scan stopped at an all-zero header at `offset`: the unwritten tail, unless a valid record
// (or other data) follows. Returns where to scan next (0: nothing valid follows).
Result<uint64_t> SkipZeros(SegmentFile& seg, uint64_t offset, AlignedBuffer& chunk,
                           SegmentCheck* check) {
  KV_ASSIGN_OR_RETURN(Resync r, FindNextRecord(seg, offset + kDirectIoAlignment, chunk));
  if (r.next != 0) {
    AddRegion(check, offset, r.next,
              "zero bytes before the valid record at offset " + std::to_string(r.next) +
                  " (recovery's scan stops at them)");
  } else if (r.nonzero_end != 0) {
    AddRegion(check, offset, r.nonzero_end, "bytes after the unwritten tail that are no record");
  }
  return r.next;
}

}  // namespace

RecordSummary SummarizeRecord(const RecordHeader& h) {
  return {.key = h.key,
          .payload_bytes = h.payload_bytes,
          .raw_bytes = h.raw_bytes,
          .codec_id = h.codec_id,
          .tombstone = h.tombstone(),
          .sealed = h.sealed(),
          .sequence = h.sequence,
          .expiry_wall_us = h.expiry_wall_us,
          .layout_digest = h.layout_digest};
}

void KeepNewest(const RecordSummary& r, uint64_t segment_id, NewestRecords* newest) {
  auto [it, fresh] = newest->try_emplace(r.key, NewestRecord{r, segment_id});
  if (!fresh && r.sequence > it->second.record.sequence) it->second = {r, segment_id};
}

bool IsCacheFileName(std::string_view name) {
  const size_t bad = name.find(".bad");
  if (bad != std::string_view::npos) {
    const std::string_view rest = name.substr(bad + 4);
    const bool numbered = rest.size() > 1 && rest[0] == '.' &&
                          std::all_of(rest.begin() + 1, rest.end(),
                                      [](char c) { return c >= '0' && c <= '9'; });
    if (!rest.empty() && !numbered) return false;
    name = name.substr(0, bad);
  }
  uint64_t id = 0;
  return ParseSegmentFileName(name, &id) || name == kCheckpointName ||
         IsTempFileName(name, kCheckpointTempName);
}

Status CheckRegularFile(Env* env, const std::string& path) {
  KV_ASSIGN_OR_RETURN(
      std::unique_ptr<File> file,
      env->OpenFile(path, {.mode = OpenMode::kReadOnly,
                           .kind = FileKind::kRegular,
                           .links = Links::kRefuse}));
  return file->Close();
}

Status CheckDirList(const std::vector<std::string>& dirs) {
  if (dirs.empty()) return Status::InvalidArgument("no directory given");
  for (size_t d = 0; d < dirs.size(); ++d) {
    for (size_t e = 0; e < d; ++e) {
      if (dirs[e] == dirs[d]) return Status::InvalidArgument(dirs[d] + " is given twice");
    }
  }
  return Status::Ok();
}

Status CheckOneCache(Env* env, const std::vector<std::string>& dirs) {
  KV_RETURN_IF_ERROR(CheckDirList(dirs));
  // A cache from before manifests has none at all; the checks below still apply to it.
  bool any_manifest = false;
  for (const std::string& dir : dirs) {
    Result<Manifest> m = ReadManifest(env, dir);
    any_manifest = any_manifest || m.ok() || !m.status().IsNotFound();
  }
  if (any_manifest) KV_RETURN_IF_ERROR(CheckManifestSet(env, dirs));
  std::map<uint64_t, size_t> where;  // Segment id -> directory index.
  for (size_t d = 0; d < dirs.size(); ++d) {
    KV_ASSIGN_OR_RETURN(std::vector<std::string> names, env->ListDir(dirs[d]));
    for (const std::string& name : names) {
      uint64_t id = 0;
      if (d > 0 && name == kCheckpointName) {
        return Status::InvalidArgument(JoinPath(dirs[d], name) +
                                       ": only the first directory of a cache holds " +
                                       kCheckpointName + ", so " + dirs[d] + " is not directory " +
                                       std::to_string(d) + " of the cache in " + dirs[0]);
      }
      if (!ParseSegmentFileName(name, &id)) continue;
      auto [it, fresh] = where.emplace(id, d);
      if (!fresh) {
        return Status::InvalidArgument(dirs[it->second] + " and " + dirs[d] + " both hold " +
                                       name + ": they are not directories of one cache");
      }
    }
  }
  return Status::Ok();
}

Result<ToolListing> ListCache(Env* env, const std::vector<std::string>& dirs) {
  KV_RETURN_IF_ERROR(CheckOneCache(env, dirs));
  ToolListing listing;
  Result<Manifest> manifest = ReadManifest(env, dirs[0]);
  if (manifest.ok()) listing.manifest = *manifest;
  KV_ASSIGN_OR_RETURN(DirListing found, ListSegments(env, dirs, DirectIo::kOff));
  listing.segments = std::move(found.segments);
  for (std::string& path : found.other_files) {
    const std::string_view name = std::string_view(path).substr(path.rfind('/') + 1);
    if (IsTempFileName(name, kCheckpointTempName)) {
      listing.temp_files.push_back(std::move(path));
    } else {
      listing.other_files.push_back(std::move(path));
    }
  }
  KV_ASSIGN_OR_RETURN(std::vector<std::string> names, env->ListDir(dirs[0]));
  listing.checkpoint_present =
      std::find(names.begin(), names.end(), kCheckpointName) != names.end();
  if (listing.checkpoint_present) listing.checkpoint_path = JoinPath(dirs[0], kCheckpointName);
  return listing;
}

Result<SegmentCheck> CheckSegment(SegmentFile& seg) {
  KV_CHECK(seg.file != nullptr);
  SegmentCheck check;
  KV_ASSIGN_OR_RETURN(AlignedBuffer block, AlignedBuffer::Allocate(kDirectIoAlignment));
  KV_ASSIGN_OR_RETURN(AlignedBuffer chunk, AlignedBuffer::Allocate(kResyncReadBytes));
  HugePageBuffer scratch;
  const uint64_t limit = std::min(seg.file_bytes, seg.segment_bytes);
  uint64_t offset = kSegmentHeaderBytes;
  // Each pass ends at a record boundary further on, or stops: at most one pass per 4 KiB.
  while (offset != 0 && offset < limit) {
    KV_ASSIGN_OR_RETURN(
        SegmentScan scan,
        ScanSegment(
            *seg.file, seg.segment_id, seg.segment_bytes, offset,
            [&](const RecordHeader& h, uint64_t at) { check.records[at] = SummarizeRecord(h); },
            &scratch));
    offset = scan.end_offset;
    if (scan.stop == ScanStop::kInvalid) {
      KV_ASSIGN_OR_RETURN(offset, SkipInvalid(seg, offset, scan.reason, block, chunk, &check));
    } else if (scan.stop == ScanStop::kZeroTail) {
      KV_ASSIGN_OR_RETURN(offset, SkipZeros(seg, offset, chunk, &check));
    } else {
      // End of file on a block boundary, or a last block too short to hold a header.
      if (offset < limit) {
        size_t got = 0;
        KV_RETURN_IF_ERROR(ReadBlock(*seg.file, offset, block, &got));
        if (!AllZero(block.span().first(got))) {
          AddRegion(&check, offset, seg.file_bytes, "record: truncated header (the file ends)");
        }
      }
      break;
    }
  }
  if (seg.file_bytes > seg.segment_bytes) {
    AddRegion(&check, seg.segment_bytes, seg.file_bytes,
              "bytes past the segment size of " + std::to_string(seg.segment_bytes));
  }
  return check;
}

}  // namespace kvtier::ssd
