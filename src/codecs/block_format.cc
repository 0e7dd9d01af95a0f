#include "codecs/block_format.h"

#include <zstd.h>

#include <bit>
#include <string>

#include "core/assert.h"
#include "core/coding.h"
#include "core/crc32c.h"

namespace kvtier::codecs {

namespace {

uint32_t HeaderCrc(const std::byte* header) {
  return crc32c::Mask(crc32c::Value(header, kBlockHeaderCrcOffset));
}

Status Corrupt(const std::string& what) { return Status::Corruption("encoded block: " + what); }


// Field checks after the checksum matched: a valid CRC over nonsense is still nonsense (a
// writer bug, or a block from an incompatible build).
Status CheckFields(const BlockHeader& h, uint8_t bits, uint8_t flags, uint32_t reserved) {
  if (Status s = h.params.Validate(); !s.ok()) return Corrupt(s.message());
  if (Status s = h.geometry.Validate(); !s.ok()) return Corrupt(s.message());
  if (bits != HeaderBits(h.params)) {
    return Corrupt("bits " + std::to_string(bits) + " do not match " + CodecName(h.params.codec));
  }
  if (h.geometry.kind == LayoutKind::kLatent && !LatentCodecOk(h.params)) {
    return Corrupt("a latent block with the codec " + CodecName(h.params.codec));
  }
  if (flags != HeaderFlags(h.params)) {
    return Corrupt("flags " + std::to_string(flags) + " do not match " + h.params.ToString());
  }
  if (h.params.rotated() && !std::has_single_bit(h.geometry.head_dim)) {
    return Corrupt(CodecName(h.params.codec) + " needs a power-of-two head_dim, not " +
                   std::to_string(h.geometry.head_dim));
  }
  if (reserved != 0) return Corrupt("reserved field is not zero");
  if (h.raw_bytes != h.geometry.raw_bytes()) {
    return Corrupt("raw size " + std::to_string(h.raw_bytes) + " does not match geometry " +
                   h.geometry.ToString());
  }
  if (h.payload_bytes > MaxPayloadBytes(h.params, h.geometry)) {
    return Corrupt("payload size " + std::to_string(h.payload_bytes) + " exceeds the bound for " +
                   h.params.ToString());
  }
  if (!h.params.uses_zstd() && h.payload_bytes != StagePayloadBytes(h.params, h.geometry)) {
    return Corrupt("payload size " + std::to_string(h.payload_bytes) + " does not match " +
                   h.params.ToString() + " and " + h.geometry.ToString());
  }
  return Status::Ok();
}

}  // namespace

uint8_t HeaderBits(const CodecParams& params) {
  const uint32_t k = params.key_bits();
  const uint32_t v = params.value_bits();
  return static_cast<uint8_t>(k == v ? k : (v << 4) | k);
}

uint8_t HeaderFlags(const CodecParams& params) {
  return static_cast<uint8_t>((params.uses_zstd() ? kBlockFlagZstd : 0) |
                              (params.rotated() ? kBlockFlagHadamard : 0));
}

void EncodeBlockHeader(const BlockHeader& h, std::span<std::byte, kBlockHeaderBytes> dst) {
  KV_DCHECK(h.params.Validate().ok());
  KV_DCHECK(h.geometry.Validate().ok());
  std::byte* p = dst.data();
  EncodeFixed32(p + 0, kBlockMagic);
  EncodeFixed8(p + 4, kBlockFormatVersion);
  EncodeFixed8(p + 5, static_cast<uint8_t>(h.params.codec));
  EncodeFixed8(p + 6, static_cast<uint8_t>(h.geometry.dtype));
  EncodeFixed8(p + 7, HeaderBits(h.params));
  EncodeFixed8(p + 8, static_cast<uint8_t>(h.params.zstd_level));
  EncodeFixed8(p + 9, static_cast<uint8_t>(
                         HeaderFlags(h.params) |
                         (h.geometry.kind == LayoutKind::kLatent ? kBlockFlagLatent : 0)));
  EncodeFixed16(p + 10, static_cast<uint16_t>(h.params.group_size));
  EncodeFixed32(p + 12, h.geometry.tokens);
  EncodeFixed32(p + 16, h.geometry.kv_heads);
  EncodeFixed32(p + 20, h.geometry.head_dim);
  EncodeFixed64(p + 24, h.raw_bytes);
  EncodeFixed64(p + 32, h.payload_bytes);
  EncodeFixed32(p + 40, 0);
  EncodeFixed32(p + kBlockHeaderCrcOffset, HeaderCrc(p));
}

Result<BlockHeader> DecodeBlockHeader(std::span<const std::byte> src) {
  if (src.size() < kBlockHeaderBytes) {
    return Corrupt("truncated header: " + std::to_string(src.size()) + " bytes, need " +
                   std::to_string(kBlockHeaderBytes));
  }
  const std::byte* p = src.data();
  if (DecodeFixed32(p) != kBlockMagic) return Corrupt("bad magic");
  const uint8_t version = DecodeFixed8(p + 4);
  if (version != kBlockFormatVersion) {
    return Corrupt("unsupported format version " + std::to_string(version) + " (this build reads " +
                   std::to_string(kBlockFormatVersion) + ")");
  }
  if (DecodeFixed32(p + kBlockHeaderCrcOffset) != HeaderCrc(p)) {
    return Corrupt("header checksum mismatch");
  }
  BlockHeader h;
  h.params.codec = static_cast<CodecId>(DecodeFixed8(p + 5));
  h.geometry.dtype = static_cast<DType>(DecodeFixed8(p + 6));
  const uint8_t bits = DecodeFixed8(p + 7);
  h.params.zstd_level = DecodeFixed8(p + 8);
  const auto flags = static_cast<uint8_t>(DecodeFixed8(p + 9) & ~uint32_t{kBlockFlagLatent});
  if ((DecodeFixed8(p + 9) & kBlockFlagLatent) != 0) h.geometry.kind = LayoutKind::kLatent;
  h.params.group_size = DecodeFixed16(p + 10);
  h.geometry.tokens = DecodeFixed32(p + 12);
  h.geometry.kv_heads = DecodeFixed32(p + 16);
  h.geometry.head_dim = DecodeFixed32(p + 20);
  h.raw_bytes = DecodeFixed64(p + 24);
  h.payload_bytes = DecodeFixed64(p + 32);
  KV_RETURN_IF_ERROR(CheckFields(h, bits, flags, DecodeFixed32(p + 40)));
  return h;
}

QuantLayout ComputeQuantLayout(const BlockGeometry& g, uint32_t bits, uint32_t group_size) {
  return ComputeQuantLayout(g, bits, bits, group_size);
}

QuantLayout ComputeQuantLayout(const BlockGeometry& g, uint32_t key_bits, uint32_t value_bits,
                               uint32_t group_size) {
  KV_DCHECK(key_bits == 8 || key_bits == 4);
  KV_DCHECK(value_bits == 8 || value_bits == 4);
  KV_DCHECK(group_size > 0);
  const size_t channels = g.channels();
  const size_t tokens = g.tokens;
  QuantLayout l;
  // A latent block's one plane is quantized like values (per token); it has no keys.
  const bool latent = g.kind == LayoutKind::kLatent;
  l.key_groups = latent ? 0 : (tokens + group_size - 1) / group_size;
  l.value_groups = (channels + group_size - 1) / group_size;
  const size_t key_params_bytes = 2 * l.key_groups * channels;
  const size_t value_params_bytes = 2 * tokens * l.value_groups;
  const auto code_bytes = [&](uint32_t bits) {
    return bits == 8 ? g.half_elements() : (g.half_elements() + 1) / 2;
  };
  l.code_bytes = latent ? 0 : code_bytes(key_bits);
  l.v_code_bytes = code_bytes(value_bits);
  l.k_scale_offset = 0;
  l.k_zero_offset = l.k_scale_offset + key_params_bytes;
  l.v_scale_offset = l.k_zero_offset + key_params_bytes;
  l.v_zero_offset = l.v_scale_offset + value_params_bytes;
  l.k_codes_offset = l.v_zero_offset + value_params_bytes;
  l.v_codes_offset = l.k_codes_offset + l.code_bytes;
  l.total_bytes = l.v_codes_offset + l.v_code_bytes;
  return l;
}

size_t StagePayloadBytes(const CodecParams& params, const BlockGeometry& geometry) {
  if (params.lossless()) return geometry.raw_bytes();
  if (params.entropy_coded()) {  // EcqLayout (entropy_quant.h) with every element escaped.
    return geometry.planes() * (2 * geometry.channels() + geometry.kv_heads) +
           geometry.elements() * (1 + DTypeBytes(geometry.dtype));
  }
  return ComputeQuantLayout(geometry, params.key_bits(), params.value_bits(), params.group_size)
      .total_bytes;
}

size_t MaxPayloadBytes(const CodecParams& params, const BlockGeometry& geometry) {
  const size_t stage = StagePayloadBytes(params, geometry);
  return params.uses_zstd() ? ZSTD_compressBound(stage) : stage;
}

}  // namespace kvtier::codecs
