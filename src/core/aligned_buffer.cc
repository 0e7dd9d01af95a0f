#include "core/aligned_buffer.h"

#include <bit>
#include <cstring>
#include <string>

namespace kvtier {

Result<AlignedBuffer> AlignedBuffer::Allocate(size_t size_bytes, size_t alignment) {
  if (alignment < sizeof(void*) || !std::has_single_bit(alignment)) {
    return Status::InvalidArgument("alignment must be a power of two >= 8, got " +
                                   std::to_string(alignment));
  }
  if (size_bytes > SIZE_MAX - alignment) {
    return Status::InvalidArgument("buffer size overflows: " + std::to_string(size_bytes));
  }
  AlignedBuffer buf;
  buf.capacity_ = AlignUp(size_bytes == 0 ? alignment : size_bytes, alignment);
  buf.data_ = static_cast<std::byte*>(std::aligned_alloc(alignment, buf.capacity_));
  if (buf.data_ == nullptr) {
    buf.capacity_ = 0;
    return Status::NoSpace("cannot allocate " + std::to_string(size_bytes) + " aligned bytes");
  }
  std::memset(buf.data_, 0, buf.capacity_);
  buf.size_ = size_bytes;
  return buf;
}

}  // namespace kvtier
