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

// Where the integer value pass (quant_attention_avx512vnni.cc, "Integer weights" in
// quant_attention.h) keeps its tables, carved from one scratch area of Floats() floats. It
// applies where G divides head_dim (a KV head's channels are whole value groups).
struct IntValueLayout {
  size_t group;     // Query heads per KV head.
  size_t n_kv_heads;
  size_t head_dim;
  size_t head_groups;   // gh = head_dim / G: value groups per KV head.
  size_t value_groups;  // GV = n_kv_heads * gh.
  size_t gv_pad;        // A row of per-group tables: GV rounded up to 16, plus 16.
  size_t wq_stride;     // A row of wq: n_kv_heads + 16.
  size_t acc_pad;       // A head's accumulator half: head_dim rounded up to 128.
  size_t tiles;         // ceil(GV / 16).

  float* wq;       // [group][kStep][wq_stride]: the step's weights by (query head in its KV
                   // head's group, row, KV head); entries past n_kv_heads stay 0.
  float* ws;       // [group][kStep][gv_pad]: weight * value scale, by (query head, row, group).
  float* wscale;   // [group][gv_pad]: m / 16256, m the largest |ws| of the group in the step.
  float* wzero;    // [group][gv_pad]: sum over the step's rows of weight * value zero point.
  int32_t* whi;    // [group][kStep / 4][gv_pad]: per four rows and group, their 15-bit
  int32_t* wlo;    // quantized ws as two int8 halves (q15 = 128 hi + lo), one byte per row.
  int32_t* acc;    // [n_heads][hi, lo][acc_pad]: the step's integer sums, in the pass's order.
  int32_t* tile_index;  // [tiles][16]: the KV head of group 16 t + i, less tile_base[t].
  int32_t* tile_base;   // [tiles]: the KV head of group 16 t.
  int32_t* chunk_index;  // [4][4][16]: for a head's chunk k and code vector x, lane i's group
                         // relative to the head's first (four lanes per 128-bit lane).

  static IntValueLayout Of(size_t n_kv_heads, size_t group, size_t head_dim, uint32_t group_size,
                           float* base);
  // 0 where G does not divide head_dim.
  size_t Floats() const;
};

}  // namespace kvtier::runtime::qattn
