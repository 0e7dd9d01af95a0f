// Goal: the registry of tiers below memory (tier_registry.h) finds every provider by its name
// and nothing else, each provider refuses options of another type by name and calls of the other
// kind, and the tiers it opens keep records: what the engine's factory relies on to open tiers
// without including their code.
// Method: the registry's list and lookups; Validate and Open with options of the wrong type and
// kind; the SSD tier (a temporary directory, the Linux Env) and the fs store (a temporary
// directory, behind the remote tier's adapter) opened through their providers, a record written
// and read back byte for byte, and the SSD tier opened again to show it persisted. The options
// the engine holds by name (TierOptionsSet) keep one entry per name, of the type it was given,
// and each store's keyring is reached through its provider.
#include "tiers/tier_registry.h"

#include <gtest/gtest.h>

#include <any>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/aligned_buffer.h"
#include "env/env.h"
#include "testing/test_util.h"
#include "tiers/fs/fs_options.h"
#include "tiers/redis/redis_options.h"
#include "tiers/remote_store.h"
#include "tiers/remote_tier_adapter.h"
#include "tiers/ssd/ssd_options.h"
#include "tiers/ssd/ssd_test_util.h"

namespace kvtier {
namespace {

using ssd_test::Key;
using ssd_test::Layout;
using ssd_test::Payload;

constexpr size_t kPayload = 12 * 1024;

TEST(TierRegistryTest, FindsEveryProviderByItsNameAndNothingElse) {
  std::set<std::string> names;
  for (const TierProvider* p : TierProviders()) {
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(names.insert(std::string(p->name())).second) << p->name();
    EXPECT_EQ(FindTierProvider(p->name()), p);
  }
  EXPECT_EQ(names, (std::set<std::string>{"ssd", "redis", "fs"}));
  EXPECT_EQ(FindTierProvider("ssd")->kind(), TierProviderKind::kTier);
  EXPECT_EQ(FindTierProvider("redis")->kind(), TierProviderKind::kRemoteStore);
  EXPECT_EQ(FindTierProvider("fs")->kind(), TierProviderKind::kRemoteStore);
  EXPECT_EQ(FindTierProvider("nvme"), nullptr);
  EXPECT_EQ(FindTierProvider(""), nullptr);
  EXPECT_EQ(FindTierProvider("SSD"), nullptr);
}

TEST(TierRegistryTest, OptionsOfAnotherTierAndCallsOfTheOtherKindAreRefusedByName) {
  const TierProvider& ssd = *FindTierProvider("ssd");
  const TierProvider& redis = *FindTierProvider("redis");
  const TierProvider& fs = *FindTierProvider("fs");
  const std::any fs_options = FsStoreOptions{.dir = "/nonexistent", .insecure_plaintext = true};
  Status s = ssd.Validate(fs_options);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("ssd: options of another tier's type"), std::string::npos) << s.ToString();
  s = redis.Validate(std::any(SsdTierOptions{}));
  EXPECT_NE(s.message().find("redis:"), std::string::npos) << s.ToString();
  s = fs.Validate(std::any());
  EXPECT_NE(s.message().find("fs:"), std::string::npos) << s.ToString();
  EXPECT_TRUE(redis.Validate(std::any(RedisStoreOptions{})).ok());
  // The SSD tier's own checks run: no directory.
  s = ssd.Validate(std::any(SsdTierOptions{}));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();

