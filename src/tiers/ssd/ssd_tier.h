// SsdTier: the SSD tier of kvtier, a crash-safe log of KV blocks over one or more directories
// (docs/ssd_format.md specifies every byte; docs/architecture.md says why).
//
// - Records (header + payload, padded to 4 KiB) are appended with O_DIRECT to fixed-size segment
//   files spread round-robin over the directories (RAID0-like striping). Nothing is rewritten in
//   place. One IoWorker thread per directory owns that directory's IoQueue (io_uring ring or the
//   thread-pool fallback).
// - The index (key -> segment, offset, sizes, codec, reference bit, expiry) is in memory and
//   survives restarts through a checkpoint plus a scan of the segments written after it.
// - A record is returned only if its CRCs, key and layout digest match; otherwise the read is a
//   miss and `corrupt_records` grows.
// - Space is reclaimed a segment at a time, oldest first; referenced, unexpired blocks in it are
//   re-appended, and so are tombstones an older record elsewhere still needs (with several
//   directories segment ids are not in write order). An admission filter and a write budget
//   protect the drive.
// - Sync passes (Flush, periodic sync, checkpoint, reclaim) are serialised across their fsyncs,
//   so none reports OK while another's fsync of the same data runs or has failed.
//
// Thread safety: every public method may be called from any thread concurrently. Completion
// callbacks run on an internal I/O thread: they must be short and must not call the *Sync
// wrappers, Erase or Close of this tier.
//
// Completion callbacks must not call WriteBatch either: a writer may wait for staging buffers
// that only the I/O thread running the callback would free.
//
// Ownership: the Env (and its Clock and Logger) are borrowed and must outlive the tier. Batch
// arrays passed to WriteBatch/ReadBatch must stay alive until their callback has run; payload
// spans of writes are copied before WriteBatch returns; read buffers are filled in place.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/block_key.h"
#include "core/mutex.h"
#include "env/env.h"
#include "tiers/remote_crypto.h"
#include "tiers/ssd/ssd_checkpoint.h"
#include "tiers/ssd/ssd_dir_lock.h"
#include "tiers/ssd/ssd_options.h"
#include "tiers/ssd_format.h"

namespace kvtier {

namespace ssd {
class IoWorker;
class StagingPool;
class AdmissionFilter;
class WriteBudget;
struct RecoveredState;
}  // namespace ssd

struct SsdBlockWrite {
  BlockKey key;
  Hash256 layout_digest{};
  uint8_t codec_id = 0;
  uint32_t raw_bytes = 0;
  // Copied before WriteBatch returns, unless `record` holds it.
  std::span<const std::byte> payload;
  uint64_t ttl_us = 0;  // 0 = no expiry.
  // Optional: the writer's buffer around `payload`, so that the record is written from it with no
  // copy. `payload` must start at kRecordPayloadOffset of it, and it must be 4 KiB-aligned and
  // hold RecordBytesForPayload(payload.size()) bytes; the tier writes the header and padding
  // around the payload in place and the disk reads it from there, so it stays the tier's until
  // the batch's callback has run. A sealed tier (which writes ciphertext, not the payload), or a
  // buffer that does not qualify, copies as without it (SsdTierStats::staged_write_bytes).
  std::span<std::byte> record;
  // Out: OK when stored; Aborted when skipped by the admission filter; Busy when over the write
  // budget or stalled on reclaim; InvalidArgument for a too-large payload; NoSpace when the
  // filesystem is full (naming the file); else the I/O error.
  Status status;
  // Out: true when the entry was deliberately not written (the admission filter or the write
  // budget said no): not an error, the caller may retry later. Every other non-OK status is an
  // error, and the batch's callback reports the first of them.
  bool skipped = false;
};

struct SsdBlockRead {
  BlockKey key;
  Hash256 layout_digest{};      // Must match the stored record's.
  std::span<std::byte> buffer;  // 4 KiB-aligned, at least record_bytes (see Lookup).
  // Out. status: OK, NotFound (absent, expired or failed verification), InvalidArgument (bad
  // buffer), or an I/O error. payload is buffer.subspan(ssd::kRecordPayloadOffset, size).
  Status status;
  std::span<const std::byte> payload;
  uint8_t codec_id = 0;
  uint32_t raw_bytes = 0;
  // Out: the record was read but failed verification (status NotFound; the entry was dropped),
  // as opposed to a block that was never stored, expired or was reclaimed before the read.
  bool failed_verification = false;
};

struct SsdBlockInfo {
  uint32_t payload_bytes = 0;
  uint32_t record_bytes = 0;  // What a read buffer must hold.
  uint32_t raw_bytes = 0;
  uint8_t codec_id = 0;
  uint64_t expiry_wall_us = 0;
};

struct SsdTierStats {
  uint64_t blocks = 0;
  uint64_t segments = 0;
  uint64_t disk_bytes = 0;  // Bytes of segments on disk (allocated prefix).
  uint64_t live_bytes = 0;  // Record bytes of indexed blocks.
  uint64_t writes = 0, write_bytes = 0, reads = 0, read_hits = 0, read_misses = 0;
  // Of write_bytes, the records first copied into the tier's staging buffers (the others were
  // written from the writer's buffer, SsdBlockWrite::record).
  uint64_t staged_write_bytes = 0;
  uint64_t not_admitted = 0, over_budget = 0, expired = 0;
  uint64_t corrupt_records = 0, corrupt_segments = 0, torn_or_corrupt_tails = 0;
  uint64_t io_errors = 0;
  // Entries of callers' batches that were not written because of an error (I/O, no space, a
  // stall on reclaim, closing), as opposed to skips by admission or budget.
  uint64_t failed_writes = 0;
  uint64_t reclaimed_segments = 0, reappended_blocks = 0, dropped_blocks = 0;
  uint64_t checkpoints = 0, recovered_blocks = 0;
  uint64_t live_tombstones = 0;  // Erases whose tombstone record is kept (docs/ssd_format.md §7).
  bool checkpoint_used = false, checkpoint_rejected = false;
  std::string io_backend;
};

class SsdTier {
 public:
  using Callback = std::function<void(Status)>;

