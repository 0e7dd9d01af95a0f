// AVX-512 VNNI instantiation of the quantized attention kernel (quant_attention_simd.h): the
// 16-lane float vector (Vec16, quant_attention_vec16.h) for the softmax and the values, integer
// dot products for the scores (quant_attention.h, "Integer scores").
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
// Values: INT4 codes load as floats 1 + code / 16 in three instructions (a broadcast of their
// eight bytes, vpmultishiftqb to put each nibble at bits 19-22 of its lane, one vpternlogd to keep
// those bits and set the exponent of 1.0), against five for the shift-and-convert of Vec16; the
// value parameters absorb the change (code * s + z = f * 16 s + (z - 16 s)).
//
// Shapes whose head_dim or group size is not a multiple of 16 go to ref::AttendQuantQ15, so every
// shape has the integer-score semantics; so does head_dim over 256.
#include <immintrin.h>

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

// vpmultishiftqb's control for qword k of a broadcast INT4 word (Vec16Vnni::LoadU4): byte 2
// takes the bits from 8k - 3 (mod 64), byte 6 from 8k + 1.
constexpr int64_t NibbleControl(int k) {
  return (int64_t{8 * k + 1} << 48) | (int64_t{(8 * k - 3) & 63} << 16);
}

struct Vec16Vnni : Vec16 {
  static constexpr bool kIntScores = true;
  static constexpr bool kU4Biased = true;

  static KV_QATTN_TARGET KV_QATTN_INLINE F LoadU4(const uint8_t* p) {
    int64_t word = 0;
    std::memcpy(&word, p, sizeof(word));
    // Lane 2k + j (j = 0, 1) takes nibble 2k + j, at bit 8k + 4j of the word: its byte 2 gets the
    // eight bits from bit 8k + 4j - 3 (mod 64), so the nibble lands at bits 19-22.
    const __m512i control = _mm512_set_epi64(NibbleControl(7), NibbleControl(6), NibbleControl(5),
                                             NibbleControl(4), NibbleControl(3), NibbleControl(2),
                                             NibbleControl(1), NibbleControl(0));
    const __m512i fields = _mm512_multishift_epi64_epi8(control, _mm512_set1_epi64(word));
    // (fields & mantissa bits 19-22) | 1.0f: 0xea is (A & B) | C.
    return _mm512_castsi512_ps(_mm512_ternarylogic_epi32(
        fields, _mm512_set1_epi32(0x0078'0000), _mm512_set1_epi32(0x3f80'0000), 0xea));
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
  if (args.head_dim > kMaxHeadDim) {
    ref::AttendQuantQ15(args);
  } else {
    qattn::AttendOrFallBack<Vec16Vnni>(args, ref::AttendQuantQ15);
  }
}

}  // namespace kvtier::runtime::avx512vnni
