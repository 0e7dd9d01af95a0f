// AVX-512 VNNI instantiation of the quantized attention kernel (quant_attention_simd.h): the
// 16-lane float vector (Vec16, quant_attention_vec16.h) for the softmax, integer dot products
// for the scores and the weighted values (quant_attention.h, "Integer scores", "Integer
// weights").
//
// Scores: a head's scaled query is quantized to 15 bits once per key group (QuantizeQuery) and
// kept as two int8 halves (q15 = 128 hi + lo); a row's codes are dotted with each half by
// vpdpbusd (u8 codes x s8 query, four products summed into each int32 lane), 64 codes per
// instruction, with no widening or conversion, and the halves' sums are joined as 128 hi + lo
// before the horizontal sum. INT8 codes are read 64 at a time in memory order. The 128 INT4
// codes of 64 bytes are split into their low nibbles (the even elements) and high nibbles (the
// odd ones) with a shift and two masks, and the int8 query is stored in the same order (per 128
// elements: the 64 even ones, then the 64 odd ones), so no code is moved into element order. A
// tail shorter than 64 bytes is a masked load; the query's padding is zero.
//
// Weights (quant_attention.h, "Integer weights"): after a step's softmax, PrepareWeights turns
// every query head's weights times the value scales into 15-bit integers per value group, as
// two int8 halves with one byte per row for four rows in a dword, and sums the weighted zero
// points. The value pass then reads four rows' codes at a time, interleaves them with two unpack
// levels (a 32-bit lane holds one channel's four codes; the order of the channels is undone
// once per step), and dots them with both halves by vpdpbusd into int32 sums. MHA keeps one KV
// head's sums in registers over the whole step (HeadInRegisters); GQA goes through the rows in
// groups of eight and keeps every query head's sums in scratch (AccumulateRows, FlushSums). Both
// passes ask for the next step's bytes as they go (StepAhead, quant_attention_simd.h).
//
// Shapes whose head_dim or group size is not a multiple of 16, or whose group size does not
// divide head_dim, go to ref::AttendQuantQ15, so every shape has the integer semantics; so does
// head_dim over 256.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's AVX-512 intrinsics start from operands "initialised" with themselves (_mm512_undefined_*),
// which -Wmaybe-uninitialized reports wherever one is inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#define KV_QATTN_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,f16c,fma")))
#include "runtime/quant_attention_simd.h"

namespace kvtier::runtime::avx512vnni {
namespace {

#include "runtime/quant_attention_vec16.h"

// acc += codes . (the 64 int8 query values at q), four products to a lane.
KV_QATTN_TARGET KV_QATTN_INLINE __m512i Dot(__m512i acc, __m512i codes_u8, const int8_t* q) {
  return _mm512_dpbusd_epi32(acc, codes_u8, _mm512_loadu_si512(q));
}

// Beyond this head_dim a score's int32 sum could overflow (|q15| <= 16256, codes <= 255).
constexpr uint32_t kMaxHeadDim = 256;

// The mask of the first min(n, 64) bytes.
KV_QATTN_TARGET KV_QATTN_INLINE __mmask64 FirstBytes(size_t n) {
  return n >= 64 ? ~__mmask64{0} : (__mmask64{1} << n) - 1;
}

struct Vec16Vnni : Vec16 {
  static constexpr bool kIntScores = true;

  // qs (head_dim floats) to q15 = 128 hi + lo (lo in [-64, 63]) as ref::AttendQuantQ15 rounds
  // it, stored as qint[0, query_bytes) = hi and qint[query_bytes, 2 query_bytes) = lo (int8,
  // zero-padded; INT4: per 128 elements the 64 even ones, then the 64 odd ones), and its scale.
  template <uint32_t Bits>
  static KV_QATTN_TARGET void QuantizeQuery(const float* qs, size_t head_dim, int8_t* qint,
                                            float* scale) {
    __m512 m = _mm512_setzero_ps();
    for (size_t d = 0; d < head_dim; d += 16) m = _mm512_max_ps(m, _mm512_abs_ps(Load(qs + d)));
    const float max = _mm512_reduce_max_ps(m);
    const __m512 inv = _mm512_set1_ps(max > 0.0f ? 127.0f / max : 0.0f);
    *scale = max / 16256.0f;
    const size_t query_bytes = (head_dim + 127) / 128 * 128;
    for (size_t b = 0; b < 2 * query_bytes; b += 64) {
      _mm512_storeu_si512(qint + b, _mm512_setzero_si512());
    }
    // Even bytes to the low half, odd bytes to the high half.
    const __m128i evens_odds = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    for (size_t d = 0; d < head_dim; d += 16) {
      const __m512i q15 = _mm512_cvtps_epi32(
          _mm512_mul_ps(_mm512_mul_ps(Load(qs + d), inv), _mm512_set1_ps(128.0f)));
      const __m512i hi = _mm512_srai_epi32(_mm512_add_epi32(q15, _mm512_set1_epi32(64)), 7);
      const __m512i lo = _mm512_sub_epi32(q15, _mm512_slli_epi32(hi, 7));
      const __m128i halves[2] = {_mm512_cvtsepi32_epi8(hi), _mm512_cvtsepi32_epi8(lo)};
      for (size_t half = 0; half < 2; ++half) {
        int8_t* dst = qint + half * query_bytes;
        if constexpr (Bits == 8) {
          _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + d), halves[half]);
        } else {
          const __m128i split = _mm_shuffle_epi8(halves[half], evens_odds);
          int8_t* chunk = dst + d / 128 * 128 + d % 128 / 2;
          _mm_storel_epi64(reinterpret_cast<__m128i*>(chunk), split);
          _mm_storel_epi64(reinterpret_cast<__m128i*>(chunk + 64),
                           _mm_unpackhi_epi64(split, split));
        }
      }
    }
  }

