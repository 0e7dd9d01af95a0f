// libFuzzer harness for DecodeBlock: any byte string must decode or fail with a Status, never
// crash, hang or touch memory out of bounds (run under ASan/UBSan). The first input byte picks a
// mode: with bit 0 set, the rest is a block whose header checksum the harness recomputes, so
// random headers get past the CRC to the field checks and payload decoders (zstd, unshuffle,
// dequantization, the inverse Hadamard rotation). When the header parses, its own geometry is
// the expected one; otherwise a fixed small geometry is used. With bit 1 set (and bit 0 clear),
// the harness first encodes a fixed block with a codec the next byte picks (every CodecId, the
// rotated and mixed-width ones included, with or without zstd, on a geometry the byte after
// picks), then XORs the rest of the input over the encoded payload: mutations of well-formed
// blocks of every format, header intact, reach each payload decoder.
// Built only with clang and -DKVTIER_BUILD_FUZZERS=ON.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "codecs/block_format.h"
#include "codecs/codec.h"
#include "codecs/kernels.h"
#include "core/coding.h"
#include "core/crc32c.h"

namespace kvtier::codecs {
namespace {

// Keeps each run small; larger geometries exercise no other code.
constexpr size_t kFuzzRawBytesMax = size_t{1} << 20;

void DecodeOne(std::span<const std::byte> input) {
  Result<CodecContext> ctx = CodecContext::Create();
  if (!ctx.ok()) return;
  BlockGeometry expected{.tokens = 16, .kv_heads = 2, .head_dim = 8, .dtype = DType::kF16};
  Result<BlockHeader> header = DecodeBlockHeader(input);
  if (header.ok() && header->geometry.raw_bytes() <= kFuzzRawBytesMax) {
    expected = header->geometry;
  }
  std::vector<float> out((expected.raw_bytes() + 3) / 4);
  std::span<std::byte> out_bytes(reinterpret_cast<std::byte*>(out.data()), expected.raw_bytes());
  DecodeBlock(input, expected, out_bytes, &*ctx).IgnoreError();
}

// Encodes a fixed block with the codec and geometry that `pick` and `shape` select, then XORs
// `mutation` over its payload (cyclically, once over the payload) and decodes it.
void EncodeMutateDecode(uint8_t pick, uint8_t shape, std::span<const std::byte> mutation) {
  Result<CodecContext> ctx = CodecContext::Create();
  if (!ctx.ok()) return;
  const auto id = static_cast<CodecId>(1 + pick % static_cast<uint8_t>(kCodecIdLast));
  const bool quantized = SchemeOf(id).key_bits != 0 && !SchemeOf(id).entropy_coded;
  const bool zstd_always = id == CodecId::kShuffleZstd || SchemeOf(id).entropy_coded;
  const int level = (pick & 0x80) != 0 ? 1 : (zstd_always ? 1 : 0);
  const CodecParams params{.codec = id,
                           .zstd_level = id == CodecId::kIdentity ? 0 : level,
                           .group_size = quantized ? 8u + (shape & 0x18u) : 0u};
  const BlockGeometry g{.tokens = 1u + (shape & 0x07u) * 3u,
                        .kv_heads = 1u + ((shape >> 5) & 0x03u),
                        .head_dim = 1u << ((shape >> 3) & 0x03u) << 1,
                        .dtype = static_cast<DType>(1 + ((shape >> 7) | ((pick >> 5) & 2)) % 3)};
  Result<size_t> max = MaxEncodedSize(params, g);
  if (!max.ok()) return;
  std::vector<float> raw((g.raw_bytes() + 3) / 4);
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<float>(i % 29) * 0.25f - 3.0f;
  if (g.dtype != DType::kF32) {  // Halves of the same pattern (exact in f16 and bf16).
    auto* h = reinterpret_cast<uint16_t*>(raw.data());
    for (size_t i = 0; i < g.elements(); ++i) {
      const float v = static_cast<float>(i % 29) * 0.25f - 3.0f;
      h[i] = g.dtype == DType::kF16 ? F32ToF16(v) : F32ToBF16(v);
    }
  }
  std::vector<std::byte> encoded(*max);
  Result<size_t> n = EncodeBlock(
      params, g, {reinterpret_cast<const std::byte*>(raw.data()), g.raw_bytes()}, encoded, &*ctx);
  if (!n.ok()) return;
  encoded.resize(*n);
  const size_t payload = *n - kBlockHeaderBytes;
  for (size_t i = 0; i < mutation.size() && i < payload; ++i) {
    encoded[kBlockHeaderBytes + i] ^= mutation[i];
  }
  std::vector<float> out((g.raw_bytes() + 3) / 4);
  std::span<std::byte> out_bytes(reinterpret_cast<std::byte*>(out.data()), g.raw_bytes());
  DecodeBlock(encoded, g, out_bytes, &*ctx).IgnoreError();
}

}  // namespace
}  // namespace kvtier::codecs

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using kvtier::codecs::kBlockHeaderBytes;
  using kvtier::codecs::kBlockHeaderCrcOffset;
  if (size == 0) return 0;
  if ((data[0] & 3) == 2) {
    if (size < 3) return 0;
    std::vector<std::byte> mutation(size - 3);
    for (size_t i = 3; i < size; ++i) mutation[i - 3] = std::byte{data[i]};
    kvtier::codecs::EncodeMutateDecode(data[1], data[2], mutation);
    return 0;
  }
  std::vector<std::byte> block(size - 1);
  for (size_t i = 1; i < size; ++i) block[i - 1] = std::byte{data[i]};
  if ((data[0] & 1) != 0 && block.size() >= kBlockHeaderBytes) {
    const uint32_t crc = kvtier::crc32c::Value(block.data(), kBlockHeaderCrcOffset);
    kvtier::EncodeFixed32(block.data() + kBlockHeaderCrcOffset, kvtier::crc32c::Mask(crc));
  }
  kvtier::codecs::DecodeOne(block);
  return 0;
}
