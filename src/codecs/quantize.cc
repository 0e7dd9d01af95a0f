#include "codecs/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "codecs/block_format.h"
#include "core/assert.h"
#include "core/coding.h"

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

// True when every group's min and max lies within +-kF16Max. Always true for FP16 input, whose
// finite values all do, so that case is not checked.
bool InF16Range(DType dtype, const float* mins, const float* maxs, size_t n) {
  if (dtype == DType::kF16) return true;
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
    if (!InF16Range(g.dtype, mins, maxs, channels)) {
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
Status QuantizeValues(const BlockGeometry& g, uint32_t bits, size_t group, const QuantLayout& l,
                      const std::byte* half, std::byte* stage, CodecContext* ctx) {
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
      bits == 8 ? As<uint8_t>(stage + l.v_codes_offset) : ctx->CodeScratch(g.half_elements());
  for (size_t t0 = 0; t0 < g.tokens; t0 += chunk_rows) {
    const size_t t1 = std::min<size_t>(g.tokens, t0 + chunk_rows);
    const float* x = RowsF32(k, g.dtype, half, channels, t0, t1, scratch);
    if (!k.all_finite(x, (t1 - t0) * channels)) {
      return RefuseHalf(k, g.dtype, half, g.half_elements(), ctx);
    }
    // Rows quantized per call: the whole chunk when its groups tile it, else one.
    const size_t step = flat ? t1 - t0 : 1;
    for (size_t r = 0; r < t1 - t0; r += step) {
      const float* src = x + r * channels;
      const size_t n = step * channels;
      const size_t params = step * groups;
      k.min_max_groups(src, n, group, mins, maxs);
      if (!InF16Range(g.dtype, mins, maxs, params)) {
        return RefuseHalf(k, g.dtype, half, g.half_elements(), ctx);
      }
      const size_t first = (t0 + r) * groups;
      k.quant_params(mins, maxs, params, qmax, As<uint8_t>(stage + l.v_scale_offset + 2 * first),
                     As<uint8_t>(stage + l.v_zero_offset + 2 * first), mins, inv);
      k.quantize_groups(src, n, group, mins, inv, qmax, codes + (t0 + r) * channels);
    }
  }
  if (bits == 4) k.pack_nibbles(codes, g.half_elements(), As<uint8_t>(stage + l.v_codes_offset));
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

Status DequantizeValues(const BlockGeometry& g, uint32_t bits, size_t group, const QuantLayout& l,
                        const std::byte* stage, std::byte* dst, CodecContext* ctx) {
  const Kernels& k = ctx->kernels();
  const size_t channels = g.channels();
  const size_t row_bytes = channels * DTypeBytes(g.dtype);
  float* row = ctx->ParamScratch(channels);
  const uint8_t* codes = As<uint8_t>(stage + l.v_codes_offset);
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
      KV_RETURN_IF_ERROR(ReadParams(stage + l.v_scale_offset + 2 * param_index,
                                    stage + l.v_zero_offset + 2 * param_index, &scale, &zero));
      k.dequantize_uniform(codes + t * channels + c0, std::min(group, channels - c0), zero, scale,
                           row + c0);
    }
    StoreRow(k, g.dtype, row, channels, dst + t * row_bytes);
  }
  return Status::Ok();
}

}  // namespace

size_t QuantizeParamFloats(const BlockGeometry& g) {
  // Keys: min, max and inverse scale per channel. Values: the same per group of a chunk of rows,
  // at most one group per kQuantGroupSizeMin elements of the chunk.
  const size_t chunk = ValueChunkRows(g) * g.channels();
  return 3 * std::max(g.channels(), (chunk + kQuantGroupSizeMin - 1) / kQuantGroupSizeMin);
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

Status QuantizeBlock(const BlockGeometry& g, uint32_t bits, uint32_t group_size,
                     std::span<const std::byte> raw, std::span<std::byte> stage,
                     CodecContext* ctx) {
  const QuantLayout l = ComputeQuantLayout(g, bits, group_size);
  KV_CHECK(raw.size() == g.raw_bytes());
  KV_CHECK(stage.size() == l.total_bytes);
  const size_t half_bytes = g.half_elements() * DTypeBytes(g.dtype);
  KV_RETURN_IF_ERROR(QuantizeKeys(g, bits, group_size, l, raw.data(), stage.data(), ctx));
  return QuantizeValues(g, bits, group_size, l, raw.data() + half_bytes, stage.data(), ctx);
}

Status DequantizeBlock(const BlockGeometry& g, uint32_t bits, uint32_t group_size,
                       std::span<const std::byte> stage, std::span<std::byte> raw_out,
                       CodecContext* ctx) {
  const QuantLayout l = ComputeQuantLayout(g, bits, group_size);
  KV_CHECK(stage.size() == l.total_bytes);
  KV_CHECK(raw_out.size() >= g.raw_bytes());
  const size_t half_bytes = g.half_elements() * DTypeBytes(g.dtype);
  KV_RETURN_IF_ERROR(DequantizeKeys(g, bits, group_size, l, stage.data(), raw_out.data(), ctx));
  return DequantizeValues(g, bits, group_size, l, stage.data(), raw_out.data() + half_bytes, ctx);
}

}  // namespace kvtier::codecs
