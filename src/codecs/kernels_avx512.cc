// AVX-512 kernels (F, BW and VL, with AVX2/F16C/FMA). As in kernels_avx2.cc, every function
// carries a target attribute, so nothing here runs unless GetKernels() saw the CPU features first.
// Tails are handled with masked loads and stores of the same vector code: every lane is computed
// on its own, so a masked lane gives what a full vector (and the scalar reference) would.
#include <immintrin.h>

#include "codecs/kernels.h"

#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's AVX-512 intrinsics start some results from _mm512_undefined_*(), a variable
// initialised with itself, which -Wmaybe-uninitialized reports wherever one is inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#define KV_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,f16c,fma")))

namespace kvtier::codecs::avx512 {

namespace {

// Lanes [0, n) of a 16-lane vector, n <= 16.
KV_TARGET_AVX512 inline __mmask16 Lanes(size_t n) {
  return static_cast<__mmask16>((1u << n) - 1u);
}

// clamp(round_half_even((x - zero) * inv), 0, qmax) as 16 bytes.
KV_TARGET_AVX512 inline __m128i QuantizeVec(__m512 x, __m512 zero, __m512 inv, __m512 qmax) {
  const __m512 scaled = _mm512_mul_ps(_mm512_sub_ps(x, zero), inv);
  __m512 q = _mm512_roundscale_ps(scaled, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  q = _mm512_min_ps(_mm512_max_ps(q, _mm512_setzero_ps()), qmax);
  return _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(q));
}

// 16 codes (bytes) -> 16 floats; the masked form reads nothing outside `m`.
KV_TARGET_AVX512 inline __m512 CodesToFloat(const uint8_t* codes) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes));
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(bytes));
}
KV_TARGET_AVX512 inline __m512 CodesToFloat(const uint8_t* codes, __mmask16 m) {
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, codes)));
}

// Codes of x[0, n) with one (zero, inv) pair.
KV_TARGET_AVX512 inline void QuantizeSpan(const float* x, size_t n, __m512 z, __m512 inv,
                                          __m512 top, uint8_t* codes) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i),
                     QuantizeVec(_mm512_loadu_ps(x + i), z, inv, top));
  }
  if (i < n) {
    const __mmask16 m = Lanes(n - i);
    _mm_mask_storeu_epi8(codes + i, m, QuantizeVec(_mm512_maskz_loadu_ps(m, x + i), z, inv, top));
  }
}

}  // namespace

KV_TARGET_AVX512 void F16ToF32(const uint16_t* src, size_t n, float* dst) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(h));
  }
  if (i < n) {
    const __mmask16 m = Lanes(n - i);
    _mm512_mask_storeu_ps(dst + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, src + i)));
  }
}

KV_TARGET_AVX512 void F32ToF16(const float* src, size_t n, uint16_t* dst) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), h);
  }
  if (i < n) {
    const __mmask16 m = Lanes(n - i);
    const __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_mask_storeu_epi16(dst + i, m, h);
  }
}

KV_TARGET_AVX512 void BF16ToF32(const uint16_t* src, size_t n, float* dst) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm512_storeu_si512(dst + i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  if (i < n) {
    const __mmask16 m = Lanes(n - i);
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, src + i));
    _mm512_mask_storeu_ps(dst + i, m, _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16)));
  }
}

KV_TARGET_AVX512 bool AllFinite(const float* x, size_t n) {
  const __m512i exp_mask = _mm512_set1_epi32(0x7f800000);
  __mmask16 bad = 0;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i bits = _mm512_and_si512(_mm512_castps_si512(_mm512_loadu_ps(x + i)), exp_mask);
    bad = static_cast<__mmask16>(bad | _mm512_cmpeq_epi32_mask(bits, exp_mask));
  }
  if (i < n) {
    const __mmask16 m = Lanes(n - i);
    const __m512i bits =
        _mm512_and_si512(_mm512_castps_si512(_mm512_maskz_loadu_ps(m, x + i)), exp_mask);
    bad = static_cast<__mmask16>(bad | _mm512_mask_cmpeq_epi32_mask(m, bits, exp_mask));
  }
  return bad == 0;
}

