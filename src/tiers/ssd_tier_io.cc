// SsdTier's data path: turning a batch of writes into coalesced O_DIRECT appends per directory,
// installing index entries when they complete, and reading records straight into the callers'
// buffers with verification. See ssd_tier.h.
#include <algorithm>
#include <cstdint>
#include <utility>

#include "core/aligned_buffer.h"
#include "core/assert.h"
#include "tiers/ssd_io_worker.h"
#include "tiers/ssd_policy.h"
#include "tiers/ssd_record.h"
#include "tiers/ssd_tier.h"

namespace kvtier {

using ssd::IndexEntry;
using ssd::RecordBytesForPayload;

namespace {

// A run of records that are contiguous in one segment: one write request.
struct Run {
  uint64_t segment_id = 0;
  uint64_t offset = 0;
  uint64_t bytes = 0;
  File* file = nullptr;
  std::vector<size_t> entries;  // Indices into the batch.
};

}  // namespace

struct SsdTier::WriteState {
  std::span<SsdBlockWrite> writes;
  WriteMode mode;
  Callback done;
  std::vector<Placement> placements;   // segment_id 0: not placed.
  std::vector<AlignedBuffer> buffers;  // Staging, one per run; freed with the state.
  std::atomic<uint32_t> jobs_left{0};
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

// Encodes the records of `run` into one staging buffer.
static Status EncodeRun(const Run& run, std::span<SsdBlockWrite> writes,
                        const std::vector<uint64_t>& expiries, bool tombstone,
                        const std::vector<uint64_t>& sequences, AlignedBuffer* buffer) {
  KV_ASSIGN_OR_RETURN(*buffer, AlignedBuffer::Allocate(run.bytes));
  uint64_t at = 0;
  for (size_t i : run.entries) {
    const SsdBlockWrite& w = writes[i];
    ssd::RecordHeader h;
    h.codec_id = w.codec_id;
    h.flags = tombstone ? ssd::kRecordFlagTombstone : 0;
    h.layout_digest = w.layout_digest;
    h.key = w.key;
    h.raw_bytes = w.raw_bytes;
    h.payload_bytes = static_cast<uint32_t>(w.payload.size());
    h.sequence = sequences[i];
    h.expiry_wall_us = expiries[i];
    h.segment_id = run.segment_id;
    h.segment_offset = static_cast<uint32_t>(run.offset + at);
    const uint64_t record_bytes = RecordBytesForPayload(w.payload.size());
    ssd::EncodeRecord(h, w.payload, buffer->span().subspan(at, record_bytes));
    at += record_bytes;
  }
  KV_DCHECK(at == run.bytes);
  return Status::Ok();
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
  const std::vector<bool> admitted = ApplyPolicies(writes, mode);
  state->mode = std::move(mode);
  const uint64_t now_wall = clock_->WallMicros();
  {
    MutexLock lock(&mu_);
    for (size_t i = 0; i < writes.size(); ++i) {
      if (!admitted[i]) continue;
      state->placements[i].expiry_wall_us = !state->mode.expiry_wall_us.empty()
                                                ? state->mode.expiry_wall_us[i]
                                            : writes[i].ttl_us != 0 ? now_wall + writes[i].ttl_us
                                                                    : 0;
      const auto record_bytes =
          static_cast<uint32_t>(RecordBytesForPayload(writes[i].payload.size()));
      const uint64_t expiry = state->placements[i].expiry_wall_us;
      Status s = Reserve(record_bytes, state->mode.over_capacity, &state->placements[i]);
      state->placements[i].expiry_wall_us = expiry;
      if (!s.ok()) writes[i].status = s;
    }
  }
  SubmitWrites(std::move(state));
}

void SsdTier::SubmitWrites(std::shared_ptr<WriteState> state) {
  std::span<SsdBlockWrite> writes = state->writes;
  std::vector<uint64_t> expiries(writes.size(), 0), sequences(writes.size(), 0);
  std::vector<std::vector<Run>> runs(options_.dirs.size());
  // Entries in placement order, so records reserved back to back form one run.
  std::vector<size_t> order;
  for (size_t i = 0; i < writes.size(); ++i) {
    const Placement& p = state->placements[i];
    if (p.segment_id == 0) continue;
    order.push_back(i);
    sequences[i] = p.sequence;
    expiries[i] = p.expiry_wall_us;
  }
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const Placement& pa = state->placements[a];
    const Placement& pb = state->placements[b];
    return std::pair(pa.segment_id, pa.offset) < std::pair(pb.segment_id, pb.offset);
  });
  for (size_t i : order) {
    const Placement& p = state->placements[i];
    const uint64_t rb = RecordBytesForPayload(writes[i].payload.size());
    std::vector<Run>& dir_runs = runs[p.dir];
    if (dir_runs.empty() || dir_runs.back().segment_id != p.segment_id ||
        dir_runs.back().offset + dir_runs.back().bytes != p.offset ||
        dir_runs.back().bytes + rb > kIoRequestBytesMax) {
      Run run;
      run.segment_id = p.segment_id;
      run.offset = p.offset;
      run.file = p.file.get();
      dir_runs.push_back(std::move(run));
    }
    dir_runs.back().bytes += rb;
    dir_runs.back().entries.push_back(i);
  }
  std::vector<std::unique_ptr<ssd::IoJob>> jobs(options_.dirs.size());
  for (size_t d = 0; d < runs.size(); ++d) {
    if (runs[d].empty()) continue;
    auto job = std::make_unique<ssd::IoJob>();
    std::vector<Run> issued;
    for (Run& run : runs[d]) {
      AlignedBuffer buffer;
      Status s = EncodeRun(run, writes, expiries, state->mode.tombstone, sequences, &buffer);
      if (!s.ok()) {
        for (size_t i : run.entries) writes[i].status = s;
        continue;
      }
      job->requests.push_back(IoRequest{.op = IoOp::kWrite,
                                        .file = run.file,
                                        .offset = run.offset,
                                        .buffer = buffer.data(),
                                        .length = run.bytes});
      if (options_.sync == SsdSyncMode::kPerBatch &&
          std::none_of(job->syncs.begin(), job->syncs.end(),
                       [&](const IoRequest& r) { return r.file == run.file; })) {
        job->syncs.push_back(IoRequest{.op = IoOp::kSync, .file = run.file});
      }
      state->buffers.push_back(std::move(buffer));
      issued.push_back(std::move(run));
    }
    if (job->requests.empty()) continue;
    job->done = [this, state, issued = std::move(issued)](std::vector<IoCompletion>& done) {
      Status sync_error;
      for (size_t k = issued.size(); k < done.size(); ++k) {
        if (!done[k].status.ok() && sync_error.ok()) sync_error = done[k].status;
      }
      for (size_t r = 0; r < issued.size(); ++r) {
        const Status& s = !done[r].status.ok() ? done[r].status : sync_error;
        for (size_t i : issued[r].entries) state->writes[i].status = s;
      }
      if (state->jobs_left.fetch_sub(1) == 1) FinishWrites(*state);
    };
    jobs[d] = std::move(job);
  }
  uint32_t n_jobs = 0;
  for (const auto& j : jobs) n_jobs += j != nullptr ? 1u : 0u;
  if (n_jobs == 0) {
    FinishWrites(*state);
    return;
  }
  state->jobs_left.store(n_jobs);
  for (size_t d = 0; d < jobs.size(); ++d) {
    if (jobs[d] != nullptr) workers_[d]->Submit(std::move(jobs[d]));
  }
}

