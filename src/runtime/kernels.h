// Attention and FP16 kernels of the reference runtime: FP16 <-> F32 conversion, the q.k dot
// products of one query against a run of cached keys, the attention-weighted sum of cached
// values, and the whole attention of one query token over a sequence of cached blocks for every
// query head at once (AttendF16), each as a plain scalar reference (namespace `ref`) and an
// AVX2/F16C/FMA version (namespace `avx2`); plus the small scalar row operations of the forward
// pass (RMSNorm, softmax, RoPE, SwiGLU) that are not worth vectorizing by hand.
//
// Why both: the scalar versions define the semantics. FP16 conversion is bit-exact between the
// two (round to nearest even, as F16C does); dot products, weighted sums and attention differ
// only in summation order, FMA rounding and (attention) the order in which the softmax is
// normalized, so tests compare them with a relative tolerance.
//
// Cached K/V rows are FP16 bit patterns (uint16_t, little-endian) laid out as in a kvtier block:
// row i of a run starts `stride_elems` elements after row i-1 (stride = kv_heads * head_dim
// inside one block of layout [k|v][token][kv_head][head_dim]).
//
// Why AttendF16 exists: decode attention is bound by reading the KV cache, and reading it per
// query head (DotRowsF16 / WeightedSumRowsF16 once per head) fetches every row once per query
// head of its group, 256 bytes at a time at a stride of the whole row. AttendF16 walks the rows
// of a block in address order once for K and once for V, serving every query head of every KV
// head from each row while it is in cache.
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

// `rows` consecutive cached tokens of one block: K row i at k + i * kv_dim and V row i at
// v + i * kv_dim, each row [kv_head][head_dim] (kv_dim = n_kv_heads * head_dim).
struct KvRun {
  const uint16_t* k = nullptr;
  const uint16_t* v = nullptr;
  uint32_t rows = 0;  // >= 1.
};

// One query token's attention over `n_runs` runs taken as one sequence of rows j, for every
// query head h, which reads KV head h / (n_heads / n_kv_heads). With s[h][j] = q_h . k_j[kv(h)]
// and p[h][j] = e^s[h][j] / sum_j' e^s[h][j']:
//   out[h * head_dim + d] = sum_j p[h][j] * v_j[kv(h)][d]
//   run_mass[i]           = (1 / n_heads) * sum_h sum_{j in run i} p[h][j]  (sums to ~1)
//   head_lse[h]           = log sum_j e^s[h][j]
//   run_lse[i * n_heads + h] = log sum_{j in run i} e^s[h][j]
// every output overwritten, the optional ones only when given. q is used as given: the caller
// applies the 1/sqrt(head_dim) scale. The log-sum-exps let the attention of a long sequence be
// split into consecutive parts computed apart (two threads) and merged exactly
// (MergeAttendParts, RunMassFromLse). The AVX2 version takes weights below e^-64 of a head's
// largest as exactly 0 (kernels_avx2.cc).
struct AttendArgs {
  uint32_t n_heads = 0;      // Query heads; a multiple of n_kv_heads.
  uint32_t n_kv_heads = 0;   // >= 1.
  uint32_t head_dim = 0;     // >= 1.
  const float* q = nullptr;  // [n_heads][head_dim]
  const KvRun* runs = nullptr;
  size_t n_runs = 0;          // >= 1.
  float* out = nullptr;       // [n_heads][head_dim]
  float* run_mass = nullptr;  // [n_runs], or nullptr.
  float* head_lse = nullptr;  // [n_heads], or nullptr.
  float* run_lse = nullptr;   // [n_runs][n_heads], or nullptr.
  float* scratch = nullptr;   // AttendScratchFloats(n_heads, n_runs) floats, any contents.
};

// Folds the attention over a second part of a sequence (out_b, lse_b: outputs and head_lse of
// an AttendF16 call over its runs) into that over the first part (out_a, lse_a), which then
// describe both parts' rows together. Scalar; n_heads * head_dim multiply-adds.
void MergeAttendParts(uint32_t n_heads, uint32_t head_dim, const float* out_b, const float* lse_b,
                      float* out_a, float* lse_a);

// run_mass[i] = (1 / n_heads) * sum_h e^(run_lse[i * n_heads + h] - head_lse[h]).
void RunMassFromLse(uint32_t n_heads, size_t n_runs, const float* run_lse, const float* head_lse,
                    float* run_mass);

// Rows one AVX2 attention step scores before it softmaxes and reads their values; bounds the
// scratch and keeps a step's scores in L1 (32 heads: 8 KiB).
inline constexpr size_t kAttendTileRows = 64;

// Scratch floats either AttendF16 needs for a call with these counts.
size_t AttendScratchFloats(size_t n_heads, size_t n_runs);

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
// Three plain passes per head (max, sum, then probabilities and outputs); uses no scratch.
void AttendF16(const AttendArgs& args);
}  // namespace ref

namespace avx2 {
void HalfToFloatN(const uint16_t* src, size_t n, float* dst);
void FloatToHalfN(const float* src, size_t n, uint16_t* dst);
void DotRowsF16(const float* q, const uint16_t* k, size_t stride_elems, size_t n_rows,
                size_t head_dim, float* scores);
void WeightedSumRowsF16(const float* weights, const uint16_t* v, size_t stride_elems, size_t n_rows,
                        size_t head_dim, float* out);
// One pass over K and one over V in steps of kAttendTileRows rows, softmax kept online (running
// max and sum per head, earlier outputs rescaled when the max grows).
void AttendF16(const AttendArgs& args);
}  // namespace avx2

struct AttentionKernels {
  KernelIsa isa;  // kScalar or kAvx2: the set actually selected.
  void (*half_to_float)(const uint16_t* src, size_t n, float* dst);
  void (*float_to_half)(const float* src, size_t n, uint16_t* dst);
  void (*dot_rows_f16)(const float* q, const uint16_t* k, size_t stride_elems, size_t n_rows,
                       size_t head_dim, float* scores);
  void (*weighted_sum_rows_f16)(const float* weights, const uint16_t* v, size_t stride_elems,
                                size_t n_rows, size_t head_dim, float* out);
  void (*attend_f16)(const AttendArgs& args);
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
