// Goal: prove the SSD record, segment header and checkpoint codecs match docs/ssd_format.md byte
// for byte and detect corruption. Method: encode the doc's worked example and compare bytes;
// round-trip random values; flip every single bit of a record header, of a segment header and
// (sampled) of a checkpoint and require each flip to be rejected (byte-mutation testing, as
// leveldb's log_test does); truncate encodings at every length.
#include "tiers/ssd_record.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/coding.h"
#include "core/crc32c.h"
#include "tiers/ssd/ssd_checkpoint.h"

namespace kvtier::ssd {
namespace {

constexpr uint64_t kSeg = 64 * kMiB;

Hash256 Fill(uint8_t v) {
  Hash256 h;
  h.fill(v);
  return h;
}

RecordHeader ExampleHeader() {
  RecordHeader h;
  h.codec_id = 0;
  h.layout_digest = Fill(0xAB);
  h.key.chunk_hash = Fill(0x11);
  h.key.layer = 3;
  h.raw_bytes = 5000;
  h.payload_bytes = 5000;
  h.sequence = 1;
  h.segment_id = 7;
  h.segment_offset = 4096;
  return h;
}

std::vector<std::byte> Payload(size_t n, uint32_t seed) {
  std::vector<std::byte> p(n);
  std::mt19937 rng(seed);
  for (auto& b : p) b = static_cast<std::byte>(rng());
  return p;
}

TEST(SsdRecordTest, WorkedExampleMatchesDoc) {
  const std::vector<std::byte> payload = Payload(5000, 1);
  ASSERT_EQ(RecordBytesForPayload(5000), 8192u);
  std::vector<std::byte> rec(8192, std::byte{0x5A});
  EncodeRecord(ExampleHeader(), payload, rec);
  const std::byte* p = rec.data();
  EXPECT_EQ(std::memcmp(p, "KVRC", 4), 0);
  EXPECT_EQ(DecodeFixed16(p + 4), 1);
  EXPECT_EQ(DecodeFixed8(p + 6), 0);
  EXPECT_EQ(DecodeFixed8(p + 7), 0);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(DecodeFixed8(p + 8 + i), 0xAB);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(DecodeFixed8(p + 40 + i), 0x11);
  EXPECT_EQ(DecodeFixed32(p + 72), 3u);
  EXPECT_EQ(DecodeFixed32(p + 76), 5000u);
  EXPECT_EQ(DecodeFixed32(p + 80), 5000u);
  EXPECT_EQ(DecodeFixed32(p + 84), 0u);
  EXPECT_EQ(DecodeFixed64(p + 88), 1u);
  EXPECT_EQ(DecodeFixed64(p + 96), 0u);
  EXPECT_EQ(DecodeFixed64(p + 104), 7u);
  EXPECT_EQ(DecodeFixed32(p + 112), 4096u);
  EXPECT_EQ(DecodeFixed32(p + 116), crc32c::Mask(crc32c::Value(payload.data(), 5000)));
  EXPECT_EQ(DecodeFixed32(p + 120), 0u);
  EXPECT_EQ(DecodeFixed32(p + 124), crc32c::Mask(crc32c::Value(p, 124)));
  EXPECT_EQ(std::memcmp(p + 128, payload.data(), 5000), 0);
  for (size_t i = 128 + 5000; i < 8192; ++i) ASSERT_EQ(rec[i], std::byte{0}) << i;

  std::span<const std::byte> got;
  Result<RecordHeader> h = DecodeRecord(rec, 7, 4096, kSeg, &got);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(got.data(), rec.data() + kRecordPayloadOffset);
  EXPECT_EQ(got.size(), 5000u);
  EXPECT_EQ(h->key, ExampleHeader().key);
}

TEST(SsdRecordTest, RoundTripsRandomHeaders) {
  std::mt19937_64 rng(42);
  for (int i = 0; i < 200; ++i) {
    RecordHeader h;
    h.codec_id = static_cast<uint8_t>(rng());
    h.flags = static_cast<uint8_t>(rng() & kRecordFlagsKnown);
    if (h.tombstone()) h.flags = kRecordFlagTombstone;  // A tombstone is never sealed.
    if (!h.sealed()) h.flags &= static_cast<uint8_t>(~kRecordFlagSealedExpiry);
    for (auto& b : h.layout_digest) b = static_cast<uint8_t>(rng());
    for (auto& b : h.key.chunk_hash) b = static_cast<uint8_t>(rng());
    h.key.layer = static_cast<uint32_t>(rng());
    h.raw_bytes = static_cast<uint32_t>(rng());
    h.payload_bytes = h.tombstone() ? 0 : static_cast<uint32_t>(rng());
    if (h.sealed() && h.payload_bytes < kSealedRecordOverheadBytes) {
      h.payload_bytes += kSealedRecordOverheadBytes;
    }
    h.sequence = rng();
    h.expiry_wall_us = rng();
    h.segment_id = rng();
    h.segment_offset = static_cast<uint32_t>(rng());
    h.payload_crc = static_cast<uint32_t>(rng());
    std::vector<std::byte> buf(kRecordHeaderBytes);
    EncodeRecordHeader(h, buf);
    Result<RecordHeader> back = DecodeRecordHeader(buf);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(*back, h);
  }
}

// A sealed record is never a tombstone and always has room for its seal (32 bytes).
TEST(SsdRecordTest, SealedFlagNeedsAPayloadWithItsSeal) {
  for (const auto& [flags, payload_bytes] :
       {std::pair<uint8_t, uint32_t>{kRecordFlagSealed | kRecordFlagTombstone, 0},
        {kRecordFlagSealed, 31},
        {kRecordFlagSealedExpiry, 64}}) {  // An expiry sealed on a record that is not.
    RecordHeader h;
    h.flags = flags;
    h.payload_bytes = payload_bytes;
    std::vector<std::byte> buf(kRecordHeaderBytes);
    EncodeRecordHeader(h, buf);
    EXPECT_TRUE(DecodeRecordHeader(buf).status().IsCorruption()) << int{flags};
  }
  RecordHeader ok;
  ok.flags = kRecordFlagSealed;
  ok.payload_bytes = 32;
  std::vector<std::byte> buf(kRecordHeaderBytes);
  EncodeRecordHeader(ok, buf);
  EXPECT_TRUE(DecodeRecordHeader(buf).ok());
}

TEST(SsdRecordTest, EverySingleBitFlipInHeaderIsDetected) {
  const std::vector<std::byte> payload = Payload(5000, 2);
  std::vector<std::byte> rec(8192);
  EncodeRecord(ExampleHeader(), payload, rec);
  std::span<const std::byte> got;
  for (size_t bit = 0; bit < kRecordHeaderBytes * 8; ++bit) {
    std::vector<std::byte> bad = rec;
    bad[bit / 8] ^= std::byte(1u << (bit % 8));
    Result<RecordHeader> h = DecodeRecord(bad, 7, 4096, kSeg, &got);
    ASSERT_FALSE(h.ok()) << "bit " << bit << " not detected";
    EXPECT_TRUE(h.status().IsCorruption());
  }
}

TEST(SsdRecordTest, PayloadBitFlipsAreDetected) {
  const std::vector<std::byte> payload = Payload(5000, 3);
  std::vector<std::byte> rec(8192);
  EncodeRecord(ExampleHeader(), payload, rec);
  std::span<const std::byte> got;
  for (size_t bit = kRecordPayloadOffset * 8; bit < (kRecordPayloadOffset + 5000) * 8; bit += 7) {
    std::vector<std::byte> bad = rec;
    bad[bit / 8] ^= std::byte(1u << (bit % 8));
    ASSERT_FALSE(DecodeRecord(bad, 7, 4096, kSeg, &got).ok()) << "bit " << bit;
  }
  // Padding is not covered: a flip there is harmless by design.
  std::vector<std::byte> pad = rec;
  pad[8000] ^= std::byte{1};
  EXPECT_TRUE(DecodeRecord(pad, 7, 4096, kSeg, &got).ok());
}

TEST(SsdRecordTest, MisplacedRecordIsRejected) {
  const std::vector<std::byte> payload = Payload(100, 4);
  std::vector<std::byte> rec(4096);
  RecordHeader h = ExampleHeader();
  h.payload_bytes = 100;
  EncodeRecord(h, payload, rec);
  std::span<const std::byte> got;
  EXPECT_TRUE(DecodeRecord(rec, 7, 4096, kSeg, &got).ok());
  EXPECT_TRUE(DecodeRecord(rec, 8, 4096, kSeg, &got).status().IsCorruption());
  EXPECT_TRUE(DecodeRecord(rec, 7, 8192, kSeg, &got).status().IsCorruption());
  // Too large for a tiny segment.
  h.payload_bytes = 100;
  h.segment_offset = static_cast<uint32_t>(kSegmentBytesMin - 4096);
  EncodeRecord(h, payload, rec);
  EXPECT_TRUE(DecodeRecord(rec, 7, kSegmentBytesMin - 4096, kSegmentBytesMin, &got).ok());
  EXPECT_FALSE(DecodeRecord(rec, 7, kSegmentBytesMin - 4096, kSegmentBytesMin - 4096, &got).ok());
}

TEST(SsdRecordTest, TruncatedRecordIsRejected) {
  const std::vector<std::byte> payload = Payload(5000, 5);
  std::vector<std::byte> rec(8192);
  EncodeRecord(ExampleHeader(), payload, rec);
  std::span<const std::byte> got;
  for (size_t n = 0; n < kRecordPayloadOffset + 5000; n += 61) {
    EXPECT_FALSE(DecodeRecord(std::span(rec).first(n), 7, 4096, kSeg, &got).ok()) << n;
  }
}

TEST(SsdRecordTest, ZeroHeaderIsTheUnwrittenTail) {
  std::vector<std::byte> zeros(4096);
  EXPECT_TRUE(IsZeroHeader(zeros));
  EXPECT_TRUE(DecodeRecordHeader(zeros).status().IsCorruption());
  zeros[127] = std::byte{1};
  EXPECT_FALSE(IsZeroHeader(zeros));
}

TEST(SsdRecordTest, TombstoneRoundTrip) {
  RecordHeader h = ExampleHeader();
  h.flags = kRecordFlagTombstone;
  h.payload_bytes = 0;
  h.raw_bytes = 0;
  std::vector<std::byte> rec(4096);
  EncodeRecord(h, {}, rec);
  std::span<const std::byte> got;
  Result<RecordHeader> back = DecodeRecord(rec, 7, 4096, kSeg, &got);
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->tombstone());
  EXPECT_TRUE(got.empty());
}

TEST(SsdSegmentHeaderTest, RoundTripAndEveryBitFlip) {
  SegmentHeader h{.segment_id = 0x1234, .segment_bytes = kSeg, .created_wall_us = 99};
  std::vector<std::byte> buf(kSegmentHeaderBytes, std::byte{0x77});
  EncodeSegmentHeader(h, buf);
  EXPECT_EQ(std::memcmp(buf.data(), "KVSG", 4), 0);
  Result<SegmentHeader> back = DecodeSegmentHeader(buf);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, h);
  for (size_t i = kSegmentHeaderEncodedBytes; i < kSegmentHeaderBytes; ++i) {
    ASSERT_EQ(buf[i], std::byte{0});
  }
  for (size_t bit = 0; bit < kSegmentHeaderEncodedBytes * 8; ++bit) {
    std::vector<std::byte> bad = buf;
    bad[bit / 8] ^= std::byte(1u << (bit % 8));
    ASSERT_FALSE(DecodeSegmentHeader(bad).ok()) << bit;
  }
}

