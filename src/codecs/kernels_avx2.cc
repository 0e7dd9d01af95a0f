// AVX2/F16C kernels. Every function carries a target attribute instead of the whole file being
// built with -mavx2, so nothing here runs unless GetKernels() saw the CPU features first. Tails
// shorter than a vector go to the scalar reference, which defines the results.
#include <immintrin.h>

#include "codecs/kernels.h"

#define KV_TARGET_AVX2 __attribute__((target("avx2,f16c,fma")))

namespace kvtier::codecs::avx2 {

namespace {

KV_TARGET_AVX2 inline __m256i LoadU(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}
KV_TARGET_AVX2 inline void StoreU(void* p, __m256i v) {
  _mm256_storeu_si256(static_cast<__m256i*>(p), v);
}

// 8 codes (bytes) -> 8 floats.
KV_TARGET_AVX2 inline __m256 CodesToFloat(const uint8_t* codes) {
  const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes));
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes));
}

// clamp(round_half_even((x - zero) * inv), 0, qmax) as int32 lanes.
KV_TARGET_AVX2 inline __m256i QuantizeVec(__m256 x, __m256 zero, __m256 inv, __m256 qmax) {
  const __m256 scaled = _mm256_mul_ps(_mm256_sub_ps(x, zero), inv);
  __m256 q = _mm256_round_ps(scaled, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  q = _mm256_min_ps(_mm256_max_ps(q, _mm256_setzero_ps()), qmax);
  return _mm256_cvttps_epi32(q);
}

// Four vectors of int32 codes (each 0..255) -> 32 bytes in element order.
KV_TARGET_AVX2 inline void StorePackedCodes(uint8_t* dst, __m256i a, __m256i b, __m256i c,
                                            __m256i d) {
  const __m256i ab = _mm256_packs_epi32(a, b);
  const __m256i cd = _mm256_packs_epi32(c, d);
  const __m256i bytes = _mm256_packus_epi16(ab, cd);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  StoreU(dst, _mm256_permutevar8x32_epi32(bytes, order));
}

// Eight int32 codes (each 0..255) -> 8 bytes in element order.
KV_TARGET_AVX2 inline void StoreEightCodes(uint8_t* dst, __m256i q) {
  const __m128i words = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(dst), _mm_packus_epi16(words, words));
}

// Codes of x[0, n) with one (zero, inv) pair: 32 at a time, then 8, then the reference.
KV_TARGET_AVX2 inline void QuantizeSpan(const float* x, size_t n, float zero, float inv_scale,
                                        float qmax, uint8_t* codes) {
  const __m256 z = _mm256_set1_ps(zero);
  const __m256 inv = _mm256_set1_ps(inv_scale);
  const __m256 top = _mm256_set1_ps(qmax);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    StorePackedCodes(codes + i, QuantizeVec(_mm256_loadu_ps(x + i), z, inv, top),
                     QuantizeVec(_mm256_loadu_ps(x + i + 8), z, inv, top),
                     QuantizeVec(_mm256_loadu_ps(x + i + 16), z, inv, top),
                     QuantizeVec(_mm256_loadu_ps(x + i + 24), z, inv, top));
  }
  for (; i + 8 <= n; i += 8) {
    StoreEightCodes(codes + i, QuantizeVec(_mm256_loadu_ps(x + i), z, inv, top));
  }
  ref::QuantizeUniform(x + i, n - i, zero, inv_scale, qmax, codes + i);
}

// Smallest and largest lane.
KV_TARGET_AVX2 inline float ReduceMin(__m256 v) {
  __m128 m = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_min_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_min_ss(m, _mm_movehdup_ps(m)));
}
KV_TARGET_AVX2 inline float ReduceMax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

}  // namespace

KV_TARGET_AVX2 void Shuffle16(const uint8_t* src, size_t n, uint8_t* dst) {
  // Within each 128-bit lane: even bytes (low halves) first, then odd bytes (high halves).
  const __m256i split = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0, 2,
                                         4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i a = _mm256_shuffle_epi8(LoadU(src + 2 * i), split);
    __m256i b = _mm256_shuffle_epi8(LoadU(src + 2 * i + 32), split);
    a = _mm256_permute4x64_epi64(a, 0xD8);  // [lo0 lo1 hi0 hi1] per 64-bit quarter.
    b = _mm256_permute4x64_epi64(b, 0xD8);
    StoreU(dst + i, _mm256_permute2x128_si256(a, b, 0x20));
    StoreU(dst + n + i, _mm256_permute2x128_si256(a, b, 0x31));
  }
  for (; i < n; ++i) {
    dst[i] = src[2 * i];
    dst[n + i] = src[2 * i + 1];
  }
}

KV_TARGET_AVX2 void Unshuffle16(const uint8_t* src, size_t n, uint8_t* dst) {
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i lo = LoadU(src + i);
    const __m256i hi = LoadU(src + n + i);
    const __m256i mix_lo = _mm256_unpacklo_epi8(lo, hi);  // Elements 0-7 | 16-23.
    const __m256i mix_hi = _mm256_unpackhi_epi8(lo, hi);  // Elements 8-15 | 24-31.
    StoreU(dst + 2 * i, _mm256_permute2x128_si256(mix_lo, mix_hi, 0x20));
    StoreU(dst + 2 * i + 32, _mm256_permute2x128_si256(mix_lo, mix_hi, 0x31));
  }
  for (; i < n; ++i) {
    dst[2 * i] = src[i];
    dst[2 * i + 1] = src[n + i];
  }
}

