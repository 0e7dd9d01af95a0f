// AVX2/F16C/FMA versions of the attention kernels. Every function carries a target attribute
// instead of the file being built with -mavx2, so nothing here runs unless
// GetAttentionKernels() saw the CPU features first. Tails shorter than a vector use the scalar
// conversions, which are bit-identical to F16C's.
//
// AttendF16 walks each run in steps of kAttendTileRows rows. A step scores its rows against
// every query head (K pass), updates each head's running max and sum and turns the
// scores into weights (online softmax), then adds the weighted V rows into every head's output
// (V pass). Both passes take the rows in small groups in address order and serve every KV head
// inside a group, so K and V are each read once, as a few interleaved ascending
// streams. A KV head's query heads are covered by register tiles of 4, 2 or 1 heads: a K or V
// vector converted from FP16 once feeds one FMA per head of the tile; a score tile holds
// H x R = 8 dot products, a weight tile H x 8 / H output vectors across the group's rows.
// Groups are 2 rows under 4-head tiles, 4 under 2-head tiles, else 8 (one score tile per head
// tile). While a group is computed, the first row of the next group is prefetched, KV head by
// KV head; on the Xeon the benchmarks ran on, that doubled the rate of GQA groups of 4 (the
// loads otherwise wait on DRAM between FMAs), and prefetching more rows or further ahead was
// slower.
//
// Estimate: each query head and row costs 2 * head_dim / 8 FMAs in the two passes (32 for
// head_dim 128, 16 cycles at 2 FMAs per cycle), so the FMA bound is ~512 bytes of K and V per
// 16 * group cycles: ~32 bytes per cycle for MHA and ~8 for groups of 4, against ~3-4 bytes per
// cycle that one core's DRAM bandwidth delivers. Measured (docs/benchmarks-history.md) the kernel
// reaches about half the FMA bound, so MHA streams at the memory's rate while groups of 4 are
// close to compute-bound on one core.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "runtime/kernels.h"

#define KV_TARGET_AVX2 __attribute__((target("avx2,f16c,fma")))
// The register tiles must inline into their loops: called, their accumulators would go through
// memory.
#define KV_ALWAYS_INLINE inline __attribute__((always_inline))

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

KV_TARGET_AVX2 inline float HorizontalMax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// The eight horizontal sums of a[0..7], lane i holding sum(a[i]).
KV_TARGET_AVX2 inline __m256 HorizontalSums8(const __m256* a) {
  const __m256 s01 = _mm256_hadd_ps(a[0], a[1]);
  const __m256 s23 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 s45 = _mm256_hadd_ps(a[4], a[5]);
  const __m256 s67 = _mm256_hadd_ps(a[6], a[7]);
  // Per 128-bit half: lanes (0, 1, 2, 3) and (4, 5, 6, 7) summed over that half.
  const __m256 s0123 = _mm256_hadd_ps(s01, s23);
  const __m256 s4567 = _mm256_hadd_ps(s45, s67);
  return _mm256_add_ps(_mm256_permute2f128_ps(s0123, s4567, 0x20),
                       _mm256_permute2f128_ps(s0123, s4567, 0x31));
}

// Softmax weights below e^kWeightExpMin (~1.6e-28, against 1 for the max row) are taken as
// exactly 0: their products with FP16 values could then fall below the smallest normal float,
// and subnormal results cost a microcode assist per FMA on many x86 cores.
constexpr float kWeightExpMin = -64.0f;

// e^x for scores minus their running max (x <= 0, or NaN, which stays NaN), 0 below
// kWeightExpMin. x = n ln2 + r with |r| <= ln2 / 2, e^r by its Taylor polynomial of degree 6
// (truncation error < 1.3e-7 relative), ln2 split in two so n ln2 is exact to float precision.
KV_TARGET_AVX2 inline __m256 ExpNonPositive(__m256 x) {
  const __m256 keep = _mm256_cmp_ps(x, _mm256_set1_ps(kWeightExpMin), _CMP_NLT_UQ);  // Or NaN.
  x = _mm256_max_ps(_mm256_set1_ps(kWeightExpMin), x);  // NaN in the second operand is kept.
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i biased = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
  const __m256 e = _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(biased, 23)));
  return _mm256_and_ps(e, keep);
}

