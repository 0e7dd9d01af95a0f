#include "codecs/entropy_quant.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <string>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "codecs/kernels.h"
#include "codecs/quantize.h"
#include "core/assert.h"
#include "core/coding.h"

namespace kvtier::codecs {

namespace {

// Adding and subtracting 1.5 * 2^23 rounds an F32 of magnitude below 2^22 to the nearest
// integer, ties to even, in the default rounding mode; unlike nearbyint it vectorizes.
constexpr float kRoundMagic = 12582912.0f;
// Centers are 16-bit: a step of at least |mean| / kCenterMax keeps rne(mean / step) in range.
constexpr float kCenterMax = 30000.0f;

// Steps are stored as one byte e: step = 2^((e - kStepExpBias) / 8), from 2^-14 (e = 0) to
// 2^17.875 (e = 255), an eighth of an octave apart. The fractions 2^(j/8) are written out so
// that every build decodes the same steps.
constexpr int kStepExpBias = 112;
constexpr float kEighthOctaves[8] = {1.0f,        1.09050773f, 1.18920712f, 1.29683955f,
                                     1.41421356f, 1.54221083f, 1.68179283f, 1.83400809f};

// Every step byte's step, computed once: a decoder looks up each head's step rather than calling
// ldexp per channel (which took an eighth of decoding a 32-token block).
const std::array<float, 256>& StepTable() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int e = 0; e < 256; ++e) {
      const int q = e - kStepExpBias;
      const int whole = q >= 0 ? q / 8 : -((-q + 7) / 8);
      t[static_cast<size_t>(e)] = std::ldexp(kEighthOctaves[q - 8 * whole], whole);
    }
    return t;
  }();
  return table;
}

// 2^(2 - quarter_bits / 4): a head's step in units of its channels' (geometric mean) spread.
float StepScale(uint32_t quarter_bits) {
  KV_CHECK(quarter_bits >= 8 && quarter_bits <= 32);
  constexpr float kQuarterOctaves[4] = {1.0f, 0.840896415f, 0.707106781f, 0.594603558f};
  return std::ldexp(kQuarterOctaves[quarter_bits % 4], 2 - static_cast<int>(quarter_bits / 4));
}

// The byte of the step nearest `target` (in octaves) that is not below `floor`.
uint8_t StepByte(float target, float floor) {
  const auto eighths = [](float v, bool up) {
    const float e = 8.0f * std::log2(v) + static_cast<float>(kStepExpBias);
    return up ? std::ceil(e) : std::nearbyint(e);
  };
  float e = std::max(eighths(std::max(target, 1e-30f), false), eighths(floor, true));
  e = std::clamp(e, 0.0f, 255.0f);
  uint8_t b = static_cast<uint8_t>(e);
  while (b < 255 && EcqStep(b) < floor) ++b;  // log2's rounding must not undercut the floor.
  return b;
}

float ElementF32(DType dtype, const std::byte* p) {
  switch (dtype) {
    case DType::kF16:
      return F16ToF32(DecodeFixed16(p));
    case DType::kBF16:
      return BF16ToF32(DecodeFixed16(p));
    case DType::kF32: {
      float f = 0;
      std::memcpy(&f, p, sizeof f);
      return f;
    }
  }
  return NAN;
}

// The sums of channels [c0, c0 + kWidth) over every token, in local arrays that the compiler
// keeps in vector registers (kWidth a compile-time constant): no accumulator goes through memory
// between tokens.
template <size_t kWidth>
[[gnu::always_inline]] inline void ChannelSumsBlock(const float* x, size_t tokens, size_t channels,
                                                    size_t c0, float* s1_out, float* s2_out,
                                                    float* bad_out) {
  float s1[kWidth] = {};
  float s2[kWidth] = {};
  float nb[kWidth] = {};
  const float* x0 = x + c0;
  for (size_t t = 0; t < tokens; ++t) {
    const float* row = x + t * channels + c0;
    for (size_t c = 0; c < kWidth; ++c) {
      const float v = row[c];
      const float d = v - x0[c];
      s1[c] += d;
      s2[c] += d * d;
      nb[c] += std::fabs(v) <= kF16Max ? 0.0f : 1.0f;  // NaN compares false: counted.
    }
  }
  for (size_t c = 0; c < kWidth; ++c) {
    s1_out[c] = s1[c];
    s2_out[c] = s2[c];
    bad_out[c] = nb[c];
  }
}

