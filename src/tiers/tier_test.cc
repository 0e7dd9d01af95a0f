// Goal: show that the SSD tier and the remote tier (on a store, and on a shared directory: the fs
// tier) keep the one contract of tiers/tier.h, so that
// the engine can walk a list of tiers without knowing which is which: records written in a batch
// read back with their codec id and size, misses and refused records are NotFound (refused ones
// flagged corrupt), Contains and Erase agree with reads, TTLs expire, each call's callback runs
// exactly once, the counters move, and each tier says what it is (name, capabilities, buffers).
// Also the remote tier's own policies: its admission filter (misses count as requests) and its
// write budget skip writes without failing them.
// Method: one parameterised suite over both adapters. The SSD tier runs on the in-memory Env with
// a manual clock (only its directory's LOCK is a real file, in a temporary directory); the remote
// tier runs on FakeRemoteStore with the same clock, and on FsStore in a temporary directory with
// it. A corrupt record is made per tier: the SSD one by writing under another layout digest
// through the SsdTier itself, the remote ones by flipping a stored bit.
#include "tiers/tier.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/aligned_buffer.h"
#include "env/mem_env.h"
#include "testing/fake_remote_store.h"
#include "testing/test_util.h"
#include "tiers/fs/fs_store.h"
#include "tiers/remote_tier_adapter.h"
#include "tiers/ssd/ssd_test_util.h"
#include "tiers/ssd/ssd_tier_adapter.h"

namespace kvtier {
namespace {

using ssd_test::Key;
using ssd_test::Layout;
using ssd_test::Payload;

constexpr size_t kPayload = 20 * 1024;
constexpr uint8_t kCodec = 3;
constexpr uint32_t kRaw = 2 * kPayload;

class TierContractTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "ssd") {
      Result<ScopedTempDir> d = ScopedTempDir::Create();
      ASSERT_TRUE(d.ok());
      dir_ = std::make_unique<ScopedTempDir>(std::move(d).value());
      std::filesystem::create_directory(dir_->Join("d0"));
      env_ = NewMemEnv({.capacity_bytes = 64 * kMiB, .clock = &clock_});
      SsdTierOptions o;
      o.dirs = {dir_->Join("d0")};
      o.segment_bytes = 1 * kMiB;
      o.capacity_bytes = 16 * kMiB;
      Result<std::unique_ptr<SsdTier>> ssd = SsdTier::Open(o, env_.get());
      ASSERT_TRUE(ssd.ok()) << ssd.status().ToString();
      auto adapter = std::make_unique<SsdTierAdapter>(std::move(ssd).value(), Layout());
      ssd_ = adapter.get();
      tier_ = std::move(adapter);
    } else if (GetParam() == "fs") {
      Result<ScopedTempDir> d = ScopedTempDir::Create();
      ASSERT_TRUE(d.ok());
      dir_ = std::make_unique<ScopedTempDir>(std::move(d).value());
      Result<std::unique_ptr<FsStore>> fs = FsStore::Open({.dir = dir_->Join("shared"),
                                                           .insecure_plaintext = true,
                                                           .layout_digest = Layout(),
                                                           .clock = &clock_});
      ASSERT_TRUE(fs.ok()) << fs.status().ToString();
      fs_ = fs->get();
      tier_ = std::make_unique<RemoteTierAdapter>(std::move(fs).value(), RemoteTierPolicy{});
    } else {
      fake_ = std::make_unique<FakeRemoteStore>(
          FakeRemoteStoreOptions{.layout_digest = Layout(), .clock = &clock_});
      tier_ = std::make_unique<RemoteTierAdapter>(fake_.get(), RemoteTierPolicy{});
    }
    for (uint64_t i = 0; i < 16; ++i) payloads_.push_back(Payload(i, kPayload));
  }

  // Writes blocks [first, first + count) with WriteBatch and waits; every item must be written.
  void WriteBlocks(uint64_t first, uint64_t count, uint64_t ttl_us = 0) {
    std::vector<TierWrite> writes(count);
    for (uint64_t i = 0; i < count; ++i) {
      writes[i] = TierWrite{.key = Key(first + i),
                            .codec_id = kCodec,
                            .raw_bytes = kRaw,
                            .payload = payloads_[first + i],
                            .ttl_us = ttl_us};
    }
    ASSERT_TRUE(tier_->WriteBatchSync(writes).ok());
    for (const TierWrite& w : writes) {
      EXPECT_TRUE(w.status.ok()) << w.status.ToString();
      EXPECT_FALSE(w.skipped);
    }
  }

  // Reads block i into a fresh buffer: its status, with the record checked when it is OK.
  Status ReadBlock(uint64_t i, bool* corrupt = nullptr) {
    Result<AlignedBuffer> buf = AlignedBuffer::Allocate(tier_->ReadBufferBytes(kPayload));
    KV_CHECK(buf.ok());
    TierRead r{.key = Key(i), .buffer = buf->span()};
    KV_RETURN_IF_ERROR(tier_->ReadBatchSync(std::span(&r, 1)));
    if (corrupt != nullptr) *corrupt = r.corrupt;
    KV_RETURN_IF_ERROR(r.status);
    if (r.codec_id != kCodec || r.raw_bytes != kRaw || r.payload.size() != kPayload ||
        std::memcmp(r.payload.data(), payloads_[i].data(), kPayload) != 0) {
      return Status::Corruption("record differs");
    }
    if (r.payload.data() < buf->data() || r.payload.data() + kPayload > buf->data() + buf->size()) {
      return Status::Corruption("payload outside the caller's buffer");
    }
    return Status::Ok();
  }

  bool Present(uint64_t i) {
    TierContains c{.key = Key(i)};
    KV_CHECK_OK(tier_->Contains(std::span(&c, 1)));
    KV_CHECK_OK(c.status);
    return c.present;
  }

  // Leaves a record for block i that the tier must refuse.
  void Corrupt(uint64_t i) {
    if (fake_ != nullptr) {
      KV_CHECK_OK(fake_->CorruptStoredValue(Key(i), ssd::kRecordHeaderBytes + 5));
      return;
    }
    if (fs_ != nullptr) {
      KV_CHECK_OK(FlipByteOfFile(dir_->Join("shared/" + fs_->RelativePath(Key(i))),
                                 kFsFileHeaderBytes + ssd::kRecordHeaderBytes + 5));
      return;
    }
    SsdBlockWrite w{.key = Key(i),
                    .layout_digest = Layout(0x17),
                    .codec_id = kCodec,
                    .raw_bytes = kRaw,
                    .payload = payloads_[i]};
    KV_CHECK_OK(ssd_->ssd()->WriteBatchSync(std::span(&w, 1)));
    KV_CHECK_OK(w.status);
  }

  ManualClock clock_{1'000'000'000};
  std::unique_ptr<ScopedTempDir> dir_;
  std::unique_ptr<Env> env_;
  std::unique_ptr<FakeRemoteStore> fake_;
  FsStore* fs_ = nullptr;  // Owned by tier_.
  SsdTierAdapter* ssd_ = nullptr;
  std::unique_ptr<Tier> tier_;
  std::vector<std::vector<std::byte>> payloads_;
};