  // Creates missing directories (dir_mode()), takes each directory's LOCK (Busy "<dir> is in use
  // by process <pid> (LOCK held)" while another tier, in this process or another, has it),
  // checks or writes the MANIFESTs (InvalidArgument naming the mismatch for directories that
  // are not one cache in this order, count and segment size, or saying that a sealed cache was
  // opened without keys), recovers the index, starts the I/O and maintenance threads. The locks
  // are held until Close or destruction.
  static Result<std::unique_ptr<SsdTier>> Open(const SsdTierOptions& options, Env* env);
  // Close()s quietly if not closed.
  ~SsdTier();
  SsdTier(const SsdTier&) = delete;
  SsdTier& operator=(const SsdTier&) = delete;

  // Stores a batch (at most kSsdBatchEntriesMax). Blocks only for back-pressure (full queues,
  // reclaim). `done` receives OK only when every entry was written or skipped by admission or
  // budget (SsdBlockWrite::skipped); otherwise the first entry error (an I/O error, NoSpace, a
  // segment that could not be created, Busy after stalling on reclaim, Aborted when closing).
  // Each entry's status says what happened to it.
  void WriteBatch(std::span<SsdBlockWrite> writes, Callback done);
  // Reads a batch into the callers' buffers; `done` receives OK unless an I/O error happened
  // (misses are per-entry NotFound).
  void ReadBatch(std::span<SsdBlockRead> reads, Callback done);
  Status WriteBatchSync(std::span<SsdBlockWrite> writes);
  Status ReadBatchSync(std::span<SsdBlockRead> reads);

  bool Contains(const BlockKey& key);
  std::optional<SsdBlockInfo> Lookup(const BlockKey& key);
  // Removes the keys and appends tombstones so the erase survives restarts (per the sync mode).
  Status Erase(std::span<const BlockKey> keys);

  // Syncs every segment with unsynced writes now. Returns only after every write that completed
  // before the call is durable, including writes whose fsync another caller (the maintenance
  // thread's periodic sync, a checkpoint) had already started; fails when such an fsync failed.
  Status Flush();
  // Writes a checkpoint now (docs/ssd_format.md §4).
  Status Checkpoint();
  // Reclaims the oldest segment now (normally the maintenance thread does it).
  Status ReclaimOldestSegment();
  // Stops the threads after in-flight work, syncs, writes a checkpoint, releases the LOCKs.
  Status Close();
  // Test-only: gives up the directories' LOCKs while the tier keeps running, as the death of its
  // process would, so that a test can simulate a crash by opening a second instance over the
  // same directories while this one stays idle. Nothing else changes.
  void ReleaseLocksForTesting();

  // Blocks with a sequence at or below this are durable (kPerBatch: completed batches;
  // kPeriodic: the last periodic sync; kNone: the last checkpoint).
  uint64_t durable_sequence() const { return durable_sequence_.load(); }
  SsdTierStats Stats();
  const SsdTierOptions& options() const { return options_; }

