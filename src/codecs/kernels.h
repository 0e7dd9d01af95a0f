// Codec kernels: byte-plane shuffles, FP16/BF16 <-> F32 conversion, min/max reduction, and
// affine quantize/dequantize to 8-bit codes, each as a plain scalar reference (namespace `ref`)
// and, where it pays, an AVX2/F16C version (namespace `avx2`) and an AVX-512 version (namespace
// `avx512`). A Kernels table holds one set; GetKernels() picks the widest set the CPU runs (AVX-512
// F/BW/VL, else AVX2 with F16C and FMA, else scalar) at run time, so the library still runs on
// CPUs without them.
//
// Why several: the scalar versions define the semantics. Tests check the SIMD ones bit-exactly
// against them, including the lossy ones: quantization is specified as
//   q = clamp(nearbyint((x - zero) * inv_scale), 0, qmax)       (round half to even)
//   x' = float(q) * scale + zero                                (a multiply, then an add; no FMA)
// in F32, so both paths produce identical codes and identical reconstructions.
//
// Preconditions (programmer errors, not checked): pointers valid for `n` elements, outputs not
// overlapping inputs. Quantization inputs are finite (callers check with AllFinite first).
//
// Thread safety: pure functions over caller-owned memory; the tables are immutable.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvtier::codecs {

// Which kernel set a caller wants. kAuto takes the widest the CPU runs.
enum class KernelIsa : uint8_t {
  kAuto = 0,
  kScalar = 1,
  kAvx2 = 2,    // Falls back to scalar when the CPU lacks AVX2/F16C/FMA.
  kAvx512 = 3,  // Falls back to AVX2 (then scalar) when the CPU lacks AVX-512 F/BW/VL.
};

struct Kernels {
  KernelIsa isa;  // kScalar, kAvx2 or kAvx512: the set actually selected.

  // Byte planes of 16-bit elements: dst[0, n) = low bytes, dst[n, 2n) = high bytes.
  void (*shuffle16)(const uint8_t* src, size_t n, uint8_t* dst);
  void (*unshuffle16)(const uint8_t* src, size_t n, uint8_t* dst);
  // Byte planes of 32-bit elements: plane b (0 = least significant) at dst[b * n, (b + 1) * n).
  void (*shuffle32)(const uint8_t* src, size_t n, uint8_t* dst);
  void (*unshuffle32)(const uint8_t* src, size_t n, uint8_t* dst);

  // IEEE binary16 <-> binary32, round half to even; subnormals, infinities and NaN handled.
  void (*f16_to_f32)(const uint16_t* src, size_t n, float* dst);
  void (*f32_to_f16)(const float* src, size_t n, uint16_t* dst);
  // bfloat16 <-> binary32, round half to even; NaN stays NaN (quieted).
  void (*bf16_to_f32)(const uint16_t* src, size_t n, float* dst);
  void (*f32_to_bf16)(const float* src, size_t n, uint16_t* dst);

  // True when no element is NaN or infinite.
  bool (*all_finite)(const float* x, size_t n);
  // Elementwise mins[i] = min(row[i], mins[i]), maxs[i] = max(row[i], maxs[i]).
  void (*min_max_accumulate)(const float* row, size_t n, float* mins, float* maxs);
  // Min and max of x[0, n), n >= 1.
  void (*min_max)(const float* x, size_t n, float* min_out, float* max_out);
  // Min and max of each group of `group` consecutive elements of x[0, n) (the last one may be
  // shorter): mins[j], maxs[j] for j < ceil(n / group); n, group >= 1. Which of two equal zeros
  // (+0, -0) is reported may differ between kernel sets; QuantParams makes that irrelevant.
  void (*min_max_groups)(const float* x, size_t n, size_t group, float* mins, float* maxs);
  // Quantization parameters of n groups from their finite mins and maxs, as the block format
  // stores them (docs/codecs.md):
  //   scale16 = f16((max - min + 0) / qmax), zero16 = f16(min + 0)  (+ 0 turns -0 into +0)
  //   zero[i] = f32(zero16), inv_scale[i] = f32(scale16) > 0 ? 1 / f32(scale16) : 0
  // scale16 and zero16 are written little-endian at scale_le + 2 i and zero_le + 2 i (any
  // alignment). `zero` may be `mins` (updated in place); nothing else may overlap.
  void (*quant_params)(const float* mins, const float* maxs, size_t n, float qmax,
                       uint8_t* scale_le, uint8_t* zero_le, float* zero, float* inv_scale);

