#include "core/huge_page_buffer.h"

#include <sys/mman.h>

#include <cstdint>
#include <string>

#include "core/aligned_buffer.h"
#include "core/limits.h"

namespace kvtier {

HugePageBuffer::~HugePageBuffer() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_bytes_);
}

HugePageBuffer& HugePageBuffer::operator=(HugePageBuffer&& o) noexcept {
  if (this != &o) {
    if (mapping_ != nullptr) ::munmap(mapping_, mapping_bytes_);
    mapping_ = std::exchange(o.mapping_, nullptr);
    mapping_bytes_ = std::exchange(o.mapping_bytes_, 0);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

Result<HugePageBuffer> HugePageBuffer::Allocate(size_t size_bytes) {
  if (size_bytes == 0 || size_bytes > SIZE_MAX / 2) {
    return Status::InvalidArgument("huge page buffer of " + std::to_string(size_bytes) +
                                   " bytes");
  }
  const size_t bytes = AlignUp(size_bytes, kTransparentHugePageBytes);
  // One extra huge page, so that the buffer can start on a huge-page boundary.
  const size_t mapping_bytes = bytes + kTransparentHugePageBytes;
  void* m =
      ::mmap(nullptr, mapping_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    return Status::NoSpace("cannot map " + std::to_string(mapping_bytes) + " bytes of buffers");
  }
  HugePageBuffer b;
  b.mapping_ = m;
  b.mapping_bytes_ = mapping_bytes;
  const auto address = reinterpret_cast<uintptr_t>(m);
  b.data_ = static_cast<std::byte*>(m) + (AlignUp(address, kTransparentHugePageBytes) - address);
  b.size_ = size_bytes;
#ifdef MADV_HUGEPAGE
  (void)::madvise(b.data_, bytes, MADV_HUGEPAGE);  // Advice only (see the header).
#endif
  // Pre-fault every page now, so that no I/O takes a page fault on its buffer.
  for (size_t at = 0; at < bytes; at += kDirectIoAlignment) b.data_[at] = std::byte{0};
  return b;
}

}  // namespace kvtier
