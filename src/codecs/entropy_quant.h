// The entropy-coded quantizers (ecq5, ecq6, ecq6v5): uniform quantization with a step set by each
// head's spread, one byte per code, then zstd, whose Huffman stage codes the bytes near their
// entropy (docs/codecs.md, "Entropy-coded quantization").
//
// Why: int8 and int4 give every code the same bits, so their codes look almost uniform to zstd
// (it gains 2-4 % on them), and int4's min-max scale spends its 16 levels on a group's extremes.
// A step proportional to the spread of the values makes their codes follow one narrow
// distribution, which the entropy coder then stores in about log2(sigma / step) + 2 bits: at the
// same ratio the error is about half of int4's, at the same error the block is about a fifth
// smaller.
//
// Stage payload (before zstd), for P planes (2: K and V; 1 for a latent block), C channels and T
// tokens:
//   center_lo: u8[P][C]  center_hi: u8[P][C]  step: u8[P][H]  codes: u8[P][T][C]  escapes
// (H = kv_heads; each 16-bit center zigzag-coded, its low and high bytes in two planes, so that
// zstd stores the mostly zero high bytes in almost nothing; codes in block order, each the zigzag
// byte of a signed code q in [-127, 127]: 0, -1, 1, -2, .. as 0, 1, 2, 3, ..). Element x of channel
// c of head h decodes as (q + center[c]) * step[h], with step[h] = 2^((e[h] - 112) / 8) for the
// stored byte e[h] (2^-14 .. 2^17.875, an eighth of an octave apart). The encoder picks the e[h]
// nearest to 2^(2 - bits) times the geometric mean of the standard deviations (over the block's
// tokens) of the head's channels that vary, but not below any of its channels' |mean| / 30000, so
// that center[c] = rne(mean[c] / step[h]) fits 16 bits. One absolute step per head gives each
// channel the same error, which for a given number of bits minimizes the head's squared error. The
// code byte 255 is an escape: that element is stored exactly, in the block's dtype, in `escapes`,
// in block order. Every other element decodes within step[h] / 2 of its value (plus the rounding of
// the result to the dtype).
//
// Thread safety: pure functions except for the CodecContext scratch they use (one thread per
// context). Internal to the codecs layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "codecs/block_geometry.h"
#include "codecs/codec.h"
#include "kvtier/status.h"

namespace kvtier::codecs {

// The escape code: the element is stored exactly after the codes.
inline constexpr uint8_t kEcqEscape = 255;

// Floats of CodecContext::ParamScratch per channel that EcqQuantize uses.
inline constexpr size_t kEcqParamFloatsPerChannel = 5;

struct EcqLayout {
  size_t params = 0;  // P * C (centers); the steps are P * H.
  size_t centers_offset = 0;
  size_t steps_offset = 0;
  size_t codes_offset = 0;
  size_t escapes_offset = 0;  // == the fixed part's size.
  size_t max_bytes = 0;       // Every element escaped.
};
EcqLayout ComputeEcqLayout(const BlockGeometry& geometry);

// The precision of each plane in quarter bits: a head's step is 2^(2 - quarter_bits / 4) times
// the geometric mean of its channels' standard deviations. ecq5: 20 and 20; ecq6: 24 and 24;
// ecq6v5: keys 24, values 21. A latent block's one plane takes the key precision.
struct EcqPrecision {
  uint32_t key_quarter_bits = 0;
  uint32_t value_quarter_bits = 0;
};
// The precision of an entropy-coded codec (CHECK-fails for any other id).
EcqPrecision EcqPrecisionOf(CodecId id);

// The step a stored step byte stands for: 2^((e - 112) / 8).
float EcqStep(uint8_t e);

// Quantizes `raw` (geometry.raw_bytes()) into `stage` (at least ComputeEcqLayout().max_bytes)
// with `precision` (quarter bits in 8..32) and sets `stage_bytes`.
// InvalidArgument when a value is not finite or beyond the FP16 range.
Status EcqQuantize(const BlockGeometry& geometry, EcqPrecision precision,
                   std::span<const std::byte> raw, std::span<std::byte> stage, size_t* stage_bytes,
                   CodecContext* ctx);

// Reconstructs `raw_out` (geometry.raw_bytes()) from a stage payload of exactly `stage.size()`
// bytes. Corruption for a stage shorter than its fixed part, an escape count that does not match
// the bytes after the codes, or an escaped element that is not finite or beyond the FP16 range.
Status EcqDequantize(const BlockGeometry& geometry, std::span<const std::byte> stage,
                     std::span<std::byte> raw_out, CodecContext* ctx);

}  // namespace kvtier::codecs
