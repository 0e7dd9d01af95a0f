#include "tiers/redis/redis_open_worker.h"

namespace kvtier {

RedisOpenWorker::RedisOpenWorker(GcmImpl impl) : cipher_(impl), thread_([this] { Run(); }) {}

RedisOpenWorker::~RedisOpenWorker() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  work_.SignalAll();
  thread_.join();
}

bool RedisOpenWorker::Submit(RedisOpenCall* call, size_t index, const redisReply* reply) {
  {
    MutexLock lock(&mu_);
    if (count_ == queue_.size()) return false;
    queue_[(head_ + count_) % queue_.size()] = {call, index, reply};
    ++count_;
    ++call->pending_;
  }
  work_.Signal();
  return true;
}

void RedisOpenWorker::Wait(RedisOpenCall* call) {
  MutexLock lock(&mu_);
  while (call->pending_ != 0) done_.Wait(&mu_);
}

void RedisOpenWorker::Run() {
  for (;;) {
    Job job;
    {
      MutexLock lock(&mu_);
      while (count_ == 0 && !stop_) work_.Wait(&mu_);
      if (count_ == 0) return;  // Stopping, and nothing is left.
      job = queue_[head_];
      head_ = (head_ + 1) % queue_.size();
      --count_;
    }
    job.call->Open(job.index, *job.reply, &cipher_);
    // The call may be freed as soon as its count reaches zero and the lock is released: touch
    // nothing of it after this block.
    MutexLock lock(&mu_);
    if (--job.call->pending_ == 0) done_.SignalAll();
  }
}

}  // namespace kvtier
