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

struct GroupParams {
  float zero;
  float scale;
  float inv_scale;
  uint16_t zero_f16;
  uint16_t scale_f16;
};

// Params from a group's min and max (finite, within +-kF16Max). The quantizer uses the FP16
// values actually stored, so encoder and decoder agree exactly.
GroupParams MakeParams(float min, float max, float qmax) {
  GroupParams p;
  p.scale_f16 = F32ToF16((max - min) / qmax);
  p.scale = F16ToF32(p.scale_f16);
  p.zero_f16 = F32ToF16(min + 0.0f);  // + 0.0f turns -0 into +0: one canonical encoding.
  p.zero = F16ToF32(p.zero_f16);
  p.inv_scale = p.scale > 0.0f ? 1.0f / p.scale : 0.0f;
  return p;
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

// Keys: per channel, groups of G tokens.
void QuantizeKeys(const BlockGeometry& g, uint32_t bits, size_t group, const QuantLayout& l,
                  const float* x, std::byte* stage, CodecContext* ctx) {
  const Kernels& k = ctx->kernels();
  const size_t channels = g.channels();
  const float qmax = QMax(bits);
  float* mins = ctx->ParamScratch(3 * channels);
  float* maxs = mins + channels;
  float* inv = maxs + channels;
  uint8_t* codes =
      bits == 8 ? As<uint8_t>(stage + l.k_codes_offset) : ctx->CodeScratch(g.half_elements());
  for (size_t grp = 0; grp < l.key_groups; ++grp) {
    const size_t t0 = grp * group;
    const size_t t1 = std::min<size_t>(g.tokens, t0 + group);
    std::memcpy(mins, x + t0 * channels, channels * sizeof(float));
    std::memcpy(maxs, x + t0 * channels, channels * sizeof(float));
    for (size_t t = t0 + 1; t < t1; ++t)
      k.min_max_accumulate(x + t * channels, channels, mins, maxs);
    std::byte* scale_out = stage + l.k_scale_offset + 2 * grp * channels;
    std::byte* zero_out = stage + l.k_zero_offset + 2 * grp * channels;
    for (size_t c = 0; c < channels; ++c) {
      const GroupParams p = MakeParams(mins[c], maxs[c], qmax);
      EncodeFixed16(scale_out + 2 * c, p.scale_f16);
      EncodeFixed16(zero_out + 2 * c, p.zero_f16);
      mins[c] = p.zero;
      inv[c] = p.inv_scale;
    }
    for (size_t t = t0; t < t1; ++t) {
      k.quantize_per_channel(x + t * channels, channels, mins, inv, qmax, codes + t * channels);
    }
  }
  if (bits == 4) k.pack_nibbles(codes, g.half_elements(), As<uint8_t>(stage + l.k_codes_offset));
}

// Values: per token, groups of G channels.
void QuantizeValues(const BlockGeometry& g, uint32_t bits, size_t group, const QuantLayout& l,
                    const float* x, std::byte* stage, CodecContext* ctx) {
  const Kernels& k = ctx->kernels();
  const size_t channels = g.channels();
  const float qmax = QMax(bits);
  uint8_t* codes =
      bits == 8 ? As<uint8_t>(stage + l.v_codes_offset) : ctx->CodeScratch(g.half_elements());
  for (size_t t = 0; t < g.tokens; ++t) {
    for (size_t j = 0; j < l.value_groups; ++j) {
      const size_t c0 = j * group;
      const size_t n = std::min(group, channels - c0);
      const float* src = x + t * channels + c0;
      float min = 0;
      float max = 0;
      k.min_max(src, n, &min, &max);
      const GroupParams p = MakeParams(min, max, qmax);
      const size_t param_index = t * l.value_groups + j;
      EncodeFixed16(stage + l.v_scale_offset + 2 * param_index, p.scale_f16);
      EncodeFixed16(stage + l.v_zero_offset + 2 * param_index, p.zero_f16);
      k.quantize_uniform(src, n, p.zero, p.inv_scale, qmax, codes + t * channels + c0);
    }
  }
  if (bits == 4) k.pack_nibbles(codes, g.half_elements(), As<uint8_t>(stage + l.v_codes_offset));
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
  const Kernels& k = ctx->kernels();
  const size_t n = g.half_elements();
  const size_t half_bytes = n * DTypeBytes(g.dtype);
  for (size_t half = 0; half < 2; ++half) {
    const std::byte* src = raw.data() + half * half_bytes;
    const float* x = As<float>(src);
    if (g.dtype != DType::kF32) {
      float* converted = ctx->F32Scratch(n);
      ToF32(k, g.dtype, src, n, converted);
      x = converted;
    }
    KV_RETURN_IF_ERROR(CheckQuantizable(k, x, n));
    if (half == 0) {
      QuantizeKeys(g, bits, group_size, l, x, stage.data(), ctx);
    } else {
      QuantizeValues(g, bits, group_size, l, x, stage.data(), ctx);
    }
  }
  return Status::Ok();
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
