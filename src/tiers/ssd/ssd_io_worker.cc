// See ssd_io_worker.h.
#include "tiers/ssd/ssd_io_worker.h"

#include <algorithm>
#include <array>
#include <string>
#include <utility>

#include "core/aligned_buffer.h"
#include "core/assert.h"
#include "core/limits.h"

namespace kvtier::ssd {
namespace {

constexpr uint32_t kIndexBits = 20;  // Requests plus syncs of one job: at most 2^20.
constexpr uint64_t kIndexMask = (uint64_t{1} << kIndexBits) - 1;
constexpr size_t kActiveJobsMax = 64;         // Jobs taken off the queue at once.
constexpr uint64_t kPollTimeoutMicros = 500;  // Bounds how late a newly queued job starts.
constexpr size_t kReapBatch = 64;

}  // namespace

Result<std::unique_ptr<IoWorker>> IoWorker::Start(Env* env, const IoQueueOptions& queue_options,
                                                  uint32_t jobs_max) {
  if (jobs_max == 0) return Status::InvalidArgument("IoWorker: jobs_max must be positive");
  KV_ASSIGN_OR_RETURN(std::unique_ptr<IoQueue> queue, env->NewIoQueue(queue_options));
  std::unique_ptr<IoWorker> worker(new IoWorker(std::move(queue), jobs_max));
  worker->thread_ = std::thread([w = worker.get()] { w->Loop(); });
  return worker;
}

IoWorker::IoWorker(std::unique_ptr<IoQueue> queue, uint32_t jobs_max)
    : queue_(std::move(queue)), jobs_max_(jobs_max) {}

IoWorker::~IoWorker() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    changed_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
}

void IoWorker::Submit(std::unique_ptr<IoJob> job) {
  KV_CHECK(job != nullptr);
  KV_CHECK(job->requests.size() + job->syncs.size() <= kIndexMask);
  MutexLock lock(&mu_);
  KV_CHECK(!stopping_);
  while (pending_.size() >= jobs_max_) changed_.Wait();
  pending_.push_back(std::move(job));
  changed_.SignalAll();
}

bool IoWorker::TakeJobs() {
  MutexLock lock(&mu_);
  while (pending_.empty() && active_.empty() && !stopping_) changed_.Wait();
  if (pending_.empty() && active_.empty()) return true;  // Stopping with nothing left.
  bool took = false;
  while (!pending_.empty() && active_.size() < kActiveJobsMax) {
    Active a;
    a.job = std::move(pending_.front());
    pending_.pop_front();
    a.completions.resize(a.job->requests.size() + a.job->syncs.size());
    const uint64_t serial = next_serial_++;
    active_.emplace(serial, std::move(a));
    took = true;
  }
  if (took) changed_.SignalAll();
  return false;
}

void IoWorker::Loop() {
  while (!TakeJobs()) {
    SubmitReady();
    Reap();
  }
}

void IoWorker::SubmitReady() {
  std::array<IoRequest, kIoBatchMax> batch;
  for (auto it = active_.begin(); it != active_.end();) {
    const uint64_t serial = it->first;
    Active& a = it->second;
    ++it;  // FinishIfDone may erase the current job.
    const size_t n_req = a.job->requests.size();
    const size_t total = n_req + a.job->syncs.size();
    // Syncs wait until every request completed successfully.
    const size_t limit = (a.completed == n_req && !a.failed) ? total : n_req;
    while (a.next < limit) {
      size_t n = 0;
      for (size_t i = a.next; i < limit && n < batch.size(); ++i, ++n) {
        batch[n] = i < n_req ? a.job->requests[i] : a.job->syncs[i - n_req];
        batch[n].user_data = (serial << kIndexBits) | i;
      }
      Result<size_t> accepted = queue_->Submit(std::span<const IoRequest>(batch.data(), n));
      if (!accepted.ok()) {
        // The queue refused the requests themselves: fail them so the job still completes.
        for (size_t i = 0; i < n; ++i) {
          a.completions[a.next + i].status = accepted.status();
        }
        a.completed += n;
        a.failed = true;
        a.next += n;
        continue;
      }
      a.next += *accepted;
      if (*accepted < n) return;  // The queue is full; the rest waits for completions.
    }
    FinishIfDone(serial);
  }
}

// A write that moved fewer bytes than asked (the usual sign of a filesystem filling up) is
// finished here with plain writes of the rest, so that what fails is reported as the kernel says
// it (NoSpace naming the file and offset for ENOSPC) rather than as a bare short transfer. Rare,
// so blocking this thread for it is fine.
Status IoWorker::FinishShortWrite(const IoRequest& r, uint64_t done_bytes) {
  const std::string where = r.file->path() + " at offset " + std::to_string(r.offset);
  const bool aligned = done_bytes % kDirectIoAlignment == 0;
  if (done_bytes > r.length || !aligned) {
    // O_DIRECT cannot continue from an unaligned point; say what happened.
    return Status::IoError("short write to " + where + ": " + std::to_string(done_bytes) + " of " +
                           std::to_string(r.length) + " bytes written (is the disk full?)");
  }
  // The rest, from a plain buffer or from the gathered ones past the bytes written.
  std::vector<std::span<const std::byte>> pieces;
  if (r.gather.empty()) {
    pieces.emplace_back(r.buffer + done_bytes, r.length - done_bytes);
  } else {
    uint64_t skip = done_bytes;
    for (const iovec& v : r.gather) {
      const size_t from = static_cast<size_t>(std::min<uint64_t>(skip, v.iov_len));
      skip -= from;
      if (from < v.iov_len) {
        pieces.emplace_back(static_cast<const std::byte*>(v.iov_base) + from, v.iov_len - from);
      }
    }
  }
  uint64_t at = r.offset + done_bytes;
  for (const std::span<const std::byte> piece : pieces) {
    const Status rest = r.file->WriteAt(at, piece);
    if (!rest.ok()) return rest.WithContext("completing a short write to " + where);
    at += piece.size();
  }
  return Status::Ok();
}