 private:
  struct Segment {
    uint32_t dir = 0;
    // Shared with reads in flight, so reclaim can drop the segment while they finish.
    std::shared_ptr<File> file;
    uint64_t append_offset = 0;
    bool sealed = false;
    bool unsynced = false;
    std::multiset<uint64_t> in_flight;  // Offsets of writes not yet completed.
    // The smallest sequence of a block (not tombstone) record it holds: a tombstone with a larger
    // sequence must outlive its own segment while this one exists (docs/ssd_format.md §7). 0 for
    // a recovered segment, whose records before the checkpoint's scan_from were not read.
    uint64_t min_sequence = UINT64_MAX;
    // Keys of the records written into it (data and tombstones; stale ones too), so a reclaim
    // visits its own records instead of the whole index. At most segment_bytes / 4096.
    std::vector<BlockKey> keys;
    // Rolled by a reclaim past the segment limit for its copies: until the reclaim ends, other
    // writers leave room in it for the copies the reclaim has yet to place (reclaim_bytes_left_),
    // waiting when they would not, so that its copies always fit (docs/ssd_format.md §7).
    bool reclaim_only = false;
  };
  struct Placement {
    uint64_t segment_id = 0;
    uint64_t offset = 0;
    uint64_t sequence = 0;
    bool fresh_sequence = true;  // Taken from next_sequence_ (false: a re-append keeps its own).
    std::shared_ptr<File> file;
    uint32_t dir = 0;
    uint64_t expiry_wall_us = 0;  // Written into the record and the index entry.
  };
  struct WriteState;
  struct WritePart;
  class WriteStager;
  struct ReadState;
  // How an internal write differs from a caller's.
  struct WriteMode {
    bool bypass_policy = false;  // Reclaim re-appends and tombstones skip admission and budget.
    // Reclaim may exceed the segment limit by one per directory, counted from the segments that
    // existed when it began (reclaim_limit_). Such a write never waits for reclaim (it is the
    // reclaim): it fails with Busy where an ordinary write would wait.
    bool over_capacity = false;
    bool tombstone = false;
    std::vector<uint64_t> expiry_wall_us;   // Absolute expiries (re-appends keep theirs).
    std::vector<uint64_t> expect_sequence;  // Install only if the entry still has this sequence.
    // Tombstone re-appends: the sequence to write, the tombstone's own, so that the copy can
    // never beat a write of its key made after the erase (docs/ssd_format.md §7).
    std::vector<uint64_t> keep_sequence;
    // Re-appends: the original record's flags; its payload (sealed or not) is written as it is.
    std::vector<uint8_t> record_flags;
  };