  // s[i * kStep + r] = float(code_r . q15_i) * qscale[i] + bias[i] for H heads and R rows (row r's
  // segment of this KV head starting at element e0 + r * C; head i's halves at qint + 2 i
  // query_bytes).
  template <uint32_t Bits, size_t H, size_t R>
  static KV_QATTN_TARGET KV_QATTN_INLINE void DotTileInt(const int8_t* qint, const float* qscale,
                                                         const float* bias, const uint8_t* codes,
                                                         size_t e0, const qattn::Geometry& g,
                                                         float* s) {
    static_assert(H * R <= 8);
    const size_t qb = g.query_bytes;
    __m512i hi[8], lo[8];
#pragma GCC unroll 8
    for (size_t k = 0; k < 8; ++k) hi[k] = lo[k] = _mm512_setzero_si512();
    if constexpr (Bits == 8) {
      for (size_t d = 0; d < g.head_dim; d += 64) {
        const __mmask64 mask = FirstBytes(g.head_dim - d);
#pragma GCC unroll 8
        for (size_t r = 0; r < R; ++r) {
          const __m512i kv = _mm512_maskz_loadu_epi8(mask, codes + e0 + r * g.channels + d);
#pragma GCC unroll 4
          for (size_t i = 0; i < H; ++i) {
            hi[i * R + r] = Dot(hi[i * R + r], kv, qint + 2 * i * qb + d);
            lo[i * R + r] = Dot(lo[i * R + r], kv, qint + 2 * i * qb + qb + d);
          }
        }
      }
    } else {
      const __m512i low_nibbles = _mm512_set1_epi8(0x0f);
      for (size_t d = 0; d < g.head_dim; d += 128) {
        const __mmask64 mask = FirstBytes((g.head_dim - d) / 2);
#pragma GCC unroll 8
        for (size_t r = 0; r < R; ++r) {
          const __m512i bytes =
              _mm512_maskz_loadu_epi8(mask, codes + (e0 + r * g.channels + d) / 2);
          const __m512i even = _mm512_and_si512(bytes, low_nibbles);
          const __m512i odd = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), low_nibbles);
#pragma GCC unroll 4
          for (size_t i = 0; i < H; ++i) {
            const int8_t* q = qint + 2 * i * qb + d;
            hi[i * R + r] = Dot(Dot(hi[i * R + r], even, q), odd, q + 64);
            lo[i * R + r] = Dot(Dot(lo[i * R + r], even, q + qb), odd, q + qb + 64);
          }
        }
      }
    }
    __m512i acc[8];
#pragma GCC unroll 8
    for (size_t k = 0; k < 8; ++k) acc[k] = _mm512_add_epi32(_mm512_slli_epi32(hi[k], 7), lo[k]);
    if constexpr (H * R == 8) {
      __m256i f[8];
#pragma GCC unroll 8
      for (size_t k = 0; k < 8; ++k) {
        f[k] = _mm256_add_epi32(_mm512_castsi512_si256(acc[k]),
                                _mm512_extracti64x4_epi64(acc[k], 1));
      }
      const __m256i s0123 =
          _mm256_hadd_epi32(_mm256_hadd_epi32(f[0], f[1]), _mm256_hadd_epi32(f[2], f[3]));
      const __m256i s4567 =
          _mm256_hadd_epi32(_mm256_hadd_epi32(f[4], f[5]), _mm256_hadd_epi32(f[6], f[7]));
      const __m256i sums = _mm256_add_epi32(_mm256_permute2x128_si256(s0123, s4567, 0x20),
                                            _mm256_permute2x128_si256(s0123, s4567, 0x31));
      // Lane k is head k / R: its scale and bias spread by a permute (a masked load reads only
      // the H heads').
      const __m256i head_of_lane = _mm256_setr_epi32(0 / R, 1 / R, 2 / R, 3 / R, 4 / R, 5 / R,
                                                     6 / R, 7 / R);
      constexpr __mmask8 kHeads = (1u << H) - 1;
      const __m256 scale = _mm256_permutevar8x32_ps(
          _mm256_castps128_ps256(_mm_maskz_loadu_ps(kHeads, qscale)), head_of_lane);
      const __m256 offset = _mm256_permutevar8x32_ps(
          _mm256_castps128_ps256(_mm_maskz_loadu_ps(kHeads, bias)), head_of_lane);
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes,
                      _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(sums), scale), offset));
