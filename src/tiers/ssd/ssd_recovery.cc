// See ssd_recovery.h and docs/ssd_format.md §5.
#include "tiers/ssd/ssd_recovery.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "core/aligned_buffer.h"
#include "core/assert.h"
#include "tiers/ssd/ssd_dir_lock.h"
#include "tiers/ssd/ssd_manifest.h"

namespace kvtier::ssd {
namespace {

// Reads of a segment scan start small, since a scan from a checkpoint usually finds the
// unwritten tail at once, and double up to kScanChunkBytes for a scan through records.
constexpr size_t kScanFirstReadBytes = 256 * kKiB;
constexpr size_t kScanChunkBytes = 8 * kMiB;

std::string JoinPath(const std::string& dir, const std::string& name) { return dir + "/" + name; }

// Reads exactly dst.size() bytes at `offset`; *complete is false at end of file.
Status ReadFull(File& file, uint64_t offset, std::span<std::byte> dst, bool* complete) {
  size_t got = 0;
  KV_RETURN_IF_ERROR(file.ReadAt(offset, dst, &got));
  *complete = got == dst.size();
  return Status::Ok();
}

Status OpenSegment(Env* env, const std::string& path, DirectIo direct, SegmentFile* seg) {
  Result<std::unique_ptr<File>> opened = env->OpenFile(
      path, {.mode = OpenMode::kReadOnly,
             .direct = direct,
             .kind = FileKind::kRegular,
             .links = Links::kRefuse});
  if (!opened.ok() && opened.status().IsInvalidArgument()) {
    seg->bad = Status::Corruption(opened.status().message());  // Not a regular file.
    return Status::Ok();
  }
  if (!opened.ok()) return opened.status();
  seg->file = std::move(opened).value();
  KV_ASSIGN_OR_RETURN(seg->file_bytes, seg->file->Size());
  KV_ASSIGN_OR_RETURN(AlignedBuffer block, AlignedBuffer::Allocate(kSegmentHeaderBytes));
  bool complete = false;
  KV_RETURN_IF_ERROR(ReadFull(*seg->file, 0, block.span(), &complete));
  Result<SegmentHeader> h = complete ? DecodeSegmentHeader(block.span())
                                     : Result<SegmentHeader>(Status::Corruption("short header"));
  if (h.ok() && h->segment_id != seg->segment_id) {
    h = Status::Corruption("segment header names another segment");
  }
  if (h.ok() && (h->segment_bytes < kSegmentBytesMin || h->segment_bytes > kSegmentBytesMax ||
                 h->segment_bytes % kDirectIoAlignment != 0)) {
    h = Status::Corruption("segment header: bad segment size");
  }
  if (!h.ok()) {
    seg->bad = h.status().WithContext(path);
    seg->file.reset();
    seg->file_bytes = 0;
    return Status::Ok();
  }
  seg->segment_bytes = h->segment_bytes;
  seg->created_wall_us = h->created_wall_us;
  return Status::Ok();
}

// Installs `h` (found at `offset` of its segment) if it is newer than what the index and the
// tombstones seen so far say about its key.
// A re-appended tombstone keeps its sequence, so an equal sequence is a copy of one tombstone.
void Apply(const RecordHeader& h, uint64_t offset, RecoveredState* st) {
  ++st->stats.records_scanned;
  if (h.sealed()) ++st->stats.sealed_records;
  st->next_sequence = std::max(st->next_sequence, h.sequence + 1);
  auto tomb = st->tombstones.find(h.key);
  if (tomb != st->tombstones.end() && tomb->second.sequence > h.sequence) return;
  auto it = st->index.find(h.key);
  if (it != st->index.end() && it->second.sequence > h.sequence) return;
  if (h.tombstone()) {
    ++st->stats.tombstones_seen;
    st->tombstones[h.key] = LiveTombstone{.segment_id = h.segment_id, .sequence = h.sequence};
    if (it != st->index.end()) st->index.erase(it);
    return;
  }
  st->index[h.key] = IndexEntry{.segment_id = h.segment_id,
                                .segment_offset = static_cast<uint32_t>(offset),
                                .payload_bytes = h.payload_bytes,
                                .raw_bytes = h.raw_bytes,
                                .codec_id = h.codec_id,
                                .referenced = false,
                                .sequence = h.sequence,
                                .expiry_wall_us = h.expiry_wall_us};
}

// Corruption naming the first thing about `ck` that does not fit the configuration, the
// directories' MANIFEST or the segments on disk (beyond what DecodeCheckpoint checked).
Status CheckCheckpoint(const Checkpoint& ck, const RecoverOptions& o, const DirListing& listing) {
  if (ck.dir_count != o.dirs.size() || ck.segment_bytes != o.segment_bytes) {
    return Status::Corruption("checkpoint: written for " + std::to_string(ck.dir_count) +
                              " directories of " + std::to_string(ck.segment_bytes) +
                              "-byte segments, the cache has " + std::to_string(o.dirs.size()) +
                              " of " + std::to_string(o.segment_bytes));
  }
  // Version 1 and 2 files carry no cache id (all zero) and are read as before.
  const std::array<uint8_t, 16> none{};
  if (ck.cache_id != none && o.cache_id != none && ck.cache_id != o.cache_id) {
    return Status::Corruption("checkpoint: written for cache " + CacheIdHex(ck.cache_id) +
                              ", the directories belong to cache " + CacheIdHex(o.cache_id));
  }
  for (const CheckpointSegment& s : ck.segments) {
    auto f = std::lower_bound(
        listing.segments.begin(), listing.segments.end(), s.segment_id,
        [](const SegmentFile& a, uint64_t id) { return a.segment_id < id; });
    if (f == listing.segments.end() || f->segment_id != s.segment_id || !f->bad.ok()) continue;
    if (s.scan_from > f->segment_bytes || s.scan_from > f->file_bytes) {
      return Status::Corruption("checkpoint: segment " + std::to_string(s.segment_id) +
                                " scan_from " + std::to_string(s.scan_from) + " is past its " +
                                std::to_string(f->file_bytes) + "-byte file");
    }
  }
  return Status::Ok();
}

// Loads the checkpoint of dirs[0] if it is usable; returns each listed segment's scan_from.
std::unordered_map<uint64_t, uint64_t> LoadCheckpoint(Env* env, const RecoverOptions& o,
                                                      const DirListing& listing, RecoveredState* st,
                                                      Logger* logger) {
  std::unordered_map<uint64_t, uint64_t> scan_from;
  const uint64_t max_bytes = o.capacity_bytes == 0
                                 ? kSsdCheckpointBytesMax
                                 : CheckpointBytesMax(o.capacity_bytes, o.segment_bytes,
                                                      o.dirs.size());
  Result<Checkpoint> ck = ReadCheckpointFile(env, JoinPath(o.dirs[0], kCheckpointName), max_bytes);
  Status usable = ck.ok() ? CheckCheckpoint(*ck, o, listing) : ck.status();
  if (!usable.ok()) {
    if (!usable.IsNotFound()) {
      st->stats.checkpoint_rejected = true;
      LogTo(logger, LogLevel::kWarn,
            "ssd: checkpoint ignored, scanning every segment: " + usable.ToString());
    }
    return scan_from;
  }
  for (const CheckpointSegment& s : ck->segments) {
    const bool present =
        std::any_of(listing.segments.begin(), listing.segments.end(), [&](const SegmentFile& f) {
          return f.segment_id == s.segment_id && f.bad.ok() && f.dir_index == s.dir_index;
        });
    if (present) scan_from[s.segment_id] = s.scan_from;
  }
  for (const auto& [key, entry] : ck->entries) {
    if (scan_from.count(entry.segment_id) == 0) continue;  // Its segment is gone.
    st->index[key] = entry;
    ++st->stats.checkpoint_entries;
  }
  for (const auto& [key, t] : ck->tombstones) {
    if (scan_from.count(t.segment_id) != 0) st->tombstones[key] = t;
  }
  st->next_sequence = std::max(st->next_sequence, ck->next_sequence);
  st->next_segment_id = std::max(st->next_segment_id, ck->next_segment_id);
  st->stats.checkpoint_used = true;
  return scan_from;
}

// A window over one segment file's bytes [begin_, begin_ + size_), refilled with large
// sequential reads as the scan moves forward. Why: reading each record's header block and then
// the record, one synchronous request at a time, scanned at 45-55 MB/s
// (docs/benchmarks-history.md §2); chunks of kScanChunkBytes let the disk stream. Bytes of a
// record that straddles the end of the window move to its front before the next read, so every
// read stays 4 KiB-aligned (O_DIRECT).
class ScanWindow {
 public:
  // `limit`: no byte at or past it is read (the segment's size).
  ScanWindow(File& file, uint64_t limit, HugePageBuffer* buffer)
      : file_(file), limit_(limit), buf_(*buffer) {}

