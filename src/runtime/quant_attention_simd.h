// The SIMD quantized attention kernel (quant_attention.h), written once over a vector type `V`
// and instantiated by quant_attention_avx2.cc (8 lanes) and quant_attention_avx512.cc (16 lanes).
// Include it only from those files, after defining KV_QATTN_TARGET as the target attribute of
// that file: every function here carries it, so nothing runs unless the dispatcher saw the CPU
// features, and every function is a template on V, so the two instantiations never share a
// symbol.
//
// V provides: F (the float vector), kLanes; Zero, Set1, Load, Store, Fma, Mul, Add, Sub, Max;
// LoadU8 (kLanes INT8 codes as floats), LoadU4 (kLanes INT4 codes from kLanes / 2 bytes, as
// floats), LoadHalf (kLanes FP16 values from any address);
// Fold8 (to 8 lanes with the same sum), HSum, HMax; RoundNearest, Pow2 (2^n for integral n) and
// ZeroBelow (e where x >= limit or NaN, else 0). kIntScores: the scores are integer dot products
// (quant_attention.h), and V also provides QuantizeQuery<Bits> (a head's scaled query to two
// int8 halves and its scale) and DotTileInt<Bits, H, R> (the integer DotTile). kIntValues: the
// weighted sum of values is integer too (quant_attention.h, "Integer weights"), and V provides
// InitIntValues (once per call) and IntValueStep<Bits> (a step's value pass).
//
// A step is at most kQuantAttendStepRows rows of one run inside one key group. It scales the
// query by the group's key scales when the group begins (qs[h][d] = q[h][d] * k_scale[c], bias[h]
// = q_h . k_zero), scores the rows (K pass: qs . code + bias, a multiply-add per code), updates
// the online softmax, then adds the weighted values (V pass: each value vector dequantized in
// registers, code * v_scale + v_zero, and multiply-added into every query head of its KV head).
// Both passes walk the rows in small groups in address order and serve every KV head inside a
// group, with register tiles of 4, 2 or 1 query heads, like AttendF16 (kernels_avx2.cc). A
// value's group index is looked up per vector from a table built once per call. While a step
// computes, both passes ask for the next step's bytes (StepAhead).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "codecs/kernels.h"
#include "core/coding.h"
#include "runtime/kernels.h"
#include "runtime/quant_attention.h"
#include "runtime/quant_attention_view.h"

#ifndef KV_QATTN_TARGET
#error "define KV_QATTN_TARGET before including runtime/quant_attention_simd.h"
#endif
// Register tiles must inline into their loops: called, their accumulators go through memory.
#define KV_QATTN_INLINE inline __attribute__((always_inline))

namespace kvtier::runtime::qattn {

// Weights below e^-64 of a head's running max are exactly 0 (as in AttendF16): their products
// could fall below the smallest normal float, and subnormals cost a microcode assist per FMA.
inline constexpr float kWeightExpMin = -64.0f;
inline constexpr size_t kStep = kQuantAttendStepRows;

// e^x for x <= 0 (or NaN, kept), 0 below kWeightExpMin: x = n ln2 + r, e^r by its degree-6
// Taylor polynomial (< 1.3e-7 relative), ln2 split in two so that n ln2 is exact.
template <class V>
KV_QATTN_TARGET KV_QATTN_INLINE typename V::F ExpNonPositive(typename V::F x) {
  using F = typename V::F;
  const F clamped = V::Max(V::Set1(kWeightExpMin), x);  // NaN in the second operand is kept.
  const F n = V::RoundNearest(V::Mul(clamped, V::Set1(1.44269504f)));
  F r = V::Sub(clamped, V::Mul(n, V::Set1(0.693359375f)));
  r = V::Sub(r, V::Mul(n, V::Set1(-2.12194440e-4f)));
  F p = V::Set1(1.0f / 720.0f);
  p = V::Fma(p, r, V::Set1(1.0f / 120.0f));
  p = V::Fma(p, r, V::Set1(1.0f / 24.0f));
  p = V::Fma(p, r, V::Set1(1.0f / 6.0f));
  p = V::Fma(p, r, V::Set1(0.5f));
  p = V::Fma(p, r, V::Set1(1.0f));
  p = V::Fma(p, r, V::Set1(1.0f));
  return V::ZeroBelow(V::Mul(p, V::Pow2(n)), x, kWeightExpMin);
}

template <class V>
KV_QATTN_TARGET KV_QATTN_INLINE float WeightExp(float x) {
  return x < kWeightExpMin ? 0.0f : std::exp(x);
}

// The eight horizontal sums of a[0..7]: lane i holds sum(a[i]).
template <class V>
KV_QATTN_TARGET KV_QATTN_INLINE __m256 HorizontalSums8(const __m256* a) {
  const __m256 s0123 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
  const __m256 s4567 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(s0123, s4567, 0x20),
                       _mm256_permute2f128_ps(s0123, s4567, 0x31));
}

