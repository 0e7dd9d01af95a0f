// The per-thread bodies of the quantization kernels, as functions that compile both for the GPU
// (codec_kernels.cu launches one thread per index) and for the host (quant_host.cc runs the same
// bodies over every index), so the layout and rounding logic the GPU runs is testable against the
// CPU codec on machines without a GPU.
//
// Rounding: every arithmetic step is one IEEE round-to-nearest operation, spelled with the _rn
// intrinsics on the device (never fused or approximated) and with plain operators on the host
// (compiled with -ffp-contract=off). The FP16/BF16 conversions are the bit manipulations of the
// scalar reference (codecs/kernels_scalar.cc), so they agree on every input.
//
// Thread safety: pure functions over caller-owned memory (a body writes only its own outputs).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "cuda/kernel_launch.h"
#include "cuda/paged_layout.h"

namespace kvtier::cuda::internal {

KV_HOST_DEVICE inline uint32_t FloatBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
#endif
}

KV_HOST_DEVICE inline float BitsFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

#if defined(__CUDA_ARCH__)
KV_HOST_DEVICE inline float Add(float a, float b) { return __fadd_rn(a, b); }
KV_HOST_DEVICE inline float Sub(float a, float b) { return __fsub_rn(a, b); }
KV_HOST_DEVICE inline float Mul(float a, float b) { return __fmul_rn(a, b); }
KV_HOST_DEVICE inline float Div(float a, float b) { return __fdiv_rn(a, b); }
KV_HOST_DEVICE inline float RoundEven(float x) { return rintf(x); }
KV_HOST_DEVICE inline bool Finite(float x) { return isfinite(x); }
#else
inline float Add(float a, float b) { return a + b; }
inline float Sub(float a, float b) { return a - b; }
inline float Mul(float a, float b) { return a * b; }
inline float Div(float a, float b) { return a / b; }
inline float RoundEven(float x) { return std::nearbyint(x); }  // Default mode: ties to even.
inline bool Finite(float x) { return std::isfinite(x); }
#endif

KV_HOST_DEVICE inline uint32_t ShiftRoundEven(uint32_t m, uint32_t shift) {
  const uint32_t kept = m >> shift;
  const uint32_t rest = m & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  return (rest > half || (rest == half && (kept & 1u) != 0)) ? kept + 1 : kept;
}

KV_HOST_DEVICE inline float F16ToF32(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t exp = (uint32_t{h} >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    const float mag = Mul(static_cast<float>(mant), 0x1p-24f);
    return sign != 0 ? -mag : mag;
  }
  if (exp == 31) {
    const uint32_t nan_quiet = mant != 0 ? 0x400000u : 0u;
    return BitsFloat(sign | 0x7f800000u | nan_quiet | (mant << 13));
  }
  return BitsFloat(sign | ((exp + 112u) << 23) | (mant << 13));
}

KV_HOST_DEVICE inline uint16_t F32ToF16(float f) {
  const uint32_t x = FloatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  const uint32_t exp = abs >> 23;
  const uint32_t mant = abs & 0x7fffffu;
  if (exp == 0xff) {
    const uint32_t nan_bits = mant != 0 ? (0x200u | (mant >> 13)) : 0u;
    return static_cast<uint16_t>(sign | 0x7c00u | nan_bits);
  }
  if (exp >= 143) return static_cast<uint16_t>(sign | 0x7c00u);
  if (exp >= 113) {
    const uint32_t h = ((exp - 112u) << 10) | (mant >> 13);
    const uint32_t rest = mant & 0x1fffu;
    const bool up = rest > 0x1000u || (rest == 0x1000u && (h & 1u) != 0);
    return static_cast<uint16_t>(sign | (up ? h + 1 : h));
  }
  if (exp < 102) return static_cast<uint16_t>(sign);
  return static_cast<uint16_t>(sign | ShiftRoundEven(mant | 0x800000u, 126u - exp));
}

