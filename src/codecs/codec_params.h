// CodecId and CodecParams: which codec encodes a block and with which parameters.
//
// Why: the codec choice is data (the precision ladder returns one, encoded headers store one), so
// it is a small value type with a single Validate() rather than a class hierarchy.
//
// Thread safety: value types and pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "kvtier/result.h"
#include "kvtier/status.h"

namespace kvtier::codecs {

// Stored in every encoded block header: append only, never renumber (0 is never valid).
enum class CodecId : uint8_t {
  kIdentity = 1,     // Raw bytes.
  kShuffleZstd = 2,  // Byte planes (2 for f16/bf16, 4 for f32), then zstd. Lossless.
  kInt8 = 3,         // KIVI-style asymmetric 8-bit quantization (+ optional zstd). Lossy.
  kInt4 = 4,         // KIVI-style asymmetric 4-bit quantization (+ optional zstd). Lossy.
  kInt8Rot = 5,      // int8, each value head rotated (randomized Hadamard) first. Lossy.
  kInt4Rot = 6,      // int4, each value head rotated (randomized Hadamard) first. Lossy.
  kK8V4 = 7,         // Keys int8, values int4 (KIVI-style layout of both). Lossy.
  kK8V4Rot = 8,      // k8v4, each value head rotated (randomized Hadamard) first. Lossy.
  kEcq5 = 9,         // Entropy-coded quantization, step sd / 8 (about 5 bits), zstd. Lossy.
  kEcq6 = 10,        // Entropy-coded quantization, step sd / 16 (about 6 bits), zstd. Lossy.
  kEcq6V5 = 11,      // ecq, keys as ecq6, values at step sd / 9.5 (about 5.25 bits). Lossy.
};
// The largest CodecId value (the surfaces' enums check their range against it).
inline constexpr CodecId kCodecIdLast = CodecId::kEcq6V5;

// What a quantized codec does: bits of the key and value codes (8 or 4; 0 for a lossless codec)
// and whether each head of the values is rotated first (docs/codecs.md, "Hadamard rotation";
// keys, quantized per channel, are never rotated). The entropy-coded codecs (ecq5, ecq6, ecq6v5)
// have `entropy_coded` set and their nominal bits (5, 6; ecq6v5 6 for keys, 5 for values, whose
// step is a quarter bit finer than ecq5's): one byte per code, stored by zstd in about that many
// bits, with no group size (docs/codecs.md, "Entropy-coded quantization").
struct QuantScheme {
  uint32_t key_bits = 0;
  uint32_t value_bits = 0;
  bool rotated = false;
  bool entropy_coded = false;
  // Entropy-coded codecs: each plane's step precision in quarter bits (entropy_quant.h).
  uint32_t key_quarter_bits = 0;
  uint32_t value_quarter_bits = 0;
};
// The scheme of `id`: all zero for identity, shuffle-zstd and unknown ids.
QuantScheme SchemeOf(CodecId id);

// "identity", "shuffle-zstd", "int8", "int4", "int8-rot", "int4-rot", "k8v4", "k8v4-rot", "ecq5",
// "ecq6", "ecq6v5" or "codec(<n>)".
std::string CodecName(CodecId id);

// zstd levels accepted by the codecs. Level 0 (zstd's "default") and negative levels are refused:
// the first is ambiguous in a stored header, the second do not compress KV data at all.
inline constexpr int kZstdLevelMin = 1;
inline constexpr int kZstdLevelMax = 22;
// Quantization group: tokens per key group (per channel) and channels per value group (per token).
inline constexpr uint32_t kQuantGroupSizeMin = 8;
inline constexpr uint32_t kQuantGroupSizeMax = 1024;
// What 0 means in the options of every surface (C++, C, Python, CLI, config file): the codec's
// default. shuffle-zstd's level is 1 (zstd's fastest; KV bytes gain little from higher levels,
// docs/codecs.md); the quantized codecs take no zstd stage by default and group 32 tokens or channels.
inline constexpr int kShuffleZstdLevelDefault = 1;
inline constexpr uint32_t kQuantGroupSizeDefault = 32;
static_assert(kShuffleZstdLevelDefault >= kZstdLevelMin &&
              kShuffleZstdLevelDefault <= kZstdLevelMax);
static_assert(kQuantGroupSizeDefault >= kQuantGroupSizeMin &&
              kQuantGroupSizeDefault <= kQuantGroupSizeMax);

struct CodecParams {
  CodecId codec = CodecId::kIdentity;
  // shuffle-zstd: kZstdLevelMin..kZstdLevelMax. quantized: 0 = no zstd after quantization, else
  // kZstdLevelMin..kZstdLevelMax. identity: 0.
  int zstd_level = 0;
  // Grouped quantized codecs (int8, int4, their rotated twins, k8v4, k8v4-rot):
  // kQuantGroupSizeMin..kQuantGroupSizeMax. identity, shuffle-zstd and the ecq codecs: 0.
  // The ecq codecs always end in zstd: level kZstdLevelMin..kZstdLevelMax (0 resolves to 1).
  uint32_t group_size = 0;