KV_TARGET_AVX2 void F16ToF32(const uint16_t* src, size_t n, float* dst) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  ref::F16ToF32(src + i, n - i, dst + i);
}

KV_TARGET_AVX2 void F32ToF16(const float* src, size_t n, uint16_t* dst) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  ref::F32ToF16(src + i, n - i, dst + i);
}

// 8 floats to BF16 as the scalar F32ToBF16 rounds them: NaNs keep their top bits and turn quiet
// (| 0x40), the rest round to nearest even by adding 0x7fff plus the kept LSB.
KV_TARGET_AVX2 inline __m256i Bf16Bits(__m256i x) {
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)),
                                         _mm256_set1_epi32(0x7f800000));
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(
      _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb), 16);
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(rounded, quiet, nan);
}

KV_TARGET_AVX2 void F32ToBF16(const float* src, size_t n, uint16_t* dst) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i a = Bf16Bits(_mm256_castps_si256(_mm256_loadu_ps(src + i)));
    const __m256i b = Bf16Bits(_mm256_castps_si256(_mm256_loadu_ps(src + i + 8)));
    // packus interleaves the 128-bit lanes (a0 b0 a1 b1); the permute puts them in order.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);
    StoreU(dst + i, packed);
  }
  ref::F32ToBF16(src + i, n - i, dst + i);
}

KV_TARGET_AVX2 void BF16ToF32(const uint16_t* src, size_t n, float* dst) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m256i bits = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(bits));
  }
  ref::BF16ToF32(src + i, n - i, dst + i);
}

KV_TARGET_AVX2 bool AllFinite(const float* x, size_t n) {
  const __m256i exp_mask = _mm256_set1_epi32(0x7f800000);
  __m256i bad = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i bits = _mm256_castps_si256(_mm256_loadu_ps(x + i));
    bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(_mm256_and_si256(bits, exp_mask), exp_mask));
  }
  if (_mm256_testz_si256(bad, bad) == 0) return false;
  return ref::AllFinite(x + i, n - i);
}

KV_TARGET_AVX2 void MinMaxAccumulate(const float* row, size_t n, float* mins, float* maxs) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(row + i);
    // min_ps(a, b) is a < b ? a : b, the same choice as the reference.
    _mm256_storeu_ps(mins + i, _mm256_min_ps(v, _mm256_loadu_ps(mins + i)));
    _mm256_storeu_ps(maxs + i, _mm256_max_ps(v, _mm256_loadu_ps(maxs + i)));
  }
  ref::MinMaxAccumulate(row + i, n - i, mins + i, maxs + i);
}

KV_TARGET_AVX2 void MinMax(const float* x, size_t n, float* min_out, float* max_out) {
  if (n < 16) {
    ref::MinMax(x, n, min_out, max_out);
    return;
  }
  __m256 mn = _mm256_loadu_ps(x);
  __m256 mx = mn;
  size_t i = 8;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    mn = _mm256_min_ps(v, mn);
    mx = _mm256_max_ps(v, mx);
  }
  alignas(32) float lanes_min[8];
  alignas(32) float lanes_max[8];
  _mm256_store_ps(lanes_min, mn);
  _mm256_store_ps(lanes_max, mx);
  float lo = lanes_min[0];
  float hi = lanes_max[0];
  for (size_t l = 1; l < 8; ++l) {
    lo = lanes_min[l] < lo ? lanes_min[l] : lo;
    hi = lanes_max[l] > hi ? lanes_max[l] : hi;
  }
  for (; i < n; ++i) {
    lo = x[i] < lo ? x[i] : lo;
    hi = x[i] > hi ? x[i] : hi;
  }
  *min_out = lo;
  *max_out = hi;
}

KV_TARGET_AVX2 void QuantizeUniform(const float* x, size_t n, float zero, float inv_scale,
                                    float qmax, uint8_t* codes) {
  QuantizeSpan(x, n, zero, inv_scale, qmax, codes);
}

KV_TARGET_AVX2 void QuantizeGroups(const float* x, size_t n, size_t group, const float* zero,
                                   const float* inv_scale, float qmax, uint8_t* codes) {
  for (size_t i = 0, j = 0; i < n; i += group, ++j) {
    QuantizeSpan(x + i, n - i < group ? n - i : group, zero[j], inv_scale[j], qmax, codes + i);
  }
}

