#include "core/crc32c.h"

#include <isa-l/crc.h>

#include <climits>

namespace kvtier::crc32c {
namespace {

// ISA-L's iSCSI CRC takes and returns the raw (non-inverted) register and an `int` length. The
// standard CRC32C pre- and post-inverts, and lengths above INT_MAX are fed in pieces.
template <typename F>
uint32_t ExtendWith(F fn, uint32_t init_crc, const void* data, size_t n) {
  uint32_t reg = ~init_crc;
  auto* p = static_cast<unsigned char*>(const_cast<void*>(data));
  constexpr size_t kPiece = size_t{1} << 30;
  while (n > 0) {
    const size_t len = n < kPiece ? n : kPiece;
    reg = fn(p, static_cast<int>(len), reg);
    p += len;
    n -= len;
  }
  return ~reg;
}

}  // namespace

uint32_t Extend(uint32_t init_crc, const void* data, size_t n) {
  return ExtendWith(crc32_iscsi, init_crc, data, n);
}

uint32_t ExtendPortable(uint32_t init_crc, const void* data, size_t n) {
  return ExtendWith(crc32_iscsi_base, init_crc, data, n);
}

}  // namespace kvtier::crc32c
