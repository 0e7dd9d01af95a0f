// CRC32C (Castagnoli, the iSCSI polynomial 0x1EDC6F41, reflected), the checksum of every record
// kvtier writes. Backed by Intel ISA-L (Debian's libisal), which picks an SSE4.2/PCLMUL kernel at
// run time and keeps a table-driven portable path for CPUs without them.
//
// Crc32c("123456789") == 0xE3069283. Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace kvtier::crc32c {

// Returns the CRC32C of `init_crc`'s message followed by `data` (init_crc = 0 for a new message).
uint32_t Extend(uint32_t init_crc, const void* data, size_t n);

inline uint32_t Value(const void* data, size_t n) { return Extend(0, data, n); }
inline uint32_t Value(std::span<const std::byte> data) {
  return Extend(0, data.data(), data.size());
}
inline uint32_t Value(std::string_view data) { return Extend(0, data.data(), data.size()); }

// The portable (non-SIMD) implementation, exposed so tests can check both paths.
uint32_t ExtendPortable(uint32_t init_crc, const void* data, size_t n);

// Masking, as leveldb does: a CRC stored next to data that itself contains CRCs is masked so
// that computing a CRC over a string that embeds its own CRC does not degenerate.
inline uint32_t Mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }
inline uint32_t Unmask(uint32_t masked) {
  const uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

}  // namespace kvtier::crc32c
