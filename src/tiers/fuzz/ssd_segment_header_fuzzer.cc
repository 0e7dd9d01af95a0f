// libFuzzer harness for the SSD segment header decoder and the segment file name parser
// (docs/ssd_format.md §2): DecodeSegmentHeader and ParseSegmentFileName. Any byte string must
// decode or fail cleanly (run under ASan/UBSan); a header that decodes must encode back to the
// same bytes, and a name that parses must be the name SegmentFileName gives its id.
//
// Input: one mode byte, then the header block (also tried as a file name). Mode bit 0: the
// harness writes the header CRC, so mutated fields get past it to the version and reserved
// checks.
// Built only with -DKVTIER_BUILD_FUZZERS=ON (tests/fuzz/CMakeLists.txt).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

#include "core/assert.h"
#include "core/coding.h"
#include "core/crc32c.h"
#include "tiers/ssd_format.h"
#include "tiers/ssd_record.h"

namespace kvtier::ssd {
namespace {

void DecodeOne(std::span<const std::byte> block) {
  Result<SegmentHeader> header = DecodeSegmentHeader(block);
  if (header.ok()) {
    std::vector<std::byte> again(kSegmentHeaderBytes);
    EncodeSegmentHeader(*header, again);
    KV_CHECK(std::memcmp(again.data(), block.data(), kSegmentHeaderEncodedBytes) == 0);
  }
  const std::string_view name(reinterpret_cast<const char*>(block.data()), block.size());
  uint64_t segment_id = 0;
  if (ParseSegmentFileName(name, &segment_id)) KV_CHECK(SegmentFileName(segment_id) == name);
}

}  // namespace
}  // namespace kvtier::ssd

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using kvtier::ssd::kSegmentHeaderCrcOffset;
  using kvtier::ssd::kSegmentHeaderEncodedBytes;
  if (size == 0) return 0;
  std::vector<std::byte> block(size - 1);
  for (size_t i = 1; i < size; ++i) block[i - 1] = std::byte{data[i]};
  if ((data[0] & 1) != 0 && block.size() >= kSegmentHeaderEncodedBytes) {
    const uint32_t crc = kvtier::crc32c::Value(block.data(), kSegmentHeaderCrcOffset);
    kvtier::EncodeFixed32(block.data() + kSegmentHeaderCrcOffset, kvtier::crc32c::Mask(crc));
  }
  kvtier::ssd::DecodeOne(block);
  return 0;
}