// What every step of one call shares.
struct Geometry {
  size_t head_dim;
  size_t query_bytes;   // Integer scores: one int8 half of a head's query, head_dim rounded up
                        // to 128.
  size_t channels;      // C = n_kv_heads * head_dim: elements from one row to the next.
  size_t value_groups;  // GV = ceil(C / G).
  uint32_t group;       // Query heads per KV head.
  uint32_t n_kv_heads;
  uint32_t quant_group;  // G.
};

// The bytes of the step after the current one, asked for in address order a few cache lines
// at a time while the current step's two passes compute: its key parameters (when it begins a
// key group), key codes, value parameters and value codes. After every KV head a pass finishes
// (the MHA integer value pass: after every four rows of one) it calls AdvanceAhead with the rows
// it covered, so the lines go out in proportion to the work done, a few at a time, the last of
// them by the end of the step (FinishAhead issues any left). The passes then find their rows in
// cache, and DRAM serves the next step in long sequential runs while they compute. (Asking for
// each row group's rows just before their use, KV head by KV head, took over a quarter of the
// score pass in prefetch loops, and the integer kernel ran 16 % (INT8) and 27 % (INT4) slower
// from DRAM on MHA: docs/benchmarks-history.md.)
struct StepAhead {
  struct Range {
    const char* p;    // The next line to ask for (64-byte aligned).
    const char* end;
  };
  Range ranges[6];
  size_t n_ranges = 0;
  size_t at = 0;        // The range being issued.
  uint64_t per_unit = 0;  // Lines per (row x KV head) of work, 16.16 fixed point.
  uint64_t credit = 0;    // Lines owed, 16.16.
};

// The scratch (QuantAttendScratchFloats), carved.
struct Scratch {
  float* max;        // [n_heads] running max of the scores seen.
  float* sum;        // [n_heads] sum of e^(score - max) over them.
  float* run_sum;    // [n_heads] the same over the current run's rows.
  float* bias;       // [n_heads] q_h . k_zero of the current key group.
  float* s;          // [n_heads][kStep] a step's scores, then weights.
  float* qs;         // [n_heads][head_dim] q scaled by the current key group's scales.
  float* v_scale;    // [8][GV] value scales of the current row group, as floats.
  float* v_zero;     // [8][GV]
  float* run_lse;    // [n_runs][n_heads]
  float* vec_group;  // [C / kLanes] value group of each vector of a row, uint32_t bits (as
                     // float values, their conversion per vector cost ~4 % of the value pass).
  int8_t* qint;      // [n_heads][hi, lo][query_bytes] integer scores: qs quantized (q15 =
                     // 128 hi + lo), zero-padded.
  float* qscale;     // [n_heads] integer scores: the scale of q15.
  float* int_values;  // Integer weights: IntValueLayout's tables.
  StepAhead* ahead;    // The next step's bytes, asked for while this step computes.
};

template <class V, uint32_t Bits>
KV_QATTN_TARGET KV_QATTN_INLINE typename V::F LoadCodes(const uint8_t* codes, size_t element) {
  if constexpr (Bits == 8) {
    return V::LoadU8(codes + element);
  } else {
    return V::LoadU4(codes + element / 2);  // element is even: kLanes divides it.
  }
}