// The scalar twin of ExpNonPositive for tails and rescale factors (libm's e^x, same cutoff).
inline float WeightExp(float x) { return x < kWeightExpMin ? 0.0f : std::exp(x); }

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

// ---- AttendF16 ----

// What every step of one AttendF16 call shares.
struct AttendGeometry {
  size_t head_dim;
  size_t kv_dim;   // Elements from one row to the next.
  uint32_t group;  // Query heads per KV head.
  uint32_t n_kv_heads;
};

// Asks for one KV head's segment of a row (head_dim FP16 values) ahead of its use.
KV_TARGET_AVX2 inline void PrefetchSegment(const uint16_t* segment, size_t head_dim) {
  const auto* begin = reinterpret_cast<const char*>(segment);
  for (size_t offset = 0; offset < head_dim * sizeof(uint16_t); offset += 64) {
    _mm_prefetch(begin + offset, _MM_HINT_T0);
  }
}

// s[i * kAttendTileRows + r] = q_i . k_r for H heads (query i at q + i * head_dim) and R rows
// (row r at k + r * kv_dim), all reading one KV head. The accumulators are ordered head-major,
// so each head's R scores leave the reduction as adjacent lanes and are stored together.
template <size_t H, size_t R>
KV_TARGET_AVX2 KV_ALWAYS_INLINE void DotTile(const float* q, const uint16_t* k, AttendGeometry g,
                                             float* s) {
  static_assert(H * R <= 8);
  __m256 acc[8];
#pragma GCC unroll 8
  for (size_t i = 0; i < 8; ++i) acc[i] = _mm256_setzero_ps();
  const size_t vec_end = g.head_dim - g.head_dim % 8;
  for (size_t d = 0; d < vec_end; d += 8) {
    __m256 qv[H];
#pragma GCC unroll 4
    for (size_t i = 0; i < H; ++i) qv[i] = _mm256_loadu_ps(q + i * g.head_dim + d);
#pragma GCC unroll 8
    for (size_t r = 0; r < R; ++r) {
      const __m256 kv = LoadHalf8(k + r * g.kv_dim + d);
#pragma GCC unroll 4
      for (size_t i = 0; i < H; ++i) acc[i * R + r] = _mm256_fmadd_ps(qv[i], kv, acc[i * R + r]);
    }
  }
  const __m256 sums = HorizontalSums8(acc);  // Lane i * R + r.
  if constexpr (R == 8) {
    _mm256_storeu_ps(s, sums);
  } else if constexpr (R == 4) {
    _mm_storeu_ps(s, _mm256_castps256_ps128(sums));
    _mm_storeu_ps(s + kAttendTileRows, _mm256_extractf128_ps(sums, 1));
  } else if constexpr (R == 2) {
    const __m128 lo = _mm256_castps256_ps128(sums);
    const __m128 hi = _mm256_extractf128_ps(sums, 1);
    _mm_storel_pi(reinterpret_cast<__m64*>(s), lo);
    _mm_storeh_pi(reinterpret_cast<__m64*>(s + kAttendTileRows), lo);
    _mm_storel_pi(reinterpret_cast<__m64*>(s + 2 * kAttendTileRows), hi);
    _mm_storeh_pi(reinterpret_cast<__m64*>(s + 3 * kAttendTileRows), hi);
  } else {
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, sums);
    for (size_t i = 0; i < H; ++i) {
      for (size_t r = 0; r < R; ++r) s[i * kAttendTileRows + r] = lanes[i * R + r];
    }
  }
  for (size_t d = vec_end; d < g.head_dim; ++d) {  // A head_dim that is not a multiple of 8.
    for (size_t i = 0; i < H; ++i) {
      for (size_t r = 0; r < R; ++r) {
        s[i * kAttendTileRows + r] += q[i * g.head_dim + d] * ref::HalfToFloat(k[r * g.kv_dim + d]);
      }
    }
  }
}

