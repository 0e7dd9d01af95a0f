// libFuzzer harness for the SSD record decoder (docs/ssd_format.md §3): DecodeRecordHeader,
// DecodeRecord and CheckRecordPlacement. Any byte string must decode or fail with a Status,
// never crash or read outside the input (run under ASan/UBSan), and a record that decodes must
// hand back a payload inside the input of exactly payload_bytes bytes.
//
// Input: one mode byte, then the record. Mode bit 0: the harness writes the payload CRC (over
// the payload bytes present) and the header CRC, so mutated headers get past the checksums to
// the field and placement checks. Bits 1-2 pick the segment size the record is placed in.
// Built only with -DKVTIER_BUILD_FUZZERS=ON (tests/fuzz/CMakeLists.txt).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/assert.h"
#include "core/coding.h"
#include "core/crc32c.h"
#include "tiers/ssd_format.h"
#include "tiers/ssd_record.h"

namespace kvtier::ssd {
namespace {

constexpr size_t kPayloadBytesOffset = 80;  // Header field offsets, docs/ssd_format.md §3.
constexpr size_t kPayloadCrcOffset = 116;

void FixChecksums(std::span<std::byte> record) {
  if (record.size() < kRecordHeaderBytes) return;
  const uint64_t claimed = DecodeFixed32(record.data() + kPayloadBytesOffset);
  const size_t present = static_cast<size_t>(
      std::min<uint64_t>(claimed, record.size() - kRecordHeaderBytes));
  const uint32_t payload_crc = crc32c::Value(record.data() + kRecordHeaderBytes, present);
  EncodeFixed32(record.data() + kPayloadCrcOffset, crc32c::Mask(payload_crc));
  const uint32_t header_crc = crc32c::Value(record.data(), kRecordHeaderCrcOffset);
  EncodeFixed32(record.data() + kRecordHeaderCrcOffset, crc32c::Mask(header_crc));
}

void DecodeOne(std::span<const std::byte> record, uint8_t mode) {
  (void)IsZeroHeader(record);
  Result<RecordHeader> header = DecodeRecordHeader(record);
  if (!header.ok()) return;
  const uint64_t segment_bytes_choices[] = {kSegmentBytesMin, kSegmentBytesDefault,
                                            kSegmentBytesMax, header->segment_offset + 0ull};
  const uint64_t segment_bytes = segment_bytes_choices[(mode >> 1) & 3];
  CheckRecordPlacement(*header, header->segment_id, header->segment_offset, segment_bytes)
      .IgnoreError();
  std::span<const std::byte> payload;
  Result<RecordHeader> whole =
      DecodeRecord(record, header->segment_id, header->segment_offset, segment_bytes, &payload);
  if (!whole.ok()) return;
  KV_CHECK(*whole == *header);
  KV_CHECK(payload.size() == whole->payload_bytes);
  KV_CHECK(payload.data() >= record.data());
  KV_CHECK(payload.data() + payload.size() <= record.data() + record.size());
}

}  // namespace
}  // namespace kvtier::ssd

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::vector<std::byte> record(size - 1);
  for (size_t i = 1; i < size; ++i) record[i - 1] = std::byte{data[i]};
  if ((data[0] & 1) != 0) kvtier::ssd::FixChecksums(record);
  kvtier::ssd::DecodeOne(record, data[0]);
  return 0;
}