TEST_P(TierContractTest, NameCapabilitiesAndBuffers) {
  EXPECT_EQ(tier_->name(), GetParam() == "ssd" ? "ssd" : "remote");
  const TierCapabilities c = tier_->capabilities();
  EXPECT_TRUE(c.persistent);
  EXPECT_TRUE(c.write_back);
  EXPECT_EQ(c.shared, GetParam() != "ssd");
  EXPECT_EQ(c.local_contains, GetParam() == "ssd");
  EXPECT_GE(tier_->batch_max(), 1024u);
  EXPECT_GE(tier_->ReadBufferBytes(kPayload), kPayload);
}

TEST_P(TierContractTest, BatchRoundTripWithOneCallbackEach) {
  std::vector<TierWrite> writes(8);
  for (uint64_t i = 0; i < writes.size(); ++i) {
    writes[i] =
        TierWrite{.key = Key(i), .codec_id = kCodec, .raw_bytes = kRaw, .payload = payloads_[i]};
  }
  std::atomic<int> calls{0};
  Status written = Status::Unavailable("callback not run");
  ASSERT_TRUE(WaitForCallback([&](Tier::Callback done) {
                tier_->WriteBatch(writes, [&, done = std::move(done)](Status s) {
                  ++calls;
                  written = s;
                  done(s);
                });
              }).ok());
  EXPECT_EQ(calls.load(), 1);
  EXPECT_TRUE(written.ok());

  std::vector<AlignedBuffer> buffers;
  std::vector<TierRead> reads(writes.size() + 1);  // The last one was never written.
  for (uint64_t i = 0; i < reads.size(); ++i) {
    Result<AlignedBuffer> b = AlignedBuffer::Allocate(tier_->ReadBufferBytes(kPayload));
    ASSERT_TRUE(b.ok());
    buffers.push_back(std::move(b).value());
    reads[i] = TierRead{.key = Key(i), .buffer = buffers.back().span()};
  }
  calls = 0;
  ASSERT_TRUE(WaitForCallback([&](Tier::Callback done) {
                tier_->ReadBatch(reads, [&, done = std::move(done)](Status s) {
                  ++calls;
                  done(s);
                });
              }).ok());
  EXPECT_EQ(calls.load(), 1);
  for (uint64_t i = 0; i < writes.size(); ++i) {
    ASSERT_TRUE(reads[i].status.ok()) << i << ": " << reads[i].status.ToString();
    EXPECT_EQ(reads[i].codec_id, kCodec);
    EXPECT_EQ(reads[i].raw_bytes, kRaw);
    ASSERT_EQ(reads[i].payload.size(), kPayload);
    EXPECT_EQ(std::memcmp(reads[i].payload.data(), payloads_[i].data(), kPayload), 0) << i;
  }
  EXPECT_TRUE(reads.back().status.IsNotFound()) << reads.back().status.ToString();
  EXPECT_FALSE(reads.back().corrupt);

  const TierStoreStats s = tier_->Stats();
  EXPECT_EQ(s.writes, 8u);
  EXPECT_EQ(s.read_hits, 8u);
  EXPECT_EQ(s.read_misses, 1u);
  EXPECT_EQ(s.corrupt, 0u);
  if (s.blocks_known) {
    EXPECT_EQ(s.blocks, 8u);
  }
  EXPECT_TRUE(tier_->Flush().ok());
  if (s.blocks_known) {
    EXPECT_GT(s.capacity_bytes, 0u);
    EXPECT_GE(s.used_bytes, 8 * kPayload);
  }
  EXPECT_TRUE(tier_->Close().ok());
}