// n FP16 values at `src` to floats.
template <class V>
KV_QATTN_TARGET void HalvesToFloats(const std::byte* src, size_t n, float* dst) {
  size_t i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes) V::Store(dst + i, V::LoadHalf(src + 2 * i));
  for (; i < n; ++i) dst[i] = codecs::F16ToF32(DecodeFixed16(src + 2 * i));
}

// qs and bias (and for integer scores qint and qscale) for key group `key_group` of a block.
template <class V, uint32_t Bits>
KV_QATTN_TARGET void ScaleQueries(const float* q, const QuantBlockView& view, size_t key_group,
                                  const Geometry& g, const Scratch& sc, size_t n_heads) {
  const std::byte* scales = view.k_scale + 2 * key_group * g.channels;
  const std::byte* zeros = view.k_zero + 2 * key_group * g.channels;
  for (size_t h = 0; h < n_heads; ++h) {
    const size_t c0 = h / g.group * g.head_dim;
    typename V::F bias = V::Zero();
    for (size_t d = 0; d < g.head_dim; d += V::kLanes) {
      const typename V::F qv = V::Load(q + h * g.head_dim + d);
      V::Store(sc.qs + h * g.head_dim + d, V::Mul(qv, V::LoadHalf(scales + 2 * (c0 + d))));
      bias = V::Fma(qv, V::LoadHalf(zeros + 2 * (c0 + d)), bias);
    }
    sc.bias[h] = V::HSum(bias);
    if constexpr (V::kIntScores) {
      V::template QuantizeQuery<Bits>(sc.qs + h * g.head_dim, g.head_dim,
                                      sc.qint + 2 * h * g.query_bytes, sc.qscale + h);
    }
  }
}

// s[i * kStep + r] = qs_i . code_r + bias_i for H heads and R rows (row r's segment of this KV
// head starting at element e0 + r * C).
template <class V, uint32_t Bits, size_t H, size_t R>
KV_QATTN_TARGET KV_QATTN_INLINE void DotTile(const float* qs, const float* bias,
                                             const uint8_t* codes, size_t e0, const Geometry& g,
                                             float* s) {
  static_assert(H * R <= 8);
  typename V::F acc[8];
#pragma GCC unroll 8
  for (size_t k = 0; k < 8; ++k) acc[k] = V::Zero();
  for (size_t d = 0; d < g.head_dim; d += V::kLanes) {
    typename V::F qv[H];
#pragma GCC unroll 4
    for (size_t i = 0; i < H; ++i) qv[i] = V::Load(qs + i * g.head_dim + d);
#pragma GCC unroll 8
    for (size_t r = 0; r < R; ++r) {
      const typename V::F kv = LoadCodes<V, Bits>(codes, e0 + r * g.channels + d);
#pragma GCC unroll 4
      for (size_t i = 0; i < H; ++i) acc[i * R + r] = V::Fma(qv[i], kv, acc[i * R + r]);
    }
  }
  alignas(32) float lanes[8];
  if constexpr (H * R == 8) {
    __m256 folded[8];
#pragma GCC unroll 8
    for (size_t k = 0; k < 8; ++k) folded[k] = V::Fold8(acc[k]);
    _mm256_store_ps(lanes, HorizontalSums8<V>(folded));
  } else {
    for (size_t k = 0; k < H * R; ++k) lanes[k] = V::HSum(acc[k]);
  }
  for (size_t i = 0; i < H; ++i) {
    for (size_t r = 0; r < R; ++r) s[i * kStep + r] = lanes[i * R + r] + bias[i];
  }
}

