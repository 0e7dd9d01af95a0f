// SsdTier's data path: turning a batch of writes into coalesced O_DIRECT appends per directory
// (encoded into that directory's pre-faulted staging buffers, so a write allocates no buffer),
// installing index entries when they complete, and reading records straight into the callers'
// buffers with verification. See ssd_tier.h.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <tuple>
#include <utility>

#include "core/aligned_buffer.h"
#include "core/assert.h"
#include "core/limits.h"
#include "policies/ssd_policy.h"
#include "tiers/ssd/ssd_io_worker.h"
#include "tiers/ssd_record.h"
#include "tiers/ssd/ssd_tier.h"

namespace kvtier {

using ssd::IndexEntry;
using ssd::RecordBytesForPayload;

struct SsdTier::WriteState {
  std::span<SsdBlockWrite> writes;
  WriteMode mode;
  Callback done;
  std::vector<Placement> placements;  // segment_id 0: not placed.
  // What each entry writes: the caller's payload, or its sealed copy in `sealed`; and the
  // record's flags.
  std::vector<std::span<const std::byte>> payload;
  std::vector<uint8_t> flags;
  std::vector<std::vector<std::byte>> sealed;
  // Per entry: the writer's buffer its record is written from in place (SsdBlockWrite::record),
  // or empty when the record is copied into a staging buffer.
  std::vector<std::span<std::byte>> in_place;
  std::vector<bool> admitted;  // Entries to place (the policies and the seal let them through).
  // Parts (SubmitWrites calls) not completed, plus one held by the submitter until all are
  // submitted.
  std::atomic<uint32_t> parts_left{1};
  // Accumulated by the parts as they complete; guarded by the tier's mu_.
  Status first_error;
  uint64_t max_fresh = 0;  // The batch's highest fresh sequence (0: none).
};

// The entries of one SubmitWrites call: completed (installed, no longer in flight) as soon as
// their own jobs are, not when the whole batch is, since a batch that waits for reclaim between
// parts must not keep the reclaim's copies unacknowledged (Reserve).
struct SsdTier::WritePart {
  std::vector<size_t> order;  // Placed entries by (directory, segment, offset).
  // Jobs submitted and not completed, plus one held by SubmitWrites until all are submitted.
  std::atomic<uint32_t> jobs_left{1};
};

struct SsdTier::ReadState {
  std::span<SsdBlockRead> reads;
  Callback done;
  std::vector<IndexEntry> expect;  // segment_id 0: not issued.
  std::vector<std::shared_ptr<File>> files;
  std::vector<uint32_t> dirs;
  std::atomic<uint32_t> jobs_left{0};
  Mutex mu;
  Status first_error KV_GUARDED_BY(mu);
};

// Encodes one directory's records of a part of a batch (part->order[begin, end)) into staging
// buffers of its pool, one write request per buffer, and hands them to its IoWorker. Records that
// are contiguous in a segment share buffers; a record larger than a buffer spans several requests.
// The job so far is submitted early when the pool runs dry, so its completions free buffers.
// A record laid out in the writer's buffer (WriteState::in_place) gets its header and padding
// there and is written from it: records contiguous in a segment share one gathered write
// (pwritev) of up to a staging buffer's bytes, as staged records share a buffer.
class SsdTier::WriteStager {
 public:
  WriteStager(SsdTier* tier, std::shared_ptr<WriteState> state, std::shared_ptr<WritePart> part,
              uint32_t dir)
      : tier_(tier),
        state_(std::move(state)),
        part_(std::move(part)),
        pool_(tier->staging_[dir].get()),
        worker_(tier->workers_[dir].get()) {}

  void Add(size_t pos);
  // Submits what is staged; call once after the last Add.
  void Finish() {
    if (buffer_ != nullptr) CloseRequest();
    if (!gather_.empty()) CloseGather();
    SubmitJob();
  }

 private:
  struct Staged {
    std::byte* buffer = nullptr;
    size_t first_pos = 0, last_pos = 0;  // Entries (positions in order) with bytes in it.
  };
  void OpenRequest(File* file, uint64_t offset, size_t pos);
  void CloseRequest();
  // A record laid out in the writer's buffer: into the gathered write being built.
  void AddInPlace(const ssd::RecordHeader& h, const Placement& p, size_t pos);
  void CloseGather();
  void AddSync(File* file);
  void Put(const std::byte* src, size_t n, size_t pos);  // src null: zeros.
  void SubmitJob();