TEST(SsdSegmentHeaderTest, FileNames) {
  EXPECT_EQ(SegmentFileName(7), "seg-0000000000000007.kvs");
  uint64_t id = 0;
  ASSERT_TRUE(ParseSegmentFileName(SegmentFileName(0xabcdef0123456789ull), &id));
  EXPECT_EQ(id, 0xabcdef0123456789ull);
  EXPECT_FALSE(ParseSegmentFileName("seg-000000000000000g.kvs", &id));
  EXPECT_FALSE(ParseSegmentFileName("seg-0000000000000007.kvx", &id));
  EXPECT_FALSE(ParseSegmentFileName("index.ckpt", &id));
  EXPECT_FALSE(ParseSegmentFileName("seg-00000000000000007.kvs", &id));
}

Checkpoint ExampleCheckpoint(size_t entries) {
  Checkpoint c;
  c.dir_count = 2;
  c.segment_bytes = kSeg;
  c.next_sequence = 1000;
  c.next_segment_id = 12;
  c.written_wall_us = 5;
  c.segments = {{.segment_id = 10, .dir_index = 0, .scan_from = 8192},
                {.segment_id = 11, .dir_index = 1, .scan_from = 4096}};
  std::mt19937_64 rng(9);
  for (size_t i = 0; i < entries; ++i) {
    BlockKey k;
    for (auto& b : k.chunk_hash) b = static_cast<uint8_t>(rng());
    k.layer = static_cast<uint32_t>(i);
    IndexEntry e{.segment_id = 10 + i % 2,
                 .segment_offset = 4096,
                 .payload_bytes = static_cast<uint32_t>(rng() % 100000),
                 .raw_bytes = 7,
                 .codec_id = 2,
                 .referenced = (i % 3) == 0,
                 .sequence = rng(),
                 .expiry_wall_us = i};
    c.entries.emplace_back(k, e);
  }
  return c;
}

