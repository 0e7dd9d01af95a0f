#include "runtime/kernels.h"

#include <algorithm>
#include <bit>
#include <cmath>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace kvtier::runtime {

namespace ref {

float HalfToFloat(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in F32.
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return std::bit_cast<float>(std::bit_cast<uint32_t>(magnitude) | sign);
  }
  if (exponent == 31) {
    // Infinity, or NaN made quiet (bit 22 set) as F16C does.
    const uint32_t quiet = mantissa != 0 ? 0x400000u : 0u;
    return std::bit_cast<float>(sign | 0x7f800000u | quiet | (mantissa << 13));
  }
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

uint16_t FloatToHalf(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) {  // NaN: quiet it and keep the top mantissa bits, as F16C does.
    return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  }
  if (abs >= 0x47800000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 2^16: infinity.
  if (abs < 0x38800000u) {
    // Below the smallest normal half (2^-14): adding 0.5 shifts the value so that the F32
    // adder rounds it to a multiple of 2^-24 (nearest even) in the low mantissa bits.
    const float shifted = std::bit_cast<float>(abs) + 0.5f;
    return static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(shifted) - 0x3f000000u));
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits to nearest even;
  // a carry out of the mantissa correctly bumps the exponent (up to infinity).
  const uint32_t mantissa_odd = (abs >> 13) & 1u;
  abs += 0xc8000000u + 0xfffu + mantissa_odd;
  return static_cast<uint16_t>(sign | (abs >> 13));
}

void HalfToFloatN(const uint16_t* src, size_t n, float* dst) {
  for (size_t i = 0; i < n; ++i) dst[i] = HalfToFloat(src[i]);
}

void FloatToHalfN(const float* src, size_t n, uint16_t* dst) {
  for (size_t i = 0; i < n; ++i) dst[i] = FloatToHalf(src[i]);
}

void DotRowsF16(const float* q, const uint16_t* k, size_t stride_elems, size_t n_rows,
                size_t head_dim, float* scores) {
  for (size_t i = 0; i < n_rows; ++i) {
    const uint16_t* row = k + i * stride_elems;
    float sum = 0.0f;
    for (size_t d = 0; d < head_dim; ++d) sum += q[d] * HalfToFloat(row[d]);
    scores[i] = sum;
  }
}

void WeightedSumRowsF16(const float* weights, const uint16_t* v, size_t stride_elems, size_t n_rows,
                        size_t head_dim, float* out) {
  for (size_t i = 0; i < n_rows; ++i) {
    const uint16_t* row = v + i * stride_elems;
    for (size_t d = 0; d < head_dim; ++d) out[d] += weights[i] * HalfToFloat(row[d]);
  }
}

namespace {

float DotF16(const float* q, const uint16_t* k, size_t head_dim) {
  float sum = 0.0f;
  for (size_t d = 0; d < head_dim; ++d) sum += q[d] * HalfToFloat(k[d]);
  return sum;
}

}  // namespace

void AttendF16(const AttendArgs& a) {
  const size_t head_dim = a.head_dim;
  const size_t kv_dim = size_t{a.n_kv_heads} * head_dim;
  const uint32_t group = a.n_heads / a.n_kv_heads;
  if (a.run_mass != nullptr) std::fill_n(a.run_mass, a.n_runs, 0.0f);
  for (uint32_t h = 0; h < a.n_heads; ++h) {
    const float* q = a.q + h * head_dim;
    const size_t head_offset = size_t{h / group} * head_dim;
    auto score = [&](size_t run, size_t row) {
      return DotF16(q, a.runs[run].k + row * kv_dim + head_offset, head_dim);
    };
    float max_score = -INFINITY;
    for (size_t i = 0; i < a.n_runs; ++i) {
      for (size_t j = 0; j < a.runs[i].rows; ++j) max_score = std::max(max_score, score(i, j));
    }
    float sum = 0.0f;
    for (size_t i = 0; i < a.n_runs; ++i) {
      for (size_t j = 0; j < a.runs[i].rows; ++j) sum += std::exp(score(i, j) - max_score);
    }
    if (a.head_lse != nullptr) a.head_lse[h] = max_score + std::log(sum);
    float* out = a.out + h * head_dim;
    std::fill_n(out, head_dim, 0.0f);
    for (size_t i = 0; i < a.n_runs; ++i) {
      float run_sum = 0.0f;
      for (size_t j = 0; j < a.runs[i].rows; ++j) {
        const float e = std::exp(score(i, j) - max_score);
        const uint16_t* v = a.runs[i].v + j * kv_dim + head_offset;
        for (size_t d = 0; d < head_dim; ++d) out[d] += e / sum * HalfToFloat(v[d]);
        run_sum += e;
      }
      if (a.run_mass != nullptr) a.run_mass[i] += run_sum / sum / static_cast<float>(a.n_heads);
      if (a.run_lse != nullptr) a.run_lse[i * a.n_heads + h] = max_score + std::log(run_sum);
    }
  }
}

}  // namespace ref

