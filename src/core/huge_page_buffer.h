// HugePageBuffer: an owned, pre-faulted anonymous mapping whose usable bytes start on a 2 MiB
// boundary and are advised for transparent huge pages (MADV_HUGEPAGE), for buffers that O_DIRECT
// I/O reads into and writes from: the staging pools of the engine and of the SSD tier.
//
// Why: the kernel pins a direct I/O's user pages and hands the device one segment per physically
// contiguous run. Buffers from malloc are 4 KiB pages scattered in memory, so a 1 MiB write is
// 256 segments (and virtio-blk splits such requests); on a huge page it is one. The advice is only
// advice: without huge pages the buffer works the same, at 4 KiB pages.
//
// Thread safety: not synchronized; distinct ranges may be used by distinct threads. Move-only; the
// destructor unmaps.
#pragma once

#include <cstddef>
#include <span>
#include <utility>

#include "kvtier/result.h"

namespace kvtier {

inline constexpr size_t kTransparentHugePageBytes = size_t{2} << 20;  // x86-64 and arm64 (4K).

class HugePageBuffer {
 public:
  HugePageBuffer() = default;
  ~HugePageBuffer();
  HugePageBuffer(const HugePageBuffer&) = delete;
  HugePageBuffer& operator=(const HugePageBuffer&) = delete;
  HugePageBuffer(HugePageBuffer&& o) noexcept
      : mapping_(std::exchange(o.mapping_, nullptr)),
        mapping_bytes_(std::exchange(o.mapping_bytes_, 0)),
        data_(std::exchange(o.data_, nullptr)),
        size_(std::exchange(o.size_, 0)) {}
  HugePageBuffer& operator=(HugePageBuffer&& o) noexcept;

  // `size_bytes` (> 0) of zeroed, pre-faulted memory starting on a 2 MiB boundary. NoSpace when
  // the memory cannot be mapped.
  static Result<HugePageBuffer> Allocate(size_t size_bytes);

  std::byte* data() { return data_; }
  size_t size() const { return size_; }
  std::span<std::byte> span() { return {data_, size_}; }

 private:
  void* mapping_ = nullptr;  // What munmap gets back.
  size_t mapping_bytes_ = 0;
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace kvtier