// With live tombstones (checkpoint version 2).
Checkpoint ExampleCheckpointWithTombstones(size_t entries, size_t tombstones) {
  Checkpoint c = ExampleCheckpoint(entries);
  for (size_t i = 0; i < tombstones; ++i) {
    BlockKey k;
    k.chunk_hash.fill(static_cast<uint8_t>(i + 1));
    k.layer = static_cast<uint32_t>(100 + i);
    c.tombstones.emplace_back(k, LiveTombstone{.segment_id = 11 - i % 2, .sequence = 500 + i});
  }
  return c;
}

std::span<const std::byte> Bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// The encoding of `c` as docs/ssd_format.md §4 lays it out, built here without the encoder's
// pair assertion (which refuses, in debug builds, what the decoder would reject).
std::string PatchedEncoding(const Checkpoint& c) {
  Checkpoint valid = ExampleCheckpoint(c.entries.size());
  std::string out = EncodeCheckpoint(valid);
  out.resize(out.size() - kCheckpointTrailerBytes);
  auto* p = reinterpret_cast<std::byte*>(out.data());
  EncodeFixed64(p + 16, c.segment_bytes);
  EncodeFixed64(p + 32, c.next_segment_id);
  size_t at = kCheckpointHeaderBytes + kCheckpointCacheIdBytes;
  for (const CheckpointSegment& s : c.segments) {
    EncodeFixed64(p + at, s.segment_id);
    EncodeFixed32(p + at + 8, s.dir_index);
    EncodeFixed64(p + at + 16, s.scan_from);
    at += kCheckpointSegmentEntryBytes;
  }
  for (const auto& [key, e] : c.entries) {
    EncodeFixed32(p + at + 36, e.payload_bytes);
    EncodeFixed32(p + at + 40, e.raw_bytes);
    EncodeFixed32(p + at + 56, e.segment_offset);
    at += kCheckpointBlockEntryBytes;
  }
  PutFixed32(&out, crc32c::Mask(crc32c::Value(out)));
  return out;
}

