// Bulk byte copies (see copy_kernels.h).
#include "tiers/copy_kernels.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h>
#define KV_HAVE_SSE2_STREAM 1
#endif

namespace kvtier::tiers_internal {

void CopyBytesPlain(std::byte* dst, const std::byte* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}

void CopyBytesNonTemporal(std::byte* dst, const std::byte* src, size_t bytes) {
#if defined(KV_HAVE_SSE2_STREAM)
  constexpr size_t kLineBytes = 64;
  const size_t misalignment = reinterpret_cast<uintptr_t>(dst) & (kLineBytes - 1);
  const size_t head = misalignment == 0 ? 0 : kLineBytes - misalignment;
  if (bytes < head + kLineBytes) {
    std::memcpy(dst, src, bytes);
    return;
  }
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  bytes -= head;
  // Whole lines: four 16-byte streaming stores fill one write-combining buffer.
  const size_t lines = bytes / kLineBytes;
  for (size_t i = 0; i < lines; ++i) {
    const auto* s = reinterpret_cast<const __m128i*>(src);
    auto* d = reinterpret_cast<__m128i*>(dst);
    const __m128i a = _mm_loadu_si128(s);
    const __m128i b = _mm_loadu_si128(s + 1);
    const __m128i c = _mm_loadu_si128(s + 2);
    const __m128i e = _mm_loadu_si128(s + 3);
    _mm_stream_si128(d, a);
    _mm_stream_si128(d + 1, b);
    _mm_stream_si128(d + 2, c);
    _mm_stream_si128(d + 3, e);
    dst += kLineBytes;
    src += kLineBytes;
  }
  std::memcpy(dst, src, bytes - lines * kLineBytes);
  // Streaming stores are weakly ordered: fence so that whoever learns of the copy's completion
  // (through a mutex release) also sees its bytes.
  _mm_sfence();
#else
  std::memcpy(dst, src, bytes);
#endif
}

void CopyBytes(std::byte* dst, const std::byte* src, size_t bytes) {
  if (bytes >= kNonTemporalCopyBytesMin) {
    CopyBytesNonTemporal(dst, src, bytes);
  } else {
    CopyBytesPlain(dst, src, bytes);
  }
}

}  // namespace kvtier::tiers_internal