// out_i[d] += sum_r w[i * kAttendTileRows + r] * v_r[d] over dimensions [d0, d0 + 8 * V) for
// H heads (output i at out + i * head_dim) and R rows (row r at v + r * kv_dim): the H x V
// output vectors stay in registers over the R rows, so each is loaded and stored once per tile.
template <size_t H, size_t V, size_t R>
KV_TARGET_AVX2 KV_ALWAYS_INLINE void WeightBlock(const float* w, const uint16_t* v, size_t d0,
                                                 AttendGeometry g, float* out) {
  static_assert(H * V <= 8);
  __m256 acc[H * V];
#pragma GCC unroll 8
  for (size_t i = 0; i < H; ++i) {
#pragma GCC unroll 8
    for (size_t j = 0; j < V; ++j)
      acc[i * V + j] = _mm256_loadu_ps(out + i * g.head_dim + d0 + 8 * j);
  }
#pragma GCC unroll 8
  for (size_t r = 0; r < R; ++r) {
    const uint16_t* row = v + r * g.kv_dim + d0;
    if constexpr (V <= 4) {
      // The row's V vectors once, then each head's weight against all of them.
      __m256 vv[V];
#pragma GCC unroll 4
      for (size_t j = 0; j < V; ++j) vv[j] = LoadHalf8(row + 8 * j);
#pragma GCC unroll 4
      for (size_t i = 0; i < H; ++i) {
        const __m256 wi = _mm256_broadcast_ss(w + i * kAttendTileRows + r);
#pragma GCC unroll 4
        for (size_t j = 0; j < V; ++j) acc[i * V + j] = _mm256_fmadd_ps(wi, vv[j], acc[i * V + j]);
      }
    } else {
      // One head (H == 1): eight vectors would not fit beside the accumulators.
      const __m256 w0 = _mm256_broadcast_ss(w + r);
#pragma GCC unroll 8
      for (size_t j = 0; j < V; ++j) acc[j] = _mm256_fmadd_ps(w0, LoadHalf8(row + 8 * j), acc[j]);
    }
  }
#pragma GCC unroll 8
  for (size_t i = 0; i < H; ++i) {
#pragma GCC unroll 8
    for (size_t j = 0; j < V; ++j)
      _mm256_storeu_ps(out + i * g.head_dim + d0 + 8 * j, acc[i * V + j]);
  }
}

// WeightBlock over a whole head_dim: blocks of 8 / H vectors, then single vectors, then the
// scalar remainder.
template <size_t H, size_t R>
KV_TARGET_AVX2 KV_ALWAYS_INLINE void WeightTile(const float* w, const uint16_t* v, AttendGeometry g,
                                                float* out) {
  constexpr size_t kVectors = 8 / H;
  const size_t vec_end = g.head_dim - g.head_dim % 8;
  size_t d = 0;
  for (; d + 8 * kVectors <= vec_end; d += 8 * kVectors)
    WeightBlock<H, kVectors, R>(w, v, d, g, out);
  for (; d < vec_end; d += 8) WeightBlock<H, 1, R>(w, v, d, g, out);
  for (; d < g.head_dim; ++d) {
    for (size_t i = 0; i < H; ++i) {
      float sum = out[i * g.head_dim + d];
      for (size_t r = 0; r < R; ++r) {
        sum += w[i * kAttendTileRows + r] * ref::HalfToFloat(v[r * g.kv_dim + d]);
      }
      out[i * g.head_dim + d] = sum;
    }
  }
}

// Which pass a step runs over a group of rows.
enum class Pass : uint8_t { kScores, kWeights };

// H heads over `Rows` rows: score tiles of H x min(Rows, 8 / H) rows (eight accumulators), one
// weight tile of all the rows (its accumulators are H x 8 / H output vectors).
template <Pass P, size_t H, size_t Rows>
KV_TARGET_AVX2 KV_ALWAYS_INLINE void HeadTile(const float* q, float* out, const uint16_t* kv,
                                              AttendGeometry g, float* s) {
  if constexpr (P == Pass::kScores) {
    constexpr size_t R = std::min(Rows, 8 / H);
    static_assert(Rows % R == 0);
    for (size_t r = 0; r < Rows; r += R) DotTile<H, R>(q, kv + r * g.kv_dim, g, s + r);
  } else {
    WeightTile<H, Rows>(s, kv, g, out);
  }
}

