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
// Values (quant_attention.h, "Integer weights"): after the softmax, a step's weights are
// quantized to u8 per query head and value group (QuantizeWeights, 16 (head, group) pairs per
// vector) and packed four tokens to a 32-bit word; four rows of codes are interleaved in
// registers (two rounds of unpacks) so that each 32-bit lane holds four tokens of one channel,
// and vpdpbusd sums weight x code into int32 per channel, 64 products per instruction, for every
// query head of the KV head. The sums stay in int32 for the whole step (at most 64 rows) and
// are turned into floats once, in channel order again (AddSums).
//
// Shapes the integer weights do not take (IntValuesTake) go to ref::AttendQuantQ15P8, so every
// shape has the same semantics.
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

// The integer P.V scratch (qattn::IntValueLayout), carved. Pair k is query head k / gph and the
// value group its channels [j * hc, (j + 1) * hc) fall in, j = k % gph (gph groups per head of
// hc channels). Pairs are handled 16 at a time (a window); a window's heads and groups lie within
// 16 of its first head (hbase) and its smallest group (gbase), so one permute spreads them.
struct IntValues {
  qattn::IntValueLayout l;
  size_t windows;      // ceil(pairs / 16).
  int32_t* acc;        // [n_heads][acc_stride] a step's sums A, in the tiles' lane order.
  uint32_t* wt;        // [kStep / 4][pairs_padded] the weights of a quad of rows: 4 bytes.
  float* pt;           // [kStep][pt_stride] the step's weights p, row by row.
  float* sigma;        // [GV + 16] the step's largest value scale per group.
  float* kk;           // [pairs_padded] 255 / (largest weight * sigma): weight to code.
  float* f;            // [pairs_padded] its inverse: A to value.
  float* zt;           // [pairs_padded] sum_t p_t (zero_t + mid scale_t).
  int32_t* wsum;       // [pairs_padded] sum_t w_t (INT4: A's offset).
  int32_t* hrel;       // [pairs_padded] head - hbase of the pair's window.
  int32_t* grel;       // [pairs_padded] group - gbase.
  int32_t* hbase;      // [windows]
  int32_t* gbase;      // [windows]
  float* pmax;         // [n_heads] the step's largest weight.
  int32_t* lane_pair;  // [4][16] per chunk (INT8) or half chunk (INT4, 2 per chunk): each lane's
                       // pair - the pair of the chunk's first channel.
};

inline IntValues CarveIntValues(const QuantAttendArgs& a, const qattn::Geometry& g,
                                float* p) {
  IntValues v;
  v.l = qattn::IntValueLayoutOf(a.n_heads, g.head_dim, g.channels, g.quant_group);
  v.windows = (v.l.pairs + 15) / 16;
  const size_t pp = v.l.pairs_padded;
  v.acc = reinterpret_cast<int32_t*>(p);
  p += a.n_heads * v.l.acc_stride;
  v.wt = reinterpret_cast<uint32_t*>(p);
  p += qattn::kStep / 4 * pp;
  for (float** part : {&v.kk, &v.f, &v.zt}) {
    *part = p;
    p += pp;
  }
  for (int32_t** part : {&v.wsum, &v.hrel, &v.grel, &v.hbase, &v.gbase}) {
    *part = reinterpret_cast<int32_t*>(p);
    p += pp;
  }
  v.pt = p;
  p += qattn::kStep * v.l.pt_stride;
  v.sigma = p;
  p += g.value_groups + 16;
  v.pmax = p;
  p += a.n_heads;
  v.lane_pair = reinterpret_cast<int32_t*>(p);
  return v;
}

// The value group of pair k.
inline size_t PairGroup(const QuantAttendArgs& a, const qattn::IntValueLayout& l, size_t k) {
  const size_t h = k / l.groups_per_head;
  const size_t c = h / (a.n_heads / a.n_kv_heads) * a.head_dim +
                   k % l.groups_per_head * l.head_channels;
  return c / a.group_size;
}