  // Codes with one (zero, inv_scale) pair for all n elements.
  void (*quantize_uniform)(const float* x, size_t n, float zero, float inv_scale, float qmax,
                           uint8_t* codes);
  // Codes with a (zero[i], inv_scale[i]) pair per element position (per channel).
  void (*quantize_per_channel)(const float* x, size_t n, const float* zero, const float* inv_scale,
                               float qmax, uint8_t* codes);
  // Codes with the pair (zero[i / group], inv_scale[i / group]) for element i (groups of
  // consecutive elements, the last one possibly shorter).
  void (*quantize_groups)(const float* x, size_t n, size_t group, const float* zero,
                          const float* inv_scale, float qmax, uint8_t* codes);
  void (*dequantize_uniform)(const uint8_t* codes, size_t n, float zero, float scale, float* out);
  void (*dequantize_per_channel)(const uint8_t* codes, size_t n, const float* zero,
                                 const float* scale, float* out);

  // Two 4-bit codes per byte, element 2i in the low nibble; an odd tail leaves the high nibble 0.
  // Codes must be < 16.
  void (*pack_nibbles)(const uint8_t* codes, size_t n, uint8_t* packed);
  void (*unpack_nibbles)(const uint8_t* packed, size_t n, uint8_t* codes);
};

// True when this CPU can run the AVX2 set.
bool CpuHasAvx2();
// True when this CPU (and its OS) can run the AVX-512 set: AVX-512 F, BW and VL besides AVX2.
bool CpuHasAvx512();
// True when the AVX-512 set can also use AVX512_BF16 (VCVTNE2PS2BF16: two F32 vectors to one of
// BF16, round to nearest even, subnormal inputs and outputs flushed to zero). Only for values
// known to be zero or normal, whose rounding it gives exactly as F32ToBF16 does.
bool CpuHasAvx512Bf16();
// The kernel set for `isa` (see KernelIsa). The reference lives for the whole program.
const Kernels& GetKernels(KernelIsa isa = KernelIsa::kAuto);

// Scalar element conversions, also used directly by the codecs for single values.
float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);
float BF16ToF32(uint16_t h);
uint16_t F32ToBF16(float f);

namespace ref {
void Shuffle16(const uint8_t* src, size_t n, uint8_t* dst);
void Unshuffle16(const uint8_t* src, size_t n, uint8_t* dst);
void Shuffle32(const uint8_t* src, size_t n, uint8_t* dst);
void Unshuffle32(const uint8_t* src, size_t n, uint8_t* dst);
void F16ToF32(const uint16_t* src, size_t n, float* dst);
void F32ToF16(const float* src, size_t n, uint16_t* dst);
void BF16ToF32(const uint16_t* src, size_t n, float* dst);
void F32ToBF16(const float* src, size_t n, uint16_t* dst);
bool AllFinite(const float* x, size_t n);
void MinMaxAccumulate(const float* row, size_t n, float* mins, float* maxs);
void MinMax(const float* x, size_t n, float* min_out, float* max_out);
void MinMaxGroups(const float* x, size_t n, size_t group, float* mins, float* maxs);
void QuantParams(const float* mins, const float* maxs, size_t n, float qmax, uint8_t* scale_le,
                 uint8_t* zero_le, float* zero, float* inv_scale);
void QuantizeUniform(const float* x, size_t n, float zero, float inv_scale, float qmax,
                     uint8_t* codes);
void QuantizePerChannel(const float* x, size_t n, const float* zero, const float* inv_scale,
                        float qmax, uint8_t* codes);
void QuantizeGroups(const float* x, size_t n, size_t group, const float* zero,
                    const float* inv_scale, float qmax, uint8_t* codes);
void DequantizeUniform(const uint8_t* codes, size_t n, float zero, float scale, float* out);
void DequantizePerChannel(const uint8_t* codes, size_t n, const float* zero, const float* scale,
                          float* out);
void PackNibbles(const uint8_t* codes, size_t n, uint8_t* packed);
void UnpackNibbles(const uint8_t* packed, size_t n, uint8_t* codes);
}  // namespace ref

