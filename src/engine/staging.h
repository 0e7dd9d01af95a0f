// Bounded pools the engine's data path borrows from instead of allocating: 4 KiB-aligned staging
// buffers that SSD reads land in and encoded blocks are written from, and codec contexts.
//
// Why bounded: every queue and buffer count has a limit. Acquire() takes all the
// buffers it asks for at once or waits, in the order the callers asked, and a holder never waits
// for anything that needs another buffer (buffers in flight come back from I/O completions, which
// never acquire), so a waiter always gets its turn: no deadlock, no caller overtaken forever, and
// at most `count` buffers of memory.
//
// Thread safety: every method may be called from any thread. A lease is owned by one thread.
// Ownership: the pools own the memory; a lease's spans are valid until the lease is destroyed, and
// leases must be destroyed before their pool.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "codecs/codec.h"
#include "core/aligned_buffer.h"
#include "core/huge_page_buffer.h"
#include "core/mutex.h"

namespace kvtier {

// SSD reads of a Load are issued in batches of at most this many blocks (one staging buffer each).
inline constexpr uint32_t kLoadStagingBatchMax = 8;

class StagingPool;

class StagingLease {
 public:
  StagingLease() = default;
  StagingLease(StagingLease&& o) noexcept;
  StagingLease& operator=(StagingLease&&) = delete;
  ~StagingLease();
  std::span<std::byte> buffer(size_t i) const { return buffers_[i]; }
  size_t size() const { return buffers_.size(); }
  std::span<const std::span<std::byte>> buffers() const { return buffers_; }

 private:
  friend class StagingPool;
  StagingPool* pool_ = nullptr;
  std::vector<uint32_t> indexes_;
  std::vector<std::span<std::byte>> buffers_;
};

class StagingPool {
 public:
  // `count` buffers of `buffer_bytes` (rounded up to 4 KiB) each, 4 KiB-aligned.
  static Result<std::unique_ptr<StagingPool>> Create(uint32_t count, size_t buffer_bytes);

  // Waits until `n` buffers are free and takes them (1 <= n <= count()). Callers are served in
  // the order they asked: a large lease (Pin's promotion of a whole chunk) is not overtaken
  // forever by smaller ones that keep arriving, and a later caller waits behind it even when its
  // own few buffers are free.
  StagingLease Acquire(uint32_t n) KV_EXCLUDES(mu_);
  uint32_t count() const { return static_cast<uint32_t>(buffers_.size()); }
  // Callers waiting in Acquire now (for tests).
  uint64_t waiting() const KV_EXCLUDES(mu_);
  size_t buffer_bytes() const { return buffer_bytes_; }

 private:
  friend class StagingLease;
  StagingPool() = default;
  void Release(std::span<const uint32_t> indexes) KV_EXCLUDES(mu_);

  size_t buffer_bytes_ = 0;
  // The buffers, back to back in one region on huge pages (core/huge_page_buffer.h: SSD reads
  // land in them and records are written from them with O_DIRECT).
  HugePageBuffer region_;
  std::vector<std::span<std::byte>> buffers_;
  mutable Mutex mu_;
  CondVar freed_;
  std::vector<uint32_t> free_ KV_GUARDED_BY(mu_);
  // First come, first served: the ticket the next caller takes, and the one served next.
  uint64_t next_ticket_ KV_GUARDED_BY(mu_) = 0;
  uint64_t serving_ KV_GUARDED_BY(mu_) = 0;
};

class CodecContextPool;

class CodecLease {
 public:
  CodecLease(CodecContextPool* pool, std::unique_ptr<codecs::CodecContext> ctx)
      : pool_(pool), ctx_(std::move(ctx)) {}
  CodecLease(CodecLease&&) noexcept = default;
  CodecLease& operator=(CodecLease&&) = delete;
  ~CodecLease();
  codecs::CodecContext* get() { return ctx_.get(); }

 private:
  CodecContextPool* pool_;
  std::unique_ptr<codecs::CodecContext> ctx_;
};

// Codec contexts are reused; a new one is made when all are lent (at most one per thread that
// encodes or decodes at once, so the pool stays bounded by the number of threads).
class CodecContextPool {
 public:
  explicit CodecContextPool(const codecs::BlockGeometry& geometry) : geometry_(geometry) {}
  Result<CodecLease> Acquire() KV_EXCLUDES(mu_);

 private:
  friend class CodecLease;
  void Return(std::unique_ptr<codecs::CodecContext> ctx) KV_EXCLUDES(mu_);

  const codecs::BlockGeometry geometry_;
  Mutex mu_;
  std::vector<std::unique_ptr<codecs::CodecContext>> free_ KV_GUARDED_BY(mu_);
};

}  // namespace kvtier
