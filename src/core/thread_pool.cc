#include "core/thread_pool.h"

#include <pthread.h>

#include <memory>

#include "core/limits.h"
#include "core/thread_priority.h"

namespace kvtier {

Result<std::unique_ptr<ThreadPool>> ThreadPool::Create(const ThreadPoolOptions& options) {
  if (options.threads == 0 || options.threads > kThreadPoolThreadsMax) {
    return Status::InvalidArgument("thread pool threads must be in [1, " +
                                   std::to_string(kThreadPoolThreadsMax) + "], got " +
                                   std::to_string(options.threads));
  }
  if (options.nice_increment < 0 || options.nice_increment > kNiceMax) {
    return Status::InvalidArgument("thread pool nice_increment must be in [0, " +
                                   std::to_string(kNiceMax) + "], got " +
                                   std::to_string(options.nice_increment));
  }
  if (options.queue_tasks_max == 0 || options.queue_tasks_max > kThreadPoolQueueMax) {
    return Status::InvalidArgument("thread pool queue_tasks_max must be in [1, " +
                                   std::to_string(kThreadPoolQueueMax) + "], got " +
                                   std::to_string(options.queue_tasks_max));
  }
  return std::unique_ptr<ThreadPool>(new ThreadPool(options));
}

ThreadPool::ThreadPool(const ThreadPoolOptions& options) : options_(options) {
  workers_.reserve(options.threads);
  for (uint32_t i = 0; i < options.threads; ++i) {
    workers_.emplace_back([this] {
      if (options_.nice_increment > 0) {
        // Refused (a seccomp filter, say): the worker runs at the pool creator's priority.
        LowerThisThreadPriority(options_.nice_increment).status().IgnoreError();
      }
      if (options_.idle_scheduling) UseIdleScheduling().IgnoreError();
      WorkerLoop();
    });
    const std::string name = (options_.name + std::to_string(i)).substr(0, 15);
    pthread_setname_np(workers_.back().native_handle(), name.c_str());
  }
}

ThreadPool::~ThreadPool() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  not_empty_.SignalAll();
  not_full_.SignalAll();
  for (auto& t : workers_) t.join();
}

Status ThreadPool::Submit(Task task) {
  MutexLock lock(&mu_);
  while (!stopping_ && queue_.size() >= options_.queue_tasks_max) not_full_.Wait(&mu_);
  if (stopping_) return Status::Aborted("thread pool is shutting down");
  queue_.push_back(std::move(task));
  not_empty_.Signal();
  return Status::Ok();
}

Status ThreadPool::TrySubmit(Task task) {
  MutexLock lock(&mu_);
  if (stopping_) return Status::Aborted("thread pool is shutting down");
  if (queue_.size() >= options_.queue_tasks_max) {
    return Status::Busy("thread pool queue is full (" + std::to_string(queue_.size()) + " tasks)");
  }
  queue_.push_back(std::move(task));
  not_empty_.Signal();
  return Status::Ok();
}

void ThreadPool::WaitIdle() {
  MutexLock lock(&mu_);
  while (!queue_.empty() || running_ > 0) idle_.Wait(&mu_);
}

size_t ThreadPool::queued() {
  MutexLock lock(&mu_);
  return queue_.size();
}

void ThreadPool::WorkerLoop() {
  for (;;) {
    Task task;
    {
      MutexLock lock(&mu_);
      while (queue_.empty() && !stopping_) not_empty_.Wait(&mu_);
      // Shutdown drains the queue first: queued work was accepted and must run.
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
      ++running_;
      not_full_.Signal();
    }
    task();
    {
      MutexLock lock(&mu_);
      --running_;
      if (queue_.empty() && running_ == 0) idle_.SignalAll();
    }
  }
}

}  // namespace kvtier
