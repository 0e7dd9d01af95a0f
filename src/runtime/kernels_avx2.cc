// AVX2/F16C/FMA versions of the attention kernels. Every function carries a target attribute
// instead of the file being built with -mavx2, so nothing here runs unless
// GetAttentionKernels() saw the CPU features first. Tails shorter than a vector use the scalar
// conversions, which are bit-identical to F16C's.
#include <immintrin.h>

#include "runtime/kernels.h"

#define KV_TARGET_AVX2 __attribute__((target("avx2,f16c,fma")))

namespace kvtier::runtime::avx2 {
namespace {

KV_TARGET_AVX2 inline __m256 LoadHalf8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

KV_TARGET_AVX2 inline float HorizontalSum(__m256 v) {
  const __m128 lo = _mm256_castps256_ps128(v);
  const __m128 hi = _mm256_extractf128_ps(v, 1);
  __m128 s = _mm_add_ps(lo, hi);
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// One q.k product; head_dim need not be a multiple of 8.
KV_TARGET_AVX2 inline float DotOne(const float* q, const uint16_t* k, size_t head_dim) {
  __m256 acc0 = _mm256_setzero_ps();
  __m256 acc1 = _mm256_setzero_ps();
  size_t d = 0;
  for (; d + 16 <= head_dim; d += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), LoadHalf8(k + d), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d + 8), LoadHalf8(k + d + 8), acc1);
  }
  for (; d + 8 <= head_dim; d += 8) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), LoadHalf8(k + d), acc0);
  }
  float sum = HorizontalSum(_mm256_add_ps(acc0, acc1));
  for (; d < head_dim; ++d) sum += q[d] * ref::HalfToFloat(k[d]);
  return sum;
}

}  // namespace

KV_TARGET_AVX2 void HalfToFloatN(const uint16_t* src, size_t n, float* dst) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, LoadHalf8(src + i));
  for (; i < n; ++i) dst[i] = ref::HalfToFloat(src[i]);
}

KV_TARGET_AVX2 void FloatToHalfN(const float* src, size_t n, uint16_t* dst) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = ref::FloatToHalf(src[i]);
}

KV_TARGET_AVX2 void DotRowsF16(const float* q, const uint16_t* k, size_t stride_elems,
                               size_t n_rows, size_t head_dim, float* scores) {
  if (head_dim == 8) {
    // Small heads (tiny models): one vector per row, no reduction tree per element.
    const __m256 qv = _mm256_loadu_ps(q);
    for (size_t i = 0; i < n_rows; ++i) {
      scores[i] = HorizontalSum(_mm256_mul_ps(qv, LoadHalf8(k + i * stride_elems)));
    }
    return;
  }
  for (size_t i = 0; i < n_rows; ++i) scores[i] = DotOne(q, k + i * stride_elems, head_dim);
}

KV_TARGET_AVX2 void WeightedSumRowsF16(const float* weights, const uint16_t* v, size_t stride_elems,
                                       size_t n_rows, size_t head_dim, float* out) {
  const size_t vec_end = head_dim - head_dim % 8;
  for (size_t i = 0; i < n_rows; ++i) {
    const uint16_t* row = v + i * stride_elems;
    const __m256 w = _mm256_set1_ps(weights[i]);
    for (size_t d = 0; d < vec_end; d += 8) {
      _mm256_storeu_ps(out + d, _mm256_fmadd_ps(w, LoadHalf8(row + d), _mm256_loadu_ps(out + d)));
    }
    for (size_t d = vec_end; d < head_dim; ++d) out[d] += weights[i] * ref::HalfToFloat(row[d]);
  }
}

}  // namespace kvtier::runtime::avx2
