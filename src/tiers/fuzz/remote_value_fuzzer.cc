// libFuzzer harness for the remote tier's value decoder (src/tiers/remote_store.h):
// VerifyRemoteValue, which every Redis GET reply goes through before its payload is used. Any
// byte string must verify or fail with a Status and a RemoteValueCheck, never crash or read
// outside the value (run under ASan/UBSan); a value that verifies must hand back a payload
// inside it of exactly payload_bytes bytes.
//
// Input: one mode byte, then the value. Mode bit 0: the harness writes the payload CRC and the
// header CRC, so mutated fields get past the checksums. Bit 1: the expected key and layout
// digest are taken from the value's own header (so the key checks pass); otherwise they are
// fixed ones the value must not match.
// Built only with -DKVTIER_BUILD_FUZZERS=ON (tests/fuzz/CMakeLists.txt).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/assert.h"
#include "core/coding.h"
#include "core/crc32c.h"
#include "tiers/remote_store.h"
#include "tiers/ssd_format.h"
#include "tiers/ssd_record.h"

namespace kvtier {
namespace {

constexpr size_t kPayloadBytesOffset = 80;  // Header field offsets, docs/ssd_format.md §3.
constexpr size_t kPayloadCrcOffset = 116;

void FixChecksums(std::span<std::byte> value) {
  if (value.size() < kRemoteValueHeaderBytes) return;
  const uint64_t claimed = DecodeFixed32(value.data() + kPayloadBytesOffset);
  const size_t present = static_cast<size_t>(
      std::min<uint64_t>(claimed, value.size() - kRemoteValueHeaderBytes));
  const uint32_t payload_crc = crc32c::Value(value.data() + kRemoteValueHeaderBytes, present);
  EncodeFixed32(value.data() + kPayloadCrcOffset, crc32c::Mask(payload_crc));
  const uint32_t header_crc = crc32c::Value(value.data(), ssd::kRecordHeaderCrcOffset);
  EncodeFixed32(value.data() + ssd::kRecordHeaderCrcOffset, crc32c::Mask(header_crc));
}

void VerifyOne(std::span<const std::byte> value, bool own_key) {
  BlockKey key;
  Hash256 layout_digest{};
  if (own_key) {
    Result<ssd::RecordHeader> h = ssd::DecodeRecordHeader(value);
    if (h.ok()) {
      key = h->key;
      layout_digest = h->layout_digest;
    }
  }
  ssd::RecordHeader header;
  std::span<const std::byte> payload;
  RemoteValueCheck check = RemoteValueCheck::kOk;
  const Status s = VerifyRemoteValue(value, key, layout_digest, &header, &payload, &check);
  KV_CHECK(s.ok() == (check == RemoteValueCheck::kOk));
  if (!s.ok()) return;
  KV_CHECK(header.key == key);
  KV_CHECK(payload.size() == header.payload_bytes);
  KV_CHECK(payload.data() >= value.data());
  KV_CHECK(payload.data() + payload.size() <= value.data() + value.size());
}

}  // namespace
}  // namespace kvtier

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::vector<std::byte> value(size - 1);
  for (size_t i = 1; i < size; ++i) value[i - 1] = std::byte{data[i]};
  if ((data[0] & 1) != 0) kvtier::FixChecksums(value);
  kvtier::VerifyOne(value, (data[0] & 2) != 0);
  return 0;
}