void IoWorker::Reap() {
  if (queue_->in_flight() == 0) return;
  std::array<IoCompletion, kReapBatch> out;
  Result<size_t> got = queue_->Poll(out, 1, kPollTimeoutMicros);
  KV_CHECK(got.ok());  // Poll fails only on a broken queue; nothing sane is left to do.
  for (size_t k = 0; k < *got; ++k) {
    IoCompletion& c = out[k];
    const uint64_t serial = c.user_data >> kIndexBits;
    const size_t index = c.user_data & kIndexMask;
    auto it = active_.find(serial);
    KV_CHECK(it != active_.end());
    Active& a = it->second;
    const size_t n_req = a.job->requests.size();
    if (c.status.ok() && index < n_req && a.job->requests[index].op == IoOp::kWrite &&
        c.bytes < a.job->requests[index].length) {
      c.status = FinishShortWrite(a.job->requests[index], c.bytes);
    }
    if (!c.status.ok()) a.failed = true;
    a.completions[index] = std::move(c);
    ++a.completed;
    FinishIfDone(serial);
  }
}

void IoWorker::FinishIfDone(uint64_t serial) {
  auto it = active_.find(serial);
  if (it == active_.end()) return;
  Active& a = it->second;
  const size_t n_req = a.job->requests.size();
  const size_t total = n_req + a.job->syncs.size();
  // Done when everything submitted has completed and nothing more will be: all submitted, or a
  // failure stops the syncs once every request is out.
  const bool all_out = a.next == total || (a.failed && a.next >= n_req);
  if (a.completed != a.next || !all_out) return;
  for (size_t i = a.next; i < total; ++i) {
    a.completions[i].status = Status::Aborted("sync skipped after a failed request");
  }
  std::unique_ptr<IoJob> job = std::move(a.job);
  std::vector<IoCompletion> completions = std::move(a.completions);
  active_.erase(it);
  job->done(completions);
}

}  // namespace kvtier::ssd

namespace kvtier::ssd {

Result<std::unique_ptr<StagingPool>> StagingPool::Create(size_t buffers, size_t buffer_bytes) {
  if (buffers == 0 || buffers > kBuffersMax || buffer_bytes == 0 ||
      buffer_bytes % kDirectIoAlignment != 0 || buffer_bytes > kIoRequestBytesMax) {
    return Status::InvalidArgument("StagingPool: bad buffer count or size");
  }
  KV_ASSIGN_OR_RETURN(HugePageBuffer region, HugePageBuffer::Allocate(buffers * buffer_bytes));
  return std::unique_ptr<StagingPool>(new StagingPool(std::move(region), buffers, buffer_bytes));
}

StagingPool::StagingPool(HugePageBuffer region, size_t buffers, size_t buffer_bytes)
    : region_(std::move(region)),
      base_(region_.data()),
      buffers_(buffers),
      buffer_bytes_(buffer_bytes) {
  MutexLock lock(&mu_);
  free_.reserve(buffers);
  for (size_t i = buffers; i > 0; --i) free_.push_back(static_cast<uint32_t>(i - 1));
}

StagingPool::~StagingPool() {
  {
    MutexLock lock(&mu_);
    KV_CHECK(free_.size() == buffers_);  // Every buffer is back: no I/O still uses one.
  }
}

std::byte* StagingPool::TryAcquire() {
  MutexLock lock(&mu_);
  if (free_.empty()) return nullptr;
  const uint32_t i = free_.back();
  free_.pop_back();
  return base_ + size_t{i} * buffer_bytes_;
}

std::byte* StagingPool::Acquire() {
  MutexLock lock(&mu_);
  while (free_.empty()) released_.Wait();
  const uint32_t i = free_.back();
  free_.pop_back();
  return base_ + size_t{i} * buffer_bytes_;
}

void StagingPool::Release(std::byte* buffer) {
  KV_CHECK(buffer >= base_ && buffer < base_ + buffers_ * buffer_bytes_);
  const size_t offset = static_cast<size_t>(buffer - base_);
  KV_CHECK(offset % buffer_bytes_ == 0);
  MutexLock lock(&mu_);
  KV_DCHECK(free_.size() < buffers_);
  free_.push_back(static_cast<uint32_t>(offset / buffer_bytes_));
  released_.Signal();
}

}  // namespace kvtier::ssd
