// KIVI-style asymmetric quantization of a whole block into the int8/int4 stage-1 payload
// (layout: QuantLayout in block_format.h), and back. Keys are quantized per channel in groups of
// `group_size` tokens; values per token in groups of `group_size` channels. Each group stores an
// FP16 scale and an FP16 zero point (its minimum):
//   scale = fp16((max - min) / qmax), zero = fp16(min), q = clamp(rne((x - zero) / scale), 0, qmax)
// Error bound per element (docs/codecs.md): |x - x'| <= scale / 2 + e(zero) + qmax * e(scale)
// (+ the rounding of x' to the block dtype), where e() is the FP16 rounding error of that value.
//
// Also the element conversions between a block's dtype and F32 that the quality gate reuses.
//
// Thread safety: pure functions except for the CodecContext scratch they use (one thread per
// context). Internal to the codecs layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "codecs/block_geometry.h"
#include "codecs/codec.h"
#include "codecs/kernels.h"
#include "kvtier/status.h"

namespace kvtier::codecs {

// Largest finite FP16 value: inputs beyond it cannot get an FP16 zero point.
inline constexpr float kF16Max = 65504.0f;

// `n` elements of `dtype` at `src` (aligned to the element size) to F32, and back (RNE).
void ToF32(const Kernels& kernels, DType dtype, const std::byte* src, size_t n, float* dst);
void FromF32(const Kernels& kernels, DType dtype, const float* src, size_t n, std::byte* dst);

// Floats of CodecContext::ParamScratch that QuantizeBlock and DequantizeBlock use at most for
// blocks of `geometry` (valid).
size_t QuantizeParamFloats(const BlockGeometry& geometry);

// Quantizes `raw` (geometry.raw_bytes()) into `stage` (QuantLayout::total_bytes). InvalidArgument
// when a value is not finite or beyond +-kF16Max.
Status QuantizeBlock(const BlockGeometry& geometry, uint32_t bits, uint32_t group_size,
                     std::span<const std::byte> raw, std::span<std::byte> stage, CodecContext* ctx);

// Reconstructs `raw_out` (geometry.raw_bytes()) from `stage` (QuantLayout::total_bytes).
// Corruption when a stored scale or zero point is not finite or a scale is negative.
Status DequantizeBlock(const BlockGeometry& geometry, uint32_t bits, uint32_t group_size,
                       std::span<const std::byte> stage, std::span<std::byte> raw_out,
                       CodecContext* ctx);

}  // namespace kvtier::codecs
