// The 16-lane float vector of the AVX-512 quantized attention kernels (quant_attention_simd.h),
// shared by quant_attention_avx512.cc and quant_attention_avx512vnni.cc. Include it only from
// those files, inside an unnamed namespace, after runtime/quant_attention_simd.h: its functions
// carry the including file's KV_QATTN_TARGET. INT8 codes widen with one vpmovzxbd from memory;
// the sixteen INT4 codes of eight bytes are the 4-bit fields of two 32-bit words, so a permute
// puts the low word in lanes 0-7 and the high word in lanes 8-15 and a variable shift by (0, 4,
// ..., 28) twice puts code i in lane i.
// The including file includes <immintrin.h> and <cstring> first.
#pragma once

#ifndef KV_QATTN_TARGET
#error "define KV_QATTN_TARGET before including runtime/quant_attention_vec16.h"
#endif

struct Vec16 {
  using F = __m512;
  static constexpr size_t kLanes = 16;
  static constexpr bool kIntScores = false;
  static constexpr bool kIntValues = false;

  static KV_QATTN_TARGET KV_QATTN_INLINE F Zero() { return _mm512_setzero_ps(); }
  static KV_QATTN_TARGET KV_QATTN_INLINE F Set1(float x) { return _mm512_set1_ps(x); }
  static KV_QATTN_TARGET KV_QATTN_INLINE F Load(const float* p) { return _mm512_loadu_ps(p); }
  static KV_QATTN_TARGET KV_QATTN_INLINE void Store(float* p, F x) { _mm512_storeu_ps(p, x); }
  static KV_QATTN_TARGET KV_QATTN_INLINE F Fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static KV_QATTN_TARGET KV_QATTN_INLINE F Mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static KV_QATTN_TARGET KV_QATTN_INLINE F Add(F a, F b) { return _mm512_add_ps(a, b); }
  static KV_QATTN_TARGET KV_QATTN_INLINE F Sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static KV_QATTN_TARGET KV_QATTN_INLINE F Max(F a, F b) { return _mm512_max_ps(a, b); }

  static KV_QATTN_TARGET KV_QATTN_INLINE F LoadU8(const uint8_t* p) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(bytes));
  }
  static KV_QATTN_TARGET KV_QATTN_INLINE F LoadU4(const uint8_t* p) {
    int64_t words = 0;
    std::memcpy(&words, p, sizeof(words));
    const __m512i low_high = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i shifts =
        _mm512_set_epi32(28, 24, 20, 16, 12, 8, 4, 0, 28, 24, 20, 16, 12, 8, 4, 0);
    const __m512i spread =
        _mm512_permutexvar_epi32(low_high, _mm512_castsi128_si512(_mm_cvtsi64_si128(words)));
    const __m512i fields = _mm512_srlv_epi32(spread, shifts);
    return _mm512_cvtepi32_ps(_mm512_and_si512(fields, _mm512_set1_epi32(0xf)));
  }
  static KV_QATTN_TARGET KV_QATTN_INLINE F LoadHalf(const std::byte* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }

  static KV_QATTN_TARGET KV_QATTN_INLINE __m256 Fold8(F x) {
    const __m256 high = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1));
    return _mm256_add_ps(_mm512_castps512_ps256(x), high);
  }
  static KV_QATTN_TARGET KV_QATTN_INLINE float HSum(F x) { return _mm512_reduce_add_ps(x); }
  static KV_QATTN_TARGET KV_QATTN_INLINE float HMax(F x) { return _mm512_reduce_max_ps(x); }

  static KV_QATTN_TARGET KV_QATTN_INLINE F RoundNearest(F x) {
    return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  static KV_QATTN_TARGET KV_QATTN_INLINE F Pow2(F n) {
    const __m512i biased = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_slli_epi32(biased, 23));
  }
  static KV_QATTN_TARGET KV_QATTN_INLINE F ZeroBelow(F e, F x, float limit) {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(limit), _CMP_NLT_UQ), e);
  }
};

