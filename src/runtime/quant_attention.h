// Decode attention read straight from INT8/INT4 quantized KV blocks: one query token's attention
// over a sequence of blocks in the codecs' int8/int4 stage-1 payload (codecs/block_format.h
// QuantLayout), computed from the codes and their FP16 group scales and zero points without
// ever writing an FP16 (or F32) copy of K or V. The same contract as AttendF16 (kernels.h): every
// query head, GQA, online softmax, per-run and per-head log-sum-exps so that parts attended apart
// merge exactly (MergeAttendParts, RunMassFromLse).
//
// Why: decode attention is bound by reading the KV cache. Read as codes it is 1.125 (INT8) or
// 0.625 (INT4) bytes per element with group 32 instead of FP16's 2, and dequantizing a block to
// FP16 first costs a write and a second read of 2 bytes per element on a core that attention
// needs.
//
// The payload of one block ([k|v][token][kv_head][head_dim] before quantization, C = n_kv_heads *
// head_dim channels, G = group_size):
//   keys   per channel in groups of G tokens: k[t][c] = code * k_scale[t / G][c] + k_zero[...]
//   values per token in groups of G channels: v[t][c] = code * v_scale[t][c / G] + v_zero[...]
// The kernels factor the key scales into the query (one product q[c] * k_scale[c] per channel
// and key group, plus a bias q . k_zero), so a score is one multiply-add per code; values are
// dequantized in registers (one multiply-add per code, shared by a KV head's query heads).
//
// Versions: a scalar reference (namespace ref) that dequantizes each element as the codecs
// specify (float(code) * scale + zero, then the same three passes as ref::AttendF16) and defines
// the semantics; AVX2/F16C/FMA (8 lanes) and AVX-512F (16 lanes) versions that take the factored
// form and differ from it only in rounding. A SIMD version needs head_dim and group_size to be
// multiples of its lane count; it hands other shapes to the next narrower version (AVX-512 ->
// AVX2 -> scalar), so every version accepts every valid shape. The GPU version of the same
// contract, with the reference's semantics, is the CUDA layer's AttendQuantRuns
// (cuda/cuda_kernels.h), over device copies of the blocks.
//
// Integer scores (AVX-512 VNNI): the scaled query of each head and key group, qs[d] = q[d] *
// k_scale[c], is quantized to 15-bit integers with its own symmetric scale (m = max_d |qs[d]|,
// q15[d] = round-to-nearest-even(qs[d] * (127 / m) * 128), in [-16256, 16256], 0 when m is 0),
// so that a score is an integer dot product of the u8 codes with q15, exact in int32, scaled
// once: score = float(code . q15) * (m / 16256) + q . k_zero. The kernel splits q15 into two
// int8 halves (q15 = 128 hi + lo, lo in [-64, 63]) and dots the codes with each (vpdpbusd: 64
// multiply-adds per instruction). ref::AttendQuantQ15 is that contract in scalar code (the same
// passes as ref::AttendQuant, only the scores differ); the VNNI version matches it up to
// summation order and hands shapes it does not take (head_dim or group size not a multiple of
// 16, head_dim over 256, where the int32 sum could overflow) to it. The query's rounding error
// is at most m / 32512 per channel. An 8-bit query (one dot product instead of two) was
// measured too coarse: where a few key channels are 12x the others, output cosine against FP16
// fell to 0.95 (INT8).
//
// Integer weights (AVX-512 VNNI, where G divides head_dim): the weighted sum of values is an
// integer dot product too. A run's rows go in steps (a step ends at every kQuantAttendStepRows
// rows and at every key group boundary). In each step, for every query head and value group g of
// its KV head, the softmax weights times the group's value scales, p_r = e_r * v_scale[r][g], are
// quantized to 15 bits with one scale (m = max_r |p_r|, q_r = round-to-nearest-even(p_r * (16256
// / m)), 0 when m is 0), and the step adds float(sum_r q_r * code_r[c]) * (m / 16256) + sum_r e_r
// * v_zero[r][g] to channel c's output (before the division by the sum of weights). The kernel
// interleaves the codes of four rows so that a 32-bit lane holds one channel's four codes and
// dots them with the weights' two int8 halves (q15 = 128 hi + lo) by vpdpbusd. The weights keep
// 15 bits relative to the largest in their step and group, so a part attended apart (a run set
// under top-k selection) keeps its precision when merged; 8-bit weights did not (quant_attention
// benchmarks, docs/benchmarks-history.md). ref::AttendQuantQ15 includes this too.
//
// Preconditions (programmer errors, not checked): pointers valid for the stated counts; payloads
// are int8/int4 stage-1 payloads of `block_tokens` tokens with this geometry, bits and group size
// (QuantRunFromEncodedBlock checks an encoded block's header); outputs do not overlap inputs.
// Scales and zero points are trusted: a corrupt one gives NaN or wrong outputs, never an
// out-of-bounds access (the codes index nothing). Thread safety: pure functions; the kernel tables
// are immutable. Ownership: runs borrow their payloads for the duration of a call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "kvtier/result.h"