// out_i[d0, d0 + kLanes * VB) += sum_r w[i * kStep + r] * v_r over R rows, each value vector
// dequantized once in registers for all H heads; the H x VB outputs stay in registers.
template <class V, uint32_t Bits, size_t H, size_t VB, size_t R>
KV_QATTN_TARGET KV_QATTN_INLINE void WeightBlock(const float* w, const uint8_t* codes, size_t e0,
                                                 size_t c0, size_t d0, const Geometry& g,
                                                 const Scratch& sc, float* out) {
  using F = typename V::F;
  F acc[H * VB];
  size_t vgroup[VB];
#pragma GCC unroll 8
  for (size_t j = 0; j < VB; ++j) {
    uint32_t bits = 0;
    std::memcpy(&bits, sc.vec_group + (c0 + d0) / V::kLanes + j, sizeof(bits));
    vgroup[j] = bits;
#pragma GCC unroll 4
    for (size_t i = 0; i < H; ++i) acc[i * VB + j] = V::Load(out + i * g.head_dim + d0 + j * V::kLanes);
  }
#pragma GCC unroll 8
  for (size_t r = 0; r < R; ++r) {
    F wr[H];
#pragma GCC unroll 4
    for (size_t i = 0; i < H; ++i) wr[i] = V::Set1(w[i * kStep + r]);
    const float* scale = sc.v_scale + r * g.value_groups;
    const float* zero = sc.v_zero + r * g.value_groups;
#pragma GCC unroll 8
    for (size_t j = 0; j < VB; ++j) {
      const F code = LoadCodes<V, Bits>(codes, e0 + r * g.channels + d0 + j * V::kLanes);
      const F v = V::Fma(code, V::Set1(scale[vgroup[j]]), V::Set1(zero[vgroup[j]]));
#pragma GCC unroll 4
      for (size_t i = 0; i < H; ++i) acc[i * VB + j] = V::Fma(wr[i], v, acc[i * VB + j]);
    }
  }
#pragma GCC unroll 8
  for (size_t j = 0; j < VB; ++j) {
#pragma GCC unroll 4
    for (size_t i = 0; i < H; ++i) V::Store(out + i * g.head_dim + d0 + j * V::kLanes, acc[i * VB + j]);
  }
}

enum class Pass : uint8_t { kScores, kWeights };

// H query heads (from head h) of KV head `kv_head` over `Rows` rows starting at element e0.
template <class V, uint32_t Bits, Pass P, size_t H, size_t Rows>
KV_QATTN_TARGET KV_QATTN_INLINE void HeadTile(size_t h, uint32_t kv_head, const uint8_t* codes,
                                              size_t e0, const Geometry& g, const Scratch& sc,
                                              float* out, size_t r_in_step) {
  const size_t c0 = size_t{kv_head} * g.head_dim;
  float* s = sc.s + h * kStep + r_in_step;
  if constexpr (P == Pass::kScores) {
    constexpr size_t R = std::min(Rows, 8 / H);
    static_assert(Rows % R == 0);
    for (size_t r = 0; r < Rows; r += R) {
      if constexpr (V::kIntScores) {
        V::template DotTileInt<Bits, H, R>(sc.qint + 2 * h * g.query_bytes, sc.qscale + h,
                                           sc.bias + h,
                                           codes, e0 + r * g.channels + c0, g, s + r);
      } else {
        DotTile<V, Bits, H, R>(sc.qs + h * g.head_dim, sc.bias + h, codes,
                               e0 + r * g.channels + c0, g, s + r);
      }
    }
  } else {
    constexpr size_t VB = 8 / H;
    float* o = out + h * g.head_dim;
    size_t d = 0;
    for (; d + VB * V::kLanes <= g.head_dim; d += VB * V::kLanes) {
      WeightBlock<V, Bits, H, VB, Rows>(s, codes, e0 + c0, c0, d, g, sc, o);
    }
    for (; d < g.head_dim; d += V::kLanes) {
      WeightBlock<V, Bits, H, 1, Rows>(s, codes, e0 + c0, c0, d, g, sc, o);
    }
  }
}