// Per-channel mean and standard deviation of the T x C plane `x`, in one pass over it, and
// per channel a count of the values that are not finite or beyond the FP16 range (`bad`). The
// sums are of each value's difference from the channel's first value (x0), so that a channel
// far from zero keeps the precision of its spread: var = (S2 - S1^2 / T) / T with
// S1 = sum(x - x0), S2 = sum((x - x0)^2), where x0 is one of the channel's own values. Each
// channel's sums run over the tokens in order, so every vector width gives the same bits.
[[gnu::always_inline]] inline void ChannelStatsBody(const float* x, size_t tokens, size_t channels,
                                                    float* mean, float* sd, float* bad) {
  constexpr size_t kBlock = 32;
  size_t c0 = 0;
  for (; c0 + kBlock <= channels; c0 += kBlock) {
    ChannelSumsBlock<kBlock>(x, tokens, channels, c0, mean + c0, sd + c0, bad + c0);
  }
  for (; c0 < channels; ++c0) {
    ChannelSumsBlock<1>(x, tokens, channels, c0, mean + c0, sd + c0, bad + c0);
  }
  const float* x0 = x;
  const float inv_t = 1.0f / static_cast<float>(tokens);
  for (size_t c = 0; c < channels; ++c) {
    const float s1 = mean[c];
    const float var = (sd[c] - s1 * s1 * inv_t) * inv_t;
    mean[c] = x0[c] + s1 * inv_t;
    sd[c] = std::sqrt(std::max(var, 0.0f));
  }
}

void ChannelStats(const float* x, size_t tokens, size_t channels, float* mean, float* sd,
                  float* bad) {
  ChannelStatsBody(x, tokens, channels, mean, sd, bad);
}

// frexp of a positive finite float, as std::frexp(double(v)) gives it: the mantissa in [0.5, 1)
// and the binary exponent. A normal float's come from its bits (no libm call); a subnormal's from
// std::frexp (a spread is the square root of a float variance, never subnormal, but the
// function does not rely on it).
[[gnu::always_inline]] inline double Frexp(float v, int* e) {
  uint32_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  const uint32_t biased = bits >> 23;  // v > 0: no sign bit.
  if (biased == 0) return std::frexp(static_cast<double>(v), e);
  *e = static_cast<int>(biased) - 126;
  bits = (bits & 0x7fffffu) | (126u << 23);
  float m = 0;
  std::memcpy(&m, &bits, sizeof m);
  return static_cast<double>(m);
}

// The step byte of one head: 2^(2 - bits) times the geometric mean of its channels' standard
// deviations (over the channels that vary), so that every channel of the head gets the same
// absolute error, which for a given number of bits minimizes the head's squared error (the
// channels with the larger spread take the more bits); not below any channel's |mean| / 30000.
// The sum of the log2 is taken as one log2 of the product: each spread's binary exponent is
// summed apart (frexp) and the mantissas in [0.5, 1) multiplied in double, renormalized every
// kMantissasPerRenorm factors (2^-64 at least, far from underflow). One log2 per head instead
// of one per channel: it took 8 % of encoding 32-token blocks.
uint8_t HeadStepByte(const float* mean, const float* sd, size_t n, float scale) {
  constexpr size_t kMantissasPerRenorm = 64;
  double mantissa = 1.0;
  int64_t exponent = 0;
  size_t varying = 0;
  // max(|mean|) / kCenterMax is the max of the quotients: division by a positive constant keeps
  // the order.
  float mean_max = 0;
  for (size_t c = 0; c < n; ++c) {
    mean_max = std::max(mean_max, std::fabs(mean[c]));
    if (sd[c] > 0.0f) {
      int e = 0;
      mantissa *= Frexp(sd[c], &e);
      exponent += e;
      if (++varying % kMantissasPerRenorm == 0) {
        mantissa = std::frexp(mantissa, &e);
        exponent += e;
      }
    }
  }
  const float floor = mean_max / kCenterMax;
  const double log_sum = static_cast<double>(exponent) + std::log2(mantissa);
  const float geo =
      varying == 0 ? 0.0f : static_cast<float>(std::exp2(log_sum / static_cast<double>(varying)));
  return StepByte(geo * scale, floor);
}

