// KIVI-style asymmetric quantization of a whole block into the int8/int4 stage-1 payload
// (layout: QuantLayout in block_format.h), and back. Keys are quantized per channel in groups of
// `group_size` tokens; values per token in groups of `group_size` channels. Each group stores an
// FP16 scale and an FP16 zero point (its minimum):
//   scale = fp16((max - min) / qmax), zero = fp16(min), q = clamp(rne((x - zero) / scale), 0, qmax)
// Error bound per element (docs/codecs.md): |x - x'| <= scale / 2 + e(zero) + qmax * e(scale)
// (+ the rounding of x' to the block dtype), where e() is the FP16 rounding error of that value.
//
// The rotated codecs (int8-rot, int4-rot, k8v4-rot) first rotate each head of the values (the
// head_dim values of one head of one token) by a fixed randomized Hadamard transform,
// y = s * H * D * x (D: fixed signs, H: the Walsh-Hadamard matrix, s = 1/sqrt(head_dim)), so that
// an outlier channel is spread over the head instead of setting its per-token group's scale; the
// decoder applies the inverse x = D * s * H * y. Keys are not rotated: quantized per channel,
// each channel already has its own scale, and rotating them measured worse (docs/codecs.md).
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
#include "codecs/codec_params.h"
#include "codecs/kernels.h"
#include "kvtier/status.h"

namespace kvtier::codecs {

// Largest finite FP16 value: inputs beyond it cannot get an FP16 zero point.
inline constexpr float kF16Max = 65504.0f;

// OK when the n values are finite and within +-kF16Max, which every quantizing codec needs (their
// scales and zero points are FP16); else InvalidArgument naming the first problem.
Status CheckQuantizable(const Kernels& k, const float* x, size_t n);

// `n` elements of `dtype` at `src` (aligned to the element size) to F32, and back (RNE).
void ToF32(const Kernels& kernels, DType dtype, const std::byte* src, size_t n, float* dst);
void FromF32(const Kernels& kernels, DType dtype, const float* src, size_t n, std::byte* dst);

// The sign (+1 or -1) of element i of a head in the rotation: bit 63 of splitmix64(i + 1) set
// means -1. Fixed forever: stored blocks depend on it (a change needs a new codec id).
float HadamardSign(size_t i);
// The rotation and its inverse over x[0, n) in place, each consecutive `head_dim` values one head
// (n a multiple of head_dim, head_dim a power of two <= kHeadDimMax). Order of operations (F32,
// no FMA): forward: multiply by the sign, butterflies for h = 1, 2, .., head_dim / 2
// (a, b -> a + b, a - b on elements j and j + h of each 2h-aligned span), multiply by s.
// Inverse: the same butterflies, then multiply by s, then by the sign. `kernels` picks the
// instruction set (AVX2 unless it is the scalar set); the results are the same bits.
void HadamardRotate(const Kernels& kernels, float* x, size_t n, uint32_t head_dim);
void HadamardUnrotate(const Kernels& kernels, float* x, size_t n, uint32_t head_dim);

// Floats of CodecContext::ParamScratch that QuantizeBlock and DequantizeBlock use at most for
// blocks of `geometry` (valid).
size_t QuantizeParamFloats(const BlockGeometry& geometry);

// Quantizes `raw` (geometry.raw_bytes()) into `stage` (QuantLayout::total_bytes). InvalidArgument
// when a value is not finite or beyond +-kF16Max (a rotated value too, for a rotated scheme, which
// needs a power-of-two head_dim: InvalidArgument otherwise).
Status QuantizeBlock(const BlockGeometry& geometry, const QuantScheme& scheme,
                     uint32_t group_size, std::span<const std::byte> raw,
                     std::span<std::byte> stage, CodecContext* ctx);
// The same with `bits` for keys and values and no rotation (int8, int4).
Status QuantizeBlock(const BlockGeometry& geometry, uint32_t bits, uint32_t group_size,
                     std::span<const std::byte> raw, std::span<std::byte> stage, CodecContext* ctx);

// Reconstructs `raw_out` (geometry.raw_bytes()) from `stage` (QuantLayout::total_bytes).
// Corruption when a stored scale or zero point is not finite or a scale is negative.
Status DequantizeBlock(const BlockGeometry& geometry, const QuantScheme& scheme,
                       uint32_t group_size, std::span<const std::byte> stage,
                       std::span<std::byte> raw_out, CodecContext* ctx);
Status DequantizeBlock(const BlockGeometry& geometry, uint32_t bits, uint32_t group_size,
                       std::span<const std::byte> stage, std::span<std::byte> raw_out,
                       CodecContext* ctx);

}  // namespace kvtier::codecs