TEST(SsdCheckpointTest, RoundTrip) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{50}}) {
    const Checkpoint c = ExampleCheckpoint(n);
    const std::string enc = EncodeCheckpoint(c);
    EXPECT_EQ(enc.size(), kCheckpointHeaderBytes + kCheckpointCacheIdBytes +
                              2 * kCheckpointSegmentEntryBytes + n * kCheckpointBlockEntryBytes +
                              kCheckpointTrailerBytes);
    Result<Checkpoint> back = DecodeCheckpoint(Bytes(enc));
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(*back, c);
  }
}

TEST(SsdCheckpointTest, RoundTripWithTombstones) {
  const Checkpoint c = ExampleCheckpointWithTombstones(4, 3);
  const std::string enc = EncodeCheckpoint(c);
  EXPECT_EQ(enc.size(), kCheckpointHeaderBytes + kCheckpointCacheIdBytes +
                            2 * kCheckpointSegmentEntryBytes + 4 * kCheckpointBlockEntryBytes +
                            3 * kCheckpointTombstoneEntryBytes + kCheckpointTrailerBytes);
  EXPECT_EQ(DecodeFixed16(Bytes(enc).data() + 4), kCheckpointVersion);
  EXPECT_EQ(DecodeFixed32(Bytes(enc).data() + 12), 3u);  // tombstone_count.
  Result<Checkpoint> back = DecodeCheckpoint(Bytes(enc));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, c);
}

