// StagingPool and CodecContextPool (see staging.h).
#include "engine/staging.h"

#include <algorithm>
#include <utility>

#include "core/assert.h"

namespace kvtier {

StagingLease::StagingLease(StagingLease&& o) noexcept
    : pool_(std::exchange(o.pool_, nullptr)),
      indexes_(std::move(o.indexes_)),
      buffers_(std::move(o.buffers_)) {}

StagingLease::~StagingLease() {
  if (pool_ != nullptr) pool_->Release(indexes_);
}

Result<std::unique_ptr<StagingPool>> StagingPool::Create(uint32_t count, size_t buffer_bytes) {
  if (count == 0) return Status::InvalidArgument("staging pool: count must be > 0");
  std::unique_ptr<StagingPool> pool(new StagingPool());
  pool->buffer_bytes_ = buffer_bytes;
  const size_t stride = AlignUp(std::max<size_t>(buffer_bytes, 1), kDirectIoAlignment);
  KV_ASSIGN_OR_RETURN(pool->region_, HugePageBuffer::Allocate(count * stride));
  pool->buffers_.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    pool->buffers_.push_back(pool->region_.span().subspan(i * stride, buffer_bytes));
  }
  MutexLock lock(&pool->mu_);
  for (uint32_t i = 0; i < count; ++i) pool->free_.push_back(count - 1 - i);
  return pool;
}

StagingLease StagingPool::Acquire(uint32_t n) {
  KV_CHECK(n >= 1);
  KV_CHECK(n <= count());
  StagingLease lease;
  MutexLock lock(&mu_);
  const uint64_t ticket = next_ticket_++;
  while (serving_ != ticket || free_.size() < n) freed_.Wait(&mu_);
  ++serving_;
  lease.pool_ = this;
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t idx = free_.back();
    free_.pop_back();
    lease.indexes_.push_back(idx);
    lease.buffers_.push_back(buffers_[idx]);
  }
  // The next in line may find its buffers free already.
  if (next_ticket_ != serving_) freed_.SignalAll();
  return lease;
}

uint64_t StagingPool::waiting() const {
  MutexLock lock(&mu_);
  return next_ticket_ - serving_;
}

void StagingPool::Release(std::span<const uint32_t> indexes) {
  MutexLock lock(&mu_);
  for (uint32_t idx : indexes) free_.push_back(idx);
  freed_.SignalAll();
}

CodecLease::~CodecLease() {
  if (ctx_ != nullptr) pool_->Return(std::move(ctx_));
}

Result<CodecLease> CodecContextPool::Acquire() {
  {
    MutexLock lock(&mu_);
    if (!free_.empty()) {
      std::unique_ptr<codecs::CodecContext> ctx = std::move(free_.back());
      free_.pop_back();
      return CodecLease(this, std::move(ctx));
    }
  }
  KV_ASSIGN_OR_RETURN(codecs::CodecContext ctx, codecs::CodecContext::Create());
  KV_RETURN_IF_ERROR(ctx.Reserve(geometry_));
  return CodecLease(this, std::make_unique<codecs::CodecContext>(std::move(ctx)));
}

void CodecContextPool::Return(std::unique_ptr<codecs::CodecContext> ctx) {
  MutexLock lock(&mu_);
  free_.push_back(std::move(ctx));
}

}  // namespace kvtier