// Every query head of `kv_head`, in tiles of 4, then 2, then 1 heads.
template <class V, uint32_t Bits, Pass P, size_t Rows>
KV_QATTN_TARGET KV_QATTN_INLINE void KvHeadRows(uint32_t kv_head, const uint8_t* codes, size_t e0,
                                                const Geometry& g, const Scratch& sc, float* out,
                                                size_t r_in_step) {
  size_t h = size_t{kv_head} * g.group;
  const size_t h_end = h + g.group;
  for (; h + 4 <= h_end; h += 4) {
    HeadTile<V, Bits, P, 4, Rows>(h, kv_head, codes, e0, g, sc, out, r_in_step);
  }
  if (h + 2 <= h_end) {
    HeadTile<V, Bits, P, 2, Rows>(h, kv_head, codes, e0, g, sc, out, r_in_step);
    h += 2;
  }
  if (h < h_end) HeadTile<V, Bits, P, 1, Rows>(h, kv_head, codes, e0, g, sc, out, r_in_step);
}

// The locality hint of StepAhead's prefetches (__builtin_prefetch: GCC's _mm_prefetch takes an
// enum that Clang does not declare). 3 is prefetcht0: on the AMD EPYC cores measured (48 KiB
// L1D, 1 MiB L2) it ran INT8 MHA from DRAM ~10 % faster than prefetcht1 (2), although a step
// ahead is more than L1 holds; asking for only every second or fourth line (leaving the rest to
// the hardware prefetchers) ran 1.3-3x slower.
inline constexpr int kAheadLocality = 3;

// Plans the step of `n` rows from row r0 of `view` (n = 0: nothing ahead), whose lines go out
// over `units` (row x KV head) of work of the current step.
template <class V, uint32_t Bits>
KV_QATTN_TARGET void PlanAhead(const QuantBlockView& view, size_t r0, size_t n, size_t units,
                               const Geometry& g, StepAhead* ahead) {
  *ahead = StepAhead{};
  if (n == 0) return;
  auto add = [&](const void* begin, size_t bytes) {
    const auto first = reinterpret_cast<uintptr_t>(begin) & ~uintptr_t{63};
    const uintptr_t end = reinterpret_cast<uintptr_t>(begin) + bytes;
    ahead->ranges[ahead->n_ranges++] = {reinterpret_cast<const char*>(first),
                                        reinterpret_cast<const char*>(end)};
    return (end - first + 63) / 64;
  };
  size_t lines = 0;
  if (r0 % g.quant_group == 0) {
    lines += add(view.k_scale + 2 * (r0 / g.quant_group) * g.channels, 2 * g.channels);
    lines += add(view.k_zero + 2 * (r0 / g.quant_group) * g.channels, 2 * g.channels);
  }
  const size_t code_bytes = n * g.channels * Bits / 8;
  lines += add(view.k_codes + r0 * g.channels * Bits / 8, code_bytes);
  lines += add(view.v_scale + 2 * r0 * g.value_groups, 2 * n * g.value_groups);
  lines += add(view.v_zero + 2 * r0 * g.value_groups, 2 * n * g.value_groups);
  lines += add(view.v_codes + r0 * g.channels * Bits / 8, code_bytes);
  ahead->per_unit = ((uint64_t{lines} << 16) + units - 1) / std::max<size_t>(units, 1);
}

// Asks for `lines` more lines of the planned step (fewer when it runs out).
template <class V>
KV_QATTN_TARGET KV_QATTN_INLINE void IssueAhead(StepAhead* ahead, uint64_t lines) {
  while (lines > 0 && ahead->at < ahead->n_ranges) {
    StepAhead::Range& range = ahead->ranges[ahead->at];
    const auto left = static_cast<uint64_t>((range.end - range.p + 63) / 64);
    const uint64_t k = std::min(lines, left);
    for (uint64_t i = 0; i < k; ++i) __builtin_prefetch(range.p + 64 * i, 0, kAheadLocality);
    range.p += 64 * k;
    lines -= k;
    if (k == left) ++ahead->at;
  }
}

// After `units` (row x KV head) of the current step's work: their share of the next step's lines.
template <class V>
KV_QATTN_TARGET KV_QATTN_INLINE void AdvanceAhead(StepAhead* ahead, size_t units) {
  ahead->credit += ahead->per_unit * units;
  const uint64_t lines = ahead->credit >> 16;
  ahead->credit &= 0xffff;
  IssueAhead<V>(ahead, lines);
}

