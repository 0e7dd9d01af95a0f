// Scalar reference kernels: the semantics every other kernel set must reproduce bit for bit.
// Written for clarity, not speed; each statement does one rounding so that no compiler can fuse
// a multiply and an add into an FMA and change the result.
#include <cmath>
#include <cstring>

#include "codecs/kernels.h"

namespace kvtier::codecs {

namespace {

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// Rounds m >> shift to nearest, ties to even (shift in 1..31).
uint32_t ShiftRoundEven(uint32_t m, uint32_t shift) {
  const uint32_t kept = m >> shift;
  const uint32_t rest = m & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  return (rest > half || (rest == half && (kept & 1u) != 0)) ? kept + 1 : kept;
}

}  // namespace

float F16ToF32(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24, exact in binary32.
    const float mag = static_cast<float>(mant) * 0x1p-24f;
    return sign != 0 ? -mag : mag;
  }
  if (exp == 31) {
    // Infinity, or NaN with its payload kept and the quiet bit set (as VCVTPH2PS does).
    const uint32_t nan_quiet = mant != 0 ? 0x400000u : 0u;
    return BitsFloat(sign | 0x7f800000u | nan_quiet | (mant << 13));
  }
  return BitsFloat(sign | ((exp + 112u) << 23) | (mant << 13));
}

uint16_t F32ToF16(float f) {
  const uint32_t x = FloatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  const uint32_t exp = abs >> 23;
  const uint32_t mant = abs & 0x7fffffu;
  if (exp == 0xff) {
    // Infinity, or NaN quieted with the top payload bits kept (as VCVTPS2PH does).
    const uint32_t nan_bits = mant != 0 ? (0x200u | (mant >> 13)) : 0u;
    return static_cast<uint16_t>(sign | 0x7c00u | nan_bits);
  }
  if (exp >= 143) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 2^16: overflow.
  if (exp >= 113) {
    // Normal binary16; a carry out of the mantissa correctly bumps the exponent (or gives inf).
    const uint32_t h = ((exp - 112u) << 10) | (mant >> 13);
    const uint32_t rest = mant & 0x1fffu;
    const bool up = rest > 0x1000u || (rest == 0x1000u && (h & 1u) != 0);
    return static_cast<uint16_t>(sign | (up ? h + 1 : h));
  }
  if (exp < 102) return static_cast<uint16_t>(sign);  // Below 2^-25: rounds to zero.
  // Subnormal binary16: value = (mant | implicit) * 2^(exp - 150) = m * 2^-24.
  const uint32_t m = ShiftRoundEven(mant | 0x800000u, 126u - exp);
  return static_cast<uint16_t>(sign | m);  // m == 0x400 is the smallest normal: still correct.
}

float BF16ToF32(uint16_t h) { return BitsFloat(uint32_t{h} << 16); }

uint16_t F32ToBF16(float f) {
  const uint32_t x = FloatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  const uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(rounded >> 16);
}

namespace ref {

void Shuffle16(const uint8_t* src, size_t n, uint8_t* dst) {
  for (size_t i = 0; i < n; ++i) {
    dst[i] = src[2 * i];
    dst[n + i] = src[2 * i + 1];
  }
}

void Unshuffle16(const uint8_t* src, size_t n, uint8_t* dst) {
  for (size_t i = 0; i < n; ++i) {
    dst[2 * i] = src[i];
    dst[2 * i + 1] = src[n + i];
  }
}

void Shuffle32(const uint8_t* src, size_t n, uint8_t* dst) {
  for (size_t i = 0; i < n; ++i) {
    for (size_t b = 0; b < 4; ++b) dst[b * n + i] = src[4 * i + b];
  }
}

void Unshuffle32(const uint8_t* src, size_t n, uint8_t* dst) {
  for (size_t i = 0; i < n; ++i) {
    for (size_t b = 0; b < 4; ++b) dst[4 * i + b] = src[b * n + i];
  }
}

void F16ToF32(const uint16_t* src, size_t n, float* dst) {
  for (size_t i = 0; i < n; ++i) dst[i] = codecs::F16ToF32(src[i]);
}

void F32ToF16(const float* src, size_t n, uint16_t* dst) {
  for (size_t i = 0; i < n; ++i) dst[i] = codecs::F32ToF16(src[i]);
}

void BF16ToF32(const uint16_t* src, size_t n, float* dst) {
  for (size_t i = 0; i < n; ++i) dst[i] = codecs::BF16ToF32(src[i]);
}

void F32ToBF16(const float* src, size_t n, uint16_t* dst) {
  for (size_t i = 0; i < n; ++i) dst[i] = codecs::F32ToBF16(src[i]);
}

bool AllFinite(const float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) return false;
  }
  return true;
}

