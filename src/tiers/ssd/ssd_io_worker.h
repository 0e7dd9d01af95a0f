// IoWorker: the one thread that owns the IoQueue (io_uring ring or thread-pool fallback) of one
// SSD-tier directory. Callers hand it jobs (a list of reads or writes, then optional syncs)
// through a bounded queue; it keeps up to the queue depth of requests in flight across jobs and
// calls each job's completion on its own thread when every request of the job has completed.
//
// Why one thread per ring: an io_uring ring is not thread-safe, and one owner per ring removes
// all contention on it (as Mooncake's uring_file does). The bounded job queue is the tier's
// back-pressure: Submit blocks while it is full.
//
// Thread safety: Submit may be called from any thread. Completion callbacks run on the worker
// thread and must not block on work that this worker would have to do (the tier's synchronous
// wrappers are never called from a callback).
//
// Ownership: a job's requests borrow their Files and buffers; the job's owner keeps them alive
// until the completion callback has run (typically by holding them in the callback's state).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/huge_page_buffer.h"
#include "core/mutex.h"
#include "env/env.h"

namespace kvtier::ssd {

struct IoJob {
  // Reads or writes, all submitted at once (up to the queue depth).
  std::vector<IoRequest> requests;
  // kSync requests issued only after every request above succeeded; their completions follow
  // those of `requests` in the vector passed to `done`.
  std::vector<IoRequest> syncs;
  // The arrays that gathered writes among `requests` point to (IoRequest::gather).
  std::vector<std::vector<iovec>> gathers;
  // A short write completes as IoError; a short read completes OK with fewer bytes (the caller
  // decides: for the tier it is a truncated record, i.e. a miss).
  // Called once with one completion per request (index i for requests[i], then the syncs; a
  // sync not issued because a request failed reports Aborted).
  std::function<void(std::vector<IoCompletion>&)> done;
};

class IoWorker {
 public:
  static Result<std::unique_ptr<IoWorker>> Start(Env* env, const IoQueueOptions& queue_options,
                                                 uint32_t jobs_max);
  // Runs every job already queued, then joins the thread.
  ~IoWorker();

  IoWorker(const IoWorker&) = delete;
  IoWorker& operator=(const IoWorker&) = delete;

  // Queues a job, waiting while `jobs_max` jobs are queued.
  void Submit(std::unique_ptr<IoJob> job) KV_EXCLUDES(mu_);
  std::string_view backend_name() const { return queue_->backend_name(); }

 private:
  struct Active {
    std::unique_ptr<IoJob> job;
    std::vector<IoCompletion> completions;
    size_t next = 0;  // Next request (over requests, then syncs) to submit.
    size_t completed = 0;
    bool failed = false;
  };

  IoWorker(std::unique_ptr<IoQueue> queue, uint32_t jobs_max);
  void Loop() KV_EXCLUDES(mu_);
  bool TakeJobs() KV_EXCLUDES(mu_);
  void SubmitReady();
  void Reap();
  static Status FinishShortWrite(const IoRequest& r, uint64_t done_bytes);
  void FinishIfDone(uint64_t serial);

  std::unique_ptr<IoQueue> queue_;  // Used only by the worker thread.
  const uint32_t jobs_max_;
  Mutex mu_;
  CondVar changed_{&mu_};
  std::deque<std::unique_ptr<IoJob>> pending_ KV_GUARDED_BY(mu_);
  bool stopping_ KV_GUARDED_BY(mu_) = false;
  // Worker-thread state: jobs taken from pending_, by serial number (the user_data of their
  // requests is serial << kIndexBits | index).
  std::map<uint64_t, Active> active_;
  uint64_t next_serial_ = 1;
  std::thread thread_;
};

// StagingPool: a fixed set of equally sized, 4 KiB-aligned staging buffers that writes encode
// their records into, so the write path allocates nothing. One per directory, made at open.
//
// Why: a fresh buffer per write costs one minor page fault per 4 KiB on first touch (~1 GB/s,
// measured), which made writes kernel-bound at 0.69x of fio (docs/benchmarks-history.md §1). The
// pool is one mapping, advised to use transparent huge pages where the kernel has them, and
// touched once at creation so that no write ever faults on it.
//
// Back-pressure: Acquire blocks while every buffer is out; the count never grows. A writer that
// holds buffers must hand them to an I/O worker (which releases them on completion) before it
// blocks for more, or it could wait on itself.
//
// Thread safety: every method may be called from any thread. Ownership: the pool owns the
// memory; buffers are borrowed between Acquire and Release and must not outlive the pool.
class StagingPool {
 public:
  // `buffers` (1..kBuffersMax) buffers of `buffer_bytes` (a positive multiple of 4 KiB, at
  // most kIoRequestBytesMax). NoSpace when the memory cannot be mapped.
  static Result<std::unique_ptr<StagingPool>> Create(size_t buffers, size_t buffer_bytes);
  ~StagingPool();
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  static constexpr size_t kBuffersMax = 4096;

  // A free buffer, or null when none is free right now.
  std::byte* TryAcquire() KV_EXCLUDES(mu_);
  // A free buffer, waiting for one to be released if needed.
  std::byte* Acquire() KV_EXCLUDES(mu_);
  // Gives back a buffer obtained from this pool.
  void Release(std::byte* buffer) KV_EXCLUDES(mu_);

  size_t buffer_bytes() const { return buffer_bytes_; }
  size_t buffers() const { return buffers_; }

 private:
  StagingPool(HugePageBuffer region, size_t buffers, size_t buffer_bytes);

  HugePageBuffer region_;  // The buffers, back to back on huge pages (core/huge_page_buffer.h).
  std::byte* const base_;  // The first buffer.
  const size_t buffers_;
  const size_t buffer_bytes_;
  Mutex mu_;
  CondVar released_{&mu_};
  // Free buffers as a stack of indices; sized once, never reallocated.
  std::vector<uint32_t> free_ KV_GUARDED_BY(mu_);
};

}  // namespace kvtier::ssd