  const TierOpenContext context{.clock = SystemClock(), .layout_digest = Layout()};
  EXPECT_EQ(ssd.OpenStore(std::any(SsdTierOptions{}), context, 1).status().code(),
            StatusCode::kNotSupported);
  EXPECT_EQ(fs.OpenTier(fs_options, context).status().code(), StatusCode::kNotSupported);
  // An SSD tier needs an Env: refused, not a crash.
  EXPECT_EQ(ssd.OpenTier(std::any(SsdTierOptions{.dirs = {"/nonexistent"}}), context)
                .status()
                .code(),
            StatusCode::kInvalidArgument);
}

// Reads block i from `tier`: present, with the payload written by RoundTrip.
void ExpectRecord(Tier& tier, uint64_t i) {
  Result<AlignedBuffer> buf = AlignedBuffer::Allocate(tier.ReadBufferBytes(kPayload));
  ASSERT_TRUE(buf.ok());
  TierRead r{.key = Key(i), .buffer = buf->span()};
  ASSERT_TRUE(tier.ReadBatchSync(std::span(&r, 1)).ok());
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(r.codec_id, 3);
  EXPECT_EQ(r.raw_bytes, kPayload * 2);
  const std::vector<std::byte> payload = Payload(i, kPayload);
  ASSERT_EQ(r.payload.size(), payload.size());
  EXPECT_EQ(std::memcmp(r.payload.data(), payload.data(), payload.size()), 0);
}

// Writes one record to `tier` and reads it back; the payload must come back byte for byte.
void RoundTrip(Tier& tier, uint64_t i) {
  const std::vector<std::byte> payload = Payload(i, kPayload);
  TierWrite w{.key = Key(i), .codec_id = 3, .raw_bytes = kPayload * 2, .payload = payload};
  ASSERT_TRUE(tier.WriteBatchSync(std::span(&w, 1)).ok());
  ASSERT_TRUE(w.status.ok()) << w.status.ToString();
  ExpectRecord(tier, i);
}

TEST(TierRegistryTest, OptionsHeldByNameKeepOneEntryPerNameOfItsType) {
  TierOptionsSet set;
  EXPECT_TRUE(set.empty());
  set.Emplace(kSsdTierName, SsdTierOptions{.dirs = {"a"}});
  set.Emplace(kFsStoreName, FsStoreOptions{.dir = "d"});
  set.Emplace(kSsdTierName, SsdTierOptions{.dirs = {"b"}});  // Replaces: one entry per name.
  ASSERT_EQ(set.size(), 2u);
  EXPECT_EQ(set.entries()[0].name, kSsdTierName);  // In the order first set.
  EXPECT_NE(FindSsdOptions(set), nullptr);
  EXPECT_EQ(set.Get<SsdTierOptions>(kSsdTierName).dirs, std::vector<std::string>{"b"});
  EXPECT_EQ(set.Find<FsStoreOptions>(kSsdTierName), nullptr);  // Another type: none.
  EXPECT_EQ(set.Find<SsdTierOptions>("nvme"), nullptr);
  EXPECT_THROW(set.Get<FsStoreOptions>(kSsdTierName), std::bad_any_cast);
  EXPECT_TRUE(set.Erase(kFsStoreName));
  EXPECT_FALSE(set.Erase(kFsStoreName));
  EXPECT_FALSE(set.Has(kFsStoreName));

  // The keyring of the one store a remote tier holds, through its provider.
  TierOptionsSet stores = TierOptionsSet::Of(kFsStoreName, FsStoreOptions{.dir = "d"});
  std::optional<RemoteKeyring>* keyring = RemoteStoreKeyring(stores);
  ASSERT_NE(keyring, nullptr);
  EXPECT_EQ(keyring, &stores.Get<FsStoreOptions>(kFsStoreName).keyring);
  stores.Emplace(kRedisStoreName, RedisStoreOptions{});
  EXPECT_EQ(RemoteStoreKeyring(stores), nullptr);  // Two stores: none is the remote tier's.
  TierOptionsSet unknown = TierOptionsSet::Of("nvme", SsdTierOptions{});
  EXPECT_EQ(RemoteStoreKeyring(unknown), nullptr);
  TierOptionsSet ssd = TierOptionsSet::Of(kSsdTierName, SsdTierOptions{});
  EXPECT_EQ(RemoteStoreKeyring(ssd), nullptr);  // A tier of its own is no store.
}

TEST(TierRegistryTest, TheSsdTierOpenedByNameKeepsItsRecordsAcrossAReopen) {
  Result<ScopedTempDir> dir = ScopedTempDir::Create();
  ASSERT_TRUE(dir.ok());
  const std::unique_ptr<Env> env = NewPosixEnv();
  const TierProvider& ssd = *FindTierProvider("ssd");
  const std::any options = SsdTierOptions{.dirs = {dir->Join("ssd")},
                                          .capacity_bytes = 16 * kMiB,
                                          .segment_bytes = kMiB};
  ASSERT_TRUE(ssd.Validate(options).ok());
  const TierOpenContext context{
      .env = env.get(), .clock = env->clock(), .layout_digest = Layout()};
  {
    Result<std::unique_ptr<Tier>> tier = ssd.OpenTier(options, context);
    ASSERT_TRUE(tier.ok()) << tier.status().ToString();
    EXPECT_EQ((*tier)->name(), "ssd");
    EXPECT_TRUE((*tier)->capabilities().persistent);
    RoundTrip(**tier, 7);
    ASSERT_TRUE((*tier)->Close().ok());
  }
  Result<std::unique_ptr<Tier>> again = ssd.OpenTier(options, context);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ExpectRecord(**again, 7);
}

TEST(TierRegistryTest, TheFsStoreOpenedByNameServesTheRemoteTier) {
  Result<ScopedTempDir> dir = ScopedTempDir::Create();
  ASSERT_TRUE(dir.ok());
  const TierProvider& fs = *FindTierProvider("fs");
  const std::any options = FsStoreOptions{.dir = dir->Join("shared"), .insecure_plaintext = true};
  ASSERT_TRUE(fs.Validate(options).ok());
  Result<std::unique_ptr<RemoteStore>> store =
      fs.OpenStore(options, {.clock = SystemClock(), .layout_digest = Layout()}, 4);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  RemoteTierAdapter tier(std::move(store).value(), RemoteTierPolicy{});
  RoundTrip(tier, 11);
  ASSERT_TRUE(tier.Close().ok());
}

}  // namespace
}  // namespace kvtier