// At the end of the current step: whatever is left.
template <class V>
KV_QATTN_TARGET void FinishAhead(StepAhead* ahead) {
  IssueAhead<V>(ahead, ~uint64_t{0});
}

// One pass over rows [0, n) of a step (first row at element e0 of the run's codes; value
// parameters of the step's first row at v_scale/v_zero), rows in groups of `Rows`, then the
// rest one by one. A group's value parameters are converted once for all KV heads; after each KV
// head, the next step's share of lines is asked for.
template <class V, uint32_t Bits, Pass P, size_t Rows>
KV_QATTN_TARGET void RowGroup(const uint8_t* codes, const std::byte* v_scale,
                              const std::byte* v_zero, size_t e0, size_t r, const Geometry& g,
                              const Scratch& sc, float* out) {
  if constexpr (P == Pass::kWeights) {
    HalvesToFloats<V>(v_scale + 2 * r * g.value_groups, Rows * g.value_groups, sc.v_scale);
    HalvesToFloats<V>(v_zero + 2 * r * g.value_groups, Rows * g.value_groups, sc.v_zero);
  }
  for (uint32_t kv_head = 0; kv_head < g.n_kv_heads; ++kv_head) {
    KvHeadRows<V, Bits, P, Rows>(kv_head, codes, e0 + r * g.channels, g, sc, out, r);
    AdvanceAhead<V>(sc.ahead, Rows);
  }
}

template <class V, uint32_t Bits, Pass P, size_t Rows>
KV_QATTN_TARGET void PassInGroups(const uint8_t* codes, const std::byte* v_scale,
                                  const std::byte* v_zero, size_t e0, size_t n,
                                  const Geometry& g, const Scratch& sc, float* out) {
  size_t r = 0;
  for (; r + Rows <= n; r += Rows) {
    RowGroup<V, Bits, P, Rows>(codes, v_scale, v_zero, e0, r, g, sc, out);
  }
  for (; r < n; ++r) RowGroup<V, Bits, P, 1>(codes, v_scale, v_zero, e0, r, g, sc, out);
}

// Row groups as small as the head tiles allow (2 rows under 4-head tiles, 4 under 2-head tiles,
// else 8), so a pass reads memory as a few interleaved ascending streams.
template <class V, uint32_t Bits, Pass P>
KV_QATTN_TARGET void StepPass(const uint8_t* codes, const std::byte* v_scale,
                              const std::byte* v_zero, size_t e0, size_t n, const Geometry& g,
                              const Scratch& sc, float* out) {
  if (g.group % 4 == 0) {
    PassInGroups<V, Bits, P, 2>(codes, v_scale, v_zero, e0, n, g, sc, out);
  } else if (g.group % 2 == 0) {
    PassInGroups<V, Bits, P, 4>(codes, v_scale, v_zero, e0, n, g, sc, out);
  } else {
    PassInGroups<V, Bits, P, 8>(codes, v_scale, v_zero, e0, n, g, sc, out);
  }
}