  SsdTier(const SsdTierOptions& options, Env* env);
  Status Start(ssd::RecoveredState* recovered);
  void WriteInternal(std::span<SsdBlockWrite> writes, WriteMode mode, Callback done);
  std::vector<bool> ApplyPolicies(std::span<SsdBlockWrite> writes, const WriteMode& mode);
  // A batch's wait for reclaim: one allowance for the whole batch (write_stall_ms_max of the
  // Env's clock), which starts again whenever reclaim frees a segment.
  struct ReclaimWait {
    bool waiting = false;     // Has waited once: since_us and freed_seen are set.
    uint64_t since_us = 0;    // When the current allowance began.
    uint64_t freed_seen = 0;  // segments_freed_ then.
    bool kicked = false;      // The maintenance thread was woken for it.
  };
  // Places entry `i` (key `key`) of a batch written with `mode`. When it must wait for reclaim
  // (the segment limit is reached, or the open segment is a reclaim's) and `holding` (the batch
  // has reserved records not yet handed to the I/O threads), it places nothing and sets
  // *must_submit: the caller submits them and asks again. A wait while holding would deadlock
  // with kPerBatch, where the reclaim's copies, placed after those holes, are not acknowledged
  // before the holes are written. Aborted for a re-append that is no longer current
  // (StillCurrentLocked); Busy when the wait's allowance ran out; Aborted when closing.
  Status Reserve(uint32_t record_bytes, const WriteMode& mode, size_t i, const BlockKey& key,
                 bool holding, ReclaimWait* wait, Placement* out, bool* must_submit)
      KV_REQUIRES(mu_);
  // Appends a record of `record_bytes` at the end of open segment `id` (entry `i` of a batch).
  void PlaceLocked(uint64_t id, uint32_t record_bytes, const WriteMode& mode, size_t i,
                   Placement* out) KV_REQUIRES(mu_);
  // Waits (mu_ released, at most 10 ms) for anything that may let a writer that needs a
  // segment go on. Busy when no segment was freed for write_stall_ms_max of the Env's clock
  // since the batch began to wait, or since reclaim last freed one: the cache is full and reclaim
  // cannot free a segment (it is failing, or stuck). Aborted when closing.
  Status WaitForReclaimLocked(ReclaimWait* wait) KV_REQUIRES(mu_);
  // Makes a new open segment for `dir` (mu_ released while the file is made, rolling_[dir] set,
  // so a directory has at most one roll at a time and its segment ids follow write order). The
  // caller checked the segment limit.
  Status RollSegment(uint32_t dir, bool over_capacity) KV_REQUIRES(mu_);
  // Reserves entries [begin, ...) of a batch; stops before an entry that must wait for reclaim
  // while entries it reserved are not yet submitted. Returns the first entry not looked at
  // (writes.size() when done).
  size_t ReserveBatchLocked(WriteState& state, size_t begin, ReclaimWait* wait, Status* give_up)
      KV_REQUIRES(mu_);
  bool StillCurrentLocked(const WriteMode& mode, size_t i, const BlockKey& key) const
      KV_REQUIRES(mu_);
  Result<std::shared_ptr<File>> CreateSegmentFile(uint64_t segment_id, uint32_t dir);
  // Hands the placed entries among [begin, end) to the I/O threads. FinishSubmitting after the
  // last call lets the batch complete.
  void SubmitWrites(const std::shared_ptr<WriteState>& state, size_t begin, size_t end);
  void FinishSubmitting(WriteState& state);
  // Completes a part whose jobs all completed: its records leave the in-flight sets and are
  // installed. FinishWrites runs once every part and the submitter are done: the batch's ack.
  void FinishPart(WriteState& state, const WritePart& part);
  void FinishWrites(WriteState& state);
  void InstallLocked(const SsdBlockWrite& w, uint32_t payload_bytes, const Placement& p,
                     const WriteMode& mode, size_t i, Segment& seg) KV_REQUIRES(mu_);
  // With a keyring: seals the payloads of the admitted entries of a caller's batch into
  // state->sealed and points state->payload at them (ssd_tier_io.cc).
  void SealPayloads(WriteState& state, std::vector<bool>& admitted);
  // Checks a verified record against the keyring and opens a sealed payload in place.
  Status OpenPayload(const ssd::RecordHeader& h, std::span<std::byte> buffer,
                     std::span<const std::byte>* payload, bool* mismatch) const;
  void SubmitReads(std::shared_ptr<ReadState> state);
  void FinishRead(SsdBlockRead& read, const ssd::IndexEntry& expect, const IoCompletion& io);
  void DropEntryLocked(const BlockKey& key, uint64_t sequence) KV_REQUIRES(mu_);
  bool SegmentLimitReachedLocked(bool over_capacity) const KV_REQUIRES(mu_);

  // Maintenance (ssd_maintenance.cc).
  void MaintenanceLoop();
  Status SyncSegments() KV_EXCLUDES(mu_, sync_mu_);
  // Syncs as SyncSegments does; fails also when a sync pass that began before `failures` was read
  // (sync_failures_) has failed since, since it may have covered the caller's writes.
  Status SyncSegmentsSince(uint64_t failures) KV_EXCLUDES(mu_, sync_mu_);
  uint64_t DurableCandidateLocked() const KV_REQUIRES(mu_);
  Status WriteCheckpoint();
  // ReclaimOldestSegment's work, with checkpoint_mu_ held.
  Status ReclaimOldestLocked() KV_REQUIRES(checkpoint_mu_);
  Status Reappend(const std::vector<std::pair<BlockKey, ssd::IndexEntry>>& entries,
                  const std::shared_ptr<File>& file);
  // Copies the live tombstones of segment `id` (keeping their sequences) before it goes.
  Status ReappendTombstones(uint64_t id,
                            const std::vector<std::pair<BlockKey, ssd::LiveTombstone>>& tombs);
  Status WriteInternalSync(std::span<SsdBlockWrite> writes, WriteMode mode);
  // What a reclaim of `id` must copy: live, referenced, unexpired entries and live tombstones
  // that an older record in another segment still needs.
  void CollectReclaimLocked(uint64_t id, std::vector<std::pair<BlockKey, ssd::IndexEntry>>* keep,
                            std::vector<std::pair<BlockKey, ssd::LiveTombstone>>* tombs)
      KV_REQUIRES(mu_);
  void DropSegmentLocked(uint64_t id) KV_REQUIRES(mu_);
  bool ReclaimNeededLocked() const KV_REQUIRES(mu_);