KV_TARGET_AVX512 void MinMaxAccumulate(const float* row, size_t n, float* mins, float* maxs) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(row + i);
    // min_ps(a, b) is a < b ? a : b, the same choice as the reference.
    _mm512_storeu_ps(mins + i, _mm512_min_ps(v, _mm512_loadu_ps(mins + i)));
    _mm512_storeu_ps(maxs + i, _mm512_max_ps(v, _mm512_loadu_ps(maxs + i)));
  }
  if (i < n) {
    const __mmask16 m = Lanes(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(m, row + i);
    _mm512_mask_storeu_ps(mins + i, m, _mm512_min_ps(v, _mm512_maskz_loadu_ps(m, mins + i)));
    _mm512_mask_storeu_ps(maxs + i, m, _mm512_max_ps(v, _mm512_maskz_loadu_ps(m, maxs + i)));
  }
}

KV_TARGET_AVX512 void MinMaxGroups(const float* x, size_t n, size_t group, float* mins,
                                   float* maxs) {
  for (size_t i = 0, j = 0; i < n; i += group, ++j) {
    const float* g = x + i;
    const size_t len = n - i < group ? n - i : group;
    // Lanes start at the group's first element, so lanes a tail leaves out change nothing.
    __m512 mn = _mm512_set1_ps(g[0]);
    __m512 mx = mn;
    size_t k = 0;
    for (; k + 16 <= len; k += 16) {
      const __m512 v = _mm512_loadu_ps(g + k);
      mn = _mm512_min_ps(v, mn);
      mx = _mm512_max_ps(v, mx);
    }
    if (k < len) {
      const __mmask16 m = Lanes(len - k);
      const __m512 v = _mm512_maskz_loadu_ps(m, g + k);
      mn = _mm512_mask_min_ps(mn, m, v, mn);
      mx = _mm512_mask_max_ps(mx, m, v, mx);
    }
    mins[j] = _mm512_reduce_min_ps(mn);
    maxs[j] = _mm512_reduce_max_ps(mx);
  }
}

KV_TARGET_AVX512 void QuantParams(const float* mins, const float* maxs, size_t n, float qmax,
                                  uint8_t* scale_le, uint8_t* zero_le, float* zero,
                                  float* inv_scale) {
  const __m512 top = _mm512_set1_ps(qmax);
  const __m512 plus_zero = _mm512_setzero_ps();
  const __m512 one = _mm512_set1_ps(1.0f);
  // Full vectors use plain loads and stores (the quantizer reads `zero` and `inv_scale` at once,
  // and a load is not always forwarded from a masked store); the tail the masked forms.
  for (size_t i = 0; i < n; i += 16) {
    const bool full = n - i >= 16;
    const __mmask16 m = full ? static_cast<__mmask16>(0xffffu) : Lanes(n - i);
    const __m512 mn = full ? _mm512_loadu_ps(mins + i) : _mm512_maskz_loadu_ps(m, mins + i);
    const __m512 mx = full ? _mm512_loadu_ps(maxs + i) : _mm512_maskz_loadu_ps(m, maxs + i);
    const __m512 range = _mm512_add_ps(_mm512_sub_ps(mx, mn), plus_zero);
    const __m256i scale16 = _mm512_cvtps_ph(_mm512_div_ps(range, top), _MM_FROUND_TO_NEAREST_INT);
    const __m256i zero16 = _mm512_cvtps_ph(_mm512_add_ps(mn, plus_zero), _MM_FROUND_TO_NEAREST_INT);
    const __m512 scale = _mm512_cvtph_ps(scale16);
    const __m512 zero32 = _mm512_cvtph_ps(zero16);
    const __m512 inv = _mm512_maskz_div_ps(_mm512_cmp_ps_mask(scale, plus_zero, _CMP_GT_OQ), one,
                                           scale);
    if (full) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(scale_le + 2 * i), scale16);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(zero_le + 2 * i), zero16);
      _mm512_storeu_ps(zero + i, zero32);
      _mm512_storeu_ps(inv_scale + i, inv);
    } else {
      _mm256_mask_storeu_epi16(scale_le + 2 * i, m, scale16);
      _mm256_mask_storeu_epi16(zero_le + 2 * i, m, zero16);
      _mm512_mask_storeu_ps(zero + i, m, zero32);
      _mm512_mask_storeu_ps(inv_scale + i, m, inv);
    }
  }
}