template <class V>
KV_QATTN_TARGET float MaxN(const float* x, size_t n) {
  size_t i = 0;
  float m = -INFINITY;
  if (n >= V::kLanes) {
    typename V::F mv = V::Load(x);
    for (i = V::kLanes; i + V::kLanes <= n; i += V::kLanes) mv = V::Max(mv, V::Load(x + i));
    m = V::HMax(mv);
  }
  for (; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

// x[i] = e^(x[i] - max) for i < n; returns their sum.
template <class V>
KV_QATTN_TARGET float ExpSubSumN(float* x, size_t n, float max) {
  const typename V::F mv = V::Set1(max);
  typename V::F sum = V::Zero();
  size_t i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes) {
    const typename V::F e = ExpNonPositive<V>(V::Sub(V::Load(x + i), mv));
    V::Store(x + i, e);
    sum = V::Add(sum, e);
  }
  float total = V::HSum(sum);
  for (; i < n; ++i) {
    x[i] = WeightExp<V>(x[i] - max);
    total += x[i];
  }
  return total;
}

template <class V>
KV_QATTN_TARGET void ScaleN(float* x, size_t n, float factor) {
  for (size_t i = 0; i < n; i += V::kLanes) V::Store(x + i, V::Mul(V::Load(x + i), V::Set1(factor)));
}

// Turns a step's scores into weights against each head's updated running max, rescaling what
// the head accumulated when the max grows.
template <class V>
KV_QATTN_TARGET void SoftmaxStep(size_t n_heads, size_t head_dim, size_t n, const Scratch& sc,
                                 float* out) {
  for (size_t h = 0; h < n_heads; ++h) {
    float* sh = sc.s + h * kStep;
    const float step_max = MaxN<V>(sh, n);
    if (step_max > sc.max[h]) {
      if (sc.max[h] != -INFINITY) {
        const float alpha = WeightExp<V>(sc.max[h] - step_max);
        sc.sum[h] *= alpha;
        sc.run_sum[h] *= alpha;
        ScaleN<V>(out + h * head_dim, head_dim, alpha);
      }
      sc.max[h] = step_max;
    }
    const float step_sum = ExpSubSumN<V>(sh, n, sc.max[h]);
    sc.sum[h] += step_sum;
    sc.run_sum[h] += step_sum;
  }
}

inline Scratch Carve(const QuantAttendArgs& a, const Geometry& g) {
  const size_t n_heads = a.n_heads;
  float* p = a.scratch;
  Scratch sc;
  for (float** part : {&sc.max, &sc.sum, &sc.run_sum, &sc.bias}) {
    *part = p;
    p += n_heads;
  }
  sc.s = p;
  sc.qs = sc.s + n_heads * kStep;
  sc.v_scale = sc.qs + n_heads * g.head_dim;
  sc.v_zero = sc.v_scale + 8 * g.value_groups;
  sc.run_lse = sc.v_zero + 8 * g.value_groups;
  sc.vec_group = sc.run_lse + a.n_runs * n_heads;
  float* qint = sc.vec_group + g.channels / 8;
  sc.qint = reinterpret_cast<int8_t*>(qint);
  sc.qscale = qint + n_heads * 2 * g.query_bytes / sizeof(float);
  sc.int_values = sc.qscale + n_heads;
  return sc;
}

// The rows of the step that begins at row r0 of a run of `rows` rows: at most kStep, and none
// past the key group's end.
inline size_t StepRows(size_t r0, size_t rows, size_t quant_group) {
  return std::min({kStep, rows - r0, (r0 / quant_group + 1) * quant_group - r0});
}

// One run's steps; `next` is the run after it (its first step is asked for during this run's
// last), or nullptr.
template <class V, uint32_t Bits>
KV_QATTN_TARGET void AttendRun(const QuantAttendArgs& a, const QuantKvRun& run,
                               const QuantKvRun* next, const Geometry& g, const Scratch& sc) {
  const QuantBlockView view = ViewOf(run, g.channels, Bits, g.quant_group);
  size_t n = 0;
  for (size_t r0 = 0; r0 < run.rows; r0 += n) {
    const size_t key_group = r0 / g.quant_group;
    n = StepRows(r0, run.rows, g.quant_group);
    // Both passes cover n rows of every KV head.
    const size_t units = 2 * n * g.n_kv_heads;
    if (r0 + n < run.rows) {
      PlanAhead<V, Bits>(view, r0 + n, StepRows(r0 + n, run.rows, g.quant_group), units, g,
                         sc.ahead);
    } else if (next != nullptr) {
      PlanAhead<V, Bits>(ViewOf(*next, g.channels, Bits, g.quant_group), 0,
                         StepRows(0, next->rows, g.quant_group), units, g, sc.ahead);
    } else {
      PlanAhead<V, Bits>(view, 0, 0, units, g, sc.ahead);
    }
    if (r0 == key_group * g.quant_group) {
      ScaleQueries<V, Bits>(a.q, view, key_group, g, sc, a.n_heads);
    }
    const size_t e0 = r0 * g.channels;
    const std::byte* v_scale = view.v_scale + 2 * r0 * g.value_groups;
    const std::byte* v_zero = view.v_zero + 2 * r0 * g.value_groups;
    StepPass<V, Bits, Pass::kScores>(view.k_codes, v_scale, v_zero, e0, n, g, sc, a.out);
    SoftmaxStep<V>(a.n_heads, g.head_dim, n, sc, a.out);
    if constexpr (V::kIntValues) {
      V::template IntValueStep<Bits>(view.v_codes, v_scale, v_zero, e0, n, g, sc, a.out);
    } else {
      StepPass<V, Bits, Pass::kWeights>(view.v_codes, v_scale, v_zero, e0, n, g, sc, a.out);
    }
    FinishAhead<V>(sc.ahead);
  }
}

// The whole call. Preconditions: head_dim and group_size are multiples of V::kLanes.
template <class V, uint32_t Bits>
KV_QATTN_TARGET void Attend(const QuantAttendArgs& a) {
  const Geometry g = {.head_dim = a.head_dim,
                      .query_bytes = (size_t{a.head_dim} + 127) / 128 * 128,
                      .channels = size_t{a.n_kv_heads} * a.head_dim,
                      .value_groups = ValueGroups(size_t{a.n_kv_heads} * a.head_dim, a.group_size),
                      .group = a.n_heads / a.n_kv_heads,
                      .n_kv_heads = a.n_kv_heads,
                      .quant_group = a.group_size};
  const size_t n_heads = a.n_heads;
  StepAhead ahead;
  Scratch sc = Carve(a, g);
  sc.ahead = &ahead;
  // Per-run log-sum-exps: asked for, or needed for the run masses.
  float* run_lse = a.run_lse != nullptr ? a.run_lse : sc.run_lse;
  for (size_t v = 0; v < g.channels / V::kLanes; ++v) {
    const auto bits = static_cast<uint32_t>(v * V::kLanes / g.quant_group);
    static_assert(sizeof(bits) == sizeof(float));
    std::memcpy(sc.vec_group + v, &bits, sizeof(bits));
  }
  if constexpr (V::kIntValues) V::template InitIntValues<Bits>(g, sc);
  std::fill_n(sc.max, n_heads, -INFINITY);
  std::fill_n(sc.sum, n_heads, 0.0f);
  std::fill_n(a.out, n_heads * g.head_dim, 0.0f);
  for (size_t i = 0; i < a.n_runs; ++i) {
    std::fill_n(sc.run_sum, n_heads, 0.0f);
    AttendRun<V, Bits>(a, a.runs[i], i + 1 < a.n_runs ? &a.runs[i + 1] : nullptr, g, sc);
    for (size_t h = 0; h < n_heads; ++h) {
      run_lse[i * n_heads + h] = sc.max[h] + std::log(sc.run_sum[h]);
    }
  }
  for (size_t h = 0; h < n_heads; ++h) {
    ScaleN<V>(a.out + h * g.head_dim, g.head_dim, 1.0f / sc.sum[h]);
    sc.max[h] += std::log(sc.sum[h]);  // Now the head's log-sum-exp.
  }
  if (a.head_lse != nullptr) std::copy_n(sc.max, n_heads, a.head_lse);
  if (a.run_mass != nullptr) RunMassFromLse(a.n_heads, a.n_runs, run_lse, sc.max, a.run_mass);
}

// Runs the V kernel where it applies; `narrower` otherwise.
template <class V>
KV_QATTN_TARGET void AttendOrFallBack(const QuantAttendArgs& a,
                                      void (*narrower)(const QuantAttendArgs&)) {
  if (a.head_dim % V::kLanes != 0 || a.group_size % V::kLanes != 0) {
    narrower(a);
  } else if (a.bits == 8) {
    Attend<V, 8>(a);
  } else {
    Attend<V, 4>(a);
  }
}

}  // namespace kvtier::runtime::qattn
