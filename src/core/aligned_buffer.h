// AlignedBuffer: an owned, zero-initialized byte buffer whose address and capacity are multiples
// of an alignment (4 KiB by default, as O_DIRECT needs). Move-only; the memory is freed by the
// destructor. Borrow it as std::span; a span must not outlive the buffer.
//
// Thread safety: not synchronized; distinct ranges may be written by distinct threads.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <span>
#include <utility>

#include "core/limits.h"
#include "kvtier/result.h"

namespace kvtier {

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  ~AlignedBuffer() { std::free(data_); }

  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  AlignedBuffer(AlignedBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)),
        size_(std::exchange(o.size_, 0)),
        capacity_(std::exchange(o.capacity_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    if (this != &o) {
      std::free(data_);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
      capacity_ = std::exchange(o.capacity_, 0);
    }
    return *this;
  }

  // Allocates `size_bytes` rounded up to `alignment` (a power of two, at least 8). Fails with
  // NoSpace when memory is exhausted and InvalidArgument for a bad alignment.
  static Result<AlignedBuffer> Allocate(size_t size_bytes, size_t alignment = kDirectIoAlignment);

  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }
  // The size asked for; capacity() is the rounded-up allocation.
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }
  bool empty() const { return size_ == 0; }

  std::span<std::byte> span() { return {data_, size_}; }
  std::span<const std::byte> span() const { return {data_, size_}; }
  std::span<std::byte> capacity_span() { return {data_, capacity_}; }

 private:
  std::byte* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

// Rounds `n` up to a multiple of `alignment` (a power of two).
constexpr size_t AlignUp(size_t n, size_t alignment) {
  return (n + alignment - 1) & ~(alignment - 1);
}
constexpr bool IsAligned(size_t n, size_t alignment) { return (n & (alignment - 1)) == 0; }

}  // namespace kvtier
