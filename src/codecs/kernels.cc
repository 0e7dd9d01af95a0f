// Kernel selection. The tables are immutable constants; the CPU check runs once per process in a
// thread-safe function-local static, which is read-only afterwards (no mutable global state).
#include "codecs/kernels.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace kvtier::codecs {

namespace {

constexpr Kernels kScalarKernels = {
    .isa = KernelIsa::kScalar,
    .shuffle16 = ref::Shuffle16,
    .unshuffle16 = ref::Unshuffle16,
    .shuffle32 = ref::Shuffle32,
    .unshuffle32 = ref::Unshuffle32,
    .f16_to_f32 = ref::F16ToF32,
    .f32_to_f16 = ref::F32ToF16,
    .bf16_to_f32 = ref::BF16ToF32,
    .f32_to_bf16 = ref::F32ToBF16,
    .all_finite = ref::AllFinite,
    .min_max_accumulate = ref::MinMaxAccumulate,
    .min_max = ref::MinMax,
    .min_max_groups = ref::MinMaxGroups,
    .quant_params = ref::QuantParams,
    .quantize_uniform = ref::QuantizeUniform,
    .quantize_per_channel = ref::QuantizePerChannel,
    .quantize_groups = ref::QuantizeGroups,
    .dequantize_uniform = ref::DequantizeUniform,
    .dequantize_per_channel = ref::DequantizePerChannel,
    .pack_nibbles = ref::PackNibbles,
    .unpack_nibbles = ref::UnpackNibbles,
};

#if defined(__x86_64__)
constexpr Kernels kAvx2Kernels = {
    .isa = KernelIsa::kAvx2,
    .shuffle16 = avx2::Shuffle16,
    .unshuffle16 = avx2::Unshuffle16,
    .shuffle32 = ref::Shuffle32,  // 32-bit planes are rare (F32 blocks); scalar is enough.
    .unshuffle32 = ref::Unshuffle32,
    .f16_to_f32 = avx2::F16ToF32,
    .f32_to_f16 = avx2::F32ToF16,
    .bf16_to_f32 = avx2::BF16ToF32,
    .f32_to_bf16 = avx2::F32ToBF16,
    .all_finite = avx2::AllFinite,
    .min_max_accumulate = avx2::MinMaxAccumulate,
    .min_max = avx2::MinMax,
    .min_max_groups = avx2::MinMaxGroups,
    .quant_params = avx2::QuantParams,
    .quantize_uniform = avx2::QuantizeUniform,
    .quantize_per_channel = avx2::QuantizePerChannel,
    .quantize_groups = avx2::QuantizeGroups,
    .dequantize_uniform = avx2::DequantizeUniform,
    .dequantize_per_channel = avx2::DequantizePerChannel,
    .pack_nibbles = avx2::PackNibbles,
    .unpack_nibbles = avx2::UnpackNibbles,
};

// Where AVX-512 gains nothing (byte shuffles and nibble packing are already one pass at the
// AVX2 width; MinMax runs once per block only when a value is out of range), the AVX2 kernels.
constexpr Kernels kAvx512Kernels = {
    .isa = KernelIsa::kAvx512,
    .shuffle16 = avx2::Shuffle16,
    .unshuffle16 = avx2::Unshuffle16,
    .shuffle32 = ref::Shuffle32,
    .unshuffle32 = ref::Unshuffle32,
    .f16_to_f32 = avx512::F16ToF32,
    .f32_to_f16 = avx512::F32ToF16,
    .bf16_to_f32 = avx512::BF16ToF32,
    .f32_to_bf16 = avx2::F32ToBF16,
    .all_finite = avx512::AllFinite,
    .min_max_accumulate = avx512::MinMaxAccumulate,
    .min_max = avx2::MinMax,
    .min_max_groups = avx512::MinMaxGroups,
    .quant_params = avx512::QuantParams,
    .quantize_uniform = avx512::QuantizeUniform,
    .quantize_per_channel = avx512::QuantizePerChannel,
    .quantize_groups = avx512::QuantizeGroups,
    .dequantize_uniform = avx512::DequantizeUniform,
    .dequantize_per_channel = avx512::DequantizePerChannel,
    .pack_nibbles = avx2::PackNibbles,
    .unpack_nibbles = avx2::UnpackNibbles,
};
#endif

bool DetectAvx2() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  // clang 14 does not know "f16c" in __builtin_cpu_supports, so F16C comes from CPUID leaf 1
  // (ECX bit 29); the OS support for YMM state is implied by a positive "avx2" answer.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  return f16c && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

bool DetectAvx512() {
#if defined(__x86_64__)
  // __builtin_cpu_supports answers "avx512*" only when the OS also saves the ZMM and opmask state.
  return CpuHasAvx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

bool DetectAvx512Bf16() {
#if defined(__x86_64__)
  // CPUID leaf 7, sub-leaf 1, EAX bit 5 (not every compiler's __builtin_cpu_supports knows it).
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return CpuHasAvx512() && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0 &&
         (eax & (1u << 5)) != 0;
#else
  return false;
#endif
}

}  // namespace

bool CpuHasAvx2() {
  static const bool has_avx2 = DetectAvx2();
  return has_avx2;
}

bool CpuHasAvx512() {
  static const bool has_avx512 = DetectAvx512();
  return has_avx512;
}

bool CpuHasAvx512Bf16() {
  static const bool has_avx512_bf16 = DetectAvx512Bf16();
  return has_avx512_bf16;
}

const Kernels& GetKernels(KernelIsa isa) {
#if defined(__x86_64__)
  if ((isa == KernelIsa::kAuto || isa == KernelIsa::kAvx512) && CpuHasAvx512()) {
    return kAvx512Kernels;
  }
  if (isa != KernelIsa::kScalar && CpuHasAvx2()) return kAvx2Kernels;
#else
  (void)isa;
#endif
  return kScalarKernels;
}

}  // namespace kvtier::codecs
