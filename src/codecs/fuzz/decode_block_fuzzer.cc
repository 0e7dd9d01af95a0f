// libFuzzer harness for DecodeBlock: any byte string must decode or fail with a Status, never
// crash, hang or touch memory out of bounds (run under ASan/UBSan). The first input byte picks a
// mode: with bit 0 set, the rest is a block whose header checksum the harness recomputes, so
// random headers get past the CRC to the field checks and payload decoders (zstd, unshuffle,
// dequantization). When the header parses, its own geometry is the expected one; otherwise a
// fixed small geometry is used.
// Built only with clang and -DKVTIER_BUILD_FUZZERS=ON.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "codecs/codec.h"
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

}  // namespace
}  // namespace kvtier::codecs

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using kvtier::codecs::kBlockHeaderBytes;
  using kvtier::codecs::kBlockHeaderCrcOffset;
  if (size == 0) return 0;
  std::vector<std::byte> block(size - 1);
  for (size_t i = 1; i < size; ++i) block[i - 1] = std::byte{data[i]};
  if ((data[0] & 1) != 0 && block.size() >= kBlockHeaderBytes) {
    const uint32_t crc = kvtier::crc32c::Value(block.data(), kBlockHeaderCrcOffset);
    kvtier::EncodeFixed32(block.data() + kBlockHeaderCrcOffset, kvtier::crc32c::Mask(crc));
  }
  kvtier::codecs::DecodeOne(block);
  return 0;
}