// One row of codes: q = rne(x / step) - center as its zigzag byte (0, -1, 1, -2, .. -> 0, 1, 2,
// 3, ..), or the escape 255 when q is outside [-127, 127]. Zigzag keeps the frequent small codes
// in the low byte values, so zstd's Huffman table describes few symbols. |x / step| <= 65504 *
// 2^14 and |center| < 2^15 keep the rounded value within int32 (the rounding trick is exact below
// 2^22 and keeps larger values large); clamped to +-128, whose zigzag is 255 or more. Written so
// that it vectorizes; the AVX2 build of the same loop (below) gives the same bits (no
// contraction: -ffp-contract=off).
[[gnu::always_inline]] inline void QuantizeRowBody(const float* x, size_t n, const float* inv_step,
                                                   const float* center, uint8_t* codes) {
  for (size_t c = 0; c < n; ++c) {
    const float r = x[c] * inv_step[c] - center[c];
    int32_t q = static_cast<int32_t>((r + kRoundMagic) - kRoundMagic);
    q = q < -128 ? -128 : q;
    q = q > 128 ? 128 : q;
    int32_t z = static_cast<int32_t>(static_cast<uint32_t>(q) << 1) ^ (q >> 31);
    z = z > 255 ? 255 : z;
    codes[c] = static_cast<uint8_t>(z);
  }
}

// The value a code stands for: (q + center) * step, q the code's zigzag-decoded integer.
[[gnu::always_inline]] inline float Dequantized(uint8_t code, float center, float step) {
  const int32_t z = code;
  const int32_t q = (z >> 1) ^ -(z & 1);
  return (static_cast<float>(q) + center) * step;
}

[[gnu::always_inline]] inline void DequantizeRowBody(const uint8_t* codes, size_t n,
                                                     const float* step, const float* center,
                                                     float* y) {
  for (size_t c = 0; c < n; ++c) y[c] = Dequantized(codes[c], center[c], step[c]);
}

// DequantizeRowBody rounded to BF16 in the same loop, as F32ToBF16 rounds (to nearest, ties to
// even; every decoded value is finite, so its NaN case never arises): a BF16 block is written
// without an F32 copy of its plane.
[[gnu::always_inline]] inline void DequantizeRowBf16Body(const uint8_t* codes, size_t n,
                                                         const float* step, const float* center,
                                                         uint16_t* out) {
  for (size_t c = 0; c < n; ++c) {
    const float y = Dequantized(codes[c], center[c], step[c]);
    uint32_t bits = 0;
    std::memcpy(&bits, &y, sizeof bits);
    out[c] = static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
  }
}

void DequantizeRowBf16(const uint8_t* codes, size_t n, const float* step, const float* center,
                       uint16_t* out) {
  DequantizeRowBf16Body(codes, n, step, center, out);
}

// A row straight to FP16, one value at a time: the AVX2 and AVX-512 rows' tails, and those rows
// where there is no x86-64.
void DequantizeRowF16(const uint8_t* codes, size_t n, const float* step, const float* center,
                      uint16_t* out) {
  for (size_t c = 0; c < n; ++c) out[c] = F32ToF16(Dequantized(codes[c], center[c], step[c]));
}

void QuantizeRow(const float* x, size_t n, const float* inv_step, const float* center,
                 uint8_t* codes) {
  QuantizeRowBody(x, n, inv_step, center, codes);
}
void DequantizeRow(const uint8_t* codes, size_t n, const float* step, const float* center,
                   float* y) {
  DequantizeRowBody(codes, n, step, center, y);
}

