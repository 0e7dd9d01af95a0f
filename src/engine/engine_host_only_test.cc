// Goal: show that the engine core (kvtier_engine_core) serves a host-only user on its own: an
// engine opened without a tier factory stores, looks up and loads blocks through host memory,
// byte for byte, and refuses options that ask for an SSD or a remote tier with one clear error
// (NotSupported naming the option and the library to link) instead of crashing. Its companion,
// host_only_deps_test.sh, checks that this executable links neither liburing nor hiredis.
// Method: this executable links only kvtier_engine_core and what it needs (no kvtier_tier_ssd,
// kvtier_tier_remote, kvtier_env or kvtier_testing); a tiny layout (2 layers, 1 KiB blocks) and a
// host tier of a few slots; block bytes derived from (chunk, layer) so every loaded byte is
// checked.
#include <gtest/gtest.h>

#include <cstring>
#include <string_view>
#include <vector>

#include "engine/engine.h"
#include "tiers/redis/redis_options.h"
#include "tiers/ssd/ssd_options.h"

namespace kvtier {
namespace {

constexpr uint32_t kLayers = 2;
constexpr uint32_t kBlockTokens = 16;
constexpr uint32_t kChunks = 3;

KvLayout HostLayout() {
  return {.layers = kLayers,
          .kv_heads = 1,
          .head_dim = 16,
          .dtype = DType::kF16,
          .block_tokens = kBlockTokens};
}

EngineOptions HostOnlyOptions() {
  EngineOptions o;
  o.layout = HostLayout();
  o.model.name = "host-only";
  o.host.capacity_bytes = 16 * HostLayout().BlockBytes();
  o.host.huge_pages = HugePages::kOff;
  o.host.lock = MemoryLock::kOff;
  o.host.prefault = false;
  o.device_backend = DeviceBackend::kCpu;
  return o;
}

// Distinct bytes per (chunk, layer), kept finite as FP16 (high byte below 0x7c).
std::vector<std::byte> BlockBytes(uint32_t chunk, uint32_t layer) {
  std::vector<std::byte> b(HostLayout().BlockBytes());
  for (size_t i = 0; i < b.size(); ++i) {
    b[i] = static_cast<std::byte>(i % 2 == 0 ? (i / 2 + 31 * chunk + 7 * layer) & 0xff
                                             : (chunk + layer) % 0x3c);
  }
  return b;
}

TEST(EngineHostOnlyTest, StoresLooksUpAndLoadsThroughHostMemory) {
  Result<std::unique_ptr<Engine>> opened = Engine::Open(HostOnlyOptions(), nullptr);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Engine& e = **opened;
  Result<Namespace> ns = e.MakeNamespace("tenant");
  ASSERT_TRUE(ns.ok()) << ns.status().ToString();
  std::vector<uint32_t> tokens(kChunks * kBlockTokens);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(1000 + i);

  std::vector<std::vector<std::byte>> blocks;
  std::vector<std::span<const std::byte>> src;
  for (uint32_t c = 0; c < kChunks; ++c) {
    for (uint32_t l = 0; l < kLayers; ++l) blocks.push_back(BlockBytes(c, l));
  }
  for (const auto& b : blocks) src.emplace_back(b);
  Result<std::unique_ptr<StoreHandle>> stored = e.Store(*ns, tokens, src);
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  ASSERT_TRUE((*stored)->Wait().ok());
  EXPECT_EQ((*stored)->chunks_stored(), kChunks);

  Result<LookupResult> found = e.Lookup(*ns, tokens);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(found->matched_tokens, tokens.size());
  ASSERT_EQ(found->chunk_tiers.size(), kChunks);
  for (TierKind k : found->chunk_tiers) EXPECT_EQ(k, TierKind::kHost);

  std::vector<std::vector<std::byte>> out(blocks.size(),
                                          std::vector<std::byte>(HostLayout().BlockBytes()));
  std::vector<std::span<std::byte>> dst;
  for (auto& b : out) dst.emplace_back(b);
  Result<std::unique_ptr<LoadHandle>> loaded = e.Load(*ns, tokens, dst);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  ASSERT_TRUE((*loaded)->Wait().ok());
  for (size_t i = 0; i < blocks.size(); ++i) {
    EXPECT_EQ(std::memcmp(out[i].data(), blocks[i].data(), blocks[i].size()), 0) << "block " << i;
  }
  loaded->reset();
  stored->reset();

  // Another tenant's tokens are misses; Flush has nothing below memory to write.
  Result<Namespace> other = e.MakeNamespace("other");
  ASSERT_TRUE(other.ok());
  Result<LookupResult> miss = e.Lookup(*other, tokens);
  ASSERT_TRUE(miss.ok());
  EXPECT_EQ(miss->matched_tokens, 0u);
  EXPECT_TRUE(e.Flush().ok());
  const EngineStats stats = e.Stats();
  for (const TierStats& t : stats.tiers) {
    EXPECT_NE(t.kind, TierKind::kSsd);
    EXPECT_NE(t.kind, TierKind::kRemote);
  }
}

// Open without a factory refuses `o` with NotSupported saying what is missing and what to link.
void ExpectRefused(const EngineOptions& o, std::string_view missing, std::string_view library) {
  Result<std::unique_ptr<Engine>> e = Engine::Open(o, nullptr);
  ASSERT_FALSE(e.ok());
  EXPECT_TRUE(e.status().IsNotSupported()) << e.status().ToString();
  EXPECT_NE(e.status().message().find(missing), std::string::npos) << e.status().ToString();
  EXPECT_NE(e.status().message().find(library), std::string::npos) << e.status().ToString();
}

TEST(EngineHostOnlyTest, AnSsdTierIsRefusedNamingTheLibrary) {
  EngineOptions o = HostOnlyOptions();
  o.tiers.Emplace(kSsdTierName, SsdTierOptions{.dirs = {"ssd"}});
  ExpectRefused(o, "has no ssd tier", "kvtier_engine");
}

TEST(EngineHostOnlyTest, ARemoteTierIsRefusedNamingTheLibrary) {
  EngineOptions o = HostOnlyOptions();
  o.remote =
      RemoteTierOptions{.stores = TierOptionsSet::Of(
                            kRedisStoreName, RedisStoreOptions{.endpoints = {"127.0.0.1:1"}})};
  ExpectRefused(o, "has no remote tier", "kvtier_tier_remote");
}

// Options the core checks itself are still refused first, naming the field.
TEST(EngineHostOnlyTest, CoreOptionsAreStillValidated) {
  EngineOptions o = HostOnlyOptions();
  o.host.capacity_bytes = 0;
  Result<std::unique_ptr<Engine>> e = Engine::Open(o, nullptr);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("host.capacity_bytes"), std::string::npos)
      << e.status().ToString();
}

}  // namespace
}  // namespace kvtier