void MergeAttendParts(uint32_t n_heads, uint32_t head_dim, const float* out_b, const float* lse_b,
                      float* out_a, float* lse_a) {
  for (size_t h = 0; h < n_heads; ++h) {
    const float total = std::max(lse_a[h], lse_b[h]);
    const float wa = std::exp(lse_a[h] - total);
    const float wb = std::exp(lse_b[h] - total);
    const float inv = 1.0f / (wa + wb);
    for (size_t d = h * head_dim; d < (h + 1) * head_dim; ++d) {
      out_a[d] = (wa * out_a[d] + wb * out_b[d]) * inv;
    }
    lse_a[h] = total + std::log(wa + wb);
  }
}

void RunMassFromLse(uint32_t n_heads, size_t n_runs, const float* run_lse, const float* head_lse,
                    float* run_mass) {
  for (size_t i = 0; i < n_runs; ++i) {
    float mass = 0.0f;
    for (size_t h = 0; h < n_heads; ++h) mass += std::exp(run_lse[i * n_heads + h] - head_lse[h]);
    run_mass[i] = mass / static_cast<float>(n_heads);
  }
}

size_t AttendScratchFloats(size_t n_heads, size_t n_runs) {
  // The AVX2 version's layout (kernels_avx2.cc): running max, sum and run sum per head, one
  // step's scores per head, and one log-sum-exp per (run, head) for the run masses.
  return n_heads * (3 + kAttendTileRows + n_runs);
}

namespace {

constexpr AttentionKernels kScalarKernels = {
    .isa = KernelIsa::kScalar,
    .half_to_float = ref::HalfToFloatN,
    .float_to_half = ref::FloatToHalfN,
    .dot_rows_f16 = ref::DotRowsF16,
    .weighted_sum_rows_f16 = ref::WeightedSumRowsF16,
    .attend_f16 = ref::AttendF16,
};

#if defined(__x86_64__)
constexpr AttentionKernels kAvx2Kernels = {
    .isa = KernelIsa::kAvx2,
    .half_to_float = avx2::HalfToFloatN,
    .float_to_half = avx2::FloatToHalfN,
    .dot_rows_f16 = avx2::DotRowsF16,
    .weighted_sum_rows_f16 = avx2::WeightedSumRowsF16,
    .attend_f16 = avx2::AttendF16,
};
#endif

bool DetectAvx2F16c() {
#if defined(__x86_64__)
  // cpuid rather than __builtin_cpu_supports: clang 14 does not know the "f16c" feature name.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
  const bool fma = (ecx & bit_FMA) != 0;
  const bool f16c = (ecx & bit_F16C) != 0;
  const bool osxsave = (ecx & bit_OSXSAVE) != 0;
  if (!fma || !f16c || !osxsave) return false;
  // The OS must save the YMM registers (XCR0 bits 1 and 2).
  uint32_t xcr0_lo = 0, xcr0_hi = 0;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  if ((xcr0_lo & 0x6u) != 0x6u) return false;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (ebx & bit_AVX2) != 0;
#else
  return false;
#endif
}

}  // namespace

bool CpuHasAvx2F16c() {
  static const bool has = DetectAvx2F16c();
  return has;
}

const AttentionKernels& GetAttentionKernels(KernelIsa isa) {
#if defined(__x86_64__)
  if (isa != KernelIsa::kScalar && CpuHasAvx2F16c()) return kAvx2Kernels;
#else
  (void)isa;
#endif
  return kScalarKernels;
}

void RmsNorm(const float* x, const float* weight, size_t n, float eps, float* out) {
  float sum_squares = 0.0f;
  for (size_t i = 0; i < n; ++i) sum_squares += x[i] * x[i];
  const float scale = 1.0f / std::sqrt(sum_squares / static_cast<float>(n) + eps);
  for (size_t i = 0; i < n; ++i) out[i] = weight[i] * (scale * x[i]);
}

void Softmax(float* x, size_t n) {
  const float max_value = *std::max_element(x, x + n);
  float sum = 0.0f;
  for (size_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max_value);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  for (size_t i = 0; i < n; ++i) x[i] *= inv;
}

void RopeInPlace(float* x, size_t n_heads, size_t head_dim, uint32_t pos, const float* inv_freq) {
  const size_t pairs = head_dim / 2;
  for (size_t i = 0; i < pairs; ++i) {
    const float angle = static_cast<float>(pos) * inv_freq[i];
    const float c = std::cos(angle);
    const float s = std::sin(angle);
    for (size_t h = 0; h < n_heads; ++h) {
      float* p = x + h * head_dim + 2 * i;
      const float x0 = p[0];
      const float x1 = p[1];
      p[0] = x0 * c - x1 * s;
      p[1] = x0 * s + x1 * c;
    }
  }
}

void SwiGluInPlace(float* gate, const float* up, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

}  // namespace kvtier::runtime