  SsdTier* const tier_;
  const std::shared_ptr<WriteState> state_;
  const std::shared_ptr<WritePart> part_;
  ssd::StagingPool* const pool_;
  ssd::IoWorker* const worker_;
  std::unique_ptr<ssd::IoJob> job_;
  std::vector<Staged> staged_;  // One per request of job_.
  // The request being filled; buffer_ null when none is.
  std::byte* buffer_ = nullptr;
  File* file_ = nullptr;
  uint64_t offset_ = 0;
  size_t filled_ = 0;
  size_t first_pos_ = 0, last_pos_ = 0;
  // The gathered write being built (empty: none): its buffers, where it starts, its bytes, and
  // its entries.
  std::vector<iovec> gather_;
  File* gather_file_ = nullptr;
  uint64_t gather_offset_ = 0, gather_bytes_ = 0;
  size_t gather_first_ = 0, gather_last_ = 0;
};

void SsdTier::WriteStager::Add(size_t pos) {
  const size_t i = part_->order[pos];
  const SsdBlockWrite& w = state_->writes[i];
  const std::span<const std::byte> payload = state_->payload[i];
  const Placement& p = state_->placements[i];
  const size_t record_bytes = RecordBytesForPayload(payload.size());
  const size_t buffer_bytes = pool_->buffer_bytes();
  ssd::RecordHeader h;
  h.codec_id = w.codec_id;
  h.flags = state_->flags[i];
  h.layout_digest = w.layout_digest;
  h.key = w.key;
  h.raw_bytes = w.raw_bytes;
  h.payload_bytes = static_cast<uint32_t>(payload.size());
  h.sequence = p.sequence;
  h.expiry_wall_us = p.expiry_wall_us;
  h.segment_id = p.segment_id;
  h.segment_offset = static_cast<uint32_t>(p.offset);
  if (!state_->in_place[i].empty()) {
    AddInPlace(h, p, pos);
    return;
  }
  if (!gather_.empty()) CloseGather();
  // A new request when the record does not continue this one, or would needlessly straddle it.
  if (buffer_ != nullptr &&
      (file_ != p.file.get() || offset_ + filled_ != p.offset ||
       (filled_ + record_bytes > buffer_bytes && record_bytes <= buffer_bytes))) {
    CloseRequest();
  }
  if (buffer_ == nullptr) OpenRequest(p.file.get(), p.offset, pos);
  if (filled_ + record_bytes <= buffer_bytes) {
    ssd::EncodeRecord(h, payload, std::span(buffer_ + filled_, record_bytes));
    filled_ += record_bytes;
    last_pos_ = pos;
    if (filled_ == buffer_bytes) CloseRequest();
    return;
  }
  // Larger than a buffer: the same bytes EncodeRecord makes, streamed over several requests.
  h.payload_crc = ssd::PayloadCrc(payload);
  std::array<std::byte, ssd::kRecordHeaderBytes> head;
  ssd::EncodeRecordHeader(h, head);
  Put(head.data(), head.size(), pos);
  Put(payload.data(), payload.size(), pos);
  Put(nullptr, record_bytes - ssd::kRecordPayloadOffset - payload.size(), pos);
}

void SsdTier::WriteStager::Put(const std::byte* src, size_t n, size_t pos) {
  while (n > 0) {
    if (buffer_ == nullptr) OpenRequest(file_, offset_, pos);
    const size_t take = std::min(n, pool_->buffer_bytes() - filled_);
    if (src != nullptr) {
      std::memcpy(buffer_ + filled_, src, take);
      src += take;
    } else {
      std::memset(buffer_ + filled_, 0, take);
    }
    filled_ += take;
    n -= take;
    last_pos_ = pos;
    if (filled_ == pool_->buffer_bytes()) CloseRequest();
  }
}

void SsdTier::WriteStager::AddInPlace(const ssd::RecordHeader& h, const Placement& p,
                                      size_t pos) {
  if (buffer_ != nullptr) CloseRequest();
  const std::span<std::byte> record = state_->in_place[part_->order[pos]];
  // A new gathered write when the record does not continue this one, or this one is full.
  if (!gather_.empty() &&
      (gather_file_ != p.file.get() || gather_offset_ + gather_bytes_ != p.offset ||
       gather_.size() == kIoVectorsMax ||
       gather_bytes_ + record.size() > std::max(pool_->buffer_bytes(), record.size()))) {
    CloseGather();
  }
  ssd::EncodeRecordAroundPayload(h, record);
  if (gather_.empty()) {
    gather_file_ = p.file.get();
    gather_offset_ = p.offset;
    gather_bytes_ = 0;
    gather_first_ = pos;
  }
  gather_.push_back({record.data(), record.size()});
  gather_bytes_ += record.size();
  gather_last_ = pos;
}

void SsdTier::WriteStager::CloseGather() {
  KV_DCHECK(!gather_.empty());
  if (job_ == nullptr) job_ = std::make_unique<ssd::IoJob>();
  job_->gathers.push_back(std::move(gather_));
  gather_ = {};
  job_->requests.push_back(IoRequest{.op = IoOp::kWrite,
                                     .file = gather_file_,
                                     .offset = gather_offset_,
                                     .length = gather_bytes_,
                                     .gather = job_->gathers.back()});
  staged_.push_back({.buffer = nullptr, .first_pos = gather_first_, .last_pos = gather_last_});
  AddSync(gather_file_);
}

void SsdTier::WriteStager::AddSync(File* file) {
  if (tier_->options_.sync == SsdSyncMode::kPerBatch &&
      std::none_of(job_->syncs.begin(), job_->syncs.end(),
                   [&](const IoRequest& r) { return r.file == file; })) {
    job_->syncs.push_back(IoRequest{.op = IoOp::kSync, .file = file});
  }
}

void SsdTier::WriteStager::OpenRequest(File* file, uint64_t offset, size_t pos) {
  KV_DCHECK(buffer_ == nullptr);
  buffer_ = pool_->TryAcquire();
  if (buffer_ == nullptr) {
    // Every buffer is in flight (some perhaps staged by us): let ours go, then wait.
    SubmitJob();
    buffer_ = pool_->Acquire();
  }
  file_ = file;
  offset_ = offset;
  filled_ = 0;
  first_pos_ = last_pos_ = pos;
}

// Closes the request being filled; offset_ moves to the byte after it.
void SsdTier::WriteStager::CloseRequest() {
  KV_DCHECK(buffer_ != nullptr && filled_ > 0 && filled_ % kDirectIoAlignment == 0);
  if (job_ == nullptr) job_ = std::make_unique<ssd::IoJob>();
  job_->requests.push_back(IoRequest{
      .op = IoOp::kWrite, .file = file_, .offset = offset_, .buffer = buffer_, .length = filled_});
  staged_.push_back({.buffer = buffer_, .first_pos = first_pos_, .last_pos = last_pos_});
  AddSync(file_);
  offset_ += filled_;
  filled_ = 0;
  buffer_ = nullptr;
}

// Keeps the first error an entry gets.
static void SetError(Status* status, const Status& error) {
  if (status->ok() && !error.ok()) *status = error;
}

void SsdTier::WriteStager::SubmitJob() {
  if (job_ == nullptr) return;
  job_->done = [tier = tier_, state = state_, part = part_, pool = pool_,
                staged = std::move(staged_)](std::vector<IoCompletion>& done) {
    WriteState& st = *state;
    const std::vector<size_t>& order = part->order;
    Status sync_error;
    for (size_t k = staged.size(); k < done.size(); ++k) SetError(&sync_error, done[k].status);
    // A failed request skips the job's syncs: the entries whose own request was written are not
    // durable either, for the failed request's reason (NoSpace naming the file, say).
    Status request_error;
    for (size_t r = 0; r < staged.size(); ++r) SetError(&request_error, done[r].status);
    if (!sync_error.ok() && !request_error.ok()) sync_error = request_error;
    for (size_t r = 0; r < staged.size(); ++r) {
      if (staged[r].buffer != nullptr) pool->Release(staged[r].buffer);  // Null: in place.
      for (size_t pos = staged[r].first_pos; pos <= staged[r].last_pos; ++pos) {
        SetError(&st.writes[order[pos]].status, done[r].status);
        SetError(&st.writes[order[pos]].status, sync_error);
      }
    }
    if (part->jobs_left.fetch_sub(1) == 1) tier->FinishPart(st, *part);
  };
  staged_ = {};
  part_->jobs_left.fetch_add(1);
  worker_->Submit(std::move(job_));
}

// The writer's buffer to write entry `w` from in place, or empty: only when it holds exactly the
// payload the record carries (not a sealed copy) where the record puts it, with room for the
// whole record (one request), aligned for O_DIRECT.
static std::span<std::byte> InPlaceRecord(const SsdBlockWrite& w,
                                          std::span<const std::byte> payload) {
  const std::span<std::byte> r = w.record;
  if (r.empty() || payload.data() != r.data() + ssd::kRecordPayloadOffset ||
      !IsAligned(reinterpret_cast<uintptr_t>(r.data()), kDirectIoAlignment) ||
      r.size() < RecordBytesForPayload(payload.size()) ||
      RecordBytesForPayload(payload.size()) > kIoRequestBytesMax) {
    return {};
  }
  return r.first(RecordBytesForPayload(payload.size()));
}

void SsdTier::WriteBatch(std::span<SsdBlockWrite> writes, Callback done) {
  WriteInternal(writes, WriteMode{}, std::move(done));
}

void SsdTier::WriteInternal(std::span<SsdBlockWrite> writes, WriteMode mode, Callback done) {
  KV_CHECK(writes.size() <= kSsdBatchEntriesMax);
  auto state = std::make_shared<WriteState>();
  state->writes = writes;
  state->done = std::move(done);
  state->placements.resize(writes.size());
  std::vector<bool> admitted = ApplyPolicies(writes, mode);
  state->mode = std::move(mode);
  state->payload.resize(writes.size());
  state->flags.resize(writes.size());
  const uint64_t now_wall = clock_->WallMicros();
  for (size_t i = 0; i < writes.size(); ++i) {
    state->payload[i] = writes[i].payload;
    state->flags[i] = state->mode.tombstone          ? ssd::kRecordFlagTombstone
                      : state->mode.record_flags.empty() ? uint8_t{0}
                                                       : state->mode.record_flags[i];
    state->placements[i].expiry_wall_us = !state->mode.expiry_wall_us.empty()
                                              ? state->mode.expiry_wall_us[i]
                                          : writes[i].ttl_us != 0 ? now_wall + writes[i].ttl_us
                                                                  : 0;
  }
  SealPayloads(*state, admitted);
  state->in_place.resize(writes.size());
  for (size_t i = 0; i < writes.size(); ++i) {
    if (admitted[i]) state->in_place[i] = InPlaceRecord(writes[i], state->payload[i]);
  }
  state->admitted = std::move(admitted);
  // Reserved records are handed to the I/O threads before the batch waits for reclaim (Reserve),
  // so the batch is submitted in as many parts as it waited.
  ReclaimWait wait;
  Status give_up;
  for (size_t begin = 0; begin < writes.size();) {
    size_t end = 0;
    {
      MutexLock lock(&mu_);
      end = ReserveBatchLocked(*state, begin, &wait, &give_up);
    }
    SubmitWrites(state, begin, end);
    begin = end;
  }
  FinishSubmitting(*state);
}

size_t SsdTier::ReserveBatchLocked(WriteState& state, size_t begin, ReclaimWait* wait,
                                   Status* give_up) {
  std::span<SsdBlockWrite> writes = state.writes;
  bool holding = false;  // Entries of [begin, i) were placed (and are not yet submitted).
  for (size_t i = begin; i < writes.size(); ++i) {
    if (!state.admitted[i]) continue;
    // Once a record gave up waiting for space (Busy) or the tier is closing (Aborted), the rest
    // of the batch fails the same way at once: one stall allowance for the whole batch.
    if (!give_up->ok()) {
      writes[i].status = *give_up;
      continue;
    }
    const auto record_bytes = static_cast<uint32_t>(RecordBytesForPayload(state.payload[i].size()));
    const uint64_t expiry = state.placements[i].expiry_wall_us;
    bool must_submit = false;
    Status s = Reserve(record_bytes, state.mode, i, writes[i].key, holding, wait,
                       &state.placements[i], &must_submit);
    state.placements[i].expiry_wall_us = expiry;
    if (must_submit) return i;
    if (!s.ok()) writes[i].status = s;
    holding = holding || state.placements[i].segment_id != 0;
    // Aborted while not closing: a re-append superseded by a newer write or erase, which is
    // not an error (the block's newer state is elsewhere).
    if (s.IsAborted() && !stopping_) writes[i].skipped = true;
    if (s.IsBusy() || (s.IsAborted() && stopping_)) *give_up = s;
  }
  return writes.size();
}

// A re-append of an entry that was erased or rewritten since the reclaim's snapshot, or of a
// tombstone that a newer erase replaced, is skipped (it would be a wasted write).
bool SsdTier::StillCurrentLocked(const WriteMode& mode, size_t i, const BlockKey& key) const {
  if (!mode.expect_sequence.empty()) {
    auto it = index_.find(key);
    return it != index_.end() && it->second.sequence == mode.expect_sequence[i];
  }
  if (mode.tombstone && !mode.keep_sequence.empty()) {
    auto it = tombstones_.find(key);
    return it != tombstones_.end() && it->second.sequence == mode.keep_sequence[i];
  }
  return true;
}

void SsdTier::SubmitWrites(const std::shared_ptr<WriteState>& state, size_t begin, size_t end) {
  std::span<SsdBlockWrite> writes = state->writes;
  auto part = std::make_shared<WritePart>();
  std::vector<size_t>& order = part->order;
  for (size_t i = begin; i < end; ++i) {
    if (state->placements[i].segment_id == 0) continue;
    order.push_back(i);
    writes[i].status = Status::Ok();  // Until a request or sync of the entry fails.
  }
  if (order.empty()) return;
  // Records reserved back to back in a segment become one request.
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const Placement& pa = state->placements[a];
    const Placement& pb = state->placements[b];
    return std::tuple(pa.dir, pa.segment_id, pa.offset) <
           std::tuple(pb.dir, pb.segment_id, pb.offset);
  });
  state->parts_left.fetch_add(1);
  for (size_t first = 0; first < order.size();) {
    const uint32_t dir = state->placements[order[first]].dir;
    WriteStager stager(this, state, part, dir);
    size_t pos = first;
    for (; pos < order.size() && state->placements[order[pos]].dir == dir; ++pos) stager.Add(pos);
    stager.Finish();
    first = pos;
  }
  if (part->jobs_left.fetch_sub(1) == 1) FinishPart(*state, *part);
}