// Rewrites a current (version 3) encoding as an older version: no cache id after the header.
std::string AsOldVersion(std::string enc, uint16_t version) {
  enc.erase(kCheckpointHeaderBytes, kCheckpointCacheIdBytes);
  enc.resize(enc.size() - kCheckpointTrailerBytes);
  EncodeFixed16(reinterpret_cast<std::byte*>(enc.data()) + 4, version);
  return enc;  // Without its trailer.
}

// A version 1 file (written before tombstones were recorded) still decodes, with none; a
// version 1 file with the then-reserved field at offset 12 set is corruption.
TEST(SsdCheckpointTest, Version1IsStillRead) {
  const Checkpoint c = ExampleCheckpoint(5);
  std::string v1 = AsOldVersion(EncodeCheckpoint(c), 1);
  std::string bad = v1;
  PutFixed32(&v1, crc32c::Mask(crc32c::Value(v1)));
  Result<Checkpoint> back = DecodeCheckpoint(Bytes(v1));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, c);
  EncodeFixed32(reinterpret_cast<std::byte*>(bad.data()) + 12, 1);
  PutFixed32(&bad, crc32c::Mask(crc32c::Value(bad)));
  EXPECT_TRUE(DecodeCheckpoint(Bytes(bad)).status().IsCorruption());
}

// Version 3 carries the cache id right after the header; a version 2 file (none) still decodes
// with an all-zero id, which recovery does not hold against any cache.
TEST(SsdCheckpointTest, Version3CarriesTheCacheIdAndVersion2IsStillRead) {
  Checkpoint c = ExampleCheckpointWithTombstones(3, 2);
  for (size_t i = 0; i < c.cache_id.size(); ++i) c.cache_id[i] = static_cast<uint8_t>(0xA0 + i);
  const std::string enc = EncodeCheckpoint(c);
  EXPECT_EQ(DecodeFixed16(Bytes(enc).data() + 4), 3);
  EXPECT_EQ(std::memcmp(enc.data() + kCheckpointHeaderBytes, c.cache_id.data(), 16), 0);
  Result<Checkpoint> back = DecodeCheckpoint(Bytes(enc));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, c);
  std::string v2 = AsOldVersion(enc, 2);
  PutFixed32(&v2, crc32c::Mask(crc32c::Value(v2)));
  back = DecodeCheckpoint(Bytes(v2));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  c.cache_id = {};
  EXPECT_EQ(*back, c);
}

// Re-encodes `c` after `edit` (so the CRC is valid) and requires Corruption naming `what`.
template <typename F>
void ExpectFieldRejected(F edit, const std::string& what) {
  Checkpoint c = ExampleCheckpoint(3);
  edit(c);
  // The encoder's pair assertion would trip in debug builds on what the decoder refuses, so
  // encode the valid checkpoint and patch the field's bytes in place.
  SCOPED_TRACE(what);
  Result<Checkpoint> back = DecodeCheckpoint(Bytes(PatchedEncoding(c)));
  ASSERT_TRUE(back.status().IsCorruption()) << back.status().ToString();
  EXPECT_NE(back.status().message().find(what), std::string::npos) << back.status().ToString();
}