KV_HOST_DEVICE inline uint16_t F32ToBF16(float f) {
  const uint32_t x = FloatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// Element i of a half that starts at `base`.
KV_HOST_DEVICE inline float Load(const std::byte* base, uint64_t i, uint32_t elem) {
  if (elem == kElemF32) return reinterpret_cast<const float*>(base)[i];
  const uint16_t h = reinterpret_cast<const uint16_t*>(base)[i];
  return elem == kElemF16 ? F16ToF32(h) : BitsFloat(uint32_t{h} << 16);
}

KV_HOST_DEVICE inline void Store(std::byte* base, uint64_t i, uint32_t elem, float v) {
  if (elem == kElemF32) {
    reinterpret_cast<float*>(base)[i] = v;
  } else {
    reinterpret_cast<uint16_t*>(base)[i] = elem == kElemF16 ? F32ToF16(v) : F32ToBF16(v);
  }
}

KV_HOST_DEVICE inline uint64_t HalfBytes(const QuantArgs& a) {
  return uint64_t{a.tokens} * a.channels * (a.elem == kElemF32 ? 4u : 2u);
}

KV_HOST_DEVICE inline float QMax(uint32_t bits) { return static_cast<float>((1u << bits) - 1); }

KV_HOST_DEVICE inline bool Quantizable(float x) {
  return Finite(x) && x >= -65504.0f && x <= 65504.0f;  // Within the FP16 range.
}

KV_HOST_DEVICE inline uint16_t* Param(std::byte* stage, uint64_t offset, uint64_t index) {
  return reinterpret_cast<uint16_t*>(stage + offset) + index;
}

KV_HOST_DEVICE inline void WriteParams(std::byte* stage, uint64_t scale_off, uint64_t zero_off,
                                       uint64_t index, float mn, float mx, float qmax) {
  *Param(stage, scale_off, index) = F32ToF16(Div(Sub(mx, mn), qmax));
  *Param(stage, zero_off, index) = F32ToF16(Add(mn, 0.0f));  // -0 becomes +0.
}

// Keys, index i = (key group, channel): tokens scanned in order with the CPU's comparisons.
// Returns the flags of block b's inputs it saw.
KV_HOST_DEVICE inline uint32_t KeyParamsAt(const QuantArgs& a, uint32_t b, uint64_t i) {
  const auto grp = static_cast<uint32_t>(i / a.channels);
  const auto c = static_cast<uint32_t>(i % a.channels);
  const uint32_t t0 = grp * a.group_size;
  const uint32_t t1 = a.tokens < t0 + a.group_size ? a.tokens : t0 + a.group_size;
  const std::byte* k = a.raw[b];
  float mn = Load(k, uint64_t{t0} * a.channels + c, a.elem);
  float mx = mn;
  bool ok = Quantizable(mn);
  for (uint32_t t = t0 + 1; t < t1; ++t) {
    const float x = Load(k, uint64_t{t} * a.channels + c, a.elem);
    ok = ok && Quantizable(x);
    mn = x < mn ? x : mn;
    mx = x > mx ? x : mx;
  }
  WriteParams(a.stage[b], a.k_scale_offset, a.k_zero_offset, i, mn, mx, QMax(a.bits));
  return ok ? 0u : kFlagNotQuantizable;
}

// Values, index i = (token, value group): channels scanned in order.
KV_HOST_DEVICE inline uint32_t ValueParamsAt(const QuantArgs& a, uint32_t b, uint64_t i) {
  const auto t = static_cast<uint32_t>(i / a.value_groups);
  const auto j = static_cast<uint32_t>(i % a.value_groups);
  const uint32_t c0 = j * a.group_size;
  const uint32_t n = a.group_size < a.channels - c0 ? a.group_size : a.channels - c0;
  const std::byte* v = a.raw[b] + HalfBytes(a);
  const uint64_t first = uint64_t{t} * a.channels + c0;
  float mn = Load(v, first, a.elem);
  float mx = mn;
  bool ok = Quantizable(mn);
  for (uint32_t k = 1; k < n; ++k) {
    const float x = Load(v, first + k, a.elem);
    ok = ok && Quantizable(x);
    mn = x < mn ? x : mn;
    mx = x > mx ? x : mx;
  }
  WriteParams(a.stage[b], a.v_scale_offset, a.v_zero_offset, i, mn, mx, QMax(a.bits));
  return ok ? 0u : kFlagNotQuantizable;
}

// Index of the (scale, zero) pair of element e of `half` in the f16 parameter arrays.
KV_HOST_DEVICE inline uint64_t ParamIndex(const QuantArgs& a, uint32_t half, uint64_t e) {
  const uint64_t t = e / a.channels;
  const uint64_t c = e % a.channels;
  if (half == 0) return (t / a.group_size) * a.channels + c;
  return t * a.value_groups + c / a.group_size;
}

// The stored f16 parameter `index` of the array at `offset` of a stage payload, as a float.
KV_HOST_DEVICE inline float ParamF32(const std::byte* stage, uint64_t offset, uint64_t index) {
  return F16ToF32(reinterpret_cast<const uint16_t*>(stage + offset)[index]);
}

KV_HOST_DEVICE inline void ReadParams(const QuantArgs& a, std::byte* stage, uint32_t half,
                                      uint64_t e, float* scale, float* zero) {
  const uint64_t p = ParamIndex(a, half, e);
  *scale = ParamF32(stage, half == 0 ? a.k_scale_offset : a.v_scale_offset, p);
  *zero = ParamF32(stage, half == 0 ? a.k_zero_offset : a.v_zero_offset, p);
}

// The code of element e of one half's codes: a byte (int8), or a nibble, low for even e (int4).
KV_HOST_DEVICE inline uint32_t CodeOf(const uint8_t* codes, uint32_t bits, uint64_t e) {
  if (bits == 8) return codes[e];
  const uint32_t byte = codes[e / 2];
  return e % 2 == 0 ? (byte & 0x0fu) : (byte >> 4);
}

KV_HOST_DEVICE inline uint32_t QuantizeElement(const QuantArgs& a, uint32_t b, uint32_t half,
                                               uint64_t e) {
  float scale = 0.0f;
  float zero = 0.0f;
  ReadParams(a, a.stage[b], half, e, &scale, &zero);
  const float inv = scale > 0.0f ? Div(1.0f, scale) : 0.0f;
  const float x = Load(a.raw[b] + half * HalfBytes(a), e, a.elem);
  float q = RoundEven(Mul(Sub(x, zero), inv));
  q = q < 0.0f ? 0.0f : q;
  const float qmax = QMax(a.bits);
  q = q > qmax ? qmax : q;
  return static_cast<uint32_t>(q);
}

// Code byte i of `half` (two elements for int4, low nibble first; an odd tail leaves 0 on top).
KV_HOST_DEVICE inline void CodeByteAt(const QuantArgs& a, uint32_t b, uint32_t half, uint64_t i) {
  const uint64_t n = uint64_t{a.tokens} * a.channels;
  uint32_t byte = 0;
  if (a.bits == 8) {
    byte = QuantizeElement(a, b, half, i);
  } else {
    byte = QuantizeElement(a, b, half, 2 * i);
    if (2 * i + 1 < n) byte |= QuantizeElement(a, b, half, 2 * i + 1) << 4;
  }
  const uint64_t codes = half == 0 ? a.k_codes_offset : a.v_codes_offset;
  reinterpret_cast<uint8_t*>(a.stage[b] + codes)[i] = static_cast<uint8_t>(byte);
}

// Element e of `half`: x' = f32(q) * scale + zero, stored in the block's dtype. Returns the flags.
KV_HOST_DEVICE inline uint32_t DequantizeAt(const QuantArgs& a, uint32_t b, uint32_t half,
                                            uint64_t e) {
  std::byte* stage = a.stage[b];
  float scale = 0.0f;
  float zero = 0.0f;
  ReadParams(a, stage, half, e, &scale, &zero);
  const bool bad = !Finite(scale) || !Finite(zero) || scale < 0.0f;
  const auto* codes =
      reinterpret_cast<const uint8_t*>(stage + (half == 0 ? a.k_codes_offset : a.v_codes_offset));
  const uint32_t code = CodeOf(codes, a.bits, e);
  Store(a.raw[b] + half * HalfBytes(a), e, a.elem, Add(Mul(static_cast<float>(code), scale), zero));
  return bad ? kFlagBadParams : 0u;
}

KV_HOST_DEVICE inline uint64_t CodeBytes(const QuantArgs& a) {
  const uint64_t n = uint64_t{a.tokens} * a.channels;
  return a.bits == 8 ? n : (n + 1) / 2;
}

// Host runs of the kernels (quant_host.cc): every index of every block, in kernel order.
void QuantizeHost(const QuantArgs& args);
void DequantizeHost(const QuantArgs& args);

}  // namespace kvtier::cuda::internal
