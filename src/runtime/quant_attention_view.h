// Where the parts of one quantized block's stage-1 payload are (codecs QuantLayout), for the
// quantized attention kernels (quant_attention.h) only.
//
// Thread safety: value types and pure functions. Ownership: the view borrows the run's payload.
#pragma once

#include <algorithm>
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

// The integer P.V scratch of the AVX-512 VNNI kernel (quant_attention_avx512vnni.cc). A "pair"
// is a query head and one of the value groups its channels fall in (head_channels of them, the
// group size or head_dim if smaller): the unit that one weight per token serves.
struct IntValueLayout {
  size_t head_channels;    // min(G, head_dim).
  size_t groups_per_head;  // ceil(head_dim / head_channels).
  size_t pairs;            // n_heads * groups_per_head.
  size_t pairs_padded;     // pairs rounded up to 16, plus 16 (a 16-wide read from any pair).
  size_t acc_stride;       // int32 accumulators per head: head_dim rounded up to 128.
  size_t pt_stride;        // n_heads + 16: a step's weights transposed, per row.
  size_t floats;           // All of it, in floats.
};

inline IntValueLayout IntValueLayoutOf(size_t n_heads, size_t head_dim, size_t channels,
                                       uint32_t group_size) {
  IntValueLayout l;
  l.head_channels = std::min<size_t>(group_size, head_dim);
  l.groups_per_head = (head_dim + l.head_channels - 1) / l.head_channels;
  l.pairs = n_heads * l.groups_per_head;
  l.pairs_padded = (l.pairs + 15) / 16 * 16 + 16;
  l.acc_stride = (head_dim + 127) / 128 * 128;
  l.pt_stride = n_heads + 16;
  // Accumulators; the weights of kStep / 4 token quads and 8 per-pair arrays; the transposed
  // weights; the step's largest value scale per group; each head's largest weight; 4 index
  // vectors.
  l.floats = n_heads * l.acc_stride + (kQuantAttendStepRows / 4 + 8) * l.pairs_padded +
             kQuantAttendStepRows * l.pt_stride + ValueGroups(channels, group_size) + 16 +
             n_heads + 64;
  return l;
}

}  // namespace kvtier::runtime::qattn