#pragma GCC unroll 4
      for (size_t i = 0; i < H; ++i) std::memcpy(s + i * qattn::kStep, lanes + i * R, R * 4);
    } else {
      for (size_t i = 0; i < H; ++i) {
        for (size_t r = 0; r < R; ++r) {
          const int32_t sum = _mm512_reduce_add_epi32(acc[i * R + r]);
          s[i * qattn::kStep + r] = static_cast<float>(sum) * qscale[i] + bias[i];
        }
      }
    }
  }

  // ---- Integer weights (quant_attention.h): the value pass as vpdpbusd over four rows ----
  static constexpr bool kIntValues = true;
  static constexpr size_t kSets = qattn::kStep / 4;

  static qattn::IntValueLayout Layout(const qattn::Geometry& g, const qattn::Scratch& sc) {
    return qattn::IntValueLayout::Of(g.n_kv_heads, g.group, g.head_dim, g.quant_group,
                                     sc.int_values);
  }

  // The tables that depend only on the call's geometry, and zeroed accumulators and padding.
  template <uint32_t Bits>
  static KV_QATTN_TARGET void InitIntValues(const qattn::Geometry& g, const qattn::Scratch& sc) {
    const qattn::IntValueLayout l = Layout(g, sc);
    std::fill_n(l.wq, l.group * qattn::kStep * l.wq_stride, 0.0f);
    // GQA's sums live in acc between row groups (FlushSums zeroes them after each step); MHA
    // keeps them in registers.
    if (l.group > 1) std::fill_n(l.acc, l.group * l.n_kv_heads * 2 * l.acc_pad, 0);
    for (size_t t = 0; t < l.tiles; ++t) {
      const size_t base = 16 * t / l.head_groups;
      l.tile_base[t] = static_cast<int32_t>(base);
      for (size_t i = 0; i < 16; ++i) {
        l.tile_index[16 * t + i] = static_cast<int32_t>((16 * t + i) / l.head_groups - base);
      }
    }
    // Chunk k of a head (64 elements for INT8, 128 for INT4), code vector x, lane i (128-bit
    // lane L = i / 4): the elements that lane sums begin at 64 k + 16 L (INT8) or 128 k + 32 L +
    // 8 x (INT4, x-th four of the even and odd elements); past head_dim, the last group.
    for (size_t k = 0; k < 4; ++k) {
      for (size_t x = 0; x < 4; ++x) {
        for (size_t i = 0; i < 16; ++i) {
          const size_t lane = i / 4;
          const size_t d = Bits == 8 ? 64 * k + 16 * lane : 128 * k + 32 * lane + 8 * x;
          l.chunk_index[(4 * k + x) * 16 + i] =
              static_cast<int32_t>(std::min(d, g.head_dim - 1) / g.quant_group);
        }
      }
    }
  }

  // Byte 4 i + u of the result is byte 16 u + i of the source: four rows of sixteen groups'
  // bytes to sixteen groups of four rows' bytes.
  static KV_QATTN_TARGET KV_QATTN_INLINE __m512i RowsToGroups() {
    alignas(64) int8_t index[64];
    for (int i = 0; i < 16; ++i) {
      for (int u = 0; u < 4; ++u) index[4 * i + u] = static_cast<int8_t>(16 * u + i);
    }
    return _mm512_load_si512(index);
  }

  // The step's quantized weights: for every query head (by its place qi in its KV head's
  // group), value group and four rows, q15 = 128 hi + lo of weight * value scale, one byte per
  // row in a dword; and per group the scale m / 16256 and the weighted sum of zero points.
  static KV_QATTN_TARGET void PrepareWeights(const qattn::IntValueLayout& l,
                                             const qattn::Scratch& sc, size_t n,
                                             const std::byte* v_scale, const std::byte* v_zero) {
    const size_t gv = l.value_groups;
    // wq[qi][r][kv] = s[kv * group + qi][r], sixteen KV heads per gather (a transposition one
    // float at a time stalled the vector loads below on its narrow stores).
    const __m512i kv_stride = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32(static_cast<int32_t>(l.group * qattn::kStep)));
    for (size_t kv0 = 0; kv0 < l.n_kv_heads; kv0 += 16) {
      const size_t left = l.n_kv_heads - kv0;
      const __mmask16 heads =
          left >= 16 ? __mmask16{0xffff} : static_cast<__mmask16>((1u << left) - 1);
      for (size_t qi = 0; qi < l.group; ++qi) {
        const float* w = sc.s + (kv0 * l.group + qi) * qattn::kStep;
        float* dst = l.wq + qi * qattn::kStep * l.wq_stride + kv0;
        for (size_t r = 0; r < n; ++r) {
          _mm512_mask_storeu_ps(dst + r * l.wq_stride, heads,
                                _mm512_mask_i32gather_ps(_mm512_setzero_ps(), heads, kv_stride,
                                                         w + r, 4));
        }
      }
    }
    const size_t sets = (n + 7) / 8 * 2;  // The value pass reads whole groups of eight rows.
    const __m512i rows_to_groups = RowsToGroups();
    for (size_t qi = 0; qi < l.group; ++qi) {
      for (size_t t = 0; t < l.tiles; ++t) {
        const size_t g0 = 16 * t;
        const __m512i index = _mm512_loadu_si512(l.tile_index + g0);
        const float* wrow = l.wq + qi * qattn::kStep * l.wq_stride + l.tile_base[t];
        const __mmask16 lanes =
            gv - g0 >= 16 ? __mmask16{0xffff} : static_cast<__mmask16>((1u << (gv - g0)) - 1);
        float* ws = l.ws + qi * qattn::kStep * l.gv_pad + g0;
        __m512 mx = _mm512_setzero_ps();
        __m512 zs = _mm512_setzero_ps();
        for (size_t r = 0; r < n; ++r) {
          const __m512 w = _mm512_permutexvar_ps(index, _mm512_loadu_ps(wrow + r * l.wq_stride));
          const __m512 scale = _mm512_cvtph_ps(
              _mm256_maskz_loadu_epi16(lanes, v_scale + 2 * (r * gv + g0)));
          const __m512 zero = _mm512_cvtph_ps(
              _mm256_maskz_loadu_epi16(lanes, v_zero + 2 * (r * gv + g0)));
          const __m512 p = _mm512_mul_ps(w, scale);
          _mm512_storeu_ps(ws + r * l.gv_pad, p);
          mx = _mm512_max_ps(mx, _mm512_abs_ps(p));
          zs = _mm512_fmadd_ps(w, zero, zs);
        }
        _mm512_storeu_ps(l.wscale + qi * l.gv_pad + g0,
                         _mm512_div_ps(mx, _mm512_set1_ps(16256.0f)));
        _mm512_storeu_ps(l.wzero + qi * l.gv_pad + g0, zs);
        const __mmask16 positive = _mm512_cmp_ps_mask(mx, _mm512_setzero_ps(), _CMP_GT_OQ);
        const __m512 inv = _mm512_maskz_div_ps(positive, _mm512_set1_ps(16256.0f), mx);
        for (size_t j = 0; j < sets; ++j) {
          __m512i hi = _mm512_setzero_si512();
          __m512i lo = _mm512_setzero_si512();
          for (size_t u = 0; u < 4; ++u) {
            const size_t row = 4 * j + u;
            const __m512 x = row < n ? _mm512_mul_ps(_mm512_loadu_ps(ws + row * l.gv_pad), inv)
                                     : _mm512_setzero_ps();
            const __m512i q = _mm512_cvtps_epi32(x);
            const __m512i h = _mm512_srai_epi32(_mm512_add_epi32(q, _mm512_set1_epi32(64)), 7);
            const __m512i low = _mm512_sub_epi32(q, _mm512_slli_epi32(h, 7));
            const auto lane = static_cast<__mmask16>(0xfu << (4 * u));
            hi = _mm512_mask_broadcast_i32x4(hi, lane, _mm512_cvtepi32_epi8(h));
            lo = _mm512_mask_broadcast_i32x4(lo, lane, _mm512_cvtepi32_epi8(low));
          }
          const size_t at = (qi * kSets + j) * l.gv_pad + g0;
          _mm512_storeu_si512(l.whi + at, _mm512_permutexvar_epi8(rows_to_groups, hi));
          _mm512_storeu_si512(l.wlo + at, _mm512_permutexvar_epi8(rows_to_groups, lo));
        }
      }
    }
  }

  // Four rows' codes (64 each) to four vectors whose dword i holds the four rows' codes of one
  // element: x[0] lanes L hold elements 16 L + 0..3, x[1] 16 L + 4..7, x[2] + 8..11, x[3] + 12..15.
  static KV_QATTN_TARGET KV_QATTN_INLINE void Interleave4(__m512i a0, __m512i a1, __m512i a2,
                                                          __m512i a3, __m512i* x) {
    const __m512i t0 = _mm512_unpacklo_epi8(a0, a1);
    const __m512i t1 = _mm512_unpackhi_epi8(a0, a1);
    const __m512i t2 = _mm512_unpacklo_epi8(a2, a3);
    const __m512i t3 = _mm512_unpackhi_epi8(a2, a3);
    x[0] = _mm512_unpacklo_epi16(t0, t2);
    x[1] = _mm512_unpackhi_epi16(t0, t2);
    x[2] = _mm512_unpacklo_epi16(t1, t3);
    x[3] = _mm512_unpackhi_epi16(t1, t3);
  }

  // Interleave4 of four rows' INT8 codes at p[u] + offset (the first min(64, ...) bytes of mask).
  static KV_QATTN_TARGET KV_QATTN_INLINE void LoadInterleaved(const uint8_t* const* p,
                                                              size_t offset, __mmask64 mask,
                                                              __m512i* x) {
    Interleave4(_mm512_maskz_loadu_epi8(mask, p[0] + offset),
                _mm512_maskz_loadu_epi8(mask, p[1] + offset),
                _mm512_maskz_loadu_epi8(mask, p[2] + offset),
                _mm512_maskz_loadu_epi8(mask, p[3] + offset), x);
  }

  // The same for the 128 INT4 codes of 64 bytes: the low nibbles (even elements) to `even`, the
  // high ones (odd elements) to `odd`. The bytes are interleaved before their nibbles are split
  // (a byte move commutes with the split), so the four rows take half the unpacks.
  static KV_QATTN_TARGET KV_QATTN_INLINE void LoadInterleavedNibbles(const uint8_t* const* p,
                                                                     size_t offset,
                                                                     __mmask64 mask,
                                                                     __m512i* even, __m512i* odd) {
    const __m512i nibble = _mm512_set1_epi8(0x0f);
    __m512i x[4];
    LoadInterleaved(p, offset, mask, x);
#pragma GCC unroll 4
    for (size_t k = 0; k < 4; ++k) {
      even[k] = _mm512_and_si512(x[k], nibble);
      odd[k] = _mm512_and_si512(_mm512_srli_epi16(x[k], 4), nibble);
    }
  }

  // The weights of query head qi for sets set0 and set0 + 1 of KV head kv, spread over the
  // lanes of chunk index `index`.
  static KV_QATTN_TARGET KV_QATTN_INLINE void Weights(const qattn::IntValueLayout& l, size_t qi,
                                                      size_t kv, size_t set0, __m512i index,
                                                      __m512i* hi, __m512i* lo) {
    for (size_t s = 0; s < 2; ++s) {
      const size_t at = (qi * kSets + set0 + s) * l.gv_pad + kv * l.head_groups;
      hi[s] = _mm512_permutexvar_epi32(index, _mm512_loadu_si512(l.whi + at));
      lo[s] = _mm512_permutexvar_epi32(index, _mm512_loadu_si512(l.wlo + at));
    }
  }

  // acc[0..3] (hi) and acc[acc_pad..] (lo) += the weighted codes of two sets of four rows.
  static KV_QATTN_TARGET KV_QATTN_INLINE void Accumulate(int32_t* acc, size_t acc_pad,
                                                         const __m512i (*x)[4], size_t xi,
                                                         const __m512i* hi, const __m512i* lo) {
    __m512i h = _mm512_loadu_si512(acc + 16 * xi);
    __m512i w = _mm512_loadu_si512(acc + acc_pad + 16 * xi);
    h = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(h, x[0][xi], hi[0]), x[1][xi], hi[1]);
    w = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(w, x[0][xi], lo[0]), x[1][xi], lo[1]);
    _mm512_storeu_si512(acc + 16 * xi, h);
    _mm512_storeu_si512(acc + acc_pad + 16 * xi, w);
  }

  // Eight rows (row[u], at KV head kv's first element) into every query head of kv.
  template <uint32_t Bits, bool UniformX>
  static KV_QATTN_TARGET KV_QATTN_INLINE void AccumulateRows(const uint8_t* const* row, size_t kv,
                                                             size_t set0,
                                                             const qattn::IntValueLayout& l) {
    if constexpr (Bits == 8) {
      for (size_t d0 = 0; d0 < l.head_dim; d0 += 64) {
        const __mmask64 mask = FirstBytes(l.head_dim - d0);
        __m512i x[2][4];
#pragma GCC unroll 2
        for (size_t s = 0; s < 2; ++s) LoadInterleaved(row + 4 * s, d0, mask, x[s]);
        const __m512i index = _mm512_loadu_si512(l.chunk_index + d0 / 64 * 4 * 16);
        for (size_t qi = 0; qi < l.group; ++qi) {
          int32_t* acc = l.acc + (kv * l.group + qi) * 2 * l.acc_pad + d0;
          __m512i hi[2], lo[2];
          Weights(l, qi, kv, set0, index, hi, lo);
#pragma GCC unroll 4
          for (size_t xi = 0; xi < 4; ++xi) Accumulate(acc, l.acc_pad, x, xi, hi, lo);
        }
      }
    } else {
      for (size_t d0 = 0; d0 < l.head_dim; d0 += 128) {
        const __mmask64 mask = FirstBytes((l.head_dim - d0) / 2);
        __m512i even[2][4], odd[2][4];
#pragma GCC unroll 2
        for (size_t s = 0; s < 2; ++s) {
          LoadInterleavedNibbles(row + 4 * s, d0 / 2, mask, even[s], odd[s]);
        }
        const int32_t* chunk_index = l.chunk_index + d0 / 128 * 4 * 16;
        for (size_t qi = 0; qi < l.group; ++qi) {
          int32_t* acc = l.acc + (kv * l.group + qi) * 2 * l.acc_pad + d0;
          __m512i hi[2], lo[2];
          if constexpr (UniformX) {
            Weights(l, qi, kv, set0, _mm512_loadu_si512(chunk_index), hi, lo);
          }
#pragma GCC unroll 4
          for (size_t xi = 0; xi < 4; ++xi) {
            if constexpr (!UniformX) {
              Weights(l, qi, kv, set0, _mm512_loadu_si512(chunk_index + 16 * xi), hi, lo);
            }
            Accumulate(acc, l.acc_pad, even, xi, hi, lo);
            Accumulate(acc + 64, l.acc_pad, odd, xi, hi, lo);
          }
        }
      }
    }
  }

  // Lanes L of a[0..3] to y[L] = (a[0].L, a[1].L, a[2].L, a[3].L).
  static KV_QATTN_TARGET KV_QATTN_INLINE void TransposeLanes(const __m512i* a, __m512i* y) {
    const __m512i t0 = _mm512_shuffle_i32x4(a[0], a[1], 0x44);
    const __m512i t1 = _mm512_shuffle_i32x4(a[2], a[3], 0x44);
    const __m512i t2 = _mm512_shuffle_i32x4(a[0], a[1], 0xee);
    const __m512i t3 = _mm512_shuffle_i32x4(a[2], a[3], 0xee);
    y[0] = _mm512_shuffle_i32x4(t0, t1, 0x88);
    y[1] = _mm512_shuffle_i32x4(t0, t1, 0xdd);
    y[2] = _mm512_shuffle_i32x4(t2, t3, 0x88);
    y[3] = _mm512_shuffle_i32x4(t2, t3, 0xdd);
  }

  // The sums of the two weight halves joined: 128 hi + lo.
  static KV_QATTN_TARGET KV_QATTN_INLINE __m512i Joined(__m512i hi, __m512i lo) {
    return _mm512_add_epi32(_mm512_slli_epi32(hi, 7), lo);
  }

  // Joined sums of four accumulator vectors at acc (lo at acc + acc_pad), zeroing them.
  static KV_QATTN_TARGET KV_QATTN_INLINE void TakeSums(int32_t* acc, size_t acc_pad, __m512i* a) {
    for (size_t x = 0; x < 4; ++x) {
      a[x] = Joined(_mm512_loadu_si512(acc + 16 * x), _mm512_loadu_si512(acc + acc_pad + 16 * x));
      _mm512_storeu_si512(acc + 16 * x, _mm512_setzero_si512());
      _mm512_storeu_si512(acc + acc_pad + 16 * x, _mm512_setzero_si512());
    }
  }

  // out[d, d + 16) += float(sums) * scale + zero of d's value group.
  static KV_QATTN_TARGET KV_QATTN_INLINE void AddSums(float* out, size_t d, __m512i sums,
                                                      const float* scale, const float* zero,
                                                      size_t group_size) {
    const size_t vg = d / group_size;
    _mm512_storeu_ps(out + d, _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), _mm512_set1_ps(scale[vg]),
                                              _mm512_add_ps(_mm512_loadu_ps(out + d),
                                                            _mm512_set1_ps(zero[vg]))));
  }

  // The joined sums of an INT8 chunk (elements d0 + 16 L + 4 x + 0..3 in lane L of a[x]) into
  // out in element order, up to head_dim.
  static KV_QATTN_TARGET KV_QATTN_INLINE void AddInt8Sums(float* out, size_t d0, const __m512i* a,
                                                          const float* scale, const float* zero,
                                                          size_t group_size, size_t head_dim) {
    __m512i y[4];
    TransposeLanes(a, y);
    for (size_t lane = 0; lane < 4 && d0 + 16 * lane < head_dim; ++lane) {
      AddSums(out, d0 + 16 * lane, y[lane], scale, zero, group_size);
    }
  }

  // The joined sums of an INT4 chunk (even and odd elements apart, each ordered as an INT8
  // chunk's) into out in element order, up to head_dim.
  static KV_QATTN_TARGET KV_QATTN_INLINE void AddInt4Sums(float* out, size_t d0,
                                                          const __m512i* even_sums,
                                                          const __m512i* odd_sums,
                                                          const float* scale, const float* zero,
                                                          size_t group_size, size_t head_dim) {
    const __m512i evens_first = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6,
                                                  22, 7, 23);
    const __m512i evens_last = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29,
                                                 14, 30, 15, 31);
    __m512i even[4], odd[4];
    TransposeLanes(even_sums, even);
    TransposeLanes(odd_sums, odd);
    for (size_t lane = 0; lane < 4; ++lane) {
      const size_t d = d0 + 32 * lane;
      if (d >= head_dim) break;
      AddSums(out, d, _mm512_permutex2var_epi32(even[lane], evens_first, odd[lane]), scale, zero,
              group_size);
      if (d + 16 < head_dim) {
        AddSums(out, d + 16, _mm512_permutex2var_epi32(even[lane], evens_last, odd[lane]), scale,
                zero, group_size);
      }
    }
  }

  // The step's integer sums into out, in element order.
  template <uint32_t Bits>
  static KV_QATTN_TARGET void FlushSums(const qattn::IntValueLayout& l, const qattn::Geometry& g,
                                        float* out) {
    for (size_t h = 0; h < l.group * l.n_kv_heads; ++h) {
      const size_t qi = h % l.group;
      const size_t kv = h / l.group;
      int32_t* acc = l.acc + h * 2 * l.acc_pad;
      const float* scale = l.wscale + qi * l.gv_pad + kv * l.head_groups;
      const float* zero = l.wzero + qi * l.gv_pad + kv * l.head_groups;
      float* o = out + h * l.head_dim;
      if constexpr (Bits == 8) {
        for (size_t d0 = 0; d0 < l.head_dim; d0 += 64) {
          __m512i a[4];
          TakeSums(acc + d0, l.acc_pad, a);
          AddInt8Sums(o, d0, a, scale, zero, g.quant_group, l.head_dim);
        }
      } else {
        for (size_t d0 = 0; d0 < l.head_dim; d0 += 128) {
          __m512i even[4], odd[4];
          TakeSums(acc + d0, l.acc_pad, even);
          TakeSums(acc + d0 + 64, l.acc_pad, odd);
          AddInt4Sums(o, d0, even, odd, scale, zero, g.quant_group, l.head_dim);
        }
      }
    }
  }

  // HeadInRegisters' INT8 pass over the head's elements [d0, d0 + 128): the hi and lo sums of
  // its two 64-element halves in sixteen registers over the step's `sets` sets of four rows
  // (row(j, u): row u of set j), then into o. The first chunk's sets send out the next step's
  // lines.
  template <typename Row>
  static KV_QATTN_TARGET KV_QATTN_INLINE void Int8HeadChunk(const Row& row, size_t sets,
                                                            size_t d0, size_t kv,
                                                            const qattn::IntValueLayout& l,
                                                            uint32_t group_size,
                                                            const float* scale, const float* zero,
                                                            float* o, qattn::StepAhead* ahead) {
    const bool two = d0 + 64 < l.head_dim;
    const __mmask64 mask0 = FirstBytes(l.head_dim - d0);
    const __mmask64 mask1 = two ? FirstBytes(l.head_dim - d0 - 64) : 0;
    const __m512i index0 = _mm512_loadu_si512(l.chunk_index + d0 / 64 * 4 * 16);
    const __m512i index1 = _mm512_loadu_si512(l.chunk_index + (d0 / 64 + 1) * 4 * 16);
    __m512i hi[2][4], lo[2][4];
#pragma GCC unroll 4
    for (size_t x = 0; x < 4; ++x) {
      hi[0][x] = lo[0][x] = hi[1][x] = lo[1][x] = _mm512_setzero_si512();
    }
    for (size_t j = 0; j < sets; ++j) {
      const __m512i wrow_hi = _mm512_loadu_si512(l.whi + j * l.gv_pad + kv * l.head_groups);
      const __m512i wrow_lo = _mm512_loadu_si512(l.wlo + j * l.gv_pad + kv * l.head_groups);
      const uint8_t* p[4] = {row(j, 0), row(j, 1), row(j, 2), row(j, 3)};
#pragma GCC unroll 2
      for (size_t c = 0; c < 2; ++c) {
        if (c == 1 && !two) break;
        const __mmask64 mask = c == 0 ? mask0 : mask1;
        const size_t d = d0 + 64 * c;
        __m512i x[4];
        LoadInterleaved(p, d, mask, x);
        const __m512i index = c == 0 ? index0 : index1;
        const __m512i wh = _mm512_permutexvar_epi32(index, wrow_hi);
        const __m512i wl = _mm512_permutexvar_epi32(index, wrow_lo);
#pragma GCC unroll 4
        for (size_t xi = 0; xi < 4; ++xi) {
          hi[c][xi] = _mm512_dpbusd_epi32(hi[c][xi], x[xi], wh);
          lo[c][xi] = _mm512_dpbusd_epi32(lo[c][xi], x[xi], wl);
        }
      }
      if (d0 == 0) qattn::AdvanceAhead<Vec16>(ahead, 4);
    }
    for (size_t c = 0; c < 2; ++c) {
      const size_t d = d0 + 64 * c;
      if (d >= l.head_dim) break;
      __m512i a[4];
      for (size_t x = 0; x < 4; ++x) a[x] = Joined(hi[c][x], lo[c][x]);
      AddInt8Sums(o, d, a, scale, zero, group_size, l.head_dim);
    }
  }

  // HeadInRegisters' INT4 pass over the head's elements [d0, d0 + 128), as Int8HeadChunk's:
  // the even and odd elements' hi and lo sums apart, in sixteen registers. UniformX: the four
  // index vectors of the chunk pick the same weights (one permutation for all four).
  template <bool UniformX, typename Row>
  static KV_QATTN_TARGET KV_QATTN_INLINE void Int4HeadChunk(const Row& row, size_t sets,
                                                            size_t d0, size_t kv,
                                                            const qattn::IntValueLayout& l,
                                                            uint32_t group_size,
                                                            const float* scale, const float* zero,
                                                            float* o, qattn::StepAhead* ahead) {
    const __mmask64 mask = FirstBytes((l.head_dim - d0) / 2);
    const int32_t* chunk_index = l.chunk_index + d0 / 128 * 4 * 16;
    __m512i ehi[4], elo[4], ohi[4], olo[4];
#pragma GCC unroll 4
    for (size_t x = 0; x < 4; ++x) {
      ehi[x] = elo[x] = ohi[x] = olo[x] = _mm512_setzero_si512();
    }
    for (size_t j = 0; j < sets; ++j) {
      const __m512i wrow_hi = _mm512_loadu_si512(l.whi + j * l.gv_pad + kv * l.head_groups);
      const __m512i wrow_lo = _mm512_loadu_si512(l.wlo + j * l.gv_pad + kv * l.head_groups);
      const uint8_t* p[4] = {row(j, 0), row(j, 1), row(j, 2), row(j, 3)};
      __m512i xe[4], xo[4];
      LoadInterleavedNibbles(p, d0 / 2, mask, xe, xo);
      __m512i wh = _mm512_permutexvar_epi32(_mm512_loadu_si512(chunk_index), wrow_hi);
      __m512i wl = _mm512_permutexvar_epi32(_mm512_loadu_si512(chunk_index), wrow_lo);
#pragma GCC unroll 4
      for (size_t xi = 0; xi < 4; ++xi) {
        if constexpr (!UniformX) {
          const __m512i index = _mm512_loadu_si512(chunk_index + 16 * xi);
          wh = _mm512_permutexvar_epi32(index, wrow_hi);
          wl = _mm512_permutexvar_epi32(index, wrow_lo);
        }
        ehi[xi] = _mm512_dpbusd_epi32(ehi[xi], xe[xi], wh);
        elo[xi] = _mm512_dpbusd_epi32(elo[xi], xe[xi], wl);
        ohi[xi] = _mm512_dpbusd_epi32(ohi[xi], xo[xi], wh);
        olo[xi] = _mm512_dpbusd_epi32(olo[xi], xo[xi], wl);
      }
      if (d0 == 0) qattn::AdvanceAhead<Vec16>(ahead, 4);
    }
    __m512i even[4], odd[4];
    for (size_t x = 0; x < 4; ++x) {
      even[x] = Joined(ehi[x], elo[x]);
      odd[x] = Joined(ohi[x], olo[x]);
    }
    AddInt4Sums(o, d0, even, odd, scale, zero, group_size, l.head_dim);
  }

  // One query head per KV head (MHA): one KV head's rows of the step at a time, its sums in
  // registers (no accumulator traffic), then into out, 128 elements at a time (Int8HeadChunk,
  // Int4HeadChunk, inlined here). Rows past n read row n - 1 with weight 0.
  // After every four rows, their share of the next step's lines goes out (AdvanceAhead). With
  // a KV head's share at once (about 72 prefetches in one burst for INT8), this pass's own loads
  // waited longer, and INT8 from DRAM took 10-27 % longer (docs/benchmarks.md).
  template <uint32_t Bits, bool UniformX>
  static KV_QATTN_TARGET void HeadInRegisters(const uint8_t* first, size_t row_bytes, size_t n,
                                              size_t kv, const qattn::IntValueLayout& l,
                                              uint32_t group_size, float* o,
                                              qattn::StepAhead* ahead) {
    const size_t sets = (n + 3) / 4;
    auto row = [&](size_t j, size_t u) {
      const size_t r = 4 * j + u;
      return first + (r < n ? r : n - 1) * row_bytes;
    };
    const float* scale = l.wscale + kv * l.head_groups;
    const float* zero = l.wzero + kv * l.head_groups;
    for (size_t d0 = 0; d0 < l.head_dim; d0 += 128) {
      if constexpr (Bits == 8) {
        Int8HeadChunk(row, sets, d0, kv, l, group_size, scale, zero, o, ahead);
      } else {
        Int4HeadChunk<UniformX>(row, sets, d0, kv, l, group_size, scale, zero, o, ahead);
      }
    }
  }

  // A step's value pass: weights quantized, then KV head by KV head: MHA in HeadInRegisters;
  // GQA in groups of eight rows (the last group's missing rows read the step's last row with
  // weight 0), each followed by its share of the next step's lines (StepAhead), then the sums
  // into out.
  template <uint32_t Bits>
  static KV_QATTN_TARGET void IntValueStep(const uint8_t* codes, const std::byte* v_scale,
                                           const std::byte* v_zero, size_t e0, size_t n,
                                           const qattn::Geometry& g, const qattn::Scratch& sc,
                                           float* out) {
    const qattn::IntValueLayout l = Layout(g, sc);
    PrepareWeights(l, sc, n, v_scale, v_zero);
    const bool uniform_x = g.quant_group % 32 == 0;
    const size_t row_bytes = g.channels * Bits / 8;
    if (g.group == 1) {
      for (uint32_t kv = 0; kv < g.n_kv_heads; ++kv) {
        const uint8_t* first = codes + (e0 + size_t{kv} * g.head_dim) * Bits / 8;
        float* o = out + size_t{kv} * g.head_dim;
        if (Bits == 8 || uniform_x) {
          HeadInRegisters<Bits, true>(first, row_bytes, n, kv, l, g.quant_group, o, sc.ahead);
        } else {
          HeadInRegisters<Bits, false>(first, row_bytes, n, kv, l, g.quant_group, o, sc.ahead);
        }
      }
      return;
    }
    for (size_t r = 0; r < n; r += 8) {
      for (uint32_t kv = 0; kv < g.n_kv_heads; ++kv) {
        const uint8_t* first = codes + (e0 + r * g.channels + size_t{kv} * g.head_dim) * Bits / 8;
        const uint8_t* row[8];
        if (r + 8 <= n) {
#pragma GCC unroll 8
          for (size_t u = 0; u < 8; ++u) row[u] = first + u * row_bytes;
        } else {
          for (size_t u = 0; u < 8; ++u) {
            row[u] = first + (r + u < n ? u : n - 1 - r) * row_bytes;
            asm("" : "+r"(row[u]));  // Keeps the pointers scalar (vectorized, each is extracted).
          }
        }
        if (Bits == 8 || uniform_x) {
          AccumulateRows<Bits, true>(row, kv, r / 4, l);
        } else {
          AccumulateRows<Bits, false>(row, kv, r / 4, l);
        }
        qattn::AdvanceAhead<Vec16>(sc.ahead, std::min<size_t>(8, n - r));
      }
    }
    FlushSums<Bits>(l, g, out);
  }
};

}  // namespace

KV_QATTN_TARGET void AttendQuant(const QuantAttendArgs& args) {
  if (args.head_dim > kMaxHeadDim || args.head_dim % args.group_size != 0) {
    ref::AttendQuantQ15(args);
  } else {
    qattn::AttendOrFallBack<Vec16Vnni>(args, ref::AttendQuantQ15);
  }
}

}  // namespace kvtier::runtime::avx512vnni