#if defined(__x86_64__)
// The three loops built for one target: <Loop><suffix> runs the loop's always_inline body.
#define KV_ECQ_LOOPS(suffix, target)                                                            \
  target void QuantizeRow##suffix(const float* x, size_t n, const float* inv_step,              \
                                  const float* center, uint8_t* codes) {                        \
    QuantizeRowBody(x, n, inv_step, center, codes);                                             \
  }                                                                                             \
  target void ChannelStats##suffix(const float* x, size_t tokens, size_t channels, float* mean, \
                                   float* sd, float* bad) {                                     \
    ChannelStatsBody(x, tokens, channels, mean, sd, bad);                                       \
  }                                                                                             \
  target void DequantizeRow##suffix(const uint8_t* codes, size_t n, const float* step,          \
                                    const float* center, float* y) {                            \
    DequantizeRowBody(codes, n, step, center, y);                                               \
  }                                                                                             \
  target void DequantizeRowBf16##suffix(const uint8_t* codes, size_t n, const float* step,      \
                                        const float* center, uint16_t* out) {                   \
    DequantizeRowBf16Body(codes, n, step, center, out);                                         \
  }
KV_ECQ_LOOPS(Avx2, __attribute__((target("avx2,f16c,fma"))))
KV_ECQ_LOOPS(Avx512, __attribute__((target("avx512f,avx512bw,avx512vl,avx2,f16c,fma"))))
#undef KV_ECQ_LOOPS

// Dequantized rows written straight to FP16 (F16C's VCVTPS2PH, round to nearest even, as
// F32ToF16 rounds every value, subnormals and overflow included), 8 or 16 values at a time,
// instead of an F32 copy of the plane converted afterwards; and to BF16 32 values at a time with
// AVX512_BF16's VCVTNE2PS2BF16, which rounds to nearest even as F32ToBF16 does but flushes
// subnormals to zero. A decoded value is zero or at least the smallest step, 2^-14, in magnitude
// (and at most (127 + 32767) * 2^18): never subnormal in F32, so the bits are
// DequantizeRowBf16Body's. The values are (q + center) * step as Dequantized computes them: an
// add, then a multiply, no FMA.
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's AVX-512 intrinsics start some results from _mm512_undefined_*(), a variable
// initialised with itself, which -Wmaybe-uninitialized reports wherever one is inlined.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define KV_AVX2 __attribute__((target("avx2,f16c,fma")))
#define KV_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,f16c,fma")))
#define KV_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,f16c,fma")))
// 8 values from codes[c, c + 8), in F32.
KV_AVX2 inline __m256 DequantizedF32x8(const uint8_t* codes, const float* step, const float* center,
                                       size_t c) {
  const __m256i z =
      _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + c)));
  const __m256i sign =
      _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_and_si256(z, _mm256_set1_epi32(1)));
  const __m256i q = _mm256_xor_si256(_mm256_srli_epi32(z, 1), sign);
  return _mm256_mul_ps(_mm256_add_ps(_mm256_cvtepi32_ps(q), _mm256_loadu_ps(center + c)),
                       _mm256_loadu_ps(step + c));
}

// 16 values from codes[c, c + 16), in F32.
KV_AVX512 inline __m512 DequantizedF32x16(const uint8_t* codes, const float* step,
                                          const float* center, size_t c) {
  const __m512i z =
      _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + c)));
  const __m512i sign =
      _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_and_si512(z, _mm512_set1_epi32(1)));
  const __m512i q = _mm512_xor_si512(_mm512_srli_epi32(z, 1), sign);
  return _mm512_mul_ps(_mm512_add_ps(_mm512_cvtepi32_ps(q), _mm512_loadu_ps(center + c)),
                       _mm512_loadu_ps(step + c));
}

KV_AVX2 void DequantizeRowF16Avx2(const uint8_t* codes, size_t n, const float* step,
                                  const float* center, uint16_t* out) {
  size_t c = 0;
  for (; c + 8 <= n; c += 8) {
    const __m128i h = _mm256_cvtps_ph(DequantizedF32x8(codes, step, center, c),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + c), h);
  }
  DequantizeRowF16(codes + c, n - c, step + c, center + c, out + c);
}

KV_AVX512 void DequantizeRowF16Avx512(const uint8_t* codes, size_t n, const float* step,
                                      const float* center, uint16_t* out) {
  size_t c = 0;
  for (; c + 16 <= n; c += 16) {
    const __m256i h = _mm512_cvtps_ph(DequantizedF32x16(codes, step, center, c),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + c), h);
  }
  DequantizeRowF16(codes + c, n - c, step + c, center + c, out + c);
}