  std::string DirPath(uint32_t dir) const { return options_.dirs[dir]; }

  const SsdTierOptions options_;
  Env* const env_;
  // One exclusive LOCK per directory, taken before recovery; released at the end of Close.
  std::vector<ssd::DirLock> locks_ KV_GUARDED_BY(mu_);
  std::array<uint8_t, 16> cache_id_{};  // From the MANIFESTs; written into every checkpoint.
  Clock* const clock_;
  Logger* const logger_;
  uint64_t segments_max_ = 0;
  // One per directory. Declared before workers_, whose jobs return buffers to them, so that
  // they are destroyed after the workers.
  std::vector<std::unique_ptr<ssd::StagingPool>> staging_;
  std::vector<std::unique_ptr<ssd::IoWorker>> workers_;  // One per directory.
  std::unique_ptr<ssd::AdmissionFilter> admission_;
  std::unique_ptr<ssd::WriteBudget> budget_;

  Mutex mu_;
  CondVar changed_{&mu_};  // Segments rolled or reclaimed; maintenance wake-ups.
  std::unordered_map<BlockKey, ssd::IndexEntry> index_ KV_GUARDED_BY(mu_);
  // The newest tombstone of each erased key whose record must still be kept (§7).
  std::unordered_map<BlockKey, ssd::LiveTombstone> tombstones_ KV_GUARDED_BY(mu_);
  std::map<uint64_t, Segment> segments_ KV_GUARDED_BY(mu_);
  std::vector<uint64_t> open_segment_ KV_GUARDED_BY(mu_);  // Per dir; 0 = none.
  std::vector<bool> rolling_ KV_GUARDED_BY(mu_);           // Per dir: a segment is being made.
  uint32_t next_dir_ KV_GUARDED_BY(mu_) = 0;
  uint64_t next_sequence_ KV_GUARDED_BY(mu_) = 1;
  uint64_t next_segment_id_ KV_GUARDED_BY(mu_) = 1;
  uint64_t live_bytes_ KV_GUARDED_BY(mu_) = 0;
  // Segments the running reclaim may grow the tier to: those at its start plus one per directory.
  uint64_t reclaim_limit_ KV_GUARDED_BY(mu_) = 0;
  // Segments reclaim has freed, and why the last reclaim that failed did (OK: none failed since
  // one succeeded): what writers waiting for a segment go by.
  uint64_t segments_freed_ KV_GUARDED_BY(mu_) = 0;
  // Record bytes the running reclaim has yet to place (an upper bound: copies it skips are not
  // taken off); 0 when none runs.
  uint64_t reclaim_bytes_left_ KV_GUARDED_BY(mu_) = 0;
  Status last_reclaim_error_ KV_GUARDED_BY(mu_);
  bool checkpoint_wanted_ KV_GUARDED_BY(mu_) = false;
  bool stopping_ KV_GUARDED_BY(mu_) = false;
  bool closed_ KV_GUARDED_BY(mu_) = false;
  uint64_t writes_in_flight_ KV_GUARDED_BY(mu_) = 0;
  std::multiset<uint64_t> inflight_sequences_ KV_GUARDED_BY(mu_);
  // kPerBatch: batches that completed while a write with a lower sequence was still in flight.
  // Their callbacks wait here until every lower sequence has completed: a crash before then would
  // leave the lower write's place in its segment a hole, recovery's scan stops at the first hole,
  // and a record past it would be lost although its batch had been acknowledged as durable.
  struct DeferredAck {
    uint64_t max_sequence = 0;  // The batch's highest fresh sequence.
    Callback done;
    Status status;
  };
  std::vector<DeferredAck> deferred_acks_ KV_GUARDED_BY(mu_);
  // Moves the deferred acks whose sequences are all complete now into *ready (kPerBatch).
  void TakeReadyAcksLocked(std::vector<DeferredAck>* ready) KV_REQUIRES(mu_);
  SsdTierStats stats_ KV_GUARDED_BY(mu_);

  uint64_t sync_failures_ KV_GUARDED_BY(mu_) = 0;  // Sync passes that failed.
  Status last_sync_error_ KV_GUARDED_BY(mu_);

  // Lock order: checkpoint_mu_, then sync_mu_, then mu_.
  Mutex checkpoint_mu_;  // Serializes checkpoints and reclaims.
  // Serializes sync passes and is held across their fsyncs, so a pass never finds a segment
  // "synced" whose fsync another pass is still running (or is about to find failed).
  Mutex sync_mu_;
  std::atomic<uint64_t> durable_sequence_{0};
  std::thread maintenance_;
};

}  // namespace kvtier