  // Makes [offset, offset + n) available, reading if needed. `offset` is 4 KiB-aligned, at or
  // after the previous call's, and offset + n <= limit. *complete is false when the file ends
  // first. Fails only on read errors.
  Status Ensure(uint64_t offset, size_t n, bool* complete);
  std::span<const std::byte> At(uint64_t offset, size_t n) const {
    KV_DCHECK(offset >= begin_ && offset + n <= begin_ + size_);
    return std::span<const std::byte>(buf_.data() + (offset - begin_), n);
  }

 private:
  File& file_;
  const uint64_t limit_;
  HugePageBuffer& buf_;
  uint64_t begin_ = 0;
  size_t size_ = 0;
  bool eof_ = false;  // A read came back short: nothing after begin_ + size_ exists.
  size_t read_bytes_ = kScanFirstReadBytes;  // Window size of the next read.
};

Status ScanWindow::Ensure(uint64_t offset, size_t n, bool* complete) {
  KV_DCHECK(offset >= begin_);
  KV_DCHECK(IsAligned(offset, kDirectIoAlignment));
  KV_DCHECK(offset <= limit_ && n <= limit_ - offset);
  *complete = offset + n <= begin_ + size_;
  if (*complete || eof_) return Status::Ok();
  const size_t keep = offset < begin_ + size_ ? static_cast<size_t>(begin_ + size_ - offset) : 0;
  // The next read size, or less when the segment ends sooner; more for a larger record.
  const size_t capacity =
      std::max<size_t>(n, static_cast<size_t>(std::min<uint64_t>(read_bytes_, limit_ - offset)));
  if (capacity > buf_.size()) {
    // Recovery and the tools only, never the data path; the caller keeps the buffer.
    KV_ASSIGN_OR_RETURN(HugePageBuffer bigger, HugePageBuffer::Allocate(capacity));
    if (keep > 0) std::memcpy(bigger.data(), buf_.data() + (offset - begin_), keep);
    buf_ = std::move(bigger);
  } else if (keep > 0) {
    std::memmove(buf_.data(), buf_.data() + (offset - begin_), keep);
  }
  begin_ = offset;
  size_ = keep;
  const size_t want =
      static_cast<size_t>(std::min<uint64_t>(std::max(read_bytes_, n), limit_ - begin_)) - size_;
  size_t got = 0;
  KV_RETURN_IF_ERROR(file_.ReadAt(begin_ + size_, buf_.span().subspan(size_, want), &got));
  size_ += got;
  eof_ = got < want;
  read_bytes_ = std::min(2 * read_bytes_, kScanChunkBytes);
  *complete = offset + n <= begin_ + size_;
  return Status::Ok();
}

}  // namespace

Result<SegmentScan> ScanSegment(
    File& file, uint64_t segment_id, uint64_t segment_bytes, uint64_t start_offset,
    const std::function<void(const RecordHeader&, uint64_t offset)>& visit) {
  HugePageBuffer scratch;
  return ScanSegment(file, segment_id, segment_bytes, start_offset, visit, &scratch);
}

Result<SegmentScan> ScanSegment(
    File& file, uint64_t segment_id, uint64_t segment_bytes, uint64_t start_offset,
    const std::function<void(const RecordHeader&, uint64_t offset)>& visit,
    HugePageBuffer* scratch) {
  ScanWindow window(file, segment_bytes, scratch);
  SegmentScan scan;
  uint64_t offset = std::max<uint64_t>(start_offset, kSegmentHeaderBytes);
  scan.end_offset = offset;
  // Callers pass offsets from disk (a checkpoint's scan_from): one outside the segment or off
  // the 4 KiB grid is an invalid start, not a read at a wrapped offset.
  if (segment_bytes < kSegmentBytesMin || offset > segment_bytes ||
      offset % kDirectIoAlignment != 0) {
    scan.stop = ScanStop::kInvalid;
    scan.reason = Status::Corruption("scan: start offset " + std::to_string(offset) +
                                     " outside the " + std::to_string(segment_bytes) +
                                     "-byte segment or not 4 KiB-aligned");
    return scan;
  }
  // Written as a subtraction so that no offset near 2^64 can wrap past the check.
  while (offset <= segment_bytes - kDirectIoAlignment) {
    bool complete = false;
    KV_RETURN_IF_ERROR(window.Ensure(offset, kDirectIoAlignment, &complete));
    if (!complete) return scan;  // End of file on a record boundary (or a torn last block).
    const std::span<const std::byte> block = window.At(offset, kDirectIoAlignment);
    if (IsZeroHeader(block)) {
      scan.stop = ScanStop::kZeroTail;
      return scan;
    }
    Result<RecordHeader> h = DecodeRecordHeader(block);
    Status placed =
        h.ok() ? CheckRecordPlacement(*h, segment_id, offset, segment_bytes) : h.status();
    const uint64_t record_bytes = h.ok() ? RecordBytesForPayload(h->payload_bytes) : 0;
    if (placed.ok()) {
      KV_RETURN_IF_ERROR(window.Ensure(offset, record_bytes, &complete));
      placed = complete
                   ? CheckPayload(*h, window.At(offset + kRecordPayloadOffset, h->payload_bytes))
                   : Status::Corruption("record: truncated payload");
    }
    if (!placed.ok()) {
      scan.stop = ScanStop::kInvalid;
      scan.reason = placed;
      return scan;
    }
    visit(*h, offset);
    offset += record_bytes;
    scan.end_offset = offset;
  }
  return scan;
}

Result<DirListing> ListSegments(Env* env, const std::vector<std::string>& dirs, DirectIo direct) {
  DirListing listing;
  for (size_t d = 0; d < dirs.size(); ++d) {
    KV_ASSIGN_OR_RETURN(std::vector<std::string> names, env->ListDir(dirs[d]));
    for (const std::string& name : names) {
      SegmentFile seg;
      if (!ParseSegmentFileName(name, &seg.segment_id)) {
        if (name != kCheckpointName && name != kManifestName &&
            !IsTempFileName(name, kManifestTempName) && name != kLockFileName &&
            name != kServeStateName && !IsTempFileName(name, kServeStateTempName)) {
          listing.other_files.push_back(JoinPath(dirs[d], name));
        }
        continue;
      }
      seg.dir_index = static_cast<uint32_t>(d);
      seg.path = JoinPath(dirs[d], name);
      if (!SegmentIdInRange(seg.segment_id)) {
        // Never made by a tier (ids stay in range), so it is not opened: a bad segment (§1).
        seg.bad = Status::Corruption(seg.path + ": segment id " + std::to_string(seg.segment_id) +
                                     " is outside [1, 2^63-1], the ids a cache gives out");
        listing.segments.push_back(std::move(seg));
        continue;
      }
      KV_RETURN_IF_ERROR(OpenSegment(env, seg.path, direct, &seg));
      listing.segments.push_back(std::move(seg));
    }
  }
  std::sort(listing.segments.begin(), listing.segments.end(),
            [](const SegmentFile& a, const SegmentFile& b) { return a.segment_id < b.segment_id; });
  return listing;
}

Result<Checkpoint> ReadCheckpointFile(Env* env, const std::string& path, uint64_t max_bytes) {
  if (!env->FileExists(path)) return Status::NotFound(path);
  Result<std::unique_ptr<File>> opened =
      env->OpenFile(path, {.mode = OpenMode::kReadOnly,
                           .kind = FileKind::kRegular,
                           .links = Links::kRefuse});
  if (!opened.ok() && opened.status().IsInvalidArgument()) {
    return Status::Corruption(opened.status().message());  // A FIFO, directory, link, ...
  }
  if (!opened.ok()) return opened.status();
  File& f = **opened;
  KV_ASSIGN_OR_RETURN(const uint64_t size, f.Size());
  if (size > max_bytes) {
    return Status::Corruption(path + ": " + std::to_string(size) + " bytes, more than the " +
                              std::to_string(max_bytes) + " a checkpoint of this cache can have");
  }
  if (size < kCheckpointHeaderBytes + kCheckpointTrailerBytes) {
    return Status::Corruption(path + ": " + std::to_string(size) + " bytes, shorter than a header");
  }
  std::vector<std::byte> bytes(kCheckpointHeaderBytes);
  bool complete = false;
  KV_RETURN_IF_ERROR(ReadFull(f, 0, bytes, &complete));
  if (!complete) return Status::Corruption(path + ": short read");
  // The counts must match the size before the entries are read (or memory is taken for them).
  Result<CheckpointHeader> header = DecodeCheckpointHeader(bytes, size);
  if (!header.ok()) return header.status().WithContext(path);
  bytes.resize(size);
  const std::span<std::byte> rest = std::span(bytes).subspan(kCheckpointHeaderBytes);
  KV_RETURN_IF_ERROR(ReadFull(f, kCheckpointHeaderBytes, rest, &complete));
  if (!complete) return Status::Corruption(path + ": short read");
  Result<Checkpoint> ck = DecodeCheckpoint(bytes);
  if (!ck.ok()) return ck.status().WithContext(path);
  return ck;
}

namespace {

// Removes the temporaries a crash left (checkpoints and manifests being written). unlink(2)
// removes a link itself, never what it names. Not fatal: a leftover that cannot be removed (a
// directory of that name) is logged and ignored; new temporaries never reuse its name.
Status RemoveLeftoverTemps(Env* env, const std::vector<std::string>& dirs, Logger* logger) {
  for (const std::string& dir : dirs) {
    KV_ASSIGN_OR_RETURN(std::vector<std::string> names, env->ListDir(dir));
    for (const std::string& name : names) {
      if (!IsTempFileName(name, kCheckpointTempName) && !IsTempFileName(name, kManifestTempName)) {
        continue;
      }
      Status removed = env->RemoveFile(JoinPath(dir, name));
      if (!removed.ok()) LogTo(logger, LogLevel::kWarn, "ssd: " + removed.ToString());
    }
  }
  return Status::Ok();
}

}  // namespace

Result<RecoveredState> Recover(Env* env, const RecoverOptions& o, Logger* logger) {
  KV_CHECK(!o.dirs.empty());
  KV_RETURN_IF_ERROR(RemoveLeftoverTemps(env, o.dirs, logger));
  KV_ASSIGN_OR_RETURN(DirListing listing, ListSegments(env, o.dirs, o.direct));
  for (const std::string& other : listing.other_files) {
    LogTo(logger, LogLevel::kInfo, "ssd: ignoring foreign file " + other);
  }
  RecoveredState st;
  std::unordered_map<uint64_t, uint64_t> scan_from = LoadCheckpoint(env, o, listing, &st, logger);
  HugePageBuffer scratch;  // One scan window for every segment.
  for (SegmentFile& seg : listing.segments) {
    // A bad segment in range may be one whose creation was cut short: its id stays taken. One out
    // of range never counts, so that the next id can neither wrap nor leave the range.
    if (SegmentIdInRange(seg.segment_id)) {
      st.next_segment_id = std::max(st.next_segment_id, seg.segment_id + 1);
    }
    if (!seg.bad.ok()) {
      ++st.stats.corrupt_segments;
      LogTo(logger, LogLevel::kWarn, "ssd: bad segment, skipped: " + seg.bad.ToString());
      continue;
    }
    auto from = scan_from.find(seg.segment_id);
    const uint64_t start = from == scan_from.end() ? kSegmentHeaderBytes : from->second;
    KV_ASSIGN_OR_RETURN(
        SegmentScan scan,
        ScanSegment(
            *seg.file, seg.segment_id, seg.segment_bytes, start,
            [&](const RecordHeader& h, uint64_t offset) { Apply(h, offset, &st); }, &scratch));
    if (scan.stop == ScanStop::kInvalid) {
      ++st.stats.torn_or_corrupt_tails;
      LogTo(logger, LogLevel::kInfo,
            "ssd: scan of " + seg.path + " stopped at offset " + std::to_string(scan.end_offset) +
                ": " + scan.reason.ToString());
    }
    st.segments.push_back({.segment = std::move(seg), .end_offset = scan.end_offset});
  }
  return st;
}

Result<RecoveredState> Recover(Env* env, const std::vector<std::string>& dirs,
                               uint64_t segment_bytes, DirectIo direct, Logger* logger) {
  KV_CHECK(!dirs.empty());
  RecoverOptions o{.dirs = dirs, .segment_bytes = segment_bytes, .direct = direct};
  Result<Manifest> manifest = ReadManifest(env, dirs[0]);
  if (manifest.ok()) o.cache_id = manifest->cache_id;
  return Recover(env, o, logger);
}

}  // namespace kvtier::ssd