KV_AVX512_BF16 void DequantizeRowBf16Avx512Bf16(const uint8_t* codes, size_t n, const float* step,
                                                const float* center, uint16_t* out) {
  size_t c = 0;
  for (; c + 32 <= n; c += 32) {
    const __m512bh b = _mm512_cvtne2ps_pbh(DequantizedF32x16(codes, step, center, c + 16),
                                           DequantizedF32x16(codes, step, center, c));
    _mm512_storeu_si512(out + c, reinterpret_cast<const __m512i&>(b));  // Low half first.
  }
  DequantizeRowBf16Body(codes + c, n - c, step + c, center + c, out + c);
}
#undef KV_AVX2
#undef KV_AVX512
#undef KV_AVX512_BF16
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#else
constexpr auto ChannelStatsAvx2 = ChannelStats;
constexpr auto QuantizeRowAvx2 = QuantizeRow;
constexpr auto DequantizeRowAvx2 = DequantizeRow;
constexpr auto DequantizeRowBf16Avx2 = DequantizeRowBf16;
constexpr auto ChannelStatsAvx512 = ChannelStats;
constexpr auto QuantizeRowAvx512 = QuantizeRow;
constexpr auto DequantizeRowAvx512 = DequantizeRow;
constexpr auto DequantizeRowBf16Avx512 = DequantizeRowBf16;
constexpr auto DequantizeRowBf16Avx512Bf16 = DequantizeRowBf16;
constexpr auto DequantizeRowF16Avx2 = DequantizeRowF16;
constexpr auto DequantizeRowF16Avx512 = DequantizeRowF16;
#endif

using ChannelStatsFn = void (*)(const float*, size_t, size_t, float*, float*, float*);
using QuantizeRowFn = void (*)(const float*, size_t, const float*, const float*, uint8_t*);
using DequantizeRowFn = void (*)(const uint8_t*, size_t, const float*, const float*, float*);
// A row of 16-bit values (BF16 or FP16).
using DequantizeRow16Fn = void (*)(const uint8_t*, size_t, const float*, const float*, uint16_t*);

// The loop for a kernel set: its AVX-512 build for the AVX-512 set, its AVX2 build for the AVX2
// set, the baseline for the scalar one (a set is only ever selected on a CPU that runs it).
template <typename Fn>
Fn LoopFor(const Kernels& k, Fn scalar, [[maybe_unused]] Fn avx2, [[maybe_unused]] Fn avx512) {
#if defined(__x86_64__)
  if (k.isa == KernelIsa::kAvx512) return avx512;
  if (k.isa != KernelIsa::kScalar) return avx2;
#endif
  (void)k;
  return scalar;
}

// The row that writes `dtype` straight from the codes: BF16 with every kernel set, FP16 with the
// AVX2 and AVX-512 sets; null where the plane goes through F32 (FP16 with the scalar set, the
// reference, and F32).
DequantizeRow16Fn Row16For(const Kernels& k, DType dtype) {
  if (dtype == DType::kBF16) {
    return k.isa == KernelIsa::kAvx512 && CpuHasAvx512Bf16()
               ? DequantizeRowBf16Avx512Bf16
               : LoopFor<DequantizeRow16Fn>(k, DequantizeRowBf16, DequantizeRowBf16Avx2,
                                            DequantizeRowBf16Avx512);
  }
  if (dtype == DType::kF16 && k.isa != KernelIsa::kScalar) {
    return LoopFor<DequantizeRow16Fn>(k, DequantizeRowF16, DequantizeRowF16Avx2,
                                      DequantizeRowF16Avx512);
  }
  return nullptr;
}

// Calls f(i) for each escaped code i of codes[0, n), in order; stops at the first false.
template <typename F>
bool ForEachEscape(const uint8_t* codes, size_t n, F f) {
  const uint8_t* base = codes;
  for (size_t i = 0; i < n; ++i) {
    const void* at = std::memchr(base + i, kEcqEscape, n - i);
    if (at == nullptr) break;
    i = static_cast<size_t>(static_cast<const uint8_t*>(at) - base);
    if (!f(i)) return false;
  }
  return true;
}

}  // namespace

