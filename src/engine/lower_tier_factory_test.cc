// Goal: show that Engine::Open (the standard factory, lower_tier_factory.cc) opens the tiers below
// memory by the names EngineOptions holds them under, and refuses a name it cannot open with an
// error that names it: a name no provider registered, a store of the remote tier given as a tier
// of its own, a tier of its own given as the remote tier's store, two stores at once, and options
// of another tier's type under a registered name; and that the tier's registered name is what its
// stats call it.
// Method: Engine::Open on host-only options plus one such entry; the SSD tier opened by its
// registered name in a temporary directory keeps its blocks byte for byte across a reopen.
#include <gtest/gtest.h>

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"
#include "testing/test_util.h"
#include "tiers/fs/fs_options.h"
#include "tiers/redis/redis_options.h"
#include "tiers/ssd/ssd_options.h"

namespace kvtier {
namespace {

KvLayout Layout() {
  return {.layers = 2, .kv_heads = 1, .head_dim = 16, .dtype = DType::kF16, .block_tokens = 16};
}

EngineOptions HostOptions() {
  EngineOptions o;
  o.layout = Layout();
  o.model.name = "factory";
  o.host.capacity_bytes = 16 * Layout().BlockBytes();
  o.host.huge_pages = HugePages::kOff;
  return o;
}

// Open refuses `o` with InvalidArgument whose message holds every one of `words`.
void ExpectRefused(const EngineOptions& o, std::vector<std::string_view> words) {
  Result<std::unique_ptr<Engine>> e = Engine::Open(o);
  ASSERT_FALSE(e.ok());
  EXPECT_TRUE(e.status().IsInvalidArgument()) << e.status().ToString();
  for (std::string_view w : words) {
    EXPECT_NE(e.status().message().find(w), std::string::npos) << e.status().ToString();
  }
}

TEST(LowerTierFactoryTest, ANameNoProviderRegisteredIsRefusedByName) {
  EngineOptions o = HostOptions();
  o.tiers.Emplace("nvme", SsdTierOptions{.dirs = {"x"}});
  ExpectRefused(o, {"tiers", "'nvme'", "registered"});
}

TEST(LowerTierFactoryTest, AStoreGivenAsATierOfItsOwnIsRefused) {
  EngineOptions o = HostOptions();
  o.tiers.Emplace(kFsStoreName, FsStoreOptions{.dir = "x"});
  ExpectRefused(o, {"'fs'", "a store of the remote tier"});
}

TEST(LowerTierFactoryTest, ATierOfItsOwnGivenAsTheRemoteStoreIsRefused) {
  EngineOptions o = HostOptions();
  o.remote.emplace().stores.Emplace(kSsdTierName, SsdTierOptions{.dirs = {"x"}});
  ExpectRefused(o, {"remote.stores", "'ssd'", "a tier of its own"});
}

TEST(LowerTierFactoryTest, TwoStoresAtOnceAreRefused) {
  EngineOptions o = HostOptions();
  RemoteTierOptions& r = o.remote.emplace();
  r.stores.Emplace(kRedisStoreName, RedisStoreOptions{.endpoints = {"127.0.0.1:1"}});
  r.stores.Emplace(kFsStoreName, FsStoreOptions{.dir = "x", .insecure_plaintext = true});
  ExpectRefused(o, {"exactly one store"});
}

TEST(LowerTierFactoryTest, OptionsOfAnotherTiersTypeAreRefusedNamingTheTier) {
  Result<ScopedTempDir> dir = ScopedTempDir::Create();
  ASSERT_TRUE(dir.ok());
  EngineOptions o = HostOptions();
  o.tiers.Emplace(kSsdTierName, FsStoreOptions{.dir = dir->Join("ssd")});
  ExpectRefused(o, {"ssd", "another tier's type"});
}

// Distinct bytes per (chunk, layer), finite as FP16.
std::vector<std::byte> BlockBytes(uint32_t chunk, uint32_t layer) {
  std::vector<std::byte> b(Layout().BlockBytes());
  for (size_t i = 0; i < b.size(); ++i) {
    b[i] = static_cast<std::byte>(i % 2 == 0 ? (i / 2 + 31 * chunk + 7 * layer) & 0xff
                                             : (chunk + layer) % 0x3c);
  }
  return b;
}

TEST(LowerTierFactoryTest, TheSsdTierOpenedByItsNameKeepsBlocksAcrossAReopen) {
  Result<ScopedTempDir> dir = ScopedTempDir::Create();
  ASSERT_TRUE(dir.ok());
  EngineOptions o = HostOptions();
  o.write_policy = WritePolicy::kWriteThrough;
  o.tiers.Emplace(kSsdTierName, SsdTierOptions{.dirs = {dir->Join("ssd")},
                                               .capacity_bytes = 64ull << 20,
                                               .segment_bytes = 1 << 20});
  constexpr uint32_t kChunks = 2;
  std::vector<uint32_t> tokens(kChunks * Layout().block_tokens);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(500 + i);
  std::vector<std::vector<std::byte>> blocks;
  for (uint32_t c = 0; c < kChunks; ++c) {
    for (uint32_t l = 0; l < Layout().layers; ++l) blocks.push_back(BlockBytes(c, l));
  }
  {
    Result<std::unique_ptr<Engine>> e = Engine::Open(o);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    Result<Namespace> ns = (*e)->MakeNamespace("t");
    ASSERT_TRUE(ns.ok());
    std::vector<std::span<const std::byte>> src(blocks.begin(), blocks.end());
    Result<std::unique_ptr<StoreHandle>> stored = (*e)->Store(*ns, tokens, src);
    ASSERT_TRUE(stored.ok()) << stored.status().ToString();
    ASSERT_TRUE((*stored)->Wait().ok());
  }
  Result<std::unique_ptr<Engine>> e = Engine::Open(o);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  Result<Namespace> ns = (*e)->MakeNamespace("t");
  ASSERT_TRUE(ns.ok());
  Result<LookupResult> found = (*e)->Lookup(*ns, tokens);
  ASSERT_TRUE(found.ok());
  ASSERT_EQ(found->matched_tokens, tokens.size());
  for (TierKind k : found->chunk_tiers) EXPECT_EQ(k, TierKind::kSsd);
  std::vector<std::vector<std::byte>> out(blocks.size(),
                                          std::vector<std::byte>(Layout().BlockBytes()));
  std::vector<std::span<std::byte>> dst(out.begin(), out.end());
  Result<std::unique_ptr<LoadHandle>> loaded = (*e)->Load(*ns, tokens, dst);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  ASSERT_TRUE((*loaded)->Wait().ok());
  EXPECT_EQ(out, blocks);
  // Each tier's name leaves the engine in its stats: the memory tier's kind, the registered name
  // below memory.
  const EngineStats stats = (*e)->Stats();
  ASSERT_EQ(stats.tiers.size(), 2u);
  EXPECT_EQ(stats.tiers[0].name, "host");
  EXPECT_EQ(stats.tiers[1].kind, TierKind::kSsd);
  EXPECT_EQ(stats.tiers[1].name, kSsdTierName);
}

}  // namespace
}  // namespace kvtier
