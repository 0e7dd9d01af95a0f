// libFuzzer harness for the SSD tier's MANIFEST decoder (docs/ssd_format.md §8):
// DecodeManifest, which ReadManifest runs on the file's bytes. Any byte string must decode or
// fail with a Status, never crash or read out of bounds (run under ASan/UBSan); a manifest that
// decodes must have its stripe inside the set, a valid segment size, and encode back to the same
// 64 bytes.
//
// Input: one mode byte, then the file. Mode bit 0: the harness writes the CRC, so mutated fields
// get past it to the version, reserved, stripe, segment size and format digest checks.
// Built only with -DKVTIER_BUILD_FUZZERS=ON (tests/fuzz/CMakeLists.txt).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "core/assert.h"
#include "core/coding.h"
#include "core/crc32c.h"
#include "tiers/ssd_format.h"
#include "tiers/ssd/ssd_manifest.h"

namespace kvtier::ssd {
namespace {

void DecodeOne(std::span<const std::byte> file) {
  Result<Manifest> manifest = DecodeManifest(file);
  if (!manifest.ok()) return;
  KV_CHECK(manifest->stripe_index < manifest->stripe_count);
  KV_CHECK(manifest->segment_bytes >= kSegmentBytesMin);
  KV_CHECK(manifest->segment_bytes <= kSegmentBytesMax);
  const std::string again = EncodeManifest(*manifest);
  KV_CHECK(again.size() == file.size());
  KV_CHECK(std::memcmp(again.data(), file.data(), file.size()) == 0);
}

}  // namespace
}  // namespace kvtier::ssd

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using kvtier::ssd::kManifestCrcOffset;
  if (size == 0) return 0;
  std::vector<std::byte> file(size - 1);
  for (size_t i = 1; i < size; ++i) file[i - 1] = std::byte{data[i]};
  if ((data[0] & 1) != 0 && file.size() >= kManifestCrcOffset + 4) {
    const uint32_t crc = kvtier::crc32c::Value(file.data(), kManifestCrcOffset);
    kvtier::EncodeFixed32(file.data() + kManifestCrcOffset, kvtier::crc32c::Mask(crc));
  }
  kvtier::ssd::DecodeOne(file);
  return 0;
}