float EcqStep(uint8_t e) { return StepTable()[e]; }

EcqPrecision EcqPrecisionOf(CodecId id) {
  const QuantScheme s = SchemeOf(id);
  KV_CHECK(s.entropy_coded);
  return {.key_quarter_bits = s.key_quarter_bits, .value_quarter_bits = s.value_quarter_bits};
}

EcqLayout ComputeEcqLayout(const BlockGeometry& g) {
  EcqLayout l;
  l.params = g.planes() * g.channels();
  l.centers_offset = 0;
  l.steps_offset = 2 * l.params;
  l.codes_offset = l.steps_offset + g.planes() * g.kv_heads;
  l.escapes_offset = l.codes_offset + g.elements();
  l.max_bytes = l.escapes_offset + g.elements() * DTypeBytes(g.dtype);
  return l;
}

Status EcqQuantize(const BlockGeometry& g, EcqPrecision precision, std::span<const std::byte> raw,
                   std::span<std::byte> stage, size_t* stage_bytes, CodecContext* ctx) {
  const EcqLayout l = ComputeEcqLayout(g);
  KV_CHECK(raw.size() == g.raw_bytes());
  KV_CHECK(stage.size() >= l.max_bytes);
  const Kernels& k = ctx->kernels();
  const size_t channels = g.channels();
  const size_t half = g.half_elements();
  const size_t eb = DTypeBytes(g.dtype);
  float* x = ctx->F32Scratch(half);
  float* p = ctx->ParamScratch(kEcqParamFloatsPerChannel * channels);
  float* mean = p;
  float* sd = p + channels;
  float* inv_step = p + 2 * channels;
  float* center = p + 3 * channels;
  float* bad = p + 4 * channels;
  auto* codes = reinterpret_cast<uint8_t*>(stage.data() + l.codes_offset);
  for (size_t plane = 0; plane < g.planes(); ++plane) {
    ToF32(k, g.dtype, raw.data() + plane * half * eb, half, x);
    LoopFor<ChannelStatsFn>(k, ChannelStats, ChannelStatsAvx2, ChannelStatsAvx512)(
        x, g.tokens, channels, mean, sd, bad);
    if (std::any_of(bad, bad + channels, [](float b) { return b != 0.0f; })) {
      const Status refused = CheckQuantizable(k, x, half);  // Its error names the problem.
      KV_CHECK(!refused.ok());
      return refused;
    }
    const float scale =
        StepScale(plane == 0 ? precision.key_quarter_bits : precision.value_quarter_bits);
    for (size_t h = 0; h < g.kv_heads; ++h) {
      const size_t c0 = h * g.head_dim;
      const uint8_t step_byte = HeadStepByte(mean + c0, sd + c0, g.head_dim, scale);
      stage[l.steps_offset + plane * g.kv_heads + h] = static_cast<std::byte>(step_byte);
      const float step = EcqStep(step_byte);
      const float head_inv_step = 1.0f / step;
      for (size_t c = c0; c < c0 + g.head_dim; ++c) {
        const float cen = std::clamp(std::nearbyint(mean[c] / step), -32767.0f, 32767.0f);
        const size_t i = plane * channels + c;
        const auto c16 = static_cast<int16_t>(cen);  // Zigzag, as the codes.
        const auto cen16 = static_cast<uint16_t>((static_cast<uint16_t>(c16) << 1) ^ (c16 >> 15));
        stage[l.centers_offset + i] = static_cast<std::byte>(cen16 & 0xff);
        stage[l.centers_offset + l.params + i] = static_cast<std::byte>(cen16 >> 8);
        inv_step[c] = head_inv_step;
        center[c] = cen;
      }
    }
    const QuantizeRowFn quantize_row =
        LoopFor<QuantizeRowFn>(k, QuantizeRow, QuantizeRowAvx2, QuantizeRowAvx512);
    for (size_t t = 0; t < g.tokens; ++t) {
      quantize_row(x + t * channels, channels, inv_step, center,
                   codes + plane * half + t * channels);
    }
  }
  // Escapes: the elements themselves, in block order.
  std::byte* esc = stage.data() + l.escapes_offset;
  ForEachEscape(codes, g.elements(), [&](size_t i) {
    std::memcpy(esc, raw.data() + i * eb, eb);
    esc += eb;
    return true;
  });
  *stage_bytes = static_cast<size_t>(esc - stage.data());
  return Status::Ok();
}

