// Goal: show that an SSD tier with keys keeps records sealed at rest and serves only what a key
// holder wrote for that block: segment files hold no run of a stored block; a byte flipped in the
// ciphertext (CRC recomputed, as an attacker would) is a miss; a plain record planted in the cache
// is a miss; a cache with a keyring that lacks the record's key misses without losing the records
// (the right keys read them again); records survive a restart by the scan alone and a reclaim that
// moves them; keys rotate. A sealed cache stays sealed: its MANIFEST says so (version 2), opening
// it without keys is refused before anything is written (also when only its records tell, for a
// cache sealed by an older build), and an unsealed cache opened with keys becomes sealed. A
// record's expiry is sealed with it: an expiry cleared in the record or in the checkpoint, CRCs
// recomputed as an attacker would, is a miss counted as corruption, never an expired block served.
// Method: real files in a temporary directory; records edited in place with pwrite after the
// tier is closed (header and payload CRCs recomputed with the project's own codec).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/assert.h"
#include "testing/test_util.h"
#include "tiers/remote_crypto.h"
#include "tiers/ssd/ssd_checkpoint.h"
#include "tiers/ssd/ssd_manifest.h"
#include "tiers/ssd/ssd_recovery.h"
#include "tiers/ssd_record.h"
#include "tiers/ssd/ssd_test_util.h"
#include "tiers/ssd/ssd_tier.h"

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
    env_ = NewPosixEnv({.clock = &clock_});
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

  // Every file of the cache directory with its bytes.
  std::map<std::string, std::string> Files() const {
    std::map<std::string, std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(dir_->Join("d0"))) {
      out[e.path().filename().string()] = ReadFile(e.path().string());
    }
    return out;
  }
  static void WriteFile(const std::string& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }

  // No 64-byte run of the plaintext of blocks [0, n) is in segment 1.
  void ExpectNoPlaintextOnDisk(uint64_t n) const {
    const std::string file = ReadFile(Segment(1));
    for (uint64_t i = 0; i < n; ++i) {
      const std::vector<std::byte> p = Payload(i, kBlock);
      const std::string run(reinterpret_cast<const char*>(p.data()) + 5000, 64);
      EXPECT_EQ(file.find(run), std::string::npos) << "plaintext of block " << i << " on disk";
    }
  }

  ManualClock clock_{1'000'000'000};
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
  ExpectNoPlaintextOnDisk(5);
  // A restart by the scan alone (no checkpoint) finds and opens them.
  ASSERT_EQ(::unlink((dir_->Join("d0") + "/index.ckpt").c_str()), 0);
  auto tier = Open(Options(Ring(kKey1)));
  for (uint64_t i = 0; i < 5; ++i) EXPECT_TRUE(Get(*tier, i, kBlock).ok()) << i;
}