// Whether the integer P.V kernel takes the shape: 16-channel blocks inside one value group, a
// head's channels in whole groups (or inside one), each window's groups within 16.
bool IntValuesTake(const QuantAttendArgs& a) {
  if (a.head_dim % 16 != 0 || a.group_size % 16 != 0 || a.head_dim > kMaxHeadDim) return false;
  if (a.head_dim % a.group_size != 0 && a.group_size % a.head_dim != 0) return false;
  const qattn::IntValueLayout l = qattn::IntValueLayoutOf(
      a.n_heads, a.head_dim, size_t{a.n_kv_heads} * a.head_dim, a.group_size);
  for (size_t w = 0; w < l.pairs; w += 16) {
    size_t lo = PairGroup(a, l, w), hi = lo;
    for (size_t k = w; k < std::min(l.pairs, w + 16); ++k) {
      lo = std::min(lo, PairGroup(a, l, k));
      hi = std::max(hi, PairGroup(a, l, k));
    }
    if (hi - lo >= 16) return false;
  }
  return true;
}

// Transposes the 128-bit blocks of a0..a3: output m holds block m of a0, a1, a2, a3.
KV_QATTN_TARGET KV_QATTN_INLINE void TransposeBlocks(__m512i* a) {
  const __m512i t0 = _mm512_shuffle_i32x4(a[0], a[1], _MM_SHUFFLE(1, 0, 1, 0));
  const __m512i t1 = _mm512_shuffle_i32x4(a[2], a[3], _MM_SHUFFLE(1, 0, 1, 0));
  const __m512i t2 = _mm512_shuffle_i32x4(a[0], a[1], _MM_SHUFFLE(3, 2, 3, 2));
  const __m512i t3 = _mm512_shuffle_i32x4(a[2], a[3], _MM_SHUFFLE(3, 2, 3, 2));
  a[0] = _mm512_shuffle_i32x4(t0, t1, _MM_SHUFFLE(2, 0, 2, 0));
  a[1] = _mm512_shuffle_i32x4(t0, t1, _MM_SHUFFLE(3, 1, 3, 1));
  a[2] = _mm512_shuffle_i32x4(t2, t3, _MM_SHUFFLE(2, 0, 2, 0));
  a[3] = _mm512_shuffle_i32x4(t2, t3, _MM_SHUFFLE(3, 1, 3, 1));
}

// Four rows of 64 code bytes to four vectors whose dword 4L + i holds byte 16L + 4k + i of rows
// 0, 1, 2, 3 (vector k): four tokens of one byte position per 32-bit lane, as vpdpbusd sums.
KV_QATTN_TARGET KV_QATTN_INLINE void InterleaveRows(const __m512i* r, __m512i* t) {
  const __m512i a = _mm512_unpacklo_epi8(r[0], r[1]);
  const __m512i b = _mm512_unpackhi_epi8(r[0], r[1]);
  const __m512i c = _mm512_unpacklo_epi8(r[2], r[3]);
  const __m512i d = _mm512_unpackhi_epi8(r[2], r[3]);
  t[0] = _mm512_unpacklo_epi16(a, c);
  t[1] = _mm512_unpackhi_epi16(a, c);
  t[2] = _mm512_unpacklo_epi16(b, d);
  t[3] = _mm512_unpackhi_epi16(b, d);
}

struct Vec16Vnni : Vec16 {
  static constexpr bool kIntScores = true;
  static constexpr bool kIntValues = true;