Status EcqDequantize(const BlockGeometry& g, std::span<const std::byte> stage,
                     std::span<std::byte> raw_out, CodecContext* ctx) {
  const EcqLayout l = ComputeEcqLayout(g);
  KV_CHECK(raw_out.size() >= g.raw_bytes());
  const size_t eb = DTypeBytes(g.dtype);
  if (stage.size() < l.escapes_offset || (stage.size() - l.escapes_offset) % eb != 0) {
    return Status::Corruption("encoded block: ecq payload of " + std::to_string(stage.size()) +
                              " bytes does not fit its " + std::to_string(l.escapes_offset) +
                              "-byte codes and whole escaped elements");
  }
  const Kernels& k = ctx->kernels();
  const size_t channels = g.channels();
  const size_t half = g.half_elements();
  float* p = ctx->ParamScratch(2 * channels);
  float* step = p;
  float* center = p + channels;
  const auto* codes = reinterpret_cast<const uint8_t*>(stage.data() + l.codes_offset);
  const std::array<float, 256>& steps = StepTable();
  const auto* bytes = reinterpret_cast<const uint8_t*>(stage.data());
  for (size_t plane = 0; plane < g.planes(); ++plane) {
    for (size_t h = 0; h < g.kv_heads; ++h) {
      const float head_step = steps[bytes[l.steps_offset + plane * g.kv_heads + h]];
      for (size_t c = h * g.head_dim; c < (h + 1) * g.head_dim; ++c) {
        const size_t i = plane * channels + c;
        step[c] = head_step;
        const int32_t z = bytes[l.centers_offset + i] | bytes[l.centers_offset + l.params + i] << 8;
        center[c] = static_cast<float>((z >> 1) ^ -(z & 1));
      }
    }
    // Every decoded value is at most (127 + 32767) * 2^18 in magnitude: finite in F32, and
    // rounded to the dtype as any codec's output is.
    if (const DequantizeRow16Fn row16 = Row16For(k, g.dtype); row16 != nullptr) {
      auto* out = reinterpret_cast<uint16_t*>(raw_out.data()) + plane * half;
      for (size_t t = 0; t < g.tokens; ++t) {
        row16(codes + plane * half + t * channels, channels, step, center, out + t * channels);
      }
      continue;
    }
    float* y = ctx->F32Scratch(half);
    const DequantizeRowFn dequantize_row =
        LoopFor<DequantizeRowFn>(k, DequantizeRow, DequantizeRowAvx2, DequantizeRowAvx512);
    for (size_t t = 0; t < g.tokens; ++t) {
      dequantize_row(codes + plane * half + t * channels, channels, step, center, y + t * channels);
    }
    FromF32(k, g.dtype, y, half, raw_out.data() + plane * half * eb);
  }
  const std::byte* esc = stage.data() + l.escapes_offset;
  const std::byte* esc_end = stage.data() + stage.size();
  Status bad = Status::Ok();
  ForEachEscape(codes, g.elements(), [&](size_t i) {
    if (esc == esc_end) {
      bad = Status::Corruption("encoded block: ecq codes name more escapes than it stores");
      return false;
    }
    const float v = ElementF32(g.dtype, esc);
    if (!std::isfinite(v) || std::fabs(v) > kF16Max) {
      bad = Status::Corruption(
          "encoded block: an ecq escaped element is not finite or beyond the FP16 range");
      return false;
    }
    std::memcpy(raw_out.data() + i * eb, esc, eb);
    esc += eb;
    return true;
  });
  KV_RETURN_IF_ERROR(bad);
  if (esc != esc_end) {
    return Status::Corruption(
        "encoded block: ecq stores more escaped elements than its codes name");
  }
  return Status::Ok();
}

}  // namespace kvtier::codecs
