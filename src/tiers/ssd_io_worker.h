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

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/mutex.h"
#include "env/env.h"

namespace kvtier::ssd {

struct IoJob {
  // Reads or writes, all submitted at once (up to the queue depth).
  std::vector<IoRequest> requests;
  // kSync requests issued only after every request above succeeded; their completions follow
  // those of `requests` in the vector passed to `done`.
  std::vector<IoRequest> syncs;
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

}  // namespace kvtier::ssd