// Defined only on x86-64. Call only when CpuHasAvx2() (GetKernels does that check).
namespace avx2 {
void Shuffle16(const uint8_t* src, size_t n, uint8_t* dst);
void Unshuffle16(const uint8_t* src, size_t n, uint8_t* dst);
void F16ToF32(const uint16_t* src, size_t n, float* dst);
void F32ToF16(const float* src, size_t n, uint16_t* dst);
void BF16ToF32(const uint16_t* src, size_t n, float* dst);
void F32ToBF16(const float* src, size_t n, uint16_t* dst);
bool AllFinite(const float* x, size_t n);
void MinMaxAccumulate(const float* row, size_t n, float* mins, float* maxs);
void MinMax(const float* x, size_t n, float* min_out, float* max_out);
void MinMaxGroups(const float* x, size_t n, size_t group, float* mins, float* maxs);
void QuantParams(const float* mins, const float* maxs, size_t n, float qmax, uint8_t* scale_le,
                 uint8_t* zero_le, float* zero, float* inv_scale);
void QuantizeUniform(const float* x, size_t n, float zero, float inv_scale, float qmax,
                     uint8_t* codes);
void QuantizePerChannel(const float* x, size_t n, const float* zero, const float* inv_scale,
                        float qmax, uint8_t* codes);
void QuantizeGroups(const float* x, size_t n, size_t group, const float* zero,
                    const float* inv_scale, float qmax, uint8_t* codes);
void DequantizeUniform(const uint8_t* codes, size_t n, float zero, float scale, float* out);
void DequantizePerChannel(const uint8_t* codes, size_t n, const float* zero, const float* scale,
                          float* out);
void PackNibbles(const uint8_t* codes, size_t n, uint8_t* packed);
void UnpackNibbles(const uint8_t* packed, size_t n, uint8_t* codes);
}  // namespace avx2

// Defined only on x86-64. Call only when CpuHasAvx512() (GetKernels does that check). The
// kernels not listed here have no AVX-512 version: the AVX-512 table uses the AVX2 ones.
namespace avx512 {
void F16ToF32(const uint16_t* src, size_t n, float* dst);
void F32ToF16(const float* src, size_t n, uint16_t* dst);
void BF16ToF32(const uint16_t* src, size_t n, float* dst);
bool AllFinite(const float* x, size_t n);
void MinMaxAccumulate(const float* row, size_t n, float* mins, float* maxs);
void MinMaxGroups(const float* x, size_t n, size_t group, float* mins, float* maxs);
void QuantParams(const float* mins, const float* maxs, size_t n, float qmax, uint8_t* scale_le,
                 uint8_t* zero_le, float* zero, float* inv_scale);
void QuantizeUniform(const float* x, size_t n, float zero, float inv_scale, float qmax,
                     uint8_t* codes);
void QuantizePerChannel(const float* x, size_t n, const float* zero, const float* inv_scale,
                        float qmax, uint8_t* codes);
void QuantizeGroups(const float* x, size_t n, size_t group, const float* zero,
                    const float* inv_scale, float qmax, uint8_t* codes);
void DequantizeUniform(const uint8_t* codes, size_t n, float zero, float scale, float* out);
void DequantizePerChannel(const uint8_t* codes, size_t n, const float* zero, const float* scale,
                          float* out);
}  // namespace avx512

}  // namespace kvtier::codecs
