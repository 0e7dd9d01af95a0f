#include "codecs/quantize.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "codecs/block_format.h"
#include "core/assert.h"
#include "core/coding.h"
#include "core/limits.h"
#include "core/splitmix.h"

namespace kvtier::codecs {

namespace {

// Views byte storage as elements; callers have checked the alignment.
template <typename T>
T* As(std::byte* p) {
  return static_cast<T*>(static_cast<void*>(p));
}
template <typename T>
const T* As(const std::byte* p) {
  return static_cast<const T*>(static_cast<const void*>(p));
}

Status ReadParams(const std::byte* scale_src, const std::byte* zero_src, float* scale,
                  float* zero) {
  *scale = F16ToF32(DecodeFixed16(scale_src));
  *zero = F16ToF32(DecodeFixed16(zero_src));
  if (!std::isfinite(*scale) || !std::isfinite(*zero) || *scale < 0.0f) {
    return Status::Corruption("encoded block: invalid quantization scale or zero point");
  }
  return Status::Ok();
}

float QMax(uint32_t bits) { return static_cast<float>((1u << bits) - 1); }

// Rows [t0, t1) of one half as F32: the rows themselves in an F32 block, else converted into
// `scratch` ((t1 - t0) * channels floats), which stays in cache for the passes that follow.
const float* RowsF32(const Kernels& k, DType dtype, const std::byte* half, size_t channels,
                     size_t t0, size_t t1, float* scratch) {
  const std::byte* src = half + t0 * channels * DTypeBytes(dtype);
  if (dtype == DType::kF32) return As<float>(src);
  ToF32(k, dtype, src, (t1 - t0) * channels, scratch);
  return scratch;
}

// True when every group's min and max lies within +-kF16Max. Always true for FP16 input that is
// not rotated, whose finite values all do, so that case is not checked.
bool InF16Range(bool check, const float* mins, const float* maxs, size_t n) {
  if (!check) return true;
  bool in = true;
  for (size_t i = 0; i < n; ++i) in &= mins[i] >= -kF16Max && maxs[i] <= kF16Max;
  return in;
}

// The error for a half that a chunk found unquantizable, from the whole half as before the
// chunked checks, so that a half with both NaN and out-of-range values names the NaN.
Status RefuseHalf(const Kernels& k, DType dtype, const std::byte* half, size_t n,
                  CodecContext* ctx) {
  const float* x = As<float>(half);
  if (dtype != DType::kF32) {
    float* converted = ctx->F32Scratch(n);
    ToF32(k, dtype, half, n, converted);
    x = converted;
  }
  const Status s = CheckQuantizable(k, x, n);
  return s.ok() ? Status::InvalidArgument("int quantization needs finite values in FP16 range")
                : s;
}

// `x` (n floats of `dtype`) rotated in `scratch` (a copy first when `x` is not already there);
// nullptr when the rotation overflowed F32, which BF16 and F32 input can (up to sqrt(head_dim)
// times their largest value) and FP16 input cannot.
const float* RotateInScratch(const Kernels& k, DType dtype, const float* x, size_t n,
                             uint32_t head_dim, float* scratch) {
  if (x != scratch) std::memcpy(scratch, x, n * sizeof(float));
  HadamardRotate(k, scratch, n, head_dim);
  return dtype == DType::kF16 || k.all_finite(scratch, n) ? scratch : nullptr;
}

// Rows of values quantized together: about kValueChunkElements elements, at least one row.
constexpr size_t kValueChunkElements = 4096;
size_t ValueChunkRows(const BlockGeometry& g) {
  return std::clamp<size_t>(kValueChunkElements / g.channels(), 1, g.tokens);
}

// Keys: per channel, groups of G tokens. Each group's rows are converted once, checked, reduced
// to per-channel min/max and quantized while still in cache.
Status QuantizeKeys(const BlockGeometry& g, uint32_t bits, size_t group, const QuantLayout& l,
                    const std::byte* half, std::byte* stage, CodecContext* ctx) {
  const Kernels& k = ctx->kernels();
  const size_t channels = g.channels();
  const float qmax = QMax(bits);
  float* mins = ctx->ParamScratch(3 * channels);
  float* maxs = mins + channels;
  float* inv = maxs + channels;
  float* scratch = ctx->F32Scratch(std::min<size_t>(group, g.tokens) * channels);
  uint8_t* codes =
      bits == 8 ? As<uint8_t>(stage + l.k_codes_offset) : ctx->CodeScratch(g.half_elements());
  for (size_t grp = 0; grp < l.key_groups; ++grp) {
    const size_t t0 = grp * group;
    const size_t t1 = std::min<size_t>(g.tokens, t0 + group);
    const float* x = RowsF32(k, g.dtype, half, channels, t0, t1, scratch);
    if (!k.all_finite(x, (t1 - t0) * channels)) {
      return RefuseHalf(k, g.dtype, half, g.half_elements(), ctx);
    }
    std::memcpy(mins, x, channels * sizeof(float));
    std::memcpy(maxs, x, channels * sizeof(float));
    for (size_t r = 1; r < t1 - t0; ++r) {
      k.min_max_accumulate(x + r * channels, channels, mins, maxs);
    }
    if (!InF16Range(g.dtype != DType::kF16, mins, maxs, channels)) {
      return RefuseHalf(k, g.dtype, half, g.half_elements(), ctx);
    }
    const size_t first = grp * channels;  // Index of the group's first parameter.
    k.quant_params(mins, maxs, channels, qmax, As<uint8_t>(stage + l.k_scale_offset + 2 * first),
                   As<uint8_t>(stage + l.k_zero_offset + 2 * first), mins, inv);
    for (size_t r = 0; r < t1 - t0; ++r) {
      k.quantize_per_channel(x + r * channels, channels, mins, inv, qmax,
                             codes + (t0 + r) * channels);
    }
  }
  if (bits == 4) k.pack_nibbles(codes, g.half_elements(), As<uint8_t>(stage + l.k_codes_offset));
  return Status::Ok();
}

// Values: per token, groups of G channels. Rows are taken a few KiB at a time; when G divides the
// row, the groups of a chunk of rows are consecutive, and so are their stored parameters, so one
// call of each kernel covers the chunk.
// Where one half's per-token parameters and codes go in the stage payload.
struct TokenHalf {
  size_t scale_offset, zero_offset, codes_offset;
};

Status QuantizeValues(const BlockGeometry& g, uint32_t bits, bool rotate, size_t group,
                      const QuantLayout& l, const TokenHalf& th, const std::byte* half,
                      std::byte* stage, CodecContext* ctx) {
  const Kernels& k = ctx->kernels();
  const size_t channels = g.channels();
  const size_t groups = l.value_groups;
  const float qmax = QMax(bits);
  const size_t chunk_rows = ValueChunkRows(g);
  const bool flat = channels % group == 0;
  const size_t chunk_params = groups * (flat ? chunk_rows : 1);
  float* mins = ctx->ParamScratch(3 * chunk_params);
  float* maxs = mins + chunk_params;
  float* inv = maxs + chunk_params;
  float* scratch = ctx->F32Scratch(chunk_rows * channels);
  uint8_t* codes =
      bits == 8 ? As<uint8_t>(stage + th.codes_offset) : ctx->CodeScratch(g.half_elements());
  for (size_t t0 = 0; t0 < g.tokens; t0 += chunk_rows) {
    const size_t t1 = std::min<size_t>(g.tokens, t0 + chunk_rows);
    const float* x = RowsF32(k, g.dtype, half, channels, t0, t1, scratch);
    if (!k.all_finite(x, (t1 - t0) * channels)) {
      return RefuseHalf(k, g.dtype, half, g.half_elements(), ctx);
    }
    if (rotate) {
      x = RotateInScratch(k, g.dtype, x, (t1 - t0) * channels, g.head_dim, scratch);
      if (x == nullptr) return RefuseHalf(k, g.dtype, half, g.half_elements(), ctx);
    }
    // Rows quantized per call: the whole chunk when its groups tile it, else one.
    const size_t step = flat ? t1 - t0 : 1;
    for (size_t r = 0; r < t1 - t0; r += step) {
      const float* src = x + r * channels;
      const size_t n = step * channels;
      const size_t params = step * groups;
      k.min_max_groups(src, n, group, mins, maxs);
      if (!InF16Range(rotate || g.dtype != DType::kF16, mins, maxs, params)) {
        return RefuseHalf(k, g.dtype, half, g.half_elements(), ctx);
      }
      const size_t first = (t0 + r) * groups;
      k.quant_params(mins, maxs, params, qmax, As<uint8_t>(stage + th.scale_offset + 2 * first),
                     As<uint8_t>(stage + th.zero_offset + 2 * first), mins, inv);
      k.quantize_groups(src, n, group, mins, inv, qmax, codes + (t0 + r) * channels);
    }
  }
  if (bits == 4) k.pack_nibbles(codes, g.half_elements(), As<uint8_t>(stage + th.codes_offset));
  return Status::Ok();
}

// Dequantized rows are produced one token at a time into `row` (channels floats, hot in L1) and
// stored to `dst` in the block's dtype at once: a whole half in F32 would not fit in cache and
// would cost a round trip to DRAM.
void StoreRow(const Kernels& k, DType dtype, const float* row, size_t channels, std::byte* dst) {
  if (dtype == DType::kF32) {
    std::memcpy(dst, row, channels * sizeof(float));
  } else {
    FromF32(k, dtype, row, channels, dst);
  }
}

Status DequantizeKeys(const BlockGeometry& g, uint32_t bits, size_t group, const QuantLayout& l,
                      const std::byte* stage, std::byte* dst, CodecContext* ctx) {
  const Kernels& k = ctx->kernels();
  const size_t channels = g.channels();
  const size_t row_bytes = channels * DTypeBytes(g.dtype);
  float* zero = ctx->ParamScratch(3 * channels);
  float* scale = zero + channels;
  float* row = scale + channels;
  const uint8_t* codes = As<uint8_t>(stage + l.k_codes_offset);
  if (bits == 4) {
    uint8_t* unpacked = ctx->CodeScratch(g.half_elements());
    k.unpack_nibbles(codes, g.half_elements(), unpacked);
    codes = unpacked;
  }
  for (size_t grp = 0; grp < l.key_groups; ++grp) {
    const std::byte* scale_src = stage + l.k_scale_offset + 2 * grp * channels;
    const std::byte* zero_src = stage + l.k_zero_offset + 2 * grp * channels;
    for (size_t c = 0; c < channels; ++c) {
      KV_RETURN_IF_ERROR(ReadParams(scale_src + 2 * c, zero_src + 2 * c, &scale[c], &zero[c]));
    }
    const size_t t1 = std::min<size_t>(g.tokens, (grp + 1) * group);
    for (size_t t = grp * group; t < t1; ++t) {
      k.dequantize_per_channel(codes + t * channels, channels, zero, scale, row);
      StoreRow(k, g.dtype, row, channels, dst + t * row_bytes);
    }
  }
  return Status::Ok();
}

Status DequantizeValues(const BlockGeometry& g, uint32_t bits, bool rotate, size_t group,
                        const QuantLayout& l, const TokenHalf& th, const std::byte* stage,
                        std::byte* dst, CodecContext* ctx) {
  const Kernels& k = ctx->kernels();
  const size_t channels = g.channels();
  const size_t row_bytes = channels * DTypeBytes(g.dtype);
  float* row = ctx->ParamScratch(channels);
  const uint8_t* codes = As<uint8_t>(stage + th.codes_offset);
  if (bits == 4) {
    uint8_t* unpacked = ctx->CodeScratch(g.half_elements());
    k.unpack_nibbles(codes, g.half_elements(), unpacked);
    codes = unpacked;
  }
  for (size_t t = 0; t < g.tokens; ++t) {
    for (size_t j = 0; j < l.value_groups; ++j) {
      const size_t c0 = j * group;
      const size_t param_index = t * l.value_groups + j;
      float scale = 0;
      float zero = 0;
      KV_RETURN_IF_ERROR(ReadParams(stage + th.scale_offset + 2 * param_index,
                                    stage + th.zero_offset + 2 * param_index, &scale, &zero));
      k.dequantize_uniform(codes + t * channels + c0, std::min(group, channels - c0), zero, scale,
                           row + c0);
    }
    if (rotate) HadamardUnrotate(k, row, channels, g.head_dim);
    StoreRow(k, g.dtype, row, channels, dst + t * row_bytes);
  }
  return Status::Ok();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Randomized Hadamard rotation

namespace {

// The signs of a head, computed once: element i of the longest head (shorter heads use a prefix).
const std::array<float, kHeadDimMax>& SignTable() {
  static const std::array<float, kHeadDimMax> table = [] {
    std::array<float, kHeadDimMax> t{};
    for (size_t i = 0; i < t.size(); ++i) t[i] = (SplitMix64(i + 1) >> 63) != 0 ? -1.0f : 1.0f;
    return t;
  }();
  return table;
}

// 1 / sqrt(head_dim), rounded once to F32.
float HadamardScale(uint32_t head_dim) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
}

// What the transform does around its butterflies: `pre` multiplies each value first (the signs,
// or nullptr), the last stage's results are multiplied by `scale` and then by `post` (the signs,
// or nullptr). Fused into the passes, with the same operations in the same order as separate
// passes would do them.
struct Around {
  const float* pre;
  float scale;
  const float* post;
};

float Post(float x, const Around& a, size_t i, size_t mask) {
  const float y = x * a.scale;
  return a.post != nullptr ? y * a.post[i & mask] : y;
}

// The first three butterfly stages (h = 1, 2, 4) of each 8 consecutive values, in registers,
// with the last one finishing the transform when head_dim is 8.
void Butterflies8(float* x, size_t n, uint32_t head_dim, const Around& around) {
  const size_t mask = head_dim - 1;
  const bool last = head_dim == 8;
  for (size_t i = 0; i < n; i += 8) {
    float v[8];
    for (size_t j = 0; j < 8; ++j) {
      v[j] = around.pre != nullptr ? x[i + j] * around.pre[(i + j) & mask] : x[i + j];
    }
    float a[8];
    for (size_t j = 0; j < 8; j += 2) {
      a[j] = v[j] + v[j + 1];
      a[j + 1] = v[j] - v[j + 1];
    }
    for (size_t j = 0; j < 8; j += 4) {
      v[j] = a[j] + a[j + 2];
      v[j + 1] = a[j + 1] + a[j + 3];
      v[j + 2] = a[j] - a[j + 2];
      v[j + 3] = a[j + 1] - a[j + 3];
    }
    for (size_t j = 0; j < 4; ++j) {
      const float lo = v[j] + v[j + 4];
      const float hi = v[j] - v[j + 4];
      x[i + j] = last ? Post(lo, around, j, mask) : lo;
      x[i + j + 4] = last ? Post(hi, around, j + 4, mask) : hi;
    }
  }
}

#if defined(__x86_64__)
#define KV_TARGET_AVX2 __attribute__((target("avx2,f16c,fma")))
// Butterflies8 with one vector per 8 values: each stage adds a lane-permuted copy (lanes that take
// a + b) or subtracts from it (lanes that take a - b: the permuted copy holds a), so every lane
// computes the same F32 operation on the same operands as the scalar loop. For CPUs with AVX2
// only (kernel sets other than the scalar one). The transform is a codec step rather than a
// kernel of the table; codecs_rotation_test checks it bit for bit against the scalar path.
KV_TARGET_AVX2 void Butterflies8Avx2(float* x, size_t n, uint32_t head_dim, const Around& around) {
  const size_t mask = head_dim - 1;
  const bool last = head_dim == 8;
  const __m256 scale = _mm256_set1_ps(around.scale);
  const __m256 post = last && around.post != nullptr ? _mm256_loadu_ps(around.post)
                                                     : _mm256_set1_ps(1.0f);
  for (size_t i = 0; i < n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    if (around.pre != nullptr) v = _mm256_mul_ps(v, _mm256_loadu_ps(around.pre + (i & mask)));
    __m256 p = _mm256_permute_ps(v, 0xB1);  // Lanes 1 0 3 2 5 4 7 6.
    v = _mm256_blend_ps(_mm256_add_ps(v, p), _mm256_sub_ps(p, v), 0xAA);
    p = _mm256_permute_ps(v, 0x4E);  // Lanes 2 3 0 1 6 7 4 5.
    v = _mm256_blend_ps(_mm256_add_ps(v, p), _mm256_sub_ps(p, v), 0xCC);
    p = _mm256_permute2f128_ps(v, v, 0x01);  // The halves swapped.
    v = _mm256_blend_ps(_mm256_add_ps(v, p), _mm256_sub_ps(p, v), 0xF0);
    if (last) {
      v = _mm256_mul_ps(v, scale);
      if (around.post != nullptr) v = _mm256_mul_ps(v, post);
    }
    _mm256_storeu_ps(x + i, v);
  }
}

// Butterflies from h = 8 on, 8 pairs per step (h is a multiple of 8): the scalar loop's
// operations, lane by lane; the last stage multiplies by the scale, then by `post`.
KV_TARGET_AVX2 void ButterfliesAvx2(float* x, size_t n, uint32_t head_dim, const Around& around) {
  const __m256 scale = _mm256_set1_ps(around.scale);
  for (size_t h = 8; h < head_dim; h <<= 1) {
    const bool last = 2 * h == head_dim;
    for (size_t i = 0; i < n; i += 2 * h) {
      float* lo = x + i;
      float* hi = x + i + h;
      for (size_t j = 0; j < h; j += 8) {
        const __m256 a = _mm256_loadu_ps(lo + j);
        const __m256 b = _mm256_loadu_ps(hi + j);
        __m256 sum = _mm256_add_ps(a, b);
        __m256 diff = _mm256_sub_ps(a, b);
        if (last) {
          sum = _mm256_mul_ps(sum, scale);
          diff = _mm256_mul_ps(diff, scale);
          if (around.post != nullptr) {
            sum = _mm256_mul_ps(sum, _mm256_loadu_ps(around.post + j));
            diff = _mm256_mul_ps(diff, _mm256_loadu_ps(around.post + h + j));
          }
        }
        _mm256_storeu_ps(lo + j, sum);
        _mm256_storeu_ps(hi + j, diff);
      }
    }
  }
}
#undef KV_TARGET_AVX2
#endif

// Butterfly stages h = first_h .. head_dim / 2 of every head of x[0, n) at once (spans of 2h never
// cross a head); `pre` applies when first_h is 1, the scale and `post` at the last stage.
void Butterflies(float* x, size_t n, uint32_t head_dim, size_t first_h, const Around& around) {
  const size_t mask = head_dim - 1;
  if (around.pre != nullptr) {
    for (size_t i = 0; i < n; ++i) x[i] *= around.pre[i & mask];
  }
  for (size_t h = first_h; h < head_dim; h <<= 1) {
    const bool last = 2 * h == head_dim;
    for (size_t i = 0; i < n; i += 2 * h) {
      float* lo = x + i;
      float* hi = x + i + h;
      if (!last) {
        for (size_t j = 0; j < h; ++j) {
          const float a = lo[j];
          const float b = hi[j];
          lo[j] = a + b;
          hi[j] = a - b;
        }
      } else if (around.post == nullptr) {
        for (size_t j = 0; j < h; ++j) {
          const float a = lo[j];
          const float b = hi[j];
          lo[j] = (a + b) * around.scale;
          hi[j] = (a - b) * around.scale;
        }
      } else {
        for (size_t j = 0; j < h; ++j) {
          const float a = lo[j];
          const float b = hi[j];
          lo[j] = (a + b) * around.scale * around.post[j];
          hi[j] = (a - b) * around.scale * around.post[h + j];
        }
      }
    }
  }
}

// The whole transform of every head of x[0, n), the first stages with `k`'s instruction set.
void Transform(const Kernels& k, float* x, size_t n, uint32_t head_dim, const Around& around) {
  if (head_dim == 1) {  // No butterflies: only the scale (1) and the signs.
    for (size_t i = 0; i < n; ++i) {
      const float y = around.pre != nullptr ? x[i] * around.pre[0] : x[i];
      x[i] = Post(y, around, 0, 0);
    }
    return;
  }
  if (head_dim < 8) {
    Butterflies(x, n, head_dim, 1, around);
    return;
  }
#if defined(__x86_64__)
  if (k.isa != KernelIsa::kScalar) {
    Butterflies8Avx2(x, n, head_dim, around);
    if (head_dim > 8) {
      ButterfliesAvx2(x, n, head_dim, {.pre = nullptr, .scale = around.scale, .post = around.post});
    }
    return;
  }
#else
  (void)k;
#endif
  Butterflies8(x, n, head_dim, around);
  if (head_dim > 8) Butterflies(x, n, head_dim, 8, {.pre = nullptr, .scale = around.scale,
                                                   .post = around.post});
}

}  // namespace

float HadamardSign(size_t i) { return SignTable()[i]; }

void HadamardRotate(const Kernels& k, float* x, size_t n, uint32_t head_dim) {
  KV_DCHECK(std::has_single_bit(head_dim) && head_dim <= kHeadDimMax && n % head_dim == 0);
  Transform(k, x, n, head_dim,
            {.pre = SignTable().data(), .scale = HadamardScale(head_dim), .post = nullptr});
}

void HadamardUnrotate(const Kernels& k, float* x, size_t n, uint32_t head_dim) {
  KV_DCHECK(std::has_single_bit(head_dim) && head_dim <= kHeadDimMax && n % head_dim == 0);
  Transform(k, x, n, head_dim,
            {.pre = nullptr, .scale = HadamardScale(head_dim), .post = SignTable().data()});
}

// ---------------------------------------------------------------------------------------------

size_t QuantizeParamFloats(const BlockGeometry& g) {
  // Keys: min, max and inverse scale per channel. Values: the same per group of a chunk of rows,
  // at most one group per kQuantGroupSizeMin elements of the chunk.
  const size_t chunk = ValueChunkRows(g) * g.channels();
  return 3 * std::max(g.channels(), (chunk + kQuantGroupSizeMin - 1) / kQuantGroupSizeMin);
}

Status CheckQuantizable(const Kernels& k, const float* x, size_t n) {
  if (!k.all_finite(x, n)) {
    return Status::InvalidArgument("int quantization needs finite values (found NaN or Inf)");
  }
  float min = 0;
  float max = 0;
  k.min_max(x, n, &min, &max);
  if (min < -kF16Max || max > kF16Max) {
    return Status::InvalidArgument("int quantization needs values within the FP16 range");
  }
  return Status::Ok();
}

void ToF32(const Kernels& kernels, DType dtype, const std::byte* src, size_t n, float* dst) {
  switch (dtype) {
    case DType::kF16:
      kernels.f16_to_f32(As<uint16_t>(src), n, dst);
      return;
    case DType::kBF16:
      kernels.bf16_to_f32(As<uint16_t>(src), n, dst);
      return;
    case DType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
  }
  KV_CHECK(false && "unknown dtype");
}

void FromF32(const Kernels& kernels, DType dtype, const float* src, size_t n, std::byte* dst) {
  switch (dtype) {
    case DType::kF16:
      kernels.f32_to_f16(src, n, As<uint16_t>(dst));
      return;
    case DType::kBF16:
      kernels.f32_to_bf16(src, n, As<uint16_t>(dst));
      return;
    case DType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
  }
  KV_CHECK(false && "unknown dtype");
}

namespace {

Status CheckRotatable(const BlockGeometry& g, const QuantScheme& scheme) {
  if (scheme.rotated && !std::has_single_bit(g.head_dim)) {
    return Status::InvalidArgument("the Hadamard rotation needs a power-of-two head_dim, not " +
                                   std::to_string(g.head_dim));
  }
  return Status::Ok();
}

}  // namespace

Status QuantizeBlock(const BlockGeometry& g, const QuantScheme& scheme, uint32_t group_size,
                     std::span<const std::byte> raw, std::span<std::byte> stage,
                     CodecContext* ctx) {
  KV_RETURN_IF_ERROR(CheckRotatable(g, scheme));
  const QuantLayout l = ComputeQuantLayout(g, scheme.key_bits, scheme.value_bits, group_size);
  KV_CHECK(raw.size() == g.raw_bytes());
  KV_CHECK(stage.size() == l.total_bytes);
  const TokenHalf vt{l.v_scale_offset, l.v_zero_offset, l.v_codes_offset};
  if (g.kind == LayoutKind::kLatent) {  // One plane, quantized per token like values.
    return QuantizeValues(g, scheme.value_bits, scheme.rotated, group_size, l, vt, raw.data(),
                          stage.data(), ctx);
  }
  const size_t half_bytes = g.half_elements() * DTypeBytes(g.dtype);
  KV_RETURN_IF_ERROR(
      QuantizeKeys(g, scheme.key_bits, group_size, l, raw.data(), stage.data(), ctx));
  return QuantizeValues(g, scheme.value_bits, scheme.rotated, group_size, l, vt,
                        raw.data() + half_bytes, stage.data(), ctx);
}

Status QuantizeBlock(const BlockGeometry& g, uint32_t bits, uint32_t group_size,
                     std::span<const std::byte> raw, std::span<std::byte> stage,
                     CodecContext* ctx) {
  return QuantizeBlock(g, QuantScheme{.key_bits = bits, .value_bits = bits}, group_size, raw,
                       stage, ctx);
}

Status DequantizeBlock(const BlockGeometry& g, const QuantScheme& scheme, uint32_t group_size,
                       std::span<const std::byte> stage, std::span<std::byte> raw_out,
                       CodecContext* ctx) {
  if (!CheckRotatable(g, scheme).ok()) {
    return Status::Corruption("encoded block: rotated codes need a power-of-two head_dim");
  }
  const QuantLayout l = ComputeQuantLayout(g, scheme.key_bits, scheme.value_bits, group_size);
  KV_CHECK(stage.size() == l.total_bytes);
  KV_CHECK(raw_out.size() >= g.raw_bytes());
  const TokenHalf vt{l.v_scale_offset, l.v_zero_offset, l.v_codes_offset};
  if (g.kind == LayoutKind::kLatent) {
    return DequantizeValues(g, scheme.value_bits, scheme.rotated, group_size, l, vt,
                            stage.data(), raw_out.data(), ctx);
  }
  const size_t half_bytes = g.half_elements() * DTypeBytes(g.dtype);
  KV_RETURN_IF_ERROR(
      DequantizeKeys(g, scheme.key_bits, group_size, l, stage.data(), raw_out.data(), ctx));
  return DequantizeValues(g, scheme.value_bits, scheme.rotated, group_size, l, vt, stage.data(),
                          raw_out.data() + half_bytes, ctx);
}

Status DequantizeBlock(const BlockGeometry& g, uint32_t bits, uint32_t group_size,
                       std::span<const std::byte> stage, std::span<std::byte> raw_out,
                       CodecContext* ctx) {
  return DequantizeBlock(g, QuantScheme{.key_bits = bits, .value_bits = bits}, group_size, stage,
                         raw_out, ctx);
}

}  // namespace kvtier::codecs
