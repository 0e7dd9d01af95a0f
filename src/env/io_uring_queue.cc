// IoQueue over one io_uring ring. The ring is sized to the queue depth at creation and used only
// by the owner thread, so there is no locking. Each accepted request takes a slot of a fixed table
// (its index is the SQE's user_data), so the data path allocates nothing: a completion maps back
// to the caller's request through the slot, and the slot returns to a free stack.
#include <liburing.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <vector>

#include "core/assert.h"
#include "env/io_queues.h"

namespace kvtier {
namespace {

// Bounds one Poll wait so that a huge timeout cannot overflow the deadline arithmetic.
constexpr uint64_t kPollTimeoutMicrosMax = uint64_t{1} << 40;  // About 12.7 days.

class IoUringQueue final : public IoQueue {
 public:
  explicit IoUringQueue(uint32_t depth)
      : depth_(depth), slots_(depth), free_slots_(depth), cqes_(depth) {
    for (uint32_t i = 0; i < depth; ++i) free_slots_[i] = depth - 1 - i;
    free_count_ = depth;
  }
  ~IoUringQueue() override;

  IoUringQueue(const IoUringQueue&) = delete;
  IoUringQueue& operator=(const IoUringQueue&) = delete;

  // Sets up the ring; the error of io_uring_queue_init when the kernel refuses.
  Status Init();

  std::string_view backend_name() const override { return "io_uring"; }
  uint32_t depth() const override { return depth_; }
  uint32_t in_flight() const override { return in_flight_; }

  Result<size_t> Submit(std::span<const IoRequest> requests) override;
  Result<size_t> Poll(std::span<IoCompletion> out, size_t min_completions,
                      uint64_t timeout_micros) override;

 private:
  void Prepare(const IoRequest& request);
  // Hands the prepared SQEs to the kernel. A transient refusal (EAGAIN, EBUSY) leaves them in the
  // ring for the next Submit or Poll; any other error breaks the queue.
  Status Flush();
  // Moves up to out.size() ready completions into `out` without waiting.
  size_t Reap(std::span<IoCompletion> out);