void MinMaxAccumulate(const float* row, size_t n, float* mins, float* maxs) {
  for (size_t i = 0; i < n; ++i) {
    mins[i] = row[i] < mins[i] ? row[i] : mins[i];
    maxs[i] = row[i] > maxs[i] ? row[i] : maxs[i];
  }
}

void MinMax(const float* x, size_t n, float* min_out, float* max_out) {
  float mn = x[0];
  float mx = x[0];
  for (size_t i = 1; i < n; ++i) {
    mn = x[i] < mn ? x[i] : mn;
    mx = x[i] > mx ? x[i] : mx;
  }
  *min_out = mn;
  *max_out = mx;
}

void MinMaxGroups(const float* x, size_t n, size_t group, float* mins, float* maxs) {
  for (size_t i = 0, j = 0; i < n; i += group, ++j) {
    MinMax(x + i, n - i < group ? n - i : group, &mins[j], &maxs[j]);
  }
}

void QuantParams(const float* mins, const float* maxs, size_t n, float qmax, uint8_t* scale_le,
                 uint8_t* zero_le, float* zero, float* inv_scale) {
  for (size_t i = 0; i < n; ++i) {
    const float range = maxs[i] - mins[i];
    const float ratio = (range + 0.0f) / qmax;
    const uint16_t scale16 = codecs::F32ToF16(ratio);
    const uint16_t zero16 = codecs::F32ToF16(mins[i] + 0.0f);
    const float scale = codecs::F16ToF32(scale16);
    scale_le[2 * i] = static_cast<uint8_t>(scale16 & 0xffu);
    scale_le[2 * i + 1] = static_cast<uint8_t>(scale16 >> 8);
    zero_le[2 * i] = static_cast<uint8_t>(zero16 & 0xffu);
    zero_le[2 * i + 1] = static_cast<uint8_t>(zero16 >> 8);
    zero[i] = codecs::F16ToF32(zero16);
    inv_scale[i] = scale > 0.0f ? 1.0f / scale : 0.0f;
  }
}

namespace {
uint8_t QuantizeOne(float x, float zero, float inv_scale, float qmax) {
  const float shifted = x - zero;
  const float scaled = shifted * inv_scale;
  float q = std::nearbyint(scaled);
  q = q < 0.0f ? 0.0f : q;
  q = q > qmax ? qmax : q;
  return static_cast<uint8_t>(q);
}

float DequantizeOne(uint8_t code, float zero, float scale) {
  const float scaled = static_cast<float>(code) * scale;
  return scaled + zero;
}
}  // namespace

void QuantizeUniform(const float* x, size_t n, float zero, float inv_scale, float qmax,
                     uint8_t* codes) {
  for (size_t i = 0; i < n; ++i) codes[i] = QuantizeOne(x[i], zero, inv_scale, qmax);
}

void QuantizePerChannel(const float* x, size_t n, const float* zero, const float* inv_scale,
                        float qmax, uint8_t* codes) {
  for (size_t i = 0; i < n; ++i) codes[i] = QuantizeOne(x[i], zero[i], inv_scale[i], qmax);
}

void QuantizeGroups(const float* x, size_t n, size_t group, const float* zero,
                    const float* inv_scale, float qmax, uint8_t* codes) {
  for (size_t i = 0; i < n; ++i) {
    codes[i] = QuantizeOne(x[i], zero[i / group], inv_scale[i / group], qmax);
  }
}

void DequantizeUniform(const uint8_t* codes, size_t n, float zero, float scale, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = DequantizeOne(codes[i], zero, scale);
}

void DequantizePerChannel(const uint8_t* codes, size_t n, const float* zero, const float* scale,
                          float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = DequantizeOne(codes[i], zero[i], scale[i]);
}

void PackNibbles(const uint8_t* codes, size_t n, uint8_t* packed) {
  for (size_t i = 0; i + 1 < n; i += 2) {
    packed[i / 2] = static_cast<uint8_t>(codes[i] | (codes[i + 1] << 4));
  }
  if (n % 2 != 0) packed[n / 2] = codes[n - 1];
}

void UnpackNibbles(const uint8_t* packed, size_t n, uint8_t* codes) {
  for (size_t i = 0; i < n; ++i) {
    const uint8_t byte = packed[i / 2];
    codes[i] = static_cast<uint8_t>((i % 2 == 0) ? (byte & 0x0f) : (byte >> 4));
  }
}

}  // namespace ref
}  // namespace kvtier::codecs
