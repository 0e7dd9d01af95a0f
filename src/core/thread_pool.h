// ThreadPool: a fixed set of worker threads fed by a bounded FIFO queue. Submit() blocks while
// the queue is full (back-pressure instead of unbounded memory growth); TrySubmit() returns Busy
// instead. The destructor runs every task already queued, then joins the workers.
//
// Thread safety: Submit/TrySubmit/WaitIdle may be called from any thread, including from a task
// (TrySubmit only: a task that blocks in Submit on its own full pool could wait forever).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/mutex.h"
#include "kvtier/result.h"

namespace kvtier {

struct ThreadPoolOptions {
  uint32_t threads = 2;
  uint32_t queue_tasks_max = 1024;
  std::string name = "kvtier-pool";  // Thread name prefix (15 bytes at most are kept).
  // Added to each worker's nice value as it starts (core/thread_priority.h), for pools that do
  // background work only; [0, kNiceMax]. A refusal by the system leaves the worker as it was.
  int nice_increment = 0;
  // Each worker also moves itself to SCHED_IDLE as it starts (core/thread_priority.h); the same
  // refusal rule.
  bool idle_scheduling = false;
};

class ThreadPool {
 public:
  using Task = std::function<void()>;

  // Validates the options (threads and queue within core/limits.h) and starts the workers.
  static Result<std::unique_ptr<ThreadPool>> Create(const ThreadPoolOptions& options);
  ~ThreadPool();

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Queues `task`, waiting while the queue is full. Aborted after shutdown started.
  Status Submit(Task task) KV_EXCLUDES(mu_);
  // Queues `task` or returns Busy when the queue is full.
  Status TrySubmit(Task task) KV_EXCLUDES(mu_);
  // Waits until the queue is empty and no task is running.
  void WaitIdle() KV_EXCLUDES(mu_);

  uint32_t threads() const { return static_cast<uint32_t>(workers_.size()); }
  size_t queued() KV_EXCLUDES(mu_);

 private:
  explicit ThreadPool(const ThreadPoolOptions& options);
  void WorkerLoop() KV_EXCLUDES(mu_);

  const ThreadPoolOptions options_;
  Mutex mu_;
  CondVar not_empty_;
  CondVar not_full_;
  CondVar idle_;
  std::deque<Task> queue_ KV_GUARDED_BY(mu_);
  uint32_t running_ KV_GUARDED_BY(mu_) = 0;
  bool stopping_ KV_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace kvtier