void SsdTier::FinishSubmitting(WriteState& state) {
  if (state.parts_left.fetch_sub(1) == 1) FinishWrites(state);
}

uint64_t SsdTier::DurableCandidateLocked() const {
  return inflight_sequences_.empty() ? next_sequence_ - 1 : *inflight_sequences_.begin() - 1;
}

void SsdTier::FinishPart(WriteState& state, const WritePart& part) {
  std::vector<DeferredAck> ready;
  {
    MutexLock lock(&mu_);
    for (const size_t i : part.order) {
      const Placement& p = state.placements[i];
      SsdBlockWrite& w = state.writes[i];
      auto seg = segments_.find(p.segment_id);
      KV_CHECK(seg != segments_.end());  // A segment with writes in flight is never reclaimed.
      seg->second.in_flight.erase(seg->second.in_flight.find(p.offset));
      if (p.fresh_sequence) {
        inflight_sequences_.erase(inflight_sequences_.find(p.sequence));
        state.max_fresh = std::max(state.max_fresh, p.sequence);
      }
      --writes_in_flight_;
      if (!w.status.ok()) {
        // A hole: the scan would stop here, so seal the segment and checkpoint what follows.
        ++stats_.io_errors;
        ++stats_.failed_writes;
        seg->second.sealed = true;
        if (open_segment_[p.dir] == p.segment_id) open_segment_[p.dir] = 0;
        checkpoint_wanted_ = true;
        if (state.first_error.ok()) state.first_error = w.status;
        continue;
      }
      if (options_.sync != SsdSyncMode::kPerBatch) seg->second.unsynced = true;
      ++stats_.writes;
      stats_.write_bytes += RecordBytesForPayload(state.payload[i].size());
      if (state.in_place[i].empty()) {
        stats_.staged_write_bytes += RecordBytesForPayload(state.payload[i].size());
      }
      InstallLocked(w, static_cast<uint32_t>(state.payload[i].size()), p, state.mode, i,
                    seg->second);
    }
    TakeReadyAcksLocked(&ready);  // Other batches may have waited for these records.
    changed_.SignalAll();
  }
  for (DeferredAck& a : ready) a.done(a.status);
  if (state.parts_left.fetch_sub(1) == 1) FinishWrites(state);
}