KV_TARGET_AVX512 void QuantizeUniform(const float* x, size_t n, float zero, float inv_scale,
                                      float qmax, uint8_t* codes) {
  QuantizeSpan(x, n, _mm512_set1_ps(zero), _mm512_set1_ps(inv_scale), _mm512_set1_ps(qmax),
               codes);
}

KV_TARGET_AVX512 void QuantizeGroups(const float* x, size_t n, size_t group, const float* zero,
                                     const float* inv_scale, float qmax, uint8_t* codes) {
  const __m512 top = _mm512_set1_ps(qmax);
  for (size_t i = 0, j = 0; i < n; i += group, ++j) {
    QuantizeSpan(x + i, n - i < group ? n - i : group, _mm512_set1_ps(zero[j]),
                 _mm512_set1_ps(inv_scale[j]), top, codes + i);
  }
}

KV_TARGET_AVX512 void QuantizePerChannel(const float* x, size_t n, const float* zero,
                                         const float* inv_scale, float qmax, uint8_t* codes) {
  const __m512 top = _mm512_set1_ps(qmax);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i q = QuantizeVec(_mm512_loadu_ps(x + i), _mm512_loadu_ps(zero + i),
                                  _mm512_loadu_ps(inv_scale + i), top);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i), q);
  }
  if (i < n) {
    const __mmask16 m = Lanes(n - i);
    const __m128i q =
        QuantizeVec(_mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, zero + i),
                    _mm512_maskz_loadu_ps(m, inv_scale + i), top);
    _mm_mask_storeu_epi8(codes + i, m, q);
  }
}

KV_TARGET_AVX512 void DequantizeUniform(const uint8_t* codes, size_t n, float zero, float scale,
                                        float* out) {
  const __m512 z = _mm512_set1_ps(zero);
  const __m512 s = _mm512_set1_ps(scale);
  size_t i = 0;
  // Plain stores in the loop: a load of just-stored data (the row's FP16 conversion follows at
  // once) is forwarded from a plain store, not always from a masked one.
  for (; i + 16 <= n; i += 16) {
    // A separate multiply and add (not FMA) so the result matches the reference exactly.
    const __m512 scaled = _mm512_mul_ps(CodesToFloat(codes + i), s);
    _mm512_storeu_ps(out + i, _mm512_add_ps(scaled, z));
  }
  if (i < n) {
    const __mmask16 m = Lanes(n - i);
    const __m512 scaled = _mm512_mul_ps(CodesToFloat(codes + i, m), s);
    _mm512_mask_storeu_ps(out + i, m, _mm512_add_ps(scaled, z));
  }
}

KV_TARGET_AVX512 void DequantizePerChannel(const uint8_t* codes, size_t n, const float* zero,
                                           const float* scale, float* out) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 scaled = _mm512_mul_ps(CodesToFloat(codes + i), _mm512_loadu_ps(scale + i));
    _mm512_storeu_ps(out + i, _mm512_add_ps(scaled, _mm512_loadu_ps(zero + i)));
  }
  if (i < n) {
    const __mmask16 m = Lanes(n - i);
    const __m512 scaled =
        _mm512_mul_ps(CodesToFloat(codes + i, m), _mm512_maskz_loadu_ps(m, scale + i));
    _mm512_mask_storeu_ps(out + i, m, _mm512_add_ps(scaled, _mm512_maskz_loadu_ps(m, zero + i)));
  }
}

}  // namespace kvtier::codecs::avx512