  // The pair tables of the call (IntValues).
  static KV_QATTN_TARGET void IntValueSetUp(const QuantAttendArgs& a, const qattn::Geometry& g,
                                            const qattn::Scratch& sc) {
    const IntValues v = CarveIntValues(a, g, sc.int_values);
    const size_t gph = v.l.groups_per_head;
    for (size_t w = 0; w < v.windows; ++w) {
      const size_t first = 16 * w;
      const size_t last = std::min(v.l.pairs, first + 16);
      size_t gbase = PairGroup(a, v.l, first);
      for (size_t k = first; k < last; ++k) gbase = std::min(gbase, PairGroup(a, v.l, k));
      v.hbase[w] = static_cast<int32_t>(first / gph);
      v.gbase[w] = static_cast<int32_t>(gbase);
      for (size_t k = first; k < first + 16; ++k) {
        const bool real = k < last;
        v.hrel[k] = real ? static_cast<int32_t>(k / gph - first / gph) : 0;
        v.grel[k] = real ? static_cast<int32_t>(PairGroup(a, v.l, k) - gbase) : 0;
      }
    }
    // Lane -> pair offsets: INT8 chunk c (64 channels from d0 = 64 c), lane 4L + i serves
    // channels d0 + 16 L + [0, 16); INT4 half chunk 2c + u (128 channels from d0 = 128 c), lane
    // 4L + i serves channels d0 + 32 L + 16 u + [0, 16).
    const size_t hc = v.l.head_channels;
    for (size_t vec = 0; vec < 4; ++vec) {
      const size_t d0 = a.bits == 8 ? 64 * vec : 128 * (vec / 2);
      for (size_t lane = 0; lane < 16; ++lane) {
        const size_t block = a.bits == 8 ? 16 * (lane / 4) : 32 * (lane / 4) + 16 * (vec % 2);
        v.lane_pair[16 * vec + lane] = static_cast<int32_t>((d0 + block) / hc - d0 / hc);
      }
    }
  }

