// Where the parts of one quantized block's stage-1 payload are (codecs QuantLayout), for the
// quantized attention kernels (quant_attention.h) only.
//
// Thread safety: value types and pure functions. Ownership: the view borrows the run's payload.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/quant_attention.h"

namespace kvtier::runtime::qattn {

struct QuantBlockView {
  const std::byte* k_scale;  // f16[ceil(block_tokens / G)][C]
  const std::byte* k_zero;   // f16[ceil(block_tokens / G)][C]
  const std::byte* v_scale;  // f16[block_tokens][ceil(C / G)]
  const std::byte* v_zero;   // f16[block_tokens][ceil(C / G)]
  const uint8_t* k_codes;    // [token][channel], one byte each (INT8) or two per byte (INT4,
  const uint8_t* v_codes;    // element 2i in the low nibble of byte i).
};

QuantBlockView ViewOf(const QuantKvRun& run, size_t channels, uint32_t bits, uint32_t group_size);

// Value groups per token: ceil(C / G).
inline size_t ValueGroups(size_t channels, uint32_t group_size) {
  return (channels + group_size - 1) / group_size;
}

}  // namespace kvtier::runtime::qattn