namespace kvtier::runtime {

enum class QuantKernelIsa : uint8_t {
  kAuto = 0,    // The widest the CPU has.
  kScalar = 1,
  kAvx2 = 2,    // AVX2/F16C/FMA; scalar when the CPU lacks them.
  kAvx512 = 3,  // AVX-512F (+ AVX2/F16C/FMA); AVX2 when the CPU lacks it.
  // AVX-512F/BW/VL/VNNI/VBMI, integer scores and weights (ref::AttendQuantQ15 semantics);
  // kAvx512 when the CPU lacks them.
  kAvx512Vnni = 4,
};

// The first `rows` tokens of one quantized block.
struct QuantKvRun {
  const std::byte* payload = nullptr;  // Stage-1 payload (QuantLayout), any alignment.
  uint32_t block_tokens = 0;           // Tokens the block was encoded with (its geometry).
  uint32_t rows = 0;                   // 1..block_tokens.
};

// As AttendArgs (kernels.h), with quantized runs. Outputs:
//   out[h * head_dim + d], run_mass[i], head_lse[h], run_lse[i * n_heads + h]
// defined exactly as there, over the dequantized K and V.
struct QuantAttendArgs {
  uint32_t n_heads = 0;     // Query heads; a multiple of n_kv_heads.
  uint32_t n_kv_heads = 0;  // >= 1.
  uint32_t head_dim = 0;    // >= 1; n_kv_heads * head_dim even for INT4.
  uint32_t bits = 0;        // 8 or 4.
  uint32_t group_size = 0;  // The codec's group size (codecs::kQuantGroupSizeMin..Max).
  const float* q = nullptr;  // [n_heads][head_dim], scaled by the caller.
  const QuantKvRun* runs = nullptr;
  size_t n_runs = 0;          // >= 1.
  float* out = nullptr;       // [n_heads][head_dim]
  float* run_mass = nullptr;  // [n_runs], or nullptr.
  float* head_lse = nullptr;  // [n_heads], or nullptr.
  float* run_lse = nullptr;   // [n_runs][n_heads], or nullptr.
  float* scratch = nullptr;   // QuantAttendScratchFloats(*this) floats, any contents.
};

// Rows one SIMD step scores before it softmaxes and reads their values (a step also ends at a
// key group boundary, where the query's scaled copy changes).
inline constexpr size_t kQuantAttendStepRows = 64;

// Scratch floats any version needs for `args` (its scratch pointer unused).
size_t QuantAttendScratchFloats(const QuantAttendArgs& args);

// Checks the header of an encoded block (codecs::DecodeBlockHeader: magic, version, checksum,
// fields) and that it is an int8/int4 block without zstd whose geometry is (block_tokens >= rows,
// n_kv_heads, head_dim, any dtype) and whose group size and bits match; returns the run of its
// first `rows` tokens, pointing into `encoded`. Corruption for a bad header, InvalidArgument for
// a block of another codec or shape.
Result<QuantKvRun> QuantRunFromEncodedBlock(std::span<const std::byte> encoded,
                                            uint32_t n_kv_heads, uint32_t head_dim, uint32_t bits,
                                            uint32_t group_size, uint32_t rows);

namespace ref {
void AttendQuant(const QuantAttendArgs& args);
// As AttendQuant, with the scores and the weights of the integer versions (the query quantized
// to 15 bits per head and key group, the weights times the value scales to 15 bits per step,
// head and value group, above).
void AttendQuantQ15(const QuantAttendArgs& args);
}  // namespace ref

// Defined on x86-64 only; call only where the CPU has the features (GetQuantAttentionKernels
// checks).
namespace avx2 {
void AttendQuant(const QuantAttendArgs& args);
}  // namespace avx2
namespace avx512 {
void AttendQuant(const QuantAttendArgs& args);
}  // namespace avx512
namespace avx512vnni {
void AttendQuant(const QuantAttendArgs& args);
}  // namespace avx512vnni

struct QuantAttentionKernels {
  QuantKernelIsa isa;  // kScalar, kAvx2, kAvx512 or kAvx512Vnni: the set actually selected.
  void (*attend_quant)(const QuantAttendArgs& args);
  // The scalar version attend_quant matches: ref::AttendQuant, or ref::AttendQuantQ15 for integer
  // scores.
  void (*reference)(const QuantAttendArgs& args);
};

bool CpuHasAvx512F();
// AVX-512F/BW/VL/VNNI/VBMI, with the OS saving the ZMM state.
bool CpuHasAvx512Vnni();
const QuantAttentionKernels& GetQuantAttentionKernels(QuantKernelIsa isa = QuantKernelIsa::kAuto);

}  // namespace kvtier::runtime
