// SsdTier's background work: periodic fdatasync, checkpoints (docs/ssd_format.md §4) and
// segment-granular reclaim (§7). One maintenance thread runs it; Flush, Checkpoint and
// ReclaimOldestSegment let callers and tests run it on demand. See ssd_tier.h.
#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

#include "core/aligned_buffer.h"
#include "core/assert.h"
#include "tiers/ssd_record.h"
#include "tiers/ssd_tier.h"

namespace kvtier {

using ssd::IndexEntry;

namespace {
constexpr uint32_t kMaintenanceTickMs = 20;
constexpr size_t kReappendBatch = 64;
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
    MutexLock lock(&mu_);
    ++stats_.io_errors;
    auto it = segments_.find(id);
    if (it != segments_.end()) it->second.unsynced = true;
    if (first.ok()) first = s.WithContext("syncing " + file->path());
  }
  if (first.ok() && durable > durable_sequence_.load()) durable_sequence_.store(durable);
  return first;
}

Status SsdTier::WriteCheckpoint() {
  MutexLock serial(&checkpoint_mu_);
  ssd::Checkpoint ck;
  {
    MutexLock lock(&mu_);
    ck.dir_count = static_cast<uint32_t>(options_.dirs.size());
    ck.segment_bytes = options_.segment_bytes;
    ck.next_sequence = next_sequence_;
    ck.next_segment_id = next_segment_id_;
    ck.written_wall_us = clock_->WallMicros();
    for (const auto& [id, seg] : segments_) {
      const uint64_t scan_from = seg.in_flight.empty() ? seg.append_offset : *seg.in_flight.begin();
      ck.segments.push_back({.segment_id = id, .dir_index = seg.dir, .scan_from = scan_from});
    }
    ck.entries.reserve(index_.size());
    for (const auto& [key, e] : index_) ck.entries.emplace_back(key, e);
    checkpoint_wanted_ = false;
  }
  // Every entry of the snapshot must point at durable bytes before the checkpoint names them.
  KV_RETURN_IF_ERROR(SyncSegments());
  const std::string bytes = ssd::EncodeCheckpoint(ck);
  const std::string dir = DirPath(0);
  const std::string tmp = dir + "/" + ssd::kCheckpointTempName;
  KV_ASSIGN_OR_RETURN(std::unique_ptr<File> f, env_->OpenFile(tmp, {.mode = OpenMode::kTruncate}));
  KV_RETURN_IF_ERROR(
      f->WriteAt(0, std::span(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size())));
  KV_RETURN_IF_ERROR(f->Sync());
  KV_RETURN_IF_ERROR(f->Close());
  KV_RETURN_IF_ERROR(env_->RenameFile(tmp, dir + "/" + ssd::kCheckpointName));
  KV_RETURN_IF_ERROR(env_->SyncDir(dir));
  MutexLock lock(&mu_);
  ++stats_.checkpoints;
  return Status::Ok();
}

Status SsdTier::ReclaimOldestSegment() {
  MutexLock serial(&checkpoint_mu_);
  uint64_t id = 0;
  std::shared_ptr<File> file;
  std::vector<std::pair<BlockKey, IndexEntry>> keep;
  {
    MutexLock lock(&mu_);
    if (segments_.empty()) return Status::NotFound("ssd: no segment to reclaim");
    auto oldest = segments_.begin();
    id = oldest->first;
    Segment& seg = oldest->second;
    if (!seg.in_flight.empty()) return Status::Busy("ssd: oldest segment has writes in flight");
    seg.sealed = true;
    if (open_segment_[seg.dir] == id) open_segment_[seg.dir] = 0;
    file = seg.file;
    const uint64_t now_wall = clock_->WallMicros();
    for (const auto& [key, e] : index_) {
      if (e.segment_id == id && e.referenced && !e.Expired(now_wall)) keep.emplace_back(key, e);
    }
  }
  KV_RETURN_IF_ERROR(Reappend(keep, file));
  uint32_t dir = 0;
  {
    MutexLock lock(&mu_);
    Segment& seg = segments_.at(id);
    dir = seg.dir;
    KV_CHECK(seg.in_flight.empty());  // Sealed before: nothing can have been reserved in it.
    for (auto it = index_.begin(); it != index_.end();) {
      if (it->second.segment_id == id) {
        live_bytes_ -= it->second.record_bytes();
        ++stats_.dropped_blocks;
        it = index_.erase(it);
      } else {
        ++it;
      }
    }
    segments_.erase(id);
    ++stats_.reclaimed_segments;
    changed_.SignalAll();
  }
  const std::string path = DirPath(dir) + "/" + ssd::SegmentFileName(id);
  KV_RETURN_IF_ERROR(env_->RemoveFile(path));
  return env_->SyncDir(DirPath(dir));
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
      if (!h.ok() || h->key != key || h->sequence != e.sequence) {
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
      mode.expect_sequence.push_back(e.sequence);
      buffers.push_back(std::move(buf));
    }
    if (writes.empty()) continue;
    Mutex mu;
    CondVar cv(&mu);
    bool finished = false;
    Status result;
    WriteInternal(writes, std::move(mode), [&](Status s) {
      MutexLock lock(&mu);
      result = std::move(s);
      finished = true;
      cv.SignalAll();
    });
    {
      MutexLock lock(&mu);
      while (!finished) cv.Wait();
    }
    KV_RETURN_IF_ERROR(result);
    uint64_t reappended = 0;
    for (const SsdBlockWrite& w : writes) reappended += w.status.ok() ? 1u : 0u;
    MutexLock lock(&mu_);
    stats_.reappended_blocks += reappended;
  }
  return Status::Ok();
}

}  // namespace kvtier