  // A step's quantized weights (IntValues: wt, kk, f, zt, wsum), from its weights p in sc.s.
  template <uint32_t Bits>
  static KV_QATTN_TARGET void QuantizeWeights(const QuantAttendArgs& a,
                                              const qattn::QuantBlockView& view, size_t r0,
                                              size_t n, const qattn::Geometry& g,
                                              const qattn::Scratch& sc, const IntValues& v) {
    const size_t gv = g.value_groups;
    const size_t quads = (n + 3) / 4;
    const size_t pp = v.l.pairs_padded;
    const size_t gph = v.l.groups_per_head;
    // The largest value scale of each group over the step's rows.
    for (size_t g0 = 0; g0 < gv; g0 += 16) {
      const __mmask16 mask = gv - g0 >= 16 ? __mmask16{0xffff} : __mmask16((1u << (gv - g0)) - 1);
      __m512 m = _mm512_setzero_ps();
      for (size_t t = 0; t < n; ++t) {
        const std::byte* row = view.v_scale + 2 * ((r0 + t) * gv + g0);
        m = _mm512_max_ps(m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, row)));
      }
      _mm512_storeu_ps(v.sigma + g0, m);
    }
    for (size_t h = 0; h < a.n_heads; ++h) {
      const float* p = sc.s + h * qattn::kStep;
      v.pmax[h] = qattn::MaxN<Vec16>(p, n);
      for (size_t t = 0; t < 4 * quads; ++t) v.pt[t * v.l.pt_stride + h] = t < n ? p[t] : 0.0f;
    }
    for (size_t k = 0; k < pp; ++k) {
      const size_t w = k / 16;
      const float d = k < v.l.pairs ? v.pmax[k / gph] * v.sigma[v.gbase[w] + v.grel[k]] : 0.0f;
      v.kk[k] = d > 0.0f ? 255.0f / d : 0.0f;
      v.f[k] = d / 255.0f;
    }
    constexpr float kMid = Bits == 8 ? 128.0f : 8.0f;
    for (size_t w = 0; w < v.windows; ++w) {
      const size_t gbase = static_cast<size_t>(v.gbase[w]);
      const __mmask16 gmask =
          gv - gbase >= 16 ? __mmask16{0xffff} : __mmask16((1u << (gv - gbase)) - 1);
      const __m512i hrel = _mm512_loadu_si512(v.hrel + 16 * w);
      const __m512i grel = _mm512_loadu_si512(v.grel + 16 * w);
      const __m512 kk = _mm512_loadu_ps(v.kk + 16 * w);
      const float* pt = v.pt + v.hbase[w];
      __m512 zt = _mm512_setzero_ps();
      __m512i wsum = _mm512_setzero_si512();
      for (size_t quad = 0; quad < quads; ++quad) {
        __m512i dwords = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (size_t i = 0; i < 4; ++i) {
          const size_t t = 4 * quad + i;
          const size_t row = (r0 + std::min(t, n - 1)) * gv + gbase;  // Rows past n weigh 0.
          const __m512 p = _mm512_permutexvar_ps(hrel, _mm512_loadu_ps(pt + t * v.l.pt_stride));
          const __m512 scale = _mm512_permutexvar_ps(
              grel, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(gmask, view.v_scale + 2 * row)));
          const __m512 zero = _mm512_permutexvar_ps(
              grel, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(gmask, view.v_zero + 2 * row)));
          const __m512i weight = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_mul_ps(p, scale), kk));
          wsum = _mm512_add_epi32(wsum, weight);
          zt = _mm512_fmadd_ps(p, _mm512_fmadd_ps(scale, _mm512_set1_ps(kMid), zero), zt);
          dwords = _mm512_or_si512(dwords, _mm512_slli_epi32(weight, static_cast<unsigned>(8 * i)));
        }
        _mm512_storeu_si512(v.wt + quad * pp + 16 * w, dwords);
      }
      _mm512_storeu_ps(v.zt + 16 * w, zt);
      _mm512_storeu_si512(v.wsum + 16 * w, wsum);
    }
  }

  // Adds rows [r, r + 4 quads) of one KV head (codes of the chunk at d0 of row t at
  // codes + (t * C + c0 + d0) * Bits / 8) to the sums of H query heads from h.
  template <uint32_t Bits, size_t H>
  static KV_QATTN_TARGET KV_QATTN_INLINE void ValueTile(const uint8_t* codes, size_t c0,
                                                        size_t d0, size_t chunk, size_t h,
                                                        size_t r, size_t quads, size_t n,
                                                        const qattn::Geometry& g,
                                                        const IntValues& v) {
    constexpr size_t kAcc = Bits == 8 ? 4 : 8;
    const size_t pp = v.l.pairs_padded;
    __m512i acc[H * kAcc];
#pragma GCC unroll 4
    for (size_t i = 0; i < H; ++i) {
#pragma GCC unroll 8
      for (size_t k = 0; k < kAcc; ++k) {
        acc[i * kAcc + k] =
            _mm512_loadu_si512(v.acc + (h + i) * v.l.acc_stride + chunk * 16 * kAcc + 16 * k);
      }
    }
    const size_t bytes_left = (g.head_dim - d0) * Bits / 8;
    const __mmask64 mask = FirstBytes(bytes_left);
    const size_t lanes_per_vec = Bits == 8 ? 1 : 2;
    const __m512i lane_lo = _mm512_loadu_si512(v.lane_pair + 16 * lanes_per_vec * chunk);
    const __m512i lane_hi =
        _mm512_loadu_si512(v.lane_pair + 16 * (lanes_per_vec * chunk + lanes_per_vec - 1));
    size_t pair0[H];
#pragma GCC unroll 4
    for (size_t i = 0; i < H; ++i) {
      pair0[i] = (h + i) * v.l.groups_per_head + d0 / v.l.head_channels;
    }
    for (size_t quad = 0; quad < quads; ++quad) {
      __m512i rows[4], t[4];
#pragma GCC unroll 4
      for (size_t i = 0; i < 4; ++i) {
        const size_t row = std::min(r + 4 * quad + i, n - 1);  // Rows past n weigh 0.
        rows[i] = _mm512_maskz_loadu_epi8(mask, codes + (row * g.channels + c0 + d0) * Bits / 8);
        if constexpr (Bits == 8) {  // code - 128 as int8.
          rows[i] = _mm512_xor_si512(rows[i], _mm512_set1_epi8(static_cast<char>(0x80)));
        }
      }
      InterleaveRows(rows, t);
      const uint32_t* wrow = v.wt + (r / 4 + quad) * pp;
#pragma GCC unroll 4
      for (size_t i = 0; i < H; ++i) {
        const __m512i wq = _mm512_loadu_si512(wrow + pair0[i]);
        const __m512i w_lo = _mm512_permutexvar_epi32(lane_lo, wq);
        if constexpr (Bits == 8) {
#pragma GCC unroll 4
          for (size_t k = 0; k < 4; ++k) {
            acc[i * kAcc + k] = _mm512_dpbusd_epi32(acc[i * kAcc + k], w_lo, t[k]);
          }
        } else {
          const __m512i w_hi = _mm512_permutexvar_epi32(lane_hi, wq);
          const __m512i nibble = _mm512_set1_epi8(0x0f);
#pragma GCC unroll 4
          for (size_t k = 0; k < 4; ++k) {
            const __m512i w = k < 2 ? w_lo : w_hi;
            const __m512i even = _mm512_and_si512(t[k], nibble);
            const __m512i odd = _mm512_and_si512(_mm512_srli_epi16(t[k], 4), nibble);
            acc[i * kAcc + k] = _mm512_dpbusd_epi32(acc[i * kAcc + k], w, even);
            acc[i * kAcc + 4 + k] = _mm512_dpbusd_epi32(acc[i * kAcc + 4 + k], w, odd);
          }
        }
      }
    }
#pragma GCC unroll 4
    for (size_t i = 0; i < H; ++i) {
#pragma GCC unroll 8
      for (size_t k = 0; k < kAcc; ++k) {
        _mm512_storeu_si512(v.acc + (h + i) * v.l.acc_stride + chunk * 16 * kAcc + 16 * k,
                            acc[i * kAcc + k]);
      }
    }
  }

  // H query heads from h over every chunk of their KV head.
  template <uint32_t Bits, size_t H>
  static KV_QATTN_TARGET KV_QATTN_INLINE void ValueHeads(const uint8_t* codes, size_t c0,
                                                         size_t h, size_t r, size_t quads,
                                                         size_t n, const qattn::Geometry& g,
                                                         const IntValues& v) {
    constexpr size_t kChunk = Bits == 8 ? 64 : 128;
    for (size_t d0 = 0, chunk = 0; d0 < g.head_dim; d0 += kChunk, ++chunk) {
      ValueTile<Bits, H>(codes, c0, d0, chunk, h, r, quads, n, g, v);
    }
  }

  // A step's value pass (quant_attention.h, "Integer weights").
  template <uint32_t Bits>
  static KV_QATTN_TARGET void IntValueStep(const QuantAttendArgs& a,
                                           const qattn::QuantBlockView& view, size_t r0, size_t n,
                                           size_t run_rows_left, const qattn::Geometry& g,
                                           const qattn::Scratch& sc) {
    const IntValues v = CarveIntValues(a, g, sc.int_values);
    QuantizeWeights<Bits>(a, view, r0, n, g, sc, v);
    std::fill_n(v.acc, a.n_heads * v.l.acc_stride, 0);
    const uint8_t* codes = view.v_codes + r0 * g.channels * Bits / 8;
    constexpr size_t kRows = 8;
    constexpr size_t kMaxTile = Bits == 8 ? 4 : 2;
    for (size_t r = 0; r < n; r += kRows) {
      const size_t quads = (std::min(kRows, n - r) + 3) / 4;
      const size_t ahead = std::min(kRows, run_rows_left - std::min(run_rows_left, r + kRows));
      for (uint32_t kv = 0; kv < g.n_kv_heads; ++kv) {
        const size_t c0 = size_t{kv} * g.head_dim;
        for (size_t k = 0; k < ahead; ++k) {
          qattn::PrefetchCodes<Bits>(codes, (r + kRows + k) * g.channels + c0, g.head_dim);
        }
        size_t h = size_t{kv} * g.group;
        const size_t h_end = h + g.group;
        if constexpr (kMaxTile == 4) {
          for (; h + 4 <= h_end; h += 4) ValueHeads<Bits, 4>(codes, c0, h, r, quads, n, g, v);
        }
        for (; h + 2 <= h_end; h += 2) ValueHeads<Bits, 2>(codes, c0, h, r, quads, n, g, v);
        if (h < h_end) ValueHeads<Bits, 1>(codes, c0, h, r, quads, n, g, v);
      }
    }
    AddSums<Bits>(a, g, v);
  }

  // out += float(A - offset) * f + zt per channel, the sums put back in channel order.
  template <uint32_t Bits>
  static KV_QATTN_TARGET void AddSums(const QuantAttendArgs& a, const qattn::Geometry& g,
                                      const IntValues& v) {
    constexpr size_t kAcc = Bits == 8 ? 4 : 8;
    constexpr size_t kChunk = 16 * kAcc;
    for (size_t h = 0; h < a.n_heads; ++h) {
      for (size_t d0 = 0; d0 < g.head_dim; d0 += kChunk) {
        const int32_t* src = v.acc + h * v.l.acc_stride + d0;
        __m512i x[kAcc];  // x[m]: channels d0 + 16 m + [0, 16).
        if constexpr (Bits == 8) {
          for (size_t k = 0; k < 4; ++k) x[k] = _mm512_loadu_si512(src + 16 * k);
          TransposeBlocks(x);
        } else {
          // Dword 4L + i of E_k (odd codes: O_k) is channel 32 L + 8 k + 2 i (+ 1): interleaved,
          // block L of lo_k holds channels 32 L + 8 k + [0, 4) and of hi_k + [4, 8).
          __m512i lo[4], hi[4];
          for (size_t k = 0; k < 4; ++k) {
            const __m512i even = _mm512_loadu_si512(src + 16 * k);
            const __m512i odd = _mm512_loadu_si512(src + 64 + 16 * k);
            lo[k] = _mm512_unpacklo_epi32(even, odd);
            hi[k] = _mm512_unpackhi_epi32(even, odd);
          }
          // Block L of (lo_2u, hi_2u, lo_2u+1, hi_2u+1) is channels 32 L + 16 u + [0, 16).
          for (size_t u = 0; u < 2; ++u) {
            __m512i y[4] = {lo[2 * u], hi[2 * u], lo[2 * u + 1], hi[2 * u + 1]};
            TransposeBlocks(y);
            for (size_t m = 0; m < 4; ++m) x[2 * m + u] = y[m];
          }
        }
        for (size_t m = 0; m < kAcc && d0 + 16 * m < g.head_dim; ++m) {
          const size_t k = h * v.l.groups_per_head + (d0 + 16 * m) / v.l.head_channels;
          __m512i sums = x[m];
          if constexpr (Bits == 4) {  // Codes 0..15 were summed: A = sum w (code - 8).
            sums = _mm512_sub_epi32(sums, _mm512_set1_epi32(8 * v.wsum[k]));
          }
          float* out = a.out + h * g.head_dim + d0 + 16 * m;
          _mm512_storeu_ps(out, _mm512_add_ps(_mm512_loadu_ps(out),
                                              _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums),
                                                              _mm512_set1_ps(v.f[k]),
                                                              _mm512_set1_ps(v.zt[k]))));
        }
      }
    }
  }

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
};

}  // namespace

KV_QATTN_TARGET void AttendQuant(const QuantAttendArgs& args) {
  if (!IntValuesTake(args)) {
    ref::AttendQuantQ15P8(args);
  } else {
    qattn::AttendOrFallBack<Vec16Vnni>(args, ref::AttendQuantQ15P8);
  }
}

}  // namespace kvtier::runtime::avx512vnni