// Every query head of KV head `kv_head` over `Rows` rows starting at `rows` (row pointers at the
// start of the row, scores/weights s at the first of these rows): tiles of 4, then 2, then 1
// heads cover groups of any size.
template <Pass P, size_t Rows>
KV_TARGET_AVX2 KV_ALWAYS_INLINE void KvHeadRows(const float* q, float* out, const uint16_t* rows,
                                                uint32_t kv_head, AttendGeometry g, float* s) {
  const uint16_t* kv = rows + kv_head * g.head_dim;
  size_t h = size_t{kv_head} * g.group;
  const size_t h_end = h + g.group;
  for (; h + 4 <= h_end; h += 4) {
    HeadTile<P, 4, Rows>(q + h * g.head_dim, out + h * g.head_dim, kv, g, s + h * kAttendTileRows);
  }
  if (h + 2 <= h_end) {
    HeadTile<P, 2, Rows>(q + h * g.head_dim, out + h * g.head_dim, kv, g, s + h * kAttendTileRows);
    h += 2;
  }
  if (h < h_end) {
    HeadTile<P, 1, Rows>(q + h * g.head_dim, out + h * g.head_dim, kv, g, s + h * kAttendTileRows);
  }
}

// Rows [0, n) in groups of `Rows`, every KV head inside a group, then the rest one by one.
template <Pass P, size_t Rows>
KV_TARGET_AVX2 void PassInGroups(const float* q, float* out, const uint16_t* rows, size_t n,
                                 size_t run_rows_left, AttendGeometry g, float* s) {
  size_t r = 0;
  for (; r + Rows <= n; r += Rows) {
    const bool prefetch = r + Rows < run_rows_left;
    for (uint32_t kv_head = 0; kv_head < g.n_kv_heads; ++kv_head) {
      if (prefetch) {
        PrefetchSegment(rows + (r + Rows) * g.kv_dim + kv_head * g.head_dim, g.head_dim);
      }
      KvHeadRows<P, Rows>(q, out, rows + r * g.kv_dim, kv_head, g, s + r);
    }
  }
  for (; r < n; ++r) {
    for (uint32_t kv_head = 0; kv_head < g.n_kv_heads; ++kv_head) {
      KvHeadRows<P, 1>(q, out, rows + r * g.kv_dim, kv_head, g, s + r);
    }
  }
}

// One pass over rows [0, n) of a step (n <= kAttendTileRows). The row groups are as small as
// the group's head tiles allow (2 rows under 4-head tiles, 4 under 2-head tiles, else 8), so
// the pass reads memory as a few interleaved ascending streams. Measured with groups of 4 query
// heads: 8-row groups (fewer loads and stores per FMA) were ~15 % faster with the rows in cache
// but ~30 % slower from DRAM.
template <Pass P>
KV_TARGET_AVX2 void StepPass(const float* q, float* out, const uint16_t* rows, size_t n,
                             size_t run_rows_left, AttendGeometry g, float* s) {
  if (g.group % 4 == 0) {
    PassInGroups<P, 2>(q, out, rows, n, run_rows_left, g, s);
  } else if (g.group % 2 == 0) {
    PassInGroups<P, 4>(q, out, rows, n, run_rows_left, g, s);
  } else {
    PassInGroups<P, 8>(q, out, rows, n, run_rows_left, g, s);
  }
}

KV_TARGET_AVX2 float MaxN(const float* x, size_t n) {
  size_t i = 0;
  float m = -INFINITY;
  if (n >= 8) {
    __m256 mv = _mm256_loadu_ps(x);
    for (i = 8; i + 8 <= n; i += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(x + i));
    m = HorizontalMax(mv);
  }
  for (; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

// x[i] = e^(x[i] - max) for i < n; returns the sum.
KV_TARGET_AVX2 float ExpSubSumN(float* x, size_t n, float max) {
  const __m256 mv = _mm256_set1_ps(max);
  __m256 sum = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = ExpNonPositive(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv));
    _mm256_storeu_ps(x + i, e);
    sum = _mm256_add_ps(sum, e);
  }
  float total = HorizontalSum(sum);
  for (; i < n; ++i) {
    x[i] = WeightExp(x[i] - max);
    total += x[i];
  }
  return total;
}