TEST_P(TierContractTest, ContainsAndEraseAgreeWithReads) {
  WriteBlocks(0, 4);
  std::vector<TierContains> asks(6);
  for (uint64_t i = 0; i < asks.size(); ++i) asks[i].key = Key(i);
  ASSERT_TRUE(tier_->Contains(asks).ok());
  for (uint64_t i = 0; i < asks.size(); ++i) {
    EXPECT_TRUE(asks[i].status.ok());
    EXPECT_EQ(asks[i].present, i < 4) << i;
  }
  const std::vector<BlockKey> gone = {Key(1), Key(3), Key(9)};  // Key(9) was never written.
  ASSERT_TRUE(tier_->Erase(gone).ok());
  EXPECT_TRUE(Present(0));
  EXPECT_FALSE(Present(1));
  EXPECT_TRUE(ReadBlock(0).ok());
  EXPECT_TRUE(ReadBlock(1).IsNotFound());
  EXPECT_TRUE(ReadBlock(3).IsNotFound());
  EXPECT_TRUE(ReadBlock(2).ok());
}

TEST_P(TierContractTest, TtlExpires) {
  WriteBlocks(0, 1, /*ttl_us=*/2'000'000);
  WriteBlocks(1, 1);
  EXPECT_TRUE(ReadBlock(0).ok());
  TierContains c{.key = Key(0)};
  ASSERT_TRUE(tier_->Contains(std::span(&c, 1)).ok());
  EXPECT_TRUE(c.present);
  if (tier_->capabilities().local_contains) {
    EXPECT_EQ(c.expiry_wall_us, clock_.WallMicros() + 2'000'000) << "a local tier knows it";
  }
  clock_.Advance(3'000'000);
  EXPECT_TRUE(ReadBlock(0).IsNotFound());
  EXPECT_FALSE(Present(0));
  EXPECT_TRUE(ReadBlock(1).ok()) << "no TTL: kept";
}

TEST_P(TierContractTest, RefusedRecordIsACorruptMiss) {
  WriteBlocks(0, 2);
  Corrupt(1);
  bool corrupt = false;
  const Status s = ReadBlock(1, &corrupt);
  EXPECT_TRUE(s.IsNotFound()) << s.ToString();
  EXPECT_TRUE(corrupt);
  EXPECT_GE(tier_->Stats().corrupt, 1u);
  EXPECT_TRUE(ReadBlock(0, &corrupt).ok());
  EXPECT_FALSE(corrupt);
}

TEST_P(TierContractTest, SmallBufferIsRefusedPerItem) {
  WriteBlocks(0, 1);
  Result<AlignedBuffer> buf = AlignedBuffer::Allocate(4096);
  ASSERT_TRUE(buf.ok());
  TierRead r{.key = Key(0), .buffer = buf->span()};
  const Status call = tier_->ReadBatchSync(std::span(&r, 1));
  EXPECT_FALSE(r.status.ok());
  EXPECT_TRUE(r.status.IsInvalidArgument() || !call.ok()) << r.status.ToString();
  EXPECT_TRUE(ReadBlock(0).ok()) << "the record stays usable with a buffer that holds it";
}

