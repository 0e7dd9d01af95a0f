// See ssd_io_worker.h.
#include "tiers/ssd_io_worker.h"

#include <array>
#include <string>
#include <utility>

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
      c.status = Status::IoError("short transfer on " + a.job->requests[index].file->path() +
                                 " at offset " + std::to_string(a.job->requests[index].offset));
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
