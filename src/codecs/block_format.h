// The encoded block format: a fixed 48-byte self-describing header followed by the payload.
// Specified in docs/codecs.md ("Encoded block format"); this file holds its constants and the
// field-by-field encoder and the checking decoder of the header, plus the payload layouts.
//
//   header := magic:u32 version:u8 codec:u8 dtype:u8 bits:u8 zstd_level:u8 flags:u8
//             group_size:u16 tokens:u32 kv_heads:u32 head_dim:u32 raw_bytes:u64
//             payload_bytes:u64 reserved:u32 header_crc:u32        (little-endian, 48 bytes)
//   header_crc := crc32c::Mask(crc32c(header[0, 44)))
//
// Why a header per block: every block is decoded on its own (a tier may hold blocks written by
// different codecs or versions), and a block read back must prove what it is before any byte of
// the payload is trusted.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "codecs/block_geometry.h"
#include "codecs/codec_params.h"
#include "kvtier/result.h"

namespace kvtier::codecs {

inline constexpr uint32_t kBlockMagic = 0x4243564Bu;  // "KVCB" as little-endian bytes.
inline constexpr uint8_t kBlockFormatVersion = 1;
inline constexpr size_t kBlockHeaderBytes = 48;
inline constexpr size_t kBlockHeaderCrcOffset = 44;
// flags bit 0: the payload is one zstd frame holding the stage-1 payload.
inline constexpr uint8_t kBlockFlagZstd = 0x01;
// flags bit 1: each head of the values was rotated (randomized Hadamard, docs/codecs.md) before
// quantization; the decoder applies the inverse. Set exactly for the rotated codecs (int8-rot,
// int4-rot, k8v4-rot), whose head_dim is a power of two.
inline constexpr uint8_t kBlockFlagHadamard = 0x02;
// flags bit 2: a latent block (one plane [token][head_dim], kv_heads 1, no K/V split). Only the
// lossless codecs write it; a build that predates it refuses the block (other flag bits are 0).
inline constexpr uint8_t kBlockFlagLatent = 0x04;

// The header's bits byte for `params`: the code bits when keys and values share them (8, 4; 0
// for a lossless codec), else value bits << 4 | key bits (0x48 for k8v4).
uint8_t HeaderBits(const CodecParams& params);
// The header's flags byte for `params` (kBlockFlagZstd, kBlockFlagHadamard).
uint8_t HeaderFlags(const CodecParams& params);

struct BlockHeader {
  CodecParams params;
  BlockGeometry geometry;
  uint64_t raw_bytes = 0;      // Decoded size: geometry.raw_bytes().
  uint64_t payload_bytes = 0;  // Bytes after the header.

  // The whole encoded block.
  uint64_t encoded_bytes() const { return kBlockHeaderBytes + payload_bytes; }
};

// Writes the 48 header bytes (params and geometry must be valid: programmer error otherwise).
void EncodeBlockHeader(const BlockHeader& header, std::span<std::byte, kBlockHeaderBytes> dst);

// Parses and checks a header at the start of `src` (which may hold more bytes). Corruption when
// the input is shorter than a header, the magic, version or checksum is wrong, a field is out of
// range, the codec or dtype is unknown, or the sizes disagree with the geometry and codec.
Result<BlockHeader> DecodeBlockHeader(std::span<const std::byte> src);

// Layout of a quantized payload before the optional zstd stage. For C = kv_heads * head_dim
// channels, T tokens, group size G, GK = ceil(T / G) key groups, GV = ceil(C / G) value groups:
//   k_scale: f16[GK][C]   k_zero: f16[GK][C]    (keys: per channel, groups of G tokens)
//   v_scale: f16[T][GV]   v_zero: f16[T][GV]    (values: per token, groups of G channels)
//   k_codes: codes of K in block order [token][channel]
//   v_codes: codes of V in block order
// Codes are one byte each (8 bits) or two per byte, element 2i in the low nibble (4 bits); keys
// and values may differ (k8v4). A latent block has no K half: GK = 0, no key parameters or codes,
// and its one plane is quantized as values are (per token, groups of G along the latent row).
struct QuantLayout {
  size_t key_groups = 0;    // GK.
  size_t value_groups = 0;  // GV (per token).
  size_t k_scale_offset = 0;
  size_t k_zero_offset = 0;
  size_t v_scale_offset = 0;
  size_t v_zero_offset = 0;
  size_t k_codes_offset = 0;
  size_t v_codes_offset = 0;
  size_t code_bytes = 0;    // Key codes (and value codes when both halves share the bits).
  size_t v_code_bytes = 0;  // Value codes.
  size_t total_bytes = 0;
};
QuantLayout ComputeQuantLayout(const BlockGeometry& geometry, uint32_t bits, uint32_t group_size);
QuantLayout ComputeQuantLayout(const BlockGeometry& geometry, uint32_t key_bits,
                               uint32_t value_bits, uint32_t group_size);

// Upper bound of the payload for valid params and geometry.
size_t MaxPayloadBytes(const CodecParams& params, const BlockGeometry& geometry);
// Bytes of the payload before zstd (== the payload when no zstd is used). For ecq5/ecq6, whose
// stage has a variable number of escaped elements, its largest size.
size_t StagePayloadBytes(const CodecParams& params, const BlockGeometry& geometry);

}  // namespace kvtier::codecs