TEST_P(TierContractTest, OversizedBatchFailsWhole) {
  std::vector<TierContains> asks(tier_->batch_max() + 1);
  for (uint64_t i = 0; i < asks.size(); ++i) asks[i].key = Key(i);
  if (GetParam() != "ssd") {
    EXPECT_TRUE(tier_->Contains(asks).IsInvalidArgument());
  }
  std::vector<TierRead> reads(tier_->batch_max() + 1);
  for (uint64_t i = 0; i < reads.size(); ++i) reads[i].key = Key(i);
  EXPECT_TRUE(tier_->ReadBatchSync(reads).IsInvalidArgument());
  EXPECT_TRUE(reads[0].status.IsInvalidArgument());
  std::vector<TierWrite> writes(tier_->batch_max() + 1);
  for (uint64_t i = 0; i < writes.size(); ++i) {
    writes[i] = TierWrite{.key = Key(i), .payload = payloads_[0]};
  }
  EXPECT_TRUE(tier_->WriteBatchSync(writes).IsInvalidArgument());
  EXPECT_FALSE(Present(0)) << "nothing of a refused batch was written";
}

INSTANTIATE_TEST_SUITE_P(Tiers, TierContractTest, ::testing::Values("ssd", "remote", "fs"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

// The remote tier's admission filter and write budget: refusals are skips, not failures.
TEST(RemoteTierAdapterTest, AdmissionCountsMissesAndBudgetSkips) {
  ManualClock clock(1'000'000'000);
  FakeRemoteStore fake({.layout_digest = Layout(), .clock = &clock});
  RemoteTierAdapter tier(&fake, RemoteTierPolicy{.admission_requests = 2,
                                                  .write_budget_bytes_per_s = 3 * kPayload,
                                                  .write_budget_burst_bytes = 3 * kPayload,
                                                  .clock = &clock});
  const std::vector<std::byte> payload = Payload(0, kPayload);
  auto write = [&](uint64_t i) {
    TierWrite w{.key = Key(i), .codec_id = kCodec, .raw_bytes = kRaw, .payload = payload};
    EXPECT_TRUE(tier.WriteBatchSync(std::span(&w, 1)).ok()) << "a skip is not an error";
    return w;
  };
  TierWrite first = write(0);
  EXPECT_TRUE(first.skipped);
  EXPECT_TRUE(first.status.IsAborted());
  EXPECT_TRUE(write(0).status.ok()) << "the second request reaches the threshold";

  TierContains miss{.key = Key(1)};
  ASSERT_TRUE(tier.Contains(std::span(&miss, 1)).ok());
  EXPECT_FALSE(miss.present);
  EXPECT_TRUE(write(1).status.ok()) << "the miss counted as the first request";

  // Two payloads of budget are spent; the third fits, the fourth does not.
  TierContains miss2{.key = Key(2)};
  ASSERT_TRUE(tier.Contains(std::span(&miss2, 1)).ok());
  EXPECT_TRUE(write(2).status.ok());
  TierContains miss3{.key = Key(3)};
  ASSERT_TRUE(tier.Contains(std::span(&miss3, 1)).ok());
  TierWrite over = write(3);
  EXPECT_TRUE(over.skipped);
  EXPECT_TRUE(over.status.IsBusy());
  EXPECT_FALSE(fake.Contains(Key(3)));

  const TierStoreStats s = tier.Stats();
  EXPECT_EQ(s.not_admitted, 1u);
  EXPECT_EQ(s.over_budget, 1u);
  EXPECT_EQ(s.writes, 3u);
  EXPECT_FALSE(s.blocks_known);
}

// A store that does not answer: per-item statuses, never a crash, and the call reports it.
TEST(RemoteTierAdapterTest, UnavailableStoreFailsItems) {
  FakeRemoteStore fake({.layout_digest = Layout()});
  RemoteTierAdapter tier(&fake, RemoteTierPolicy{});
  ASSERT_TRUE(fake.ArmFault({.kind = RemoteFaultKind::kUnavailable,
                             .op = RemoteOp::kAny,
                             .repeat = FaultRepeat::kEveryAfter})
                  .ok());
  const std::vector<std::byte> payload = Payload(0, kPayload);
  TierWrite w{.key = Key(0), .codec_id = kCodec, .raw_bytes = kRaw, .payload = payload};
  EXPECT_TRUE(tier.WriteBatchSync(std::span(&w, 1)).IsUnavailable());
  EXPECT_TRUE(w.status.IsUnavailable());
  EXPECT_FALSE(w.skipped);
  TierContains c{.key = Key(0)};
  ASSERT_TRUE(tier.Contains(std::span(&c, 1)).ok());
  EXPECT_TRUE(c.status.IsUnavailable());
  EXPECT_FALSE(c.present);
  std::vector<std::byte> buf(kPayload);
  TierRead r{.key = Key(0), .buffer = buf};
  ASSERT_TRUE(tier.ReadBatchSync(std::span(&r, 1)).ok());
  EXPECT_TRUE(r.status.IsUnavailable());
  EXPECT_FALSE(r.corrupt);
  EXPECT_FALSE(tier.Erase(std::vector<BlockKey>{Key(0)}).ok());
}

}  // namespace
}  // namespace kvtier
