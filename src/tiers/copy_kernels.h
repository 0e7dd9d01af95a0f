// Bulk byte copies for the CPU device tier's copy threads.
//
// glibc's memcpy on the development machines never switches to non-temporal stores (it believes
// the L3 is 256 MiB) and moves ~5.4 GB/s on one thread; a copy with non-temporal stores writes
// around the cache and reaches 8-9.5 GB/s (docs/memory_tiers.md, bench/micro/memory_copy_bench.cc).
// Non-temporal stores also evict nothing useful, but leave the destination out of the cache, so
// they are used only for copies too large to stay cached anyway.
//
// Thread safety: pure functions. The ranges must not overlap.
#pragma once

#include <cstddef>

namespace kvtier::tiers_internal {

// Copies of at least this many bytes use non-temporal stores (where the CPU has them).
inline constexpr size_t kNonTemporalCopyBytesMin = 1 << 20;

// memcpy.
void CopyBytesPlain(std::byte* dst, const std::byte* src, size_t bytes);
// Non-temporal stores (SSE2 on x86-64, which every x86-64 CPU has); memcpy elsewhere. Any
// alignment: the head up to a 64-byte boundary of `dst` and the tail go through memcpy.
void CopyBytesNonTemporal(std::byte* dst, const std::byte* src, size_t bytes);
// Picks one of the two by size.
void CopyBytes(std::byte* dst, const std::byte* src, size_t bytes);

}  // namespace kvtier::tiers_internal