uint64_t SsdTier::DurableCandidateLocked() const {
  return inflight_sequences_.empty() ? next_sequence_ - 1 : *inflight_sequences_.begin() - 1;
}

void SsdTier::FinishWrites(WriteState& state) {
  Status first_error;
  {
    MutexLock lock(&mu_);
    for (size_t i = 0; i < state.writes.size(); ++i) {
      const Placement& p = state.placements[i];
      if (p.segment_id == 0) continue;
      SsdBlockWrite& w = state.writes[i];
      auto seg = segments_.find(p.segment_id);
      KV_CHECK(seg != segments_.end());  // A segment with writes in flight is never reclaimed.
      seg->second.in_flight.erase(seg->second.in_flight.find(p.offset));
      inflight_sequences_.erase(inflight_sequences_.find(p.sequence));
      --writes_in_flight_;
      if (!w.status.ok()) {
        // A hole: the scan would stop here, so seal the segment and checkpoint what follows.
        ++stats_.io_errors;
        seg->second.sealed = true;
        if (open_segment_[p.dir] == p.segment_id) open_segment_[p.dir] = 0;
        checkpoint_wanted_ = true;
        if (first_error.ok()) first_error = w.status;
        continue;
      }
      if (options_.sync != SsdSyncMode::kPerBatch) seg->second.unsynced = true;
      ++stats_.writes;
      stats_.write_bytes += RecordBytesForPayload(w.payload.size());
      if (state.mode.tombstone) continue;
      auto it = index_.find(w.key);
      if (!state.mode.expect_sequence.empty() &&
          (it == index_.end() || it->second.sequence != state.mode.expect_sequence[i])) {
        continue;  // Re-append of a block that was erased or replaced meanwhile.
      }
      if (it != index_.end() && it->second.sequence > p.sequence) continue;  // A newer write won.
      if (it != index_.end()) live_bytes_ -= it->second.record_bytes();
      IndexEntry e{.segment_id = p.segment_id,
                   .segment_offset = static_cast<uint32_t>(p.offset),
                   .payload_bytes = static_cast<uint32_t>(w.payload.size()),
                   .raw_bytes = w.raw_bytes,
                   .codec_id = w.codec_id,
                   .referenced = false,
                   .sequence = p.sequence,
                   .expiry_wall_us = p.expiry_wall_us};
      live_bytes_ += e.record_bytes();
      index_[w.key] = e;
    }
    if (options_.sync == SsdSyncMode::kPerBatch && first_error.ok()) {
      const uint64_t durable = DurableCandidateLocked();
      if (durable > durable_sequence_.load()) durable_sequence_.store(durable);
    }
    changed_.SignalAll();
  }
  state.done(first_error);
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
  }
  MutexLock lock(&mu_);
  if (!verdict.ok()) {
    read.status = Status::NotFound("ssd: record failed verification: " + verdict.message());
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