void SsdTier::TakeReadyAcksLocked(std::vector<DeferredAck>* ready) {
  if (options_.sync != SsdSyncMode::kPerBatch) return;
  const uint64_t complete = DurableCandidateLocked();
  auto waiting =
      std::partition(deferred_acks_.begin(), deferred_acks_.end(),
                     [complete](const DeferredAck& a) { return a.max_sequence > complete; });
  std::move(waiting, deferred_acks_.end(), std::back_inserter(*ready));
  deferred_acks_.erase(waiting, deferred_acks_.end());
}

void SsdTier::FinishWrites(WriteState& state) {
  bool deferred = false;
  std::vector<DeferredAck> ready;
  Status first_error;
  {
    MutexLock lock(&mu_);
    first_error = state.first_error;
    for (size_t i = 0; i < state.writes.size(); ++i) {
      const SsdBlockWrite& w = state.writes[i];
      // Never placed: skipped by a policy, or failed before any I/O (no segment could be
      // created, a stall on reclaim, closing). A failure is the batch's error too, so that no
      // caller reads OK for a block that is not on the SSD.
      if (state.placements[i].segment_id != 0 || w.status.ok() || w.skipped) continue;
      ++stats_.failed_writes;
      if (first_error.ok()) first_error = w.status;
    }
    if (options_.sync == SsdSyncMode::kPerBatch && first_error.ok()) {
      const uint64_t durable = DurableCandidateLocked();
      if (durable > durable_sequence_.load()) durable_sequence_.store(durable);
    }
    // Acknowledged means recoverable: with kPerBatch, a batch whose records lie past a write
    // still in flight answers only once that write has completed (see deferred_acks_).
    if (options_.sync == SsdSyncMode::kPerBatch && state.max_fresh > DurableCandidateLocked()) {
      deferred_acks_.push_back(DeferredAck{
          .max_sequence = state.max_fresh, .done = std::move(state.done), .status = first_error});
      deferred = true;
    }
    TakeReadyAcksLocked(&ready);
    changed_.SignalAll();
  }
  for (DeferredAck& a : ready) a.done(a.status);
  if (!deferred) state.done(first_error);
}

