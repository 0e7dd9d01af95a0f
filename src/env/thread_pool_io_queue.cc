// IoQueue on worker threads, the fallback where io_uring is refused. Requests wait in a fixed ring
// of `depth` entries, workers run them through the File (pread/pwrite/fdatasync for posix files)
// and put completions into a second fixed ring of `depth` entries. Both rings are allocated at
// creation and can't overflow: at most `depth` requests are unreaped at any time.
#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "core/assert.h"
#include "core/mutex.h"
#include "env/io_queues.h"

namespace kvtier {
namespace {

constexpr uint64_t kPollTimeoutMicrosMax = uint64_t{1} << 40;  // About 12.7 days.

// A fixed-capacity FIFO over a vector allocated once.
template <typename T>
class FixedRing {
 public:
  explicit FixedRing(uint32_t capacity) : items_(capacity) {}
  uint32_t size() const { return size_; }
  void Push(T item) {
    KV_CHECK(size_ < items_.size());
    items_[(head_ + size_) % items_.size()] = std::move(item);
    ++size_;
  }
  T Pop() {
    KV_CHECK(size_ > 0);
    T item = std::move(items_[head_]);
    head_ = static_cast<uint32_t>((head_ + 1) % items_.size());
    --size_;
    return item;
  }

 private:
  std::vector<T> items_;
  uint32_t head_ = 0;
  uint32_t size_ = 0;
};

class ThreadPoolIoQueue final : public IoQueue {
 public:
  explicit ThreadPoolIoQueue(const IoQueueOptions& options);
  ~ThreadPoolIoQueue() override;

  ThreadPoolIoQueue(const ThreadPoolIoQueue&) = delete;
  ThreadPoolIoQueue& operator=(const ThreadPoolIoQueue&) = delete;

  std::string_view backend_name() const override { return "threadpool"; }
  uint32_t depth() const override { return depth_; }
  uint32_t in_flight() const override { return in_flight_; }

  Result<size_t> Submit(std::span<const IoRequest> requests) override KV_EXCLUDES(mu_);
  Result<size_t> Poll(std::span<IoCompletion> out, size_t min_completions,
                      uint64_t timeout_micros) override KV_EXCLUDES(mu_);

 private:
  void WorkerLoop() KV_EXCLUDES(mu_);
  static IoCompletion Execute(const IoRequest& request);

  const uint32_t depth_;
  uint32_t in_flight_ = 0;  // Owner thread only: submitted and not yet returned by Poll.
  Mutex mu_;
  CondVar work_ready_{&mu_};
  CondVar done_ready_{&mu_};
  FixedRing<IoRequest> pending_ KV_GUARDED_BY(mu_);
  FixedRing<IoCompletion> done_ KV_GUARDED_BY(mu_);
  bool stopping_ KV_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

ThreadPoolIoQueue::ThreadPoolIoQueue(const IoQueueOptions& options)
    : depth_(options.depth), pending_(options.depth), done_(options.depth) {
  workers_.reserve(options.fallback_threads);
  for (uint32_t i = 0; i < options.fallback_threads; ++i) {
    workers_.emplace_back([this] { WorkerLoop(); });
    const std::string name = "kvtier-io" + std::to_string(i);
    pthread_setname_np(workers_.back().native_handle(), name.substr(0, 15).c_str());
  }
}

ThreadPoolIoQueue::~ThreadPoolIoQueue() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  work_ready_.SignalAll();
  // Workers finish every pending request before they exit: those requests borrow buffers.
  for (std::thread& t : workers_) t.join();
}

IoCompletion ThreadPoolIoQueue::Execute(const IoRequest& r) {
  IoCompletion c;
  c.user_data = r.user_data;
  switch (r.op) {
    case IoOp::kRead:
      c.status = r.file->ReadAt(r.offset, std::span<std::byte>(r.buffer, r.length), &c.bytes);
      break;
    case IoOp::kWrite:
      if (r.gather.empty()) {
        c.status = r.file->WriteAt(r.offset, std::span<const std::byte>(r.buffer, r.length));
      } else {
        // The gathered buffers one after the other (pwritev does no more for durability).
        uint64_t at = r.offset;
        for (const iovec& v : r.gather) {
          c.status = r.file->WriteAt(
              at, std::span<const std::byte>(static_cast<const std::byte*>(v.iov_base), v.iov_len));
          if (!c.status.ok()) break;
          at += v.iov_len;
        }
      }
      c.bytes = c.status.ok() ? r.length : 0;
      break;
    case IoOp::kSync:
      c.status = r.file->Sync();
      break;
  }
  if (!c.status.ok()) c.bytes = 0;
  return c;
}

void ThreadPoolIoQueue::WorkerLoop() {
  for (;;) {
    IoRequest request;
    {
      MutexLock lock(&mu_);
      while (pending_.size() == 0 && !stopping_) work_ready_.Wait();
      if (pending_.size() == 0) return;  // Stopping, and nothing left to run.
      request = pending_.Pop();
    }
    IoCompletion completion = Execute(request);
    {
      MutexLock lock(&mu_);
      done_.Push(std::move(completion));
    }
    done_ready_.Signal();
  }
}

Result<size_t> ThreadPoolIoQueue::Submit(std::span<const IoRequest> requests) {
  const size_t count = std::min<size_t>(requests.size(), depth_ - in_flight_);
  for (size_t i = 0; i < count; ++i) KV_RETURN_IF_ERROR(ValidateIoRequest(requests[i]));
  if (count == 0) return size_t{0};
  {
    MutexLock lock(&mu_);
    for (size_t i = 0; i < count; ++i) pending_.Push(requests[i]);
  }
  in_flight_ += static_cast<uint32_t>(count);
  if (count == 1) {
    work_ready_.Signal();
  } else {
    work_ready_.SignalAll();
  }
  return count;
}

Result<size_t> ThreadPoolIoQueue::Poll(std::span<IoCompletion> out, size_t min_completions,
                                       uint64_t timeout_micros) {
  if (in_flight_ == 0 || out.empty()) return size_t{0};
  const size_t want = std::min({min_completions, size_t{in_flight_}, out.size()});
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::microseconds(std::min(timeout_micros, kPollTimeoutMicrosMax));
  MutexLock lock(&mu_);
  while (done_.size() < want) {
    const auto left = deadline - std::chrono::steady_clock::now();
    if (left <= std::chrono::steady_clock::duration::zero()) break;
    done_ready_.WaitFor(left);
  }
  const size_t count = std::min<size_t>(done_.size(), out.size());
  for (size_t i = 0; i < count; ++i) out[i] = done_.Pop();
  in_flight_ -= static_cast<uint32_t>(count);
  return count;
}

}  // namespace

Result<std::unique_ptr<IoQueue>> NewThreadPoolIoQueue(const IoQueueOptions& options) {
  KV_RETURN_IF_ERROR(ValidateIoQueueOptions(options));
  return std::unique_ptr<IoQueue>(std::make_unique<ThreadPoolIoQueue>(options));
}

}  // namespace kvtier
