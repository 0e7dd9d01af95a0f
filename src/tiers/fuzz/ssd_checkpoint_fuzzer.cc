// libFuzzer harness for the SSD index checkpoint decoder (docs/ssd_format.md §4):
// DecodeCheckpoint. Any byte string must decode or fail with a Status, never crash, read out of
// bounds or allocate beyond what the input accounts for (run under ASan/UBSan with an RSS
// limit); a checkpoint that decodes must encode back to the same bytes when it is the current
// version.
//
// Input: one mode byte, then the file. Mode bit 0: the harness rewrites the trailer CRC, so
// mutated headers and entries get past it to the field checks.
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
#include "tiers/ssd/ssd_checkpoint.h"
#include "tiers/ssd_format.h"

namespace kvtier::ssd {
namespace {

constexpr size_t kVersionOffset = 4;  // docs/ssd_format.md §4.

void DecodeOne(std::span<const std::byte> file) {
  Result<Checkpoint> checkpoint = DecodeCheckpoint(file);
  if (!checkpoint.ok()) return;
  if (DecodeFixed16(file.data() + kVersionOffset) != kCheckpointVersion) return;
  const std::string again = EncodeCheckpoint(*checkpoint);
  KV_CHECK(again.size() == file.size());
  KV_CHECK(std::memcmp(again.data(), file.data(), file.size()) == 0);
}

}  // namespace
}  // namespace kvtier::ssd

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using kvtier::ssd::kCheckpointTrailerBytes;
  if (size == 0) return 0;
  std::vector<std::byte> file(size - 1);
  for (size_t i = 1; i < size; ++i) file[i - 1] = std::byte{data[i]};
  if ((data[0] & 1) != 0 && file.size() >= kCheckpointTrailerBytes) {
    const size_t body = file.size() - kCheckpointTrailerBytes;
    kvtier::EncodeFixed32(file.data() + body,
                          kvtier::crc32c::Mask(kvtier::crc32c::Value(file.data(), body)));
  }
  kvtier::ssd::DecodeOne(file);
  return 0;
}