// Makes a completed record visible: a block in the index, a tombstone in tombstones_.
void SsdTier::InstallLocked(const SsdBlockWrite& w, uint32_t payload_bytes, const Placement& p,
                            const WriteMode& mode, size_t i, Segment& seg) {
  if (mode.tombstone) {
    auto t = tombstones_.find(w.key);
    if (t != tombstones_.end() && t->second.sequence > p.sequence) return;  // A newer erase.
    tombstones_[w.key] = {.segment_id = p.segment_id, .sequence = p.sequence};
    seg.keys.push_back(w.key);
    return;
  }
  auto it = index_.find(w.key);
  if (!mode.expect_sequence.empty() &&
      (it == index_.end() || it->second.sequence != mode.expect_sequence[i])) {
    return;  // Re-append of a block that was erased or replaced meanwhile.
  }
  if (it != index_.end() && it->second.sequence > p.sequence) return;  // A newer write won.
  if (it != index_.end()) live_bytes_ -= it->second.record_bytes();
  IndexEntry e{.segment_id = p.segment_id,
               .segment_offset = static_cast<uint32_t>(p.offset),
               .payload_bytes = payload_bytes,
               .raw_bytes = w.raw_bytes,
               .codec_id = w.codec_id,
               .referenced = false,
               .sequence = p.sequence,
               .expiry_wall_us = p.expiry_wall_us};
  live_bytes_ += e.record_bytes();
  index_[w.key] = e;
  seg.keys.push_back(w.key);
}