KV_TARGET_AVX2 void ScaleN(float* x, size_t n, float factor) {
  const __m256 f = _mm256_set1_ps(factor);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), f));
  for (; i < n; ++i) x[i] *= factor;
}

// Per-head state of the online softmax, in the scratch (AttendScratchFloats).
struct OnlineSoftmax {
  float* max;      // [n_heads] running max of the scores seen.
  float* sum;      // [n_heads] sum of e^(score - max) over them.
  float* run_sum;  // [n_heads] the same over the current run's rows only.
};

// Turns a step's scores s[h][0, n) into weights e^(score - max) against each head's updated
// running max, rescaling what the heads accumulated so far when the max grows.
KV_TARGET_AVX2 void SoftmaxStep(AttendGeometry g, size_t n, OnlineSoftmax st, float* s,
                                float* out) {
  for (size_t h = 0; h < size_t{g.n_kv_heads} * g.group; ++h) {
    float* sh = s + h * kAttendTileRows;
    const float step_max = MaxN(sh, n);
    if (step_max > st.max[h]) {
      if (st.max[h] != -INFINITY) {
        const float alpha = WeightExp(st.max[h] - step_max);
        st.sum[h] *= alpha;
        st.run_sum[h] *= alpha;
        ScaleN(out + h * g.head_dim, g.head_dim, alpha);
      }
      st.max[h] = step_max;
    }
    const float step_sum = ExpSubSumN(sh, n, st.max[h]);
    st.sum[h] += step_sum;
    st.run_sum[h] += step_sum;
  }
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

KV_TARGET_AVX2 void AttendF16(const AttendArgs& a) {
  const AttendGeometry g = {.head_dim = a.head_dim,
                            .kv_dim = size_t{a.n_kv_heads} * a.head_dim,
                            .group = a.n_heads / a.n_kv_heads,
                            .n_kv_heads = a.n_kv_heads};
  const size_t n_heads = a.n_heads;
  const OnlineSoftmax st = {
      .max = a.scratch, .sum = a.scratch + n_heads, .run_sum = a.scratch + 2 * n_heads};
  float* s = a.scratch + 3 * n_heads;  // [n_heads][kAttendTileRows]
  // Per-run log-sum-exps: asked for, or needed for the run masses.
  float* run_lse = a.run_lse;
  if (run_lse == nullptr && a.run_mass != nullptr) run_lse = s + n_heads * kAttendTileRows;
  std::fill_n(st.max, n_heads, -INFINITY);
  std::fill_n(st.sum, n_heads, 0.0f);
  std::fill_n(a.out, n_heads * g.head_dim, 0.0f);
  for (size_t i = 0; i < a.n_runs; ++i) {
    std::fill_n(st.run_sum, n_heads, 0.0f);
    const KvRun& run = a.runs[i];
    for (size_t r0 = 0; r0 < run.rows; r0 += kAttendTileRows) {
      const size_t n = std::min<size_t>(kAttendTileRows, run.rows - r0);
      StepPass<Pass::kScores>(a.q, a.out, run.k + r0 * g.kv_dim, n, run.rows - r0, g, s);
      SoftmaxStep(g, n, st, s, a.out);
      StepPass<Pass::kWeights>(a.q, a.out, run.v + r0 * g.kv_dim, n, run.rows - r0, g, s);
    }
    if (run_lse != nullptr) {
      for (size_t h = 0; h < n_heads; ++h) {
        run_lse[i * n_heads + h] = st.max[h] + std::log(st.run_sum[h]);
      }
    }
  }
  for (size_t h = 0; h < n_heads; ++h) {
    ScaleN(a.out + h * g.head_dim, g.head_dim, 1.0f / st.sum[h]);
    st.max[h] += std::log(st.sum[h]);  // Now the head's log-sum-exp.
  }
  if (a.head_lse != nullptr) std::copy_n(st.max, n_heads, a.head_lse);
  if (a.run_mass != nullptr) RunMassFromLse(a.n_heads, a.n_runs, run_lse, st.max, a.run_mass);
}

}  // namespace kvtier::runtime::avx2
