// SsdTier: open, the write and read paths, lookups and erase. Maintenance (sync, checkpoint,
// reclaim) is in ssd_maintenance.cc. See ssd_tier.h and docs/ssd_format.md.
#include "tiers/ssd/ssd_tier.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <utility>

#include "core/aligned_buffer.h"
#include "core/assert.h"
#include "policies/ssd_policy.h"
#include "tiers/ssd/ssd_io_worker.h"
#include "tiers/ssd/ssd_manifest.h"
#include "tiers/ssd/ssd_recovery.h"
#include "tiers/tier.h"

namespace kvtier {

using ssd::IndexEntry;
using ssd::RecordBytesForPayload;

// Bounds the memory a directory's staging pool pins at open.
constexpr uint64_t kStagingBytesPerDirMax = 4 * kGiB;

Status SsdTierOptions::Validate() const {
  if (keyring.has_value() && keyring->empty()) {
    return Status::InvalidArgument("ssd: the keyring for sealed records is empty");
  }
  if (dirs.empty() || dirs.size() > kSsdDirsMax) {
    return Status::InvalidArgument("ssd: dirs must hold 1 to 64 directories");
  }
  if (segment_bytes < ssd::kSegmentBytesMin || segment_bytes > ssd::kSegmentBytesMax ||
      segment_bytes % kDirectIoAlignment != 0) {
    return Status::InvalidArgument("ssd: segment_bytes must be a multiple of 4096 in 1 MiB..1 GiB");
  }
  if (capacity_bytes / segment_bytes < 2 * dirs.size() + 2) {
    return Status::InvalidArgument("ssd: capacity_bytes must hold 2 segments per directory + 2");
  }
  if (io_depth == 0 || io_depth > kIoDepthMax) return Status::InvalidArgument("ssd: io_depth");
  if (queue_jobs_max == 0 || queue_jobs_max > kSsdQueueJobsMax) {
    return Status::InvalidArgument("ssd: queue_jobs_max");
  }
  if (staging_buffer_bytes < kDirectIoAlignment || staging_buffer_bytes > kIoRequestBytesMax ||
      staging_buffer_bytes % kDirectIoAlignment != 0) {
    return Status::InvalidArgument(
        "ssd: staging_buffer_bytes must be a multiple of 4096 <= 64 MiB");
  }
  if (staging_buffers > ssd::StagingPool::kBuffersMax ||
      uint64_t{staging_buffers} * staging_buffer_bytes > kStagingBytesPerDirMax) {
    return Status::InvalidArgument("ssd: staging_buffers (at most 4096 and 4 GiB per directory)");
  }
  if (sync == SsdSyncMode::kPeriodic && sync_interval_ms == 0) {
    return Status::InvalidArgument("ssd: sync_interval_ms must be positive in kPeriodic");
  }
  if (file_mode != 0600 && file_mode != 0640 && file_mode != 0660) {
    char mode[16];
    std::snprintf(mode, sizeof(mode), "0%o", file_mode);
    return Status::InvalidArgument(std::string("ssd: file_mode must be 0600, 0640 or 0660, not ") +
                                   mode);
  }
  return Status::Ok();
}

uint32_t SsdTierOptions::dir_mode() const {
  // Search (x) goes with every read bit, so the group can list what it may read.
  return file_mode | ((file_mode & 0440) >> 2) | 0100;
}

SsdTier::SsdTier(const SsdTierOptions& options, Env* env)
    : options_(options), env_(env), clock_(env->clock()), logger_(env->logger()) {}

Result<std::unique_ptr<SsdTier>> SsdTier::Open(const SsdTierOptions& options, Env* env) {
  KV_RETURN_IF_ERROR(options.Validate());
  for (const std::string& dir : options.dirs) {
    KV_RETURN_IF_ERROR(env->CreateDirs(dir, options.dir_mode()));
  }
  // The locks come first: nothing in a directory is read, written or removed without them.
  KV_ASSIGN_OR_RETURN(std::vector<ssd::DirLock> locks,
                      ssd::AcquireAll(env, options.dirs, ssd::DirLockMode::kExclusive,
                                      options.file_mode));
  const bool sealed = options.keyring.has_value();
  KV_ASSIGN_OR_RETURN(std::vector<ssd::Manifest> manifests,
                      ssd::EnsureManifestSet(env, options.dirs, options.segment_bytes,
                                             options.file_mode, sealed));
  KV_ASSIGN_OR_RETURN(ssd::RecoveredState recovered,
                      ssd::Recover(env,
                                   {.dirs = options.dirs,
                                    .segment_bytes = options.segment_bytes,
                                    .capacity_bytes = options.capacity_bytes,
                                    .direct = options.direct_io,
                                    .cache_id = manifests[0].cache_id},
                                   env->logger()));
  if (!sealed && recovered.stats.sealed_records > 0) {
    // Sealed by a build that did not mark its MANIFEST: marked now, so that the next open is
    // refused at once even where a checkpoint spares it the scan (docs/ssd_format.md §8).
    KV_RETURN_IF_ERROR(ssd::EnsureManifestSet(env, options.dirs, options.segment_bytes,
                                              options.file_mode, /*sealed=*/true)
                           .status());
    return Status::InvalidArgument(
        "dir " + options.dirs[0] + " holds a sealed cache (" +
        std::to_string(recovered.stats.sealed_records) +
        " records encrypted at rest were found) and no key is configured: give the cache's keys " +
        "(ssd_key_file or ssd_key_env), or use another directory");
  }
  std::unique_ptr<SsdTier> tier(new SsdTier(options, env));
  {
    MutexLock lock(&tier->mu_);
    tier->locks_ = std::move(locks);
  }
  tier->cache_id_ = manifests[0].cache_id;
  KV_RETURN_IF_ERROR(tier->Start(&recovered));
  return tier;
}

Status SsdTier::Start(ssd::RecoveredState* st) {
  const IoQueueOptions qopts{.depth = options_.io_depth, .backend = options_.io_backend};
  const uint32_t staging_buffers =
      options_.staging_buffers != 0 ? options_.staging_buffers : std::min(options_.io_depth, 64u);
  for (size_t d = 0; d < options_.dirs.size(); ++d) {
    KV_ASSIGN_OR_RETURN(std::unique_ptr<ssd::StagingPool> pool,
                        ssd::StagingPool::Create(staging_buffers, options_.staging_buffer_bytes));
    staging_.push_back(std::move(pool));
    KV_ASSIGN_OR_RETURN(std::unique_ptr<ssd::IoWorker> w,
                        ssd::IoWorker::Start(env_, qopts, options_.queue_jobs_max));
    workers_.push_back(std::move(w));
  }
  admission_ = std::make_unique<ssd::AdmissionFilter>(
      options_.admission == SsdAdmission::kAlways ? 0 : options_.admission_requests,
      options_.admission_slots);
  budget_ = std::make_unique<ssd::WriteBudget>(
      options_.write_budget_bytes_per_s, options_.write_budget_burst_bytes, clock_->NowMicros());
  segments_max_ = options_.capacity_bytes / options_.segment_bytes;
  MutexLock lock(&mu_);
  for (ssd::RecoveredSegment& rs : st->segments) {
    Segment seg;
    seg.dir = rs.segment.dir_index;
    seg.file = std::shared_ptr<File>(std::move(rs.segment.file));
    seg.append_offset = rs.end_offset;
    seg.sealed = true;     // Never append after a possibly torn tail.
    seg.min_sequence = 0;  // Unknown: it may hold anything older than a tombstone.
    segments_.emplace(rs.segment.segment_id, std::move(seg));
  }
  index_ = std::move(st->index);
  tombstones_ = std::move(st->tombstones);
  for (const auto& [key, e] : index_) {
    live_bytes_ += e.record_bytes();
    segments_.at(e.segment_id).keys.push_back(key);
  }
  for (const auto& [key, t] : tombstones_) segments_.at(t.segment_id).keys.push_back(key);
  open_segment_.assign(options_.dirs.size(), 0);
  rolling_.assign(options_.dirs.size(), false);
  next_sequence_ = st->next_sequence;
  next_segment_id_ = st->next_segment_id;
  durable_sequence_.store(next_sequence_ - 1);
  stats_.corrupt_segments = st->stats.corrupt_segments;
  stats_.torn_or_corrupt_tails = st->stats.torn_or_corrupt_tails;
  stats_.recovered_blocks = index_.size();
  stats_.checkpoint_used = st->stats.checkpoint_used;
  stats_.checkpoint_rejected = st->stats.checkpoint_rejected;
  stats_.io_backend = std::string(workers_[0]->backend_name());
  maintenance_ = std::thread([this] { MaintenanceLoop(); });
  return Status::Ok();
}

SsdTier::~SsdTier() { Close().IgnoreError(); }

Status SsdTier::Close() {
  {
    MutexLock lock(&mu_);
    if (closed_ || stopping_) return Status::Ok();
    stopping_ = true;
    changed_.SignalAll();
  }
  if (maintenance_.joinable()) maintenance_.join();
  {
    MutexLock lock(&mu_);
    while (writes_in_flight_ > 0) changed_.Wait();
  }
  Status synced = SyncSegments();
  Status checkpointed = WriteCheckpoint();
  workers_.clear();  // Joins the I/O threads; nothing is in flight any more.
  MutexLock lock(&mu_);
  closed_ = true;
  locks_.clear();  // The directories are free for the next opener.
  return synced.ok() ? checkpointed : synced;
}

void SsdTier::ReleaseLocksForTesting() {
  MutexLock lock(&mu_);
  locks_.clear();
}

bool SsdTier::SegmentLimitReachedLocked(bool over_capacity) const {
  // A reclaim may add one segment per directory beyond what existed when it began (and deletes
  // the one it reclaims), also when a crash in an earlier reclaim left the cache over its limit:
  // bounded by the segment limit alone, such a cache could never reclaim again, and so never
  // take another write.
  const uint64_t limit =
      over_capacity ? std::max<uint64_t>(segments_max_ + options_.dirs.size(), reclaim_limit_)
                    : segments_max_;
  return segments_.size() >= limit;
}

Result<std::shared_ptr<File>> SsdTier::CreateSegmentFile(uint64_t segment_id, uint32_t dir) {
  const std::string path = DirPath(dir) + "/" + ssd::SegmentFileName(segment_id);
  KV_ASSIGN_OR_RETURN(
      std::unique_ptr<File> file,
      env_->OpenFile(path, {.mode = OpenMode::kCreateExclusive,
                            .direct = options_.direct_io,
                            .create_mode = options_.file_mode,
                            .links = Links::kRefuse}));
  KV_ASSIGN_OR_RETURN(AlignedBuffer block, AlignedBuffer::Allocate(ssd::kSegmentHeaderBytes));
  ssd::EncodeSegmentHeader({.segment_id = segment_id,
                            .segment_bytes = options_.segment_bytes,
                            .created_wall_us = clock_->WallMicros()},
                           block.span());
  Status s = file->WriteAt(0, block.span());
  if (s.ok()) s = file->Sync();
  if (s.ok()) s = env_->SyncDir(DirPath(dir));
  if (!s.ok()) {
    file.reset();
    env_->RemoveFile(path).IgnoreError();  // Best effort; a leftover is a bad segment at open.
    return s.WithContext("creating " + path);
  }
  return std::shared_ptr<File>(std::move(file));
}

Status SsdTier::WaitForReclaimLocked(ReclaimWait* wait) {
  // Polled: the allowance is the Env's clock (a ManualClock in tests only ever ends it by being
  // advanced), and the wait is not counted in wake-ups: every completed write wakes the waiters,
  // so a count ran out within milliseconds while reclaim was still working.
  constexpr auto kReclaimPoll = std::chrono::milliseconds(10);
  if (stopping_) return Status::Aborted("ssd: closing");
  const uint64_t now = clock_->NowMicros();
  if (!wait->waiting || wait->freed_seen != segments_freed_) {
    *wait = {.waiting = true, .since_us = now, .freed_seen = segments_freed_,
             .kicked = wait->kicked};
  }
  if (now - wait->since_us >= uint64_t{options_.write_stall_ms_max} * 1000) {
    std::string why = "ssd: no segment free: reclaim freed none in " +
                      std::to_string(options_.write_stall_ms_max) + " ms";
    if (!last_reclaim_error_.ok()) {
      why += " (reclaim failed: " + last_reclaim_error_.ToString() + ")";
    }
    return Status::Busy(why);
  }
  if (!wait->kicked) {
    wait->kicked = true;
    changed_.SignalAll();  // The maintenance thread reclaims at once instead of at its next tick.
  }
  changed_.WaitFor(kReclaimPoll);
  return Status::Ok();
}

Status SsdTier::RollSegment(uint32_t dir, bool over_capacity) {
  KV_DCHECK(!rolling_[dir] && open_segment_[dir] == 0);
  if (next_segment_id_ > ssd::kSegmentIdMax) {
    // Unreachable in practice (§1), but the counter must never wrap onto ids in use.
    return Status::NoSpace("ssd: every segment id up to 2^63-1 has been used");
  }
  // A reclaim's segment past the limit is its own until it ends: writers that took its room
  // would make it roll again, past its allowance, with nobody but itself to free a segment.
  const bool reclaim_only = over_capacity && SegmentLimitReachedLocked(false);
  rolling_[dir] = true;
  const uint64_t id = next_segment_id_++;
  mu_.Unlock();
  Result<std::shared_ptr<File>> file = CreateSegmentFile(id, dir);
  mu_.Lock();
  rolling_[dir] = false;
  changed_.SignalAll();
  if (!file.ok()) {
    ++stats_.io_errors;
    return file.status();
  }
  Segment seg;
  seg.dir = dir;
  seg.file = std::move(file).value();
  seg.append_offset = ssd::kSegmentHeaderBytes;
  seg.reclaim_only = reclaim_only;
  segments_.emplace(id, std::move(seg));
  open_segment_[dir] = id;
  return Status::Ok();
}

void SsdTier::PlaceLocked(uint64_t id, uint32_t record_bytes, const WriteMode& mode, size_t i,
                          Placement* out) {
  Segment& seg = segments_.at(id);
  const uint64_t keep = mode.keep_sequence.empty() ? 0 : mode.keep_sequence[i];
  const bool fresh = keep == 0;
  *out = {.segment_id = id,
          .offset = seg.append_offset,
          .sequence = fresh ? next_sequence_++ : keep,
          .fresh_sequence = fresh,
          .file = seg.file,
          .dir = seg.dir};
  seg.append_offset += record_bytes;
  seg.in_flight.insert(out->offset);
  if (!mode.tombstone) seg.min_sequence = std::min(seg.min_sequence, out->sequence);
  // durable_sequence() speaks of fresh sequences; a kept one was counted when first written.
  if (fresh) inflight_sequences_.insert(out->sequence);
  ++writes_in_flight_;
  if (mode.over_capacity) {
    reclaim_bytes_left_ -= std::min<uint64_t>(reclaim_bytes_left_, record_bytes);
  }
}

Status SsdTier::Reserve(uint32_t record_bytes, const WriteMode& mode, size_t i, const BlockKey& key,
                        bool holding, ReclaimWait* wait, Placement* out, bool* must_submit) {
  const uint32_t dir = next_dir_;
  next_dir_ = static_cast<uint32_t>((next_dir_ + 1) % options_.dirs.size());
  *must_submit = false;
  while (true) {
    if (stopping_) return Status::Aborted("ssd: closing");
    const uint64_t id = open_segment_[dir];
    // Whether this record must wait for reclaim: the directory's open segment is a reclaim's,
    // or it has none and the segment limit is reached. A writer looks again after each wait:
    // another writer, or the reclaim, may have rolled the directory meanwhile (one roll per
    // directory, docs/ssd_format.md §7).
    bool wait_for_reclaim = false;
    if (id != 0) {
      Segment& seg = segments_.at(id);
      // In a reclaim's segment, others leave room for every copy the reclaim has yet to place.
      const uint64_t keep_free = seg.reclaim_only && !mode.over_capacity ? reclaim_bytes_left_ : 0;
      if (!seg.sealed && seg.append_offset + record_bytes + keep_free <= options_.segment_bytes) {
        // Checked here, where the sequence is taken, with no unlock of mu_ in between (waiting
        // for a roll unlocks it): an erase either happened before (skip the copy) or gets a
        // larger sequence than the copy.
        if (!StillCurrentLocked(mode, i, key)) {
          return Status::Aborted("ssd: superseded before its re-append");
        }
        PlaceLocked(id, record_bytes, mode, i, out);
        return Status::Ok();
      } else if (keep_free != 0) {
        wait_for_reclaim = true;  // Not sealed: the reclaim's copies go there.
      } else {
        seg.sealed = true;
        open_segment_[dir] = 0;
        continue;
      }
    } else if (rolling_[dir]) {
      changed_.Wait();  // Another writer's roll ends by itself.
      continue;
    } else if (SegmentLimitReachedLocked(mode.over_capacity)) {
      // The reclaim cannot wait for a reclaim (its copies fit one new segment per directory, so
      // this is not expected): it fails, and is tried again later.
      if (mode.over_capacity) {
        return Status::Busy("ssd: reclaim needs a segment past its allowance");
      }
      wait_for_reclaim = true;
    }
    if (!wait_for_reclaim) {
      KV_RETURN_IF_ERROR(RollSegment(dir, mode.over_capacity));
      continue;
    }
    if (holding) {
      *must_submit = true;
      return Status::Ok();
    }
    KV_RETURN_IF_ERROR(WaitForReclaimLocked(wait));
  }
}

std::vector<bool> SsdTier::ApplyPolicies(std::span<SsdBlockWrite> writes, const WriteMode& mode) {
  std::vector<bool> admitted(writes.size(), false);
  uint64_t not_admitted = 0, over_budget = 0;
  for (size_t i = 0; i < writes.size(); ++i) {
    SsdBlockWrite& w = writes[i];
    w.skipped = false;
    const bool will_seal = options_.keyring.has_value() && !mode.tombstone &&
                           mode.record_flags.empty();  // Re-appends are sealed already.
    const size_t seal_bytes = will_seal ? ssd::kSealedRecordOverheadBytes : 0;
    if (w.payload.size() + seal_bytes > ssd::PayloadBytesMax(options_.segment_bytes)) {
      w.status = Status::InvalidArgument("ssd: payload larger than a segment holds");
      continue;
    }
    // The same bound a checkpoint entry is checked against when it is read back.
    if (w.raw_bytes > kBlockBytesMax) {
      w.status = Status::InvalidArgument("ssd: raw_bytes " + std::to_string(w.raw_bytes) +
                                         " above kBlockBytesMax");
      continue;
    }
    if (!mode.bypass_policy && !admission_->RecordAndAdmit(w.key)) {
      w.status = Status::Aborted("ssd: not admitted yet");
      w.skipped = true;
      ++not_admitted;
      continue;
    }
    if (!mode.bypass_policy &&
        !budget_->TryTake(RecordBytesForPayload(w.payload.size()), clock_->NowMicros())) {
      w.status = Status::Busy("ssd: over the write budget");
      w.skipped = true;
      ++over_budget;
      continue;
    }
    w.status = Status::Ok();
    admitted[i] = true;
  }
  MutexLock lock(&mu_);
  stats_.not_admitted += not_admitted;
  stats_.over_budget += over_budget;
  return admitted;
}

Status SsdTier::WriteBatchSync(std::span<SsdBlockWrite> writes) {
  return WaitForCallback([&](Callback done) { WriteBatch(writes, std::move(done)); });
}

Status SsdTier::ReadBatchSync(std::span<SsdBlockRead> reads) {
  return WaitForCallback([&](Callback done) { ReadBatch(reads, std::move(done)); });
}

void SsdTier::DropEntryLocked(const BlockKey& key, uint64_t sequence) {
  auto it = index_.find(key);
  if (it == index_.end() || (sequence != 0 && it->second.sequence != sequence)) return;
  live_bytes_ -= it->second.record_bytes();
  index_.erase(it);
}

bool SsdTier::Contains(const BlockKey& key) { return Lookup(key).has_value(); }

std::optional<SsdBlockInfo> SsdTier::Lookup(const BlockKey& key) {
  MutexLock lock(&mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return std::nullopt;
  if (it->second.Expired(clock_->WallMicros())) {
    ++stats_.expired;
    DropEntryLocked(key, 0);
    return std::nullopt;
  }
  const IndexEntry& e = it->second;
  return SsdBlockInfo{.payload_bytes = e.payload_bytes,
                      .record_bytes = e.record_bytes(),
                      .raw_bytes = e.raw_bytes,
                      .codec_id = e.codec_id,
                      .expiry_wall_us = e.expiry_wall_us};
}

Status SsdTier::Erase(std::span<const BlockKey> keys) {
  std::vector<SsdBlockWrite> tombstones;
  {
    MutexLock lock(&mu_);
    for (const BlockKey& key : keys) {
      if (index_.count(key) == 0) continue;
      DropEntryLocked(key, 0);
      SsdBlockWrite w;
      w.key = key;
      tombstones.push_back(w);
    }
  }
  for (size_t start = 0; start < tombstones.size(); start += kSsdBatchEntriesMax) {
    const size_t n = std::min<size_t>(kSsdBatchEntriesMax, tombstones.size() - start);
    WriteMode mode;
    mode.bypass_policy = true;
    mode.tombstone = true;
    std::span<SsdBlockWrite> batch = std::span(tombstones).subspan(start, n);
    KV_RETURN_IF_ERROR(WriteInternalSync(batch, std::move(mode)));
    // A tombstone that was not written (Busy: no space) leaves the erase to memory only.
    for (const SsdBlockWrite& w : batch) KV_RETURN_IF_ERROR(w.status);
  }
  return Status::Ok();
}

Status SsdTier::WriteInternalSync(std::span<SsdBlockWrite> writes, WriteMode mode) {
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
  MutexLock lock(&mu);
  while (!finished) cv.Wait();
  return result;
}

SsdTierStats SsdTier::Stats() {
  MutexLock lock(&mu_);
  SsdTierStats s = stats_;
  s.blocks = index_.size();
  s.segments = segments_.size();
  s.live_bytes = live_bytes_;
  s.live_tombstones = tombstones_.size();
  s.disk_bytes = 0;
  for (const auto& [id, seg] : segments_) s.disk_bytes += seg.append_offset;
  return s;
}

}  // namespace kvtier
