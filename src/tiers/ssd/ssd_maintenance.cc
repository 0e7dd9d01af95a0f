// SsdTier's background work: periodic fdatasync, checkpoints (docs/ssd_format.md §4) and
// segment-granular reclaim (§7). One maintenance thread runs it; Flush, Checkpoint and
// ReclaimOldestSegment let callers and tests run it on demand. See ssd_tier.h.
#include <algorithm>
#include <chrono>
#include <string>
#include <unordered_set>
#include <utility>

#include "core/aligned_buffer.h"
#include "core/assert.h"
#include "tiers/ssd/ssd_manifest.h"
#include "tiers/ssd_record.h"
#include "tiers/ssd/ssd_tier.h"

namespace kvtier {

using ssd::IndexEntry;

namespace {
constexpr uint32_t kMaintenanceTickMs = 20;
constexpr size_t kReappendBatch = 64;
// Not a failure: the oldest segment's writes complete by themselves and the next tick retries.
constexpr const char* kOldestInFlight = "ssd: oldest segment has writes in flight";
}  // namespace

bool SsdTier::ReclaimNeededLocked() const {
  return segments_.size() + options_.dirs.size() > segments_max_;
}

void SsdTier::MaintenanceLoop() {
  uint64_t last_sync_us = clock_->NowMicros();
  uint64_t last_checkpoint_us = last_sync_us;
  mu_.Lock();
  while (!stopping_) {
    changed_.WaitFor(std::chrono::milliseconds(kMaintenanceTickMs));
    if (stopping_) break;
    const bool reclaim = ReclaimNeededLocked();
    const bool checkpoint_wanted = checkpoint_wanted_ && writes_in_flight_ == 0;
    mu_.Unlock();
    if (reclaim) {
      Status s = ReclaimOldestSegment();
      if (!s.ok() && !s.IsBusy()) LogTo(logger_, LogLevel::kWarn, "ssd: reclaim: " + s.ToString());
    }
    const uint64_t now = clock_->NowMicros();
    if (options_.sync == SsdSyncMode::kPeriodic &&
        now - last_sync_us >= uint64_t{options_.sync_interval_ms} * 1000) {
      last_sync_us = now;
      Status s = SyncSegments();
      if (!s.ok()) LogTo(logger_, LogLevel::kWarn, "ssd: periodic sync: " + s.ToString());
    }
    const bool due = options_.checkpoint_interval_ms != 0 &&
                     now - last_checkpoint_us >= uint64_t{options_.checkpoint_interval_ms} * 1000;
    if (checkpoint_wanted || due) {
      last_checkpoint_us = now;
      Status s = WriteCheckpoint();
      if (!s.ok()) LogTo(logger_, LogLevel::kWarn, "ssd: checkpoint: " + s.ToString());
    }
    mu_.Lock();
  }
  mu_.Unlock();
}

Status SsdTier::Flush() { return SyncSegments(); }

Status SsdTier::Checkpoint() { return WriteCheckpoint(); }

Status SsdTier::SyncSegments() {
  uint64_t failures = 0;
  {
    MutexLock lock(&mu_);
    failures = sync_failures_;
  }
  return SyncSegmentsSince(failures);
}

// Why sync_mu_ is held across the fsyncs: a pass clears a segment's `unsynced` flag before its
// fsync. Without the serialisation, a second caller would find nothing unsynced while the first
// pass's fsync still ran (or was about to fail), and return OK for writes that are not durable.
// Holding it, a caller waits for the running pass, then runs its own, which retries what failed.
Status SsdTier::SyncSegmentsSince(uint64_t failures) {
  MutexLock serial(&sync_mu_);
  std::vector<std::pair<uint64_t, std::shared_ptr<File>>> files;
  uint64_t durable = 0;
  {
    MutexLock lock(&mu_);
    durable = DurableCandidateLocked();
    for (auto& [id, seg] : segments_) {
      if (!seg.unsynced) continue;
      seg.unsynced = false;
      files.emplace_back(id, seg.file);
    }
  }
  Status first;
  for (auto& [id, file] : files) {
    Status s = file->Sync();
    if (s.ok()) continue;
    if (first.ok()) first = s.WithContext("syncing " + file->path());
  }
  MutexLock lock(&mu_);
  if (!first.ok()) {
    // Flag them again (the next pass retries) before the failure is counted, so that a caller
    // that reads the count after this finds the flags set.
    for (auto& [id, file] : files) {
      auto it = segments_.find(id);
      if (it != segments_.end()) it->second.unsynced = true;
    }
    ++stats_.io_errors;
    ++sync_failures_;
    last_sync_error_ = first;
    return first;
  }
  // A pass that ran while this caller waited may have covered its writes and failed; a retry
  // that succeeds does not prove those bytes reached the disk (a failed fdatasync may have
  // dropped the dirty pages), so the caller hears of the failure.
  if (sync_failures_ != failures) {
    return last_sync_error_.WithContext("an fsync covering these writes failed");
  }
  if (durable > durable_sequence_.load()) durable_sequence_.store(durable);
  return Status::Ok();
}

Status SsdTier::WriteCheckpoint() {
  MutexLock serial(&checkpoint_mu_);
  ssd::Checkpoint ck;
  uint64_t failures = 0;
  {
    MutexLock lock(&mu_);
    failures = sync_failures_;
    ck.dir_count = static_cast<uint32_t>(options_.dirs.size());
    ck.segment_bytes = options_.segment_bytes;
    ck.next_sequence = next_sequence_;
    ck.next_segment_id = next_segment_id_;
    ck.written_wall_us = clock_->WallMicros();
    ck.cache_id = cache_id_;
    for (const auto& [id, seg] : segments_) {
      const uint64_t scan_from = seg.in_flight.empty() ? seg.append_offset : *seg.in_flight.begin();
      ck.segments.push_back({.segment_id = id, .dir_index = seg.dir, .scan_from = scan_from});
    }
    ck.entries.reserve(index_.size());
    for (const auto& [key, e] : index_) ck.entries.emplace_back(key, e);
    ck.tombstones.reserve(tombstones_.size());
    for (const auto& [key, t] : tombstones_) ck.tombstones.emplace_back(key, t);
    checkpoint_wanted_ = false;
  }
  // Every entry of the snapshot must point at durable bytes before the checkpoint names them,
  // including entries whose fsync another pass was running when the snapshot was taken.
  KV_RETURN_IF_ERROR(SyncSegmentsSince(failures));
  const std::string bytes = ssd::EncodeCheckpoint(ck);
  KV_RETURN_IF_ERROR(ssd::ReplaceFileDurably(env_, DirPath(0), ssd::kCheckpointName,
                                             ssd::kCheckpointTempName, bytes, options_.file_mode));
  MutexLock lock(&mu_);
  ++stats_.checkpoints;
  return Status::Ok();
}

Status SsdTier::ReclaimOldestSegment() {
  MutexLock serial(&checkpoint_mu_);
  const Status s = ReclaimOldestLocked();
  MutexLock lock(&mu_);
  // The reclaim's segments past the limit take every writer's records again.
  for (auto& [id, seg] : segments_) seg.reclaim_only = false;
  reclaim_bytes_left_ = 0;
  if (s.ok()) {
    last_reclaim_error_ = Status::Ok();
  } else if (!s.IsNotFound() && s.message() != kOldestInFlight) {
    last_reclaim_error_ = s;  // Told to writers that give up waiting for a segment.
  }
  changed_.SignalAll();
  return s;
}

Status SsdTier::ReclaimOldestLocked() {
  uint64_t id = 0;
  std::shared_ptr<File> file;
  std::vector<std::pair<BlockKey, IndexEntry>> keep;
  std::vector<std::pair<BlockKey, ssd::LiveTombstone>> tombs;
  {
    MutexLock lock(&mu_);
    if (segments_.empty()) return Status::NotFound("ssd: no segment to reclaim");
    auto oldest = segments_.begin();
    id = oldest->first;
    Segment& seg = oldest->second;
    if (!seg.in_flight.empty()) return Status::Busy(kOldestInFlight);
    reclaim_limit_ = segments_.size() + options_.dirs.size();
    seg.sealed = true;
    if (open_segment_[seg.dir] == id) open_segment_[seg.dir] = 0;
    file = seg.file;
    CollectReclaimLocked(id, &keep, &tombs);
    reclaim_bytes_left_ = tombs.size() * ssd::RecordBytesForPayload(0);
    for (const auto& [key, e] : keep) reclaim_bytes_left_ += e.record_bytes();
  }
  KV_RETURN_IF_ERROR(Reappend(keep, file));
  KV_RETURN_IF_ERROR(ReappendTombstones(id, tombs));
  // The copies must be durable before the file that holds the originals goes (kNone and
  // kPeriodic; kPerBatch synced them with their batch).
  if (!keep.empty() || !tombs.empty()) KV_RETURN_IF_ERROR(SyncSegments());
  uint32_t dir = 0;
  {
    MutexLock lock(&mu_);
    dir = segments_.at(id).dir;
    DropSegmentLocked(id);
    ++stats_.reclaimed_segments;
    ++segments_freed_;
    changed_.SignalAll();
  }
  const std::string path = DirPath(dir) + "/" + ssd::SegmentFileName(id);
  KV_RETURN_IF_ERROR(env_->RemoveFile(path));
  return env_->SyncDir(DirPath(dir));
}

void SsdTier::CollectReclaimLocked(uint64_t id, std::vector<std::pair<BlockKey, IndexEntry>>* keep,
                                   std::vector<std::pair<BlockKey, ssd::LiveTombstone>>* tombs) {
  const Segment& seg = segments_.at(id);
  // The smallest sequence any other segment may hold: a tombstone above it still has an older
  // record of its key to hide (with several directories, segment ids are not in write order).
  uint64_t others_min = UINT64_MAX;
  for (const auto& [other_id, other] : segments_) {
    if (other_id != id) others_min = std::min(others_min, other.min_sequence);
  }
  const uint64_t now_wall = clock_->WallMicros();
  std::unordered_set<BlockKey> seen;
  for (const BlockKey& key : seg.keys) {
    if (!seen.insert(key).second) continue;
    auto it = index_.find(key);
    if (it != index_.end() && it->second.segment_id == id && it->second.referenced &&
        !it->second.Expired(now_wall)) {
      keep->emplace_back(key, it->second);
    }
    auto t = tombstones_.find(key);
    if (t != tombstones_.end() && t->second.segment_id == id && t->second.sequence > others_min) {
      tombs->emplace_back(key, t->second);
    }
  }
}

// Forgets segment `id`: its index entries and the tombstones still located in it (those worth
// keeping were re-appended and point elsewhere now).
void SsdTier::DropSegmentLocked(uint64_t id) {
  Segment& seg = segments_.at(id);
  KV_CHECK(seg.in_flight.empty());  // Sealed before: nothing can have been reserved in it.
  for (const BlockKey& key : seg.keys) {
    auto it = index_.find(key);
    if (it != index_.end() && it->second.segment_id == id) {
      live_bytes_ -= it->second.record_bytes();
      ++stats_.dropped_blocks;
      index_.erase(it);
    }
    auto t = tombstones_.find(key);
    if (t != tombstones_.end() && t->second.segment_id == id) tombstones_.erase(t);
  }
  segments_.erase(id);
}

Status SsdTier::ReappendTombstones(
    uint64_t id, const std::vector<std::pair<BlockKey, ssd::LiveTombstone>>& tombs) {
  for (size_t start = 0; start < tombs.size(); start += kReappendBatch) {
    const size_t n = std::min(kReappendBatch, tombs.size() - start);
    std::vector<SsdBlockWrite> writes(n);
    WriteMode mode;
    mode.bypass_policy = true;
    mode.over_capacity = true;
    mode.tombstone = true;
    for (size_t k = 0; k < n; ++k) {
      writes[k].key = tombs[start + k].first;
      mode.keep_sequence.push_back(tombs[start + k].second.sequence);
    }
    KV_RETURN_IF_ERROR(WriteInternalSync(writes, std::move(mode)));
    MutexLock lock(&mu_);
    for (const SsdBlockWrite& w : writes) {
      // A tombstone not copied is fine only when a newer erase replaced it; otherwise the
      // segment must stay (the reclaim fails and is retried later).
      auto t = tombstones_.find(w.key);
      if (!w.status.ok() && t != tombstones_.end() && t->second.segment_id == id) return w.status;
    }
  }
  return Status::Ok();
}

Status SsdTier::Reappend(const std::vector<std::pair<BlockKey, IndexEntry>>& entries,
                         const std::shared_ptr<File>& file) {
  for (size_t start = 0; start < entries.size(); start += kReappendBatch) {
    const size_t n = std::min(kReappendBatch, entries.size() - start);
    std::vector<AlignedBuffer> buffers;
    std::vector<SsdBlockWrite> writes;
    WriteMode mode;
    mode.bypass_policy = true;
    mode.over_capacity = true;
    for (size_t k = start; k < start + n; ++k) {
      const auto& [key, e] = entries[k];
      KV_ASSIGN_OR_RETURN(AlignedBuffer buf, AlignedBuffer::Allocate(e.record_bytes()));
      size_t got = 0;
      Status s = file->ReadAt(e.segment_offset, buf.span(), &got);
      std::span<const std::byte> payload;
      Result<ssd::RecordHeader> h =
          s.ok() && got == buf.size()
              ? ssd::DecodeRecord(buf.span(), e.segment_id, e.segment_offset, ssd::kSegmentBytesMax,
                                  &payload)
              : Result<ssd::RecordHeader>(Status::IoError("short read"));
      if (!h.ok() || h->key != key || h->sequence != e.sequence ||
          h->expiry_wall_us != e.expiry_wall_us) {
        MutexLock lock(&mu_);
        ++stats_.corrupt_records;
        continue;  // Dropped with the segment.
      }
      SsdBlockWrite w;
      w.key = key;
      w.layout_digest = h->layout_digest;
      w.codec_id = h->codec_id;
      w.raw_bytes = h->raw_bytes;
      w.payload = payload;
      writes.push_back(w);
      mode.expiry_wall_us.push_back(e.expiry_wall_us);
      mode.record_flags.push_back(h->flags);  // A sealed payload moves as it is.
      mode.expect_sequence.push_back(e.sequence);
      buffers.push_back(std::move(buf));
    }
    if (writes.empty()) continue;
    KV_RETURN_IF_ERROR(WriteInternalSync(writes, std::move(mode)));
    uint64_t reappended = 0;
    for (const SsdBlockWrite& w : writes) reappended += w.status.ok() ? 1u : 0u;
    MutexLock lock(&mu_);
    stats_.reappended_blocks += reappended;
  }
  return Status::Ok();
}

}  // namespace kvtier
