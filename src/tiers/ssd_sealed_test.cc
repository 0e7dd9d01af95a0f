// Goal: show that an SSD tier with keys keeps records sealed at rest and serves only what a key
// holder wrote for that block: segment files hold no run of a stored block; a byte flipped in the
// ciphertext (CRC recomputed, as an attacker would) is a miss; a plain record planted in the cache
// is a miss; a cache reopened without keys, or with a keyring that lacks the record's key, misses
// without losing the records (the right keys read them again); records survive a restart by the
// scan alone and a reclaim that moves them; keys rotate.
// Method: real files in a temporary directory; records edited in place with pwrite after the
// tier is closed (header and payload CRCs recomputed with the project's own codec).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "core/assert.h"
#include "testing/test_util.h"
#include "tiers/remote_crypto.h"
#include "tiers/ssd_record.h"
#include "tiers/ssd_test_util.h"
#include "tiers/ssd_tier.h"

namespace kvtier {
namespace {

using ssd_test::Get;
using ssd_test::Payload;
using ssd_test::Put;

constexpr size_t kBlock = 60 * 1024;

RemoteKeyring Ring(const std::string& text) {
  Result<RemoteKeyring> r = RemoteKeyring::Parse(text);
  KV_CHECK_OK(r.status());
  return std::move(r).value();
}
const std::string kKey1 = "1 " + std::string(64, '3');
const std::string kKey2 = "2 " + std::string(64, '4');

class SsdSealedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<ScopedTempDir> d = ScopedTempDir::Create();
    ASSERT_TRUE(d.ok());
    dir_ = std::make_unique<ScopedTempDir>(std::move(d).value());
    env_ = NewPosixEnv();
  }
  SsdTierOptions Options(std::optional<RemoteKeyring> keyring) const {
    SsdTierOptions o;
    o.dirs = {dir_->Join("d0")};
    o.segment_bytes = 1 * kMiB;
    o.capacity_bytes = 64 * kMiB;
    o.keyring = std::move(keyring);
    return o;
  }
  std::unique_ptr<SsdTier> Open(const SsdTierOptions& o) {
    Result<std::unique_ptr<SsdTier>> t = SsdTier::Open(o, env_.get());
    KV_CHECK_OK(t.status());
    return std::move(t).value();
  }
  std::string Segment(uint64_t id) const {
    return dir_->Join("d0") + "/" + ssd::SegmentFileName(id);
  }
  static std::string ReadFile(const std::string& path) {
    std::string bytes(std::filesystem::file_size(path), '\0');
    std::ifstream in(path, std::ios::binary);
    in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return bytes;
  }
  // Rewrites the record at `offset` of segment 1 through `edit` (header and payload in the
  // record's own bytes), with both CRCs recomputed.
  template <typename F>
  void EditRecord(uint64_t offset, F edit) {
    std::string file = ReadFile(Segment(1));
    auto* rec = reinterpret_cast<std::byte*>(file.data() + offset);
    Result<ssd::RecordHeader> h =
        ssd::DecodeRecordHeader(std::span<const std::byte>(rec, ssd::kRecordHeaderBytes));
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    ssd::RecordHeader header = *h;
    std::span<std::byte> payload(rec + ssd::kRecordPayloadOffset, header.payload_bytes);
    edit(header, payload);
    header.payload_crc = ssd::PayloadCrc(payload);
    ssd::EncodeRecordHeader(header, std::span(rec, ssd::kRecordHeaderBytes));
    std::ofstream out(Segment(1), std::ios::binary | std::ios::trunc);
    out.write(file.data(), static_cast<std::streamsize>(file.size()));
  }

  std::unique_ptr<ScopedTempDir> dir_;
  std::unique_ptr<Env> env_;
};