void SsdTier::ReadBatch(std::span<SsdBlockRead> reads, Callback done) {
  KV_CHECK(reads.size() <= kSsdBatchEntriesMax);
  auto state = std::make_shared<ReadState>();
  state->reads = reads;
  state->done = std::move(done);
  state->expect.resize(reads.size());
  state->files.resize(reads.size());
  state->dirs.resize(reads.size());
  std::vector<size_t> misses;
  {
    MutexLock lock(&mu_);
    const uint64_t now_wall = clock_->WallMicros();
    for (size_t i = 0; i < reads.size(); ++i) {
      SsdBlockRead& r = reads[i];
      r.payload = {};
      r.failed_verification = false;
      ++stats_.reads;
      auto it = index_.find(r.key);
      if (it != index_.end() && it->second.Expired(now_wall)) {
        ++stats_.expired;
        DropEntryLocked(r.key, 0);
        it = index_.end();
      }
      if (it == index_.end()) {
        r.status = Status::NotFound("ssd: not stored");
        ++stats_.read_misses;
        misses.push_back(i);
        continue;
      }
      IndexEntry& e = it->second;
      if (!IsAligned(reinterpret_cast<uintptr_t>(r.buffer.data()), kDirectIoAlignment) ||
          r.buffer.size() < e.record_bytes()) {
        r.status = Status::InvalidArgument("ssd: read buffer unaligned or smaller than the record");
        continue;
      }
      e.referenced = true;
      const Segment& seg = segments_.at(e.segment_id);
      state->expect[i] = e;
      state->files[i] = seg.file;
      state->dirs[i] = seg.dir;
      r.status = Status::Ok();
    }
  }
  for (size_t i : misses) admission_->Record(reads[i].key);
  SubmitReads(std::move(state));
}

