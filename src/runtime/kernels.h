// Attention and FP16 kernels of the reference runtime: FP16 <-> F32 conversion, the q.k dot
// products of one query against a run of cached keys, and the attention-weighted sum of cached
// values, each as a plain scalar reference (namespace `ref`) and an AVX2/F16C/FMA version
// (namespace `avx2`); plus the small scalar row operations of the forward pass (RMSNorm,
// softmax, RoPE, SwiGLU) that are not worth vectorizing by hand.
//
// Why both: the scalar versions define the semantics. FP16 conversion is bit-exact between the
// two (round to nearest even, as F16C does); dot products and weighted sums differ only in
// summation order and FMA rounding, so tests compare them with a relative tolerance.
//
// Cached K/V rows are FP16 bit patterns (uint16_t, little-endian) laid out as in a kvtier block:
// row i of a run starts `stride_elems` elements after row i-1 (stride = kv_heads * head_dim
// inside one block of layout [k|v][token][kv_head][head_dim]).
//
// Preconditions (programmer errors, not checked): pointers valid for the stated counts; outputs
// do not overlap inputs. Thread safety: pure functions; the tables are immutable.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvtier::runtime {

enum class KernelIsa : uint8_t {
  kAuto = 0,
  kScalar = 1,
  kAvx2 = 2,  // Falls back to scalar when the CPU lacks AVX2/F16C/FMA.
};

namespace ref {
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);  // Round to nearest even; NaN stays NaN (quiet).
void HalfToFloatN(const uint16_t* src, size_t n, float* dst);
void FloatToHalfN(const float* src, size_t n, uint16_t* dst);
// scores[i] = sum_d q[d] * k[i * stride_elems + d], for i < n_rows, d < head_dim.
void DotRowsF16(const float* q, const uint16_t* k, size_t stride_elems, size_t n_rows,
                size_t head_dim, float* scores);
// out[d] += sum_i weights[i] * v[i * stride_elems + d], for i < n_rows, d < head_dim.
void WeightedSumRowsF16(const float* weights, const uint16_t* v, size_t stride_elems, size_t n_rows,
                        size_t head_dim, float* out);
}  // namespace ref

namespace avx2 {
void HalfToFloatN(const uint16_t* src, size_t n, float* dst);
void FloatToHalfN(const float* src, size_t n, uint16_t* dst);
void DotRowsF16(const float* q, const uint16_t* k, size_t stride_elems, size_t n_rows,
                size_t head_dim, float* scores);
void WeightedSumRowsF16(const float* weights, const uint16_t* v, size_t stride_elems, size_t n_rows,
                        size_t head_dim, float* out);
}  // namespace avx2

struct AttentionKernels {
  KernelIsa isa;  // kScalar or kAvx2: the set actually selected.
  void (*half_to_float)(const uint16_t* src, size_t n, float* dst);
  void (*float_to_half)(const float* src, size_t n, uint16_t* dst);
  void (*dot_rows_f16)(const float* q, const uint16_t* k, size_t stride_elems, size_t n_rows,
                       size_t head_dim, float* scores);
  void (*weighted_sum_rows_f16)(const float* weights, const uint16_t* v, size_t stride_elems,
                                size_t n_rows, size_t head_dim, float* out);
};

bool CpuHasAvx2F16c();
const AttentionKernels& GetAttentionKernels(KernelIsa isa = KernelIsa::kAuto);

// Row operations (scalar; they are a small share of the work).
// out[i] = weight[i] * x[i] / sqrt(mean(x^2) + eps). out may alias x.
void RmsNorm(const float* x, const float* weight, size_t n, float eps, float* out);
// In-place softmax over x[0, n), n >= 1, stable against large inputs.
void Softmax(float* x, size_t n);
// Rotates adjacent pairs (x[2i], x[2i+1]) of each of `n_heads` heads of `head_dim` elements by
// the angle pos * inv_freq[i]; inv_freq has head_dim / 2 entries (1 / base^(2i / head_dim)).
void RopeInPlace(float* x, size_t n_heads, size_t head_dim, uint32_t pos, const float* inv_freq);
// gate[i] = silu(gate[i]) * up[i].
void SwiGluInPlace(float* gate, const float* up, size_t n);

}  // namespace kvtier::runtime