  static CodecParams Identity() { return {.codec = CodecId::kIdentity}; }
  static CodecParams ShuffleZstd(int level = kShuffleZstdLevelDefault) {
    return {.codec = CodecId::kShuffleZstd, .zstd_level = level};
  }
  static CodecParams Int8(uint32_t group_size = kQuantGroupSizeDefault, int zstd_level = 0) {
    return {.codec = CodecId::kInt8, .zstd_level = zstd_level, .group_size = group_size};
  }
  static CodecParams Int4(uint32_t group_size = kQuantGroupSizeDefault, int zstd_level = 0) {
    return {.codec = CodecId::kInt4, .zstd_level = zstd_level, .group_size = group_size};
  }
  // An entropy-coded codec (ecq5, ecq6, ecq6v5); level 0 resolves to 1 in WithDefaults.
  static CodecParams Ecq(CodecId id, int zstd_level = 1) {
    return {.codec = id, .zstd_level = zstd_level};
  }
  // Any lossy codec by id with its group (int8, int4, int8-rot, int4-rot, k8v4, k8v4-rot; the ecq
  // codecs take group 0).
  static CodecParams Quantized(CodecId id, uint32_t group_size = kQuantGroupSizeDefault,
                               int zstd_level = 0) {
    return {.codec = id, .zstd_level = zstd_level, .group_size = group_size};
  }

  // Quantization bits: the fewer of the key and value bits (8 or 4; ecq's nominal 5 or 6), or 0 for
  // the lossless codecs.
  uint32_t bits() const;
  uint32_t key_bits() const { return SchemeOf(codec).key_bits; }
  uint32_t value_bits() const { return SchemeOf(codec).value_bits; }
  // True when each value head is rotated (randomized Hadamard) before quantization.
  bool rotated() const { return SchemeOf(codec).rotated; }
  // True for ecq5, ecq6 and ecq6v5 (variable-size stage payload, always zstd, no group size).
  bool entropy_coded() const { return SchemeOf(codec).entropy_coded; }
  // True for the codecs with a quantization group (lossy and not entropy-coded).
  bool grouped() const { return !lossless() && !entropy_coded(); }
  bool lossless() const { return bits() == 0; }
  // True when the payload is a zstd frame.
  bool uses_zstd() const { return zstd_level != 0; }

  // These parameters with the options' zeros made the codec's defaults: shuffle-zstd's level 0
  // becomes kShuffleZstdLevelDefault, the grouped codecs' group size 0 kQuantGroupSizeDefault,
  // ecq's level 0 kZstdLevelMin. Every other value is kept, for Validate to judge. Encoded
  // headers always hold resolved values.
  CodecParams WithDefaults() const;

  // InvalidArgument naming the bad field. Takes resolved values: a shuffle-zstd level of 0 is
  // refused here (WithDefaults first where 0 means the default).
  Status Validate() const;
  std::string ToString() const;

  friend bool operator==(const CodecParams&, const CodecParams&) = default;
};

// A codec by name as the APIs spell it (CodecName's names), with its zstd
// level (0: the codec's default: 1 for shuffle-zstd, none after quantization) and quantization
// group (0: 32), resolved by WithDefaults. InvalidArgument naming the choices, or the bad field.
Result<CodecParams> ParseCodecParams(const std::string& name, int zstd_level = 0,
                                     uint32_t group_size = 0);

// Whether a latent block (multi-head latent attention: one plane, no K/V split) may be encoded
// with `params`: the lossless codecs, and int8 and int4, which quantize its one plane per token
// in groups along the latent row as they quantize values. Not k8v4 (two bit widths for K and V)
// nor the rotated codecs (a latent row is not a power-of-two head).
bool LatentCodecOk(const CodecParams& params);

}  // namespace kvtier::codecs