KV_TARGET_AVX2 void MinMaxGroups(const float* x, size_t n, size_t group, float* mins,
                                 float* maxs) {
  for (size_t i = 0, j = 0; i < n; i += group, ++j) {
    const float* g = x + i;
    const size_t len = n - i < group ? n - i : group;
    float lo = g[0];
    float hi = g[0];
    size_t k = 0;
    if (len >= 8) {
      __m256 mn = _mm256_loadu_ps(g);
      __m256 mx = mn;
      for (k = 8; k + 8 <= len; k += 8) {
        const __m256 v = _mm256_loadu_ps(g + k);
        mn = _mm256_min_ps(v, mn);
        mx = _mm256_max_ps(v, mx);
      }
      lo = ReduceMin(mn);
      hi = ReduceMax(mx);
    }
    for (; k < len; ++k) {
      lo = g[k] < lo ? g[k] : lo;
      hi = g[k] > hi ? g[k] : hi;
    }
    mins[j] = lo;
    maxs[j] = hi;
  }
}

KV_TARGET_AVX2 void QuantParams(const float* mins, const float* maxs, size_t n, float qmax,
                                uint8_t* scale_le, uint8_t* zero_le, float* zero,
                                float* inv_scale) {
  const __m256 top = _mm256_set1_ps(qmax);
  const __m256 plus_zero = _mm256_setzero_ps();
  const __m256 one = _mm256_set1_ps(1.0f);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 mn = _mm256_loadu_ps(mins + i);
    const __m256 range = _mm256_add_ps(_mm256_sub_ps(_mm256_loadu_ps(maxs + i), mn), plus_zero);
    const __m128i scale16 = _mm256_cvtps_ph(_mm256_div_ps(range, top), _MM_FROUND_TO_NEAREST_INT);
    const __m128i zero16 = _mm256_cvtps_ph(_mm256_add_ps(mn, plus_zero), _MM_FROUND_TO_NEAREST_INT);
    const __m256 scale = _mm256_cvtph_ps(scale16);
    const __m256 positive = _mm256_cmp_ps(scale, plus_zero, _CMP_GT_OQ);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(scale_le + 2 * i), scale16);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(zero_le + 2 * i), zero16);
    _mm256_storeu_ps(zero + i, _mm256_cvtph_ps(zero16));
    _mm256_storeu_ps(inv_scale + i, _mm256_and_ps(_mm256_div_ps(one, scale), positive));
  }
  ref::QuantParams(mins + i, maxs + i, n - i, qmax, scale_le + 2 * i, zero_le + 2 * i, zero + i,
                   inv_scale + i);
}

KV_TARGET_AVX2 void QuantizePerChannel(const float* x, size_t n, const float* zero,
                                       const float* inv_scale, float qmax, uint8_t* codes) {
  const __m256 top = _mm256_set1_ps(qmax);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i q[4];
    for (size_t k = 0; k < 4; ++k) {
      const size_t j = i + 8 * k;
      q[k] = QuantizeVec(_mm256_loadu_ps(x + j), _mm256_loadu_ps(zero + j),
                         _mm256_loadu_ps(inv_scale + j), top);
    }
    StorePackedCodes(codes + i, q[0], q[1], q[2], q[3]);
  }
  ref::QuantizePerChannel(x + i, n - i, zero + i, inv_scale + i, qmax, codes + i);
}

KV_TARGET_AVX2 void DequantizeUniform(const uint8_t* codes, size_t n, float zero, float scale,
                                      float* out) {
  const __m256 z = _mm256_set1_ps(zero);
  const __m256 s = _mm256_set1_ps(scale);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    // A separate multiply and add (not FMA) so the result matches the reference exactly.
    _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_mul_ps(CodesToFloat(codes + i), s), z));
  }
  ref::DequantizeUniform(codes + i, n - i, zero, scale, out + i);
}

KV_TARGET_AVX2 void DequantizePerChannel(const uint8_t* codes, size_t n, const float* zero,
                                         const float* scale, float* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 scaled = _mm256_mul_ps(CodesToFloat(codes + i), _mm256_loadu_ps(scale + i));
    _mm256_storeu_ps(out + i, _mm256_add_ps(scaled, _mm256_loadu_ps(zero + i)));
  }
  ref::DequantizePerChannel(codes + i, n - i, zero + i, scale + i, out + i);
}

KV_TARGET_AVX2 void PackNibbles(const uint8_t* codes, size_t n, uint8_t* packed) {
  // maddubs: each 16-bit lane = even_code * 1 + odd_code * 16, at most 255.
  const __m256i weights = _mm256_set1_epi16(0x1001);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i pairs = _mm256_maddubs_epi16(LoadU(codes + i), weights);
    const __m256i bytes = _mm256_permute4x64_epi64(_mm256_packus_epi16(pairs, pairs), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(packed + i / 2), _mm256_castsi256_si128(bytes));
  }
  ref::PackNibbles(codes + i, n - i, packed + i / 2);
}

KV_TARGET_AVX2 void UnpackNibbles(const uint8_t* packed, size_t n, uint8_t* codes) {
  const __m128i low_mask = _mm_set1_epi8(0x0f);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(packed + i / 2));
    const __m128i lo = _mm_and_si128(b, low_mask);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), low_mask);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i), _mm_unpacklo_epi8(lo, hi));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i + 16), _mm_unpackhi_epi8(lo, hi));
  }
  ref::UnpackNibbles(packed + i / 2, n - i, codes + i);
}

}  // namespace kvtier::codecs::avx2