// A writer's record buffer (SsdBlockWrite::record) holds the plaintext: a sealed tier never
// writes from it. Every record is sealed into the tier's own buffers (all staged), no plaintext
// reaches the disk, and the blocks read back.
TEST_F(SsdSealedTest, RecordsInTheWritersBuffersAreSealedNotWrittenInPlace) {
  {
    auto tier = Open(Options(Ring(kKey1)));
    ASSERT_TRUE(ssd_test::PutInPlace(
                    *tier, 0, 5, kBlock, [](uint64_t) { return true; },
                    [](uint64_t) { return false; })
                    .ok());
    EXPECT_GT(tier->Stats().write_bytes, 0u);
    EXPECT_EQ(tier->Stats().staged_write_bytes, tier->Stats().write_bytes);
    for (uint64_t i = 0; i < 5; ++i) EXPECT_TRUE(Get(*tier, i, kBlock).ok()) << i;
    ASSERT_TRUE(tier->Close().ok());
  }
  ExpectNoPlaintextOnDisk(5);
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

// A sealed cache reopened without keys used to be written in plain records beside its sealed
// ones. Its MANIFEST now says it is sealed, and the open is refused, naming the problem, before
// anything in the directory changes; the keys open it again.
TEST_F(SsdSealedTest, SealedCacheReopenedWithoutKeysIsRefused) {
  {
    auto tier = Open(Options(Ring(kKey1)));
    ASSERT_TRUE(Put(*tier, 0, 3, kBlock).ok());
    ASSERT_TRUE(tier->Close().ok());
  }
  Result<ssd::Manifest> m = ssd::ReadManifest(env_.get(), dir_->Join("d0"));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_TRUE(m->sealed());
  EXPECT_EQ(m->format_version, ssd::kManifestVersionFlags);
  const std::map<std::string, std::string> before = Files();
  Result<std::unique_ptr<SsdTier>> none = SsdTier::Open(Options(std::nullopt), env_.get());
  ASSERT_TRUE(none.status().IsInvalidArgument()) << none.status().ToString();
  EXPECT_NE(none.status().message().find("holds a sealed cache"), std::string::npos)
      << none.status().ToString();
  EXPECT_NE(none.status().message().find("no key is configured"), std::string::npos);
  EXPECT_EQ(Files(), before) << "the refused open changed the cache directory";
  auto tier = Open(Options(Ring(kKey1)));
  for (uint64_t i = 0; i < 3; ++i) EXPECT_TRUE(Get(*tier, i, kBlock).ok()) << i;
}

// An unsealed cache (version 1 MANIFEST, as every build writes for one) opened with keys becomes
// sealed for good: its MANIFEST is rewritten as version 2 with the sealed flag.
TEST_F(SsdSealedTest, UnsealedCacheOpenedWithKeysBecomesSealed) {
  {
    auto plain = Open(Options(std::nullopt));
    ASSERT_TRUE(Put(*plain, 0, 2, kBlock).ok());
    ASSERT_TRUE(plain->Close().ok());
  }
  Result<ssd::Manifest> m = ssd::ReadManifest(env_.get(), dir_->Join("d0"));
  ASSERT_TRUE(m.ok());
  EXPECT_FALSE(m->sealed());
  EXPECT_EQ(m->format_version, ssd::kManifestVersion);
  {
    auto sealed = Open(Options(Ring(kKey1)));
    EXPECT_TRUE(Get(*sealed, 0, kBlock).IsNotFound());  // A plain record, as before: a miss.
    ASSERT_TRUE(Put(*sealed, 10, 1, kBlock).ok());
    ASSERT_TRUE(sealed->Close().ok());
  }
  m = ssd::ReadManifest(env_.get(), dir_->Join("d0"));
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(m->sealed());
  EXPECT_TRUE(SsdTier::Open(Options(std::nullopt), env_.get()).status().IsInvalidArgument());
}

// A cache sealed by a build whose MANIFEST had no sealed flag (simulated: its manifest rewritten
// as version 1, its checkpoint removed so that the records are scanned) is refused without keys
// too, and its MANIFEST is marked, so the next open is refused even when a checkpoint spares it
// the scan.
TEST_F(SsdSealedTest, CacheSealedByAnOlderBuildIsKnownByItsRecords) {
  {
    auto tier = Open(Options(Ring(kKey1)));
    ASSERT_TRUE(Put(*tier, 0, 3, kBlock).ok());
    ASSERT_TRUE(tier->Close().ok());
  }
  Result<ssd::Manifest> m = ssd::ReadManifest(env_.get(), dir_->Join("d0"));
  ASSERT_TRUE(m.ok());
  ssd::Manifest old = *m;
  old.flags = 0;
  old.format_version = ssd::kManifestVersion;
  WriteFile(dir_->Join("d0") + "/MANIFEST", ssd::EncodeManifest(old));
  ASSERT_EQ(::unlink((dir_->Join("d0") + "/index.ckpt").c_str()), 0);
  Result<std::unique_ptr<SsdTier>> none = SsdTier::Open(Options(std::nullopt), env_.get());
  ASSERT_TRUE(none.status().IsInvalidArgument()) << none.status().ToString();
  EXPECT_NE(none.status().message().find("3 records encrypted at rest"), std::string::npos)
      << none.status().ToString();
  m = ssd::ReadManifest(env_.get(), dir_->Join("d0"));
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(m->sealed());
  auto tier = Open(Options(Ring(kKey1)));
  for (uint64_t i = 0; i < 3; ++i) EXPECT_TRUE(Get(*tier, i, kBlock).ok()) << i;
}

// A record with a 1 s TTL, its expiry then cleared on disk without the key (CRCs recomputed, as
// an attacker would): in the record header (the scan installs the cleared expiry; the seal, which
// covers the expiry, fails), or in the checkpoint's entry (the record's expiry no longer agrees).
// After the TTL, either is a miss counted as corruption; it used to be served again.
TEST_F(SsdSealedTest, TamperedExpiryIsAMissCountedAsCorruption) {
  for (const bool in_checkpoint : {false, true}) {
    SCOPED_TRACE(in_checkpoint ? "checkpoint" : "record");
    std::filesystem::remove_all(dir_->Join("d0"));
    {
      auto tier = Open(Options(Ring(kKey1)));
      ASSERT_TRUE(Put(*tier, 0, 1, kBlock, /*ttl_us=*/1'000'000).ok());
      ASSERT_TRUE(Put(*tier, 1, 1, kBlock).ok());  // No TTL: untouched.
      ASSERT_TRUE(tier->Close().ok());
    }
    const std::string ckpt = dir_->Join("d0") + "/index.ckpt";
    if (in_checkpoint) {
      Result<ssd::Checkpoint> ck = ssd::ReadCheckpointFile(env_.get(), ckpt);
      ASSERT_TRUE(ck.ok()) << ck.status().ToString();
      for (auto& [key, e] : ck->entries) e.expiry_wall_us = 0;
      WriteFile(ckpt, ssd::EncodeCheckpoint(*ck));
    } else {
      EditRecord(4096, [](ssd::RecordHeader& h, std::span<std::byte>) { h.expiry_wall_us = 0; });
      ASSERT_EQ(::unlink(ckpt.c_str()), 0);
    }
    clock_.Advance(2'000'000);  // Past the TTL.
    auto tier = Open(Options(Ring(kKey1)));
    EXPECT_TRUE(tier->Lookup(ssd_test::Key(0)).has_value());  // The index was fooled...
    EXPECT_TRUE(Get(*tier, 0, kBlock).IsNotFound());          // ...the read is not.
    EXPECT_EQ(tier->Stats().corrupt_records, 1u);
    EXPECT_FALSE(tier->Lookup(ssd_test::Key(0)).has_value());  // Dropped.
    EXPECT_TRUE(Get(*tier, 1, kBlock).ok());
    ASSERT_TRUE(tier->Close().ok());
  }
}

}  // namespace
}  // namespace kvtier