void SsdTier::SubmitReads(std::shared_ptr<ReadState> state) {
  std::vector<std::unique_ptr<ssd::IoJob>> jobs(options_.dirs.size());
  std::vector<std::vector<size_t>> entries(options_.dirs.size());
  for (size_t i = 0; i < state->reads.size(); ++i) {
    if (state->expect[i].segment_id == 0) continue;
    const uint32_t d = state->dirs[i];
    if (jobs[d] == nullptr) jobs[d] = std::make_unique<ssd::IoJob>();
    jobs[d]->requests.push_back(IoRequest{.op = IoOp::kRead,
                                          .file = state->files[i].get(),
                                          .offset = state->expect[i].segment_offset,
                                          .buffer = state->reads[i].buffer.data(),
                                          .length = state->expect[i].record_bytes()});
    entries[d].push_back(i);
  }
  uint32_t n_jobs = 0;
  for (size_t d = 0; d < jobs.size(); ++d) {
    if (jobs[d] == nullptr) continue;
    ++n_jobs;
    jobs[d]->done = [this, state, idx = std::move(entries[d])](std::vector<IoCompletion>& done) {
      for (size_t k = 0; k < idx.size(); ++k) {
        FinishRead(state->reads[idx[k]], state->expect[idx[k]], done[k]);
        if (!done[k].status.ok()) {
          MutexLock lock(&state->mu);
          if (state->first_error.ok()) state->first_error = done[k].status;
        }
      }
      if (state->jobs_left.fetch_sub(1) == 1) {
        Status first;
        {
          MutexLock lock(&state->mu);
          first = state->first_error;
        }
        state->done(first);
      }
    };
  }
  if (n_jobs == 0) {
    state->done(Status::Ok());
    return;
  }
  state->jobs_left.store(n_jobs);
  for (size_t d = 0; d < jobs.size(); ++d) {
    if (jobs[d] != nullptr) workers_[d]->Submit(std::move(jobs[d]));
  }
}

