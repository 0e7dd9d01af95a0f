// libFuzzer harness for the remote tier's value decoders: OpenRemoteValue (tiers/remote_crypto.h),
// which opens a sealed value read from Redis, and VerifyRemoteValue (tiers/remote_store.h), which
// every plain value goes through before its payload is used. Any byte string must open and
// verify or fail with a Status, never crash or read outside the value (run under ASan/UBSan); a
// value that verifies must hand back a payload inside it of exactly payload_bytes bytes.
//
// Input: one mode byte, then the value. Mode bit 0: the harness writes the payload CRC and the
// header CRC, so mutated fields get past the checksums. Bit 1: the expected key and layout
// digest are taken from the value's own header (so the key checks pass); otherwise they are
// fixed ones the value must not match. Bit 2: the value is sealed with the harness's keyring and
// opened again (which must give it back) before it is verified. Bit 3: the input is a sealed
// value, opened with the harness's keyring (only its framing can be fuzzed: a mutated tag fails).
// Built only with -DKVTIER_BUILD_FUZZERS=ON (tests/fuzz/CMakeLists.txt).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "core/assert.h"
#include "core/coding.h"
#include "core/crc32c.h"
#include "tiers/remote_crypto.h"
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

constexpr std::string_view kKeyName = "kvtier:{fuzz}:0";

const RemoteKeyring& Keyring() {
  static const RemoteKeyring keyring = std::move(RemoteKeyring::Parse(
      "7 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n").value());
  return keyring;
}

// Seals `value` and opens it again; false when the input cannot be sealed (it is too large).
bool SealAndOpen(std::span<const std::byte> value, std::vector<std::byte>* plain) {
  std::vector<std::byte> sealed;
  if (!SealRemoteValue(Keyring(), kKeyName, value, &sealed).ok()) return false;
  uint32_t key_id = 0;
  KV_CHECK(OpenRemoteValue(Keyring(), kKeyName, sealed, plain, &key_id).ok());
  KV_CHECK(key_id == 7);
  KV_CHECK(plain->size() == value.size());
  KV_CHECK(std::equal(plain->begin(), plain->end(), value.begin()));
  return true;
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
  const bool own_key = (data[0] & 2) != 0;
  if ((data[0] & 8) != 0) {
    std::vector<std::byte> plain;
    uint32_t key_id = 0;
    if (kvtier::OpenRemoteValue(kvtier::Keyring(), kvtier::kKeyName, value, &plain, &key_id).ok()) {
      kvtier::VerifyOne(plain, own_key);
    }
    return 0;
  }
  if ((data[0] & 1) != 0) kvtier::FixChecksums(value);
  if ((data[0] & 4) != 0) {
    std::vector<std::byte> plain;
    if (kvtier::SealAndOpen(value, &plain)) kvtier::VerifyOne(plain, own_key);
    return 0;
  }
  kvtier::VerifyOne(value, own_key);
  return 0;
}