// Every field is range-checked before use, with the CRC recomputed so only the check can catch
// it: a scan_from near 2^64 (which wrapped the scan's bounds check), one off the 4 KiB grid or
// past the segment, a record that overruns its segment, oversized payload or raw sizes, a
// directory index past dir_count, a duplicated or future segment id, a bad segment size.
TEST(SsdCheckpointTest, OutOfRangeFieldsAreRejected) {
  ExpectFieldRejected([](Checkpoint& c) { c.segments[0].scan_from = UINT64_MAX - 4095; },
                      "scan_from");
  ExpectFieldRejected([](Checkpoint& c) { c.segments[0].scan_from = 4096 + 512; }, "scan_from");
  ExpectFieldRejected([](Checkpoint& c) { c.segments[0].scan_from = kSeg + 4096; }, "scan_from");
  ExpectFieldRejected([](Checkpoint& c) { c.segments[1].scan_from = 0; }, "scan_from");
  ExpectFieldRejected(
      [](Checkpoint& c) { c.entries[0].second.segment_offset = static_cast<uint32_t>(kSeg); },
      "does not fit");
  ExpectFieldRejected([](Checkpoint& c) { c.entries[0].second.segment_offset = 4096 + 8; },
                      "does not fit");
  ExpectFieldRejected([](Checkpoint& c) { c.entries[0].second.segment_offset = 0; },
                      "does not fit");
  ExpectFieldRejected([](Checkpoint& c) { c.entries[1].second.payload_bytes = UINT32_MAX; },
                      "sizes out of range");
  ExpectFieldRejected([](Checkpoint& c) { c.entries[1].second.raw_bytes = UINT32_MAX; },
                      "sizes out of range");
  ExpectFieldRejected([](Checkpoint& c) { c.segments[1].dir_index = 2; }, "in directory 2 of 2");
  ExpectFieldRejected([](Checkpoint& c) { c.segments[1].segment_id = 10; }, "listed twice");
  ExpectFieldRejected([](Checkpoint& c) { c.next_segment_id = 11; }, "next_segment_id");
  ExpectFieldRejected([](Checkpoint& c) { c.segment_bytes = kSeg + 1; }, "segment_bytes");
}

// The header alone tells whether the counts fit the file, before any entry is read.
TEST(SsdCheckpointTest, HeaderCountsAreCheckedAgainstTheFileSize) {
  const std::string enc = EncodeCheckpoint(ExampleCheckpointWithTombstones(4, 2));
  Result<CheckpointHeader> h = DecodeCheckpointHeader(Bytes(enc), enc.size());
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->entry_count, 4u);
  EXPECT_EQ(h->tombstone_count, 2u);
  EXPECT_EQ(h->prefix_bytes, kCheckpointHeaderBytes + kCheckpointCacheIdBytes);
  EXPECT_TRUE(DecodeCheckpointHeader(Bytes(enc), enc.size() + 1).status().IsCorruption());
  EXPECT_TRUE(DecodeCheckpointHeader(Bytes(enc), uint64_t{4} << 30).status().IsCorruption());
  std::string huge = enc;
  EncodeFixed64(reinterpret_cast<std::byte*>(huge.data()) + 56, UINT64_MAX / 80 + 1);
  EXPECT_TRUE(DecodeCheckpointHeader(Bytes(huge), huge.size()).status().IsCorruption());
  EXPECT_LT(CheckpointBytesMax(64 * kMiB, kMiB, 1), 8 * kMiB);
  EXPECT_EQ(CheckpointBytesMax(UINT64_MAX, kMiB, 64), kSsdCheckpointBytesMax);
}

TEST(SsdCheckpointTest, BitFlipsAndTruncationAreDetected) {
  const std::string enc = EncodeCheckpoint(ExampleCheckpointWithTombstones(5, 2));
  for (size_t bit = 0; bit < enc.size() * 8; bit += 3) {
    std::string bad = enc;
    bad[bit / 8] = static_cast<char>(bad[bit / 8] ^ (1 << (bit % 8)));
    ASSERT_FALSE(DecodeCheckpoint(Bytes(bad)).ok()) << bit;
  }
  for (size_t n = 0; n < enc.size(); ++n) {
    ASSERT_FALSE(DecodeCheckpoint(Bytes(enc.substr(0, n))).ok()) << n;
  }
}

TEST(SsdCheckpointTest, EntryInUnlistedSegmentIsRejected) {
  // Drop segment 11 from a consistent checkpoint by hand (the encoder would refuse), fix the
  // count and the CRC: entries in segment 11 now name an unlisted segment.
  const std::string good = EncodeCheckpoint(ExampleCheckpoint(3));
  std::string bad = good.substr(0, kCheckpointHeaderBytes + kCheckpointSegmentEntryBytes) +
                    good.substr(kCheckpointHeaderBytes + 2 * kCheckpointSegmentEntryBytes);
  bad.resize(bad.size() - kCheckpointTrailerBytes);
  EncodeFixed32(reinterpret_cast<std::byte*>(bad.data()) + 48, 1);
  PutFixed32(&bad, crc32c::Mask(crc32c::Value(bad)));
  EXPECT_TRUE(DecodeCheckpoint(Bytes(bad)).status().IsCorruption());
}

}  // namespace
}  // namespace kvtier::ssd