void SsdTier::SealPayloads(WriteState& state, std::vector<bool>& admitted) {
  if (!options_.keyring.has_value() || state.mode.tombstone || !state.mode.record_flags.empty()) {
    return;
  }
  state.sealed.resize(state.writes.size());
  for (size_t i = 0; i < state.writes.size(); ++i) {
    if (!admitted[i]) continue;
    SsdBlockWrite& w = state.writes[i];
    std::vector<std::byte>& out = state.sealed[i];
    out.resize(w.payload.size() + ssd::kSealedRecordOverheadBytes);
    // The expiry is sealed with the block's identity: changed without the key, it fails
    // authentication instead of serving an expired block again (docs/ssd_format.md §3).
    constexpr uint8_t kFlags = ssd::kRecordFlagSealed | ssd::kRecordFlagSealedExpiry;
    const ssd::SealedAad aad = ssd::SealedRecordAad(w.key, w.layout_digest, w.codec_id,
                                                    w.raw_bytes, kFlags,
                                                    state.placements[i].expiry_wall_us);
    const Status s = SealRecordPayload(*options_.keyring, aad.span(), w.payload, out);
    if (!s.ok()) {
      w.status = s;
      admitted[i] = false;
      continue;
    }
    state.payload[i] = out;
    state.flags[i] = kFlags;
  }
}

// A record whose seal does not match the configuration (sealed without keys, plain with keys) is
// a miss but not damage: *mismatch says so, and the entry is kept (the right keys read it).
Status SsdTier::OpenPayload(const ssd::RecordHeader& h, std::span<std::byte> buffer,
                            std::span<const std::byte>* payload, bool* mismatch) const {
  *mismatch = false;
  if (h.sealed() != options_.keyring.has_value()) {
    *mismatch = true;
    return Status::NotFound(h.sealed() ? "ssd: the record is sealed and no key is configured"
                                       : "ssd: the record is not sealed but keys are configured");
  }
  if (!h.sealed()) return Status::Ok();
  std::span<std::byte> region = buffer.subspan(ssd::kRecordPayloadOffset, h.payload_bytes);
  const ssd::SealedAad aad = ssd::SealedRecordAad(h.key, h.layout_digest, h.codec_id, h.raw_bytes,
                                                  h.flags, h.expiry_wall_us);
  size_t plain_bytes = 0;
  uint32_t key_id = 0;
  const Status s = OpenRecordPayload(*options_.keyring, aad.span(), region, &plain_bytes, &key_id);
  if (s.IsNotFound()) *mismatch = true;  // Another key: a miss, not damage.
  if (!s.ok()) return s;
  *payload = region.first(plain_bytes);
  return Status::Ok();
}

void SsdTier::FinishRead(SsdBlockRead& read, const IndexEntry& expect, const IoCompletion& io) {
  if (!io.status.ok()) {
    read.status = io.status;
    MutexLock lock(&mu_);
    ++stats_.io_errors;
    return;
  }
  std::span<const std::byte> payload;
  Result<ssd::RecordHeader> h =
      ssd::DecodeRecord(read.buffer.first(std::min<size_t>(io.bytes, expect.record_bytes())),
                        expect.segment_id, expect.segment_offset, ssd::kSegmentBytesMax, &payload);
  Status verdict = h.status();
  if (h.ok() && (h->key != read.key || h->tombstone() || h->sequence != expect.sequence)) {
    verdict = Status::Corruption("record holds another block");
  } else if (h.ok() && h->layout_digest != read.layout_digest) {
    verdict = Status::Corruption("layout digest mismatch");
  } else if (h.ok() && h->expiry_wall_us != expect.expiry_wall_us) {
    // The index's expiry (from a checkpoint, or the record when scanned) and the record's
    // (authenticated when sealed) must agree: an edited one would serve an expired block.
    verdict = Status::Corruption("expiry differs from the index's");
  }
  bool mismatch = false;
  if (verdict.ok()) verdict = OpenPayload(*h, read.buffer, &payload, &mismatch);
  MutexLock lock(&mu_);
  if (mismatch) {
    read.status = verdict;
    ++stats_.read_misses;
    return;
  }
  if (verdict.ok() && expect.Expired(clock_->WallMicros())) {  // It expired during the read.
    read.status = Status::NotFound("ssd: expired");
    ++stats_.expired;
    ++stats_.read_misses;
    DropEntryLocked(read.key, expect.sequence);
    return;
  }
  if (!verdict.ok()) {
    read.status = Status::NotFound("ssd: record failed verification: " + verdict.message());
    read.failed_verification = true;
    ++stats_.corrupt_records;
    ++stats_.read_misses;
    DropEntryLocked(read.key, expect.sequence);
    return;
  }
  ++stats_.read_hits;
  read.payload = payload;
  read.codec_id = h->codec_id;
  read.raw_bytes = h->raw_bytes;
}

}  // namespace kvtier
