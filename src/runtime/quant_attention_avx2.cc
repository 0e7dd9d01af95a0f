// AVX2/F16C/FMA instantiation of the quantized attention kernel (quant_attention_simd.h): 8
// float lanes. INT8 codes widen with one vpmovzxbd from memory; the eight INT4 codes of four
// bytes are the eight 4-bit fields of one 32-bit word, so a broadcast and a variable shift by
// (0, 4, ..., 28) put code i in lane i (element 2i is the low nibble of byte i).
#include <immintrin.h>

#include <cstring>

#define KV_QATTN_TARGET __attribute__((target("avx2,f16c,fma")))
#include "runtime/quant_attention_simd.h"

namespace kvtier::runtime::avx2 {
namespace {

struct Vec8 {
  using F = __m256;
  static constexpr size_t kLanes = 8;
  static constexpr bool kIntScores = false;
  static constexpr bool kIntValues = false;

  static KV_QATTN_TARGET KV_QATTN_INLINE F Zero() { return _mm256_setzero_ps(); }
  static KV_QATTN_TARGET KV_QATTN_INLINE F Set1(float x) { return _mm256_set1_ps(x); }
  static KV_QATTN_TARGET KV_QATTN_INLINE F Load(const float* p) { return _mm256_loadu_ps(p); }
  static KV_QATTN_TARGET KV_QATTN_INLINE void Store(float* p, F x) { _mm256_storeu_ps(p, x); }
  static KV_QATTN_TARGET KV_QATTN_INLINE F Fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static KV_QATTN_TARGET KV_QATTN_INLINE F Mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static KV_QATTN_TARGET KV_QATTN_INLINE F Add(F a, F b) { return _mm256_add_ps(a, b); }
  static KV_QATTN_TARGET KV_QATTN_INLINE F Sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static KV_QATTN_TARGET KV_QATTN_INLINE F Max(F a, F b) { return _mm256_max_ps(a, b); }

  static KV_QATTN_TARGET KV_QATTN_INLINE F LoadU8(const uint8_t* p) {
    const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes));
  }
  static KV_QATTN_TARGET KV_QATTN_INLINE F LoadU4(const uint8_t* p) {
    int32_t word = 0;
    std::memcpy(&word, p, sizeof(word));
    const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    const __m256i fields = _mm256_srlv_epi32(_mm256_set1_epi32(word), shifts);
    return _mm256_cvtepi32_ps(_mm256_and_si256(fields, _mm256_set1_epi32(0xf)));
  }
  static KV_QATTN_TARGET KV_QATTN_INLINE F LoadHalf(const std::byte* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }

  static KV_QATTN_TARGET KV_QATTN_INLINE __m256 Fold8(F x) { return x; }
  static KV_QATTN_TARGET KV_QATTN_INLINE float HSum(F x) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
  }
  static KV_QATTN_TARGET KV_QATTN_INLINE float HMax(F x) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
  }

  static KV_QATTN_TARGET KV_QATTN_INLINE F RoundNearest(F x) {
    return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  static KV_QATTN_TARGET KV_QATTN_INLINE F Pow2(F n) {
    const __m256i biased = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(biased, 23));
  }
  static KV_QATTN_TARGET KV_QATTN_INLINE F ZeroBelow(F e, F x, float limit) {
    return _mm256_and_ps(e, _mm256_cmp_ps(x, _mm256_set1_ps(limit), _CMP_NLT_UQ));
  }
};

}  // namespace

KV_QATTN_TARGET void AttendQuant(const QuantAttendArgs& args) {
  qattn::AttendOrFallBack<Vec8>(args, ref::AttendQuant);
}

}  // namespace kvtier::runtime::avx2