TEST_F(SsdSealedTest, RecordsAreSealedOnDiskAndReadBack) {
  {
    auto tier = Open(Options(Ring(kKey1)));
    ASSERT_TRUE(Put(*tier, 0, 5, kBlock).ok());
    for (uint64_t i = 0; i < 5; ++i) EXPECT_TRUE(Get(*tier, i, kBlock).ok()) << i;
    ASSERT_TRUE(tier->Close().ok());
  }
  const std::string file = ReadFile(Segment(1));
  for (uint64_t i = 0; i < 5; ++i) {
    const std::vector<std::byte> p = Payload(i, kBlock);
    const std::string run(reinterpret_cast<const char*>(p.data()) + 5000, 64);
    EXPECT_EQ(file.find(run), std::string::npos) << "plaintext of block " << i << " on disk";
  }
  // A restart by the scan alone (no checkpoint) finds and opens them.
  ASSERT_EQ(::unlink((dir_->Join("d0") + "/index.ckpt").c_str()), 0);
  auto tier = Open(Options(Ring(kKey1)));
  for (uint64_t i = 0; i < 5; ++i) EXPECT_TRUE(Get(*tier, i, kBlock).ok()) << i;
}

TEST_F(SsdSealedTest, TamperedAndPlantedRecordsAreMisses) {
  {
    auto tier = Open(Options(Ring(kKey1)));
    ASSERT_TRUE(Put(*tier, 0, 3, kBlock).ok());
    ASSERT_TRUE(tier->Close().ok());
  }
  const uint64_t stride = ssd::RecordBytesForPayload(kBlock + ssd::kSealedRecordOverheadBytes);
  // Record 0: one ciphertext byte flipped, CRCs made valid again.
  EditRecord(4096, [](ssd::RecordHeader&, std::span<std::byte> p) { p[100] ^= std::byte{1}; });
  // Record 1: replaced by a plain record of other bytes (flag cleared, seal dropped).
  EditRecord(4096 + stride, [](ssd::RecordHeader& h, std::span<std::byte> p) {
    h.flags = 0;
    std::fill(p.begin(), p.end(), std::byte{0x3c});
  });
  auto tier = Open(Options(Ring(kKey1)));
  EXPECT_TRUE(Get(*tier, 0, kBlock).IsNotFound());
  EXPECT_TRUE(Get(*tier, 1, kBlock).IsNotFound());
  EXPECT_TRUE(Get(*tier, 2, kBlock).ok());
  EXPECT_GE(tier->Stats().corrupt_records, 1u);
}

TEST_F(SsdSealedTest, WithoutTheRightKeyRecordsAreMissesAndStayForTheRightKey) {
  {
    auto tier = Open(Options(Ring(kKey1)));
    ASSERT_TRUE(Put(*tier, 0, 3, kBlock).ok());
    ASSERT_TRUE(tier->Close().ok());
  }
  {
    auto none = Open(Options(std::nullopt));
    EXPECT_TRUE(Get(*none, 0, kBlock).IsNotFound());
    ASSERT_TRUE(none->Close().ok());
  }
  {
    auto other = Open(Options(Ring(kKey2)));
    EXPECT_TRUE(Get(*other, 1, kBlock).IsNotFound());
    ASSERT_TRUE(other->Close().ok());
  }
  auto right = Open(Options(Ring(kKey1)));
  for (uint64_t i = 0; i < 3; ++i) EXPECT_TRUE(Get(*right, i, kBlock).ok()) << i;
}

TEST_F(SsdSealedTest, ReclaimMovesSealedRecordsAndKeysRotate) {
  auto tier = Open(Options(Ring(kKey1)));
  ASSERT_TRUE(Put(*tier, 0, 20, kBlock).ok());  // Segment 1 full, segment 2 begun.
  ASSERT_TRUE(Get(*tier, 3, kBlock).ok());      // Referenced: reclaim copies it.
  ASSERT_TRUE(tier->ReclaimOldestSegment().ok());
  EXPECT_TRUE(Get(*tier, 3, kBlock).ok());
  ASSERT_TRUE(tier->Close().ok());
  auto rotated = Open(Options(Ring(kKey1 + "\n" + kKey2)));
  EXPECT_TRUE(Get(*rotated, 3, kBlock).ok());  // Written under key 1.
  ASSERT_TRUE(Put(*rotated, 100, 1, kBlock).ok());
  EXPECT_TRUE(Get(*rotated, 100, kBlock).ok());  // Written under key 2.
  ASSERT_TRUE(rotated->Close().ok());
  auto old_only = Open(Options(Ring(kKey1)));
  EXPECT_TRUE(Get(*old_only, 100, kBlock).IsNotFound());
  EXPECT_TRUE(Get(*old_only, 3, kBlock).ok());
}

}  // namespace
}  // namespace kvtier