  const uint32_t depth_;
  io_uring ring_{};
  bool ring_ready_ = false;
  std::vector<IoRequest> slots_;      // The request each busy slot stands for.
  std::vector<uint32_t> free_slots_;  // A stack of free slot indices; the first free_count_.
  uint32_t free_count_ = 0;
  std::vector<io_uring_cqe*> cqes_;  // Scratch for io_uring_peek_batch_cqe.
  uint32_t in_flight_ = 0;
  Status broken_;  // Once not OK, every call returns it.
};

IoUringQueue::~IoUringQueue() {
  if (!ring_ready_) return;
  // The kernel may still write into buffers of requests in flight: wait for all of them. The loop
  // is bounded by in_flight_, and a wait error ends it (the ring is unusable then).
  while (in_flight_ > 0 && Flush().ok()) {
    io_uring_cqe* cqe = nullptr;
    const int ret = io_uring_wait_cqe(&ring_, &cqe);
    if (ret == -EINTR) continue;
    if (ret < 0) break;
    const auto slot = static_cast<uint32_t>(io_uring_cqe_get_data64(cqe));
    io_uring_cqe_seen(&ring_, cqe);
    free_slots_[free_count_++] = slot;
    --in_flight_;
  }
  io_uring_queue_exit(&ring_);
}

Status IoUringQueue::Init() {
  const int ret = io_uring_queue_init(depth_, &ring_, 0);
  if (ret < 0) {
    return Status::FromErrno(-ret, "io_uring_queue_init(" + std::to_string(depth_) + " entries)");
  }
  ring_ready_ = true;
  return Status::Ok();
}

void IoUringQueue::Prepare(const IoRequest& request) {
  KV_DCHECK(free_count_ > 0);
  const uint32_t slot = free_slots_[--free_count_];
  slots_[slot] = request;
  // The SQ ring has at least depth_ entries and at most depth_ requests are unreaped.
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  KV_CHECK(sqe != nullptr);
  const int fd = request.file->fd();
  const auto length = static_cast<unsigned>(request.length);
  switch (request.op) {
    case IoOp::kRead:
      io_uring_prep_read(sqe, fd, request.buffer, length, request.offset);
      break;
    case IoOp::kWrite:
      if (!request.gather.empty()) {
        io_uring_prep_writev(sqe, fd, request.gather.data(),
                             static_cast<unsigned>(request.gather.size()), request.offset);
      } else {
        io_uring_prep_write(sqe, fd, request.buffer, length, request.offset);
      }
      break;
    case IoOp::kSync:
      io_uring_prep_fsync(sqe, fd, IORING_FSYNC_DATASYNC);
      break;
  }
  io_uring_sqe_set_data64(sqe, slot);
}

Status IoUringQueue::Flush() {
  // Each successful io_uring_submit consumes at least one SQE, so depth_ + 1 rounds suffice; the
  // bound only guards against a kernel that keeps returning 0.
  for (uint32_t round = 0; round <= depth_ && io_uring_sq_ready(&ring_) > 0; ++round) {
    const int ret = io_uring_submit(&ring_);
    if (ret >= 0 || ret == -EINTR) continue;
    if (ret == -EAGAIN || ret == -EBUSY) return Status::Ok();
    broken_ = Status::FromErrno(-ret, "io_uring_submit");
    return broken_;
  }
  return Status::Ok();
}

Result<size_t> IoUringQueue::Submit(std::span<const IoRequest> requests) {
  if (!broken_.ok()) return broken_;
  const size_t count = std::min<size_t>(requests.size(), depth_ - in_flight_);
  for (size_t i = 0; i < count; ++i) KV_RETURN_IF_ERROR(ValidateIoRequest(requests[i]));
  if (count == 0) return size_t{0};
  for (size_t i = 0; i < count; ++i) Prepare(requests[i]);
  in_flight_ += static_cast<uint32_t>(count);
  KV_RETURN_IF_ERROR(Flush());
  return count;
}

size_t IoUringQueue::Reap(std::span<IoCompletion> out) {
  const auto want = static_cast<unsigned>(std::min<size_t>(out.size(), depth_));
  const unsigned count = io_uring_peek_batch_cqe(&ring_, cqes_.data(), want);
  for (unsigned i = 0; i < count; ++i) {
    const auto slot = static_cast<uint32_t>(io_uring_cqe_get_data64(cqes_[i]));
    KV_CHECK(slot < depth_);
    const int res = cqes_[i]->res;
    const IoRequest& request = slots_[slot];
    IoCompletion& c = out[i];
    c.user_data = request.user_data;
    c.bytes = res > 0 ? static_cast<size_t>(res) : 0;
    c.status = res < 0 ? Status::FromErrno(-res, DescribeIoRequest(request)) : Status::Ok();
    free_slots_[free_count_++] = slot;
  }
  io_uring_cq_advance(&ring_, count);
  in_flight_ -= count;
  return count;
}

Result<size_t> IoUringQueue::Poll(std::span<IoCompletion> out, size_t min_completions,
                                  uint64_t timeout_micros) {
  if (!broken_.ok()) return broken_;
  if (in_flight_ == 0 || out.empty()) return size_t{0};
  KV_RETURN_IF_ERROR(Flush());  // SQEs left behind by a transient refusal.
  const size_t want = std::min({min_completions, size_t{in_flight_}, out.size()});
  size_t got = Reap(out);
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::microseconds(std::min(timeout_micros, kPollTimeoutMicrosMax));
  while (got < want) {
    const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    __kernel_timespec ts{.tv_sec = left.count() / 1'000'000'000,
                         .tv_nsec = left.count() % 1'000'000'000};
    io_uring_cqe* first = nullptr;
    const int ret =
        io_uring_wait_cqes(&ring_, &first, static_cast<unsigned>(want - got), &ts, nullptr);
    if (ret < 0 && ret != -ETIME && ret != -EINTR) {
      // Completions already reaped must reach the caller; the error comes back next time.
      if (got > 0) return got;
      return Status::FromErrno(-ret, "io_uring_wait_cqes");
    }
    got += Reap(out.subspan(got));
  }
  return got;
}

}  // namespace

Result<std::unique_ptr<IoQueue>> NewIoUringQueue(const IoQueueOptions& options) {
  KV_RETURN_IF_ERROR(ValidateIoQueueOptions(options));
  auto queue = std::make_unique<IoUringQueue>(options.depth);
  KV_RETURN_IF_ERROR(queue->Init());
  return std::unique_ptr<IoQueue>(std::move(queue));
}

}  // namespace kvtier
