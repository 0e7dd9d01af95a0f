// Goal: show that two engines ("nodes") sharing one Redis (or one Redis Cluster) share a prefix
// cache through the remote tier: node A stores a prefix (write-through, or write-back on
// eviction), node B, empty, finds it with Lookup and loads it byte-identical; tenants with other
// salts never see it; a value damaged in Redis fails authentication, its layer fails closed on B and it is counted;
// a killed Redis costs nothing but misses (A keeps serving and storing locally, B's lookups of
// remote-only chunks are misses within a bounded time, the breaker state shows in Stats) and a
// restarted Redis is used again; multi-MiB blocks work; RemoteTierOptions are validated.
// Method: real redis-server processes on loopback ports (tiers/redis/redis_test_util.h), a tiny layout
// (3 layers, 2 KiB blocks) whose bytes are derived from (chunk hash, layer) so any expected block
// can be recomputed, node A with an SSD in a temp dir and node B without one, short store
// timeouts, and a ManualClock driving the breakers' cool-down. Skipped when redis-server is not
// installed. Also: a Redis that trickles its replies makes a lookup a miss within the command
// deadline (a fake server: runs without redis-server).
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "core/assert.h"
#include "engine/engine.h"
#include "engine/engine_remote_test_util.h"
#include "testing/test_util.h"
#include "tiers/redis/redis_options.h"
#include "tiers/redis/redis_test_util.h"
#include "tiers/ssd/ssd_options.h"

namespace kvtier {
namespace {

using remote_test::kBlockTokens;
using remote_test::kLayers;
using remote_test::LoadAndCheck;
using remote_test::Matched;
using remote_test::Ns;
using remote_test::SmallLayout;
using remote_test::StoreChunks;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

// The deployment key every node of these tests shares: values are sealed, as in production.
RemoteKeyring TestKeyring() {
  Result<RemoteKeyring> ring = RemoteKeyring::Parse("1 " + std::string(64, '7'));
  KV_CHECK_OK(ring.status());
  return std::move(ring).value();
}

std::vector<uint32_t> Tokens(uint32_t seed, size_t n) { return TestTokens(seed, n); }

int64_t MillisSince(steady_clock::time_point start) {
  return std::chrono::duration_cast<milliseconds>(steady_clock::now() - start).count();
}

class EngineRemoteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!RedisServerInstalled()) GTEST_SKIP() << "redis-server is not installed; skipping";
    Result<ScopedTempDir> d = ScopedTempDir::Create();
    ASSERT_TRUE(d.ok());
    dir_ = std::make_unique<ScopedTempDir>(std::move(d).value());
  }

  void StartServer() {
    Result<std::unique_ptr<RedisServer>> server = RedisServer::Start();
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
  }

  // A node: host memory for `host_blocks` blocks, an SSD when `ssd_name` is not empty, and the
  // remote tier on `endpoints`.
  EngineOptions NodeOptions(std::vector<std::string> endpoints, uint32_t host_blocks,
                            const std::string& ssd_name, KvLayout layout = SmallLayout()) {
    EngineOptions o = remote_test::LocalNodeOptions(
        host_blocks, ssd_name.empty() ? "" : dir_->Join(ssd_name), layout);
    RedisStoreOptions r{.endpoints = std::move(endpoints),
                        .connect_timeout_ms = 200,
                        .command_timeout_ms = 500,
                        .breaker = {.failures_to_open = 3, .open_cooldown_us = 1'000'000},
                        .keyring = TestKeyring(),
                        .clock = &breaker_clock_};
    o.remote = RemoteTierOptions{.stores = TierOptionsSet::Of(kRedisStoreName, std::move(r))};
    o.logger = &logger_;
    return o;
  }

  static std::unique_ptr<Engine> Open(const EngineOptions& o) { return remote_test::OpenEngine(o); }

  ManualClock breaker_clock_;
  CapturingLogger logger_;
  std::unique_ptr<ScopedTempDir> dir_;
  std::unique_ptr<RedisServer> server_;
};

TEST_F(EngineRemoteTest, NodeBFindsAndLoadsWhatNodeAStored) {
  StartServer();
  std::unique_ptr<Engine> a = Open(NodeOptions({server_->endpoint()}, 64, "ssd-a"));
  std::unique_ptr<Engine> b = Open(NodeOptions({server_->endpoint()}, 64, ""));
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  remote_test::ExpectNodeBFindsWhatNodeAStored(*a, *b, 1);
}

TEST_F(EngineRemoteTest, TenantSaltsStayIsolatedAcrossNodes) {
  StartServer();
  std::unique_ptr<Engine> a = Open(NodeOptions({server_->endpoint()}, 64, ""));
  std::unique_ptr<Engine> b = Open(NodeOptions({server_->endpoint()}, 64, ""));
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const std::vector<uint32_t> tokens = Tokens(2, 2 * kBlockTokens);
  ASSERT_TRUE(StoreChunks(*a, Ns(*a, "alice"), tokens, 2).ok());
  EXPECT_EQ(Matched(*b, Ns(*b, "bob"), tokens), 0u);
  EXPECT_EQ(Matched(*b, Ns(*b, ""), tokens), 0u);
  EXPECT_EQ(Matched(*b, Ns(*b, "alice"), tokens), 2u * kBlockTokens);
  // A Load under the wrong salt finds nothing either: every layer fails closed.
  for (const Status& s : LoadAndCheck(*b, Ns(*b, "bob"), tokens, 2)) EXPECT_TRUE(s.IsNotFound());
}

TEST_F(EngineRemoteTest, CorruptRemoteValueFailsItsLayerClosed) {
  StartServer();
  std::unique_ptr<Engine> a = Open(NodeOptions({server_->endpoint()}, 64, ""));
  std::unique_ptr<Engine> b = Open(NodeOptions({server_->endpoint()}, 64, ""));
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const Namespace ns = Ns(*a, "t");
  const std::vector<uint32_t> tokens = Tokens(3, 2 * kBlockTokens);
  ASSERT_TRUE(StoreChunks(*a, ns, tokens, 2).ok());
  Result<std::vector<Hash256>> hashes = ChunkHashes(ns.digest, tokens, kBlockTokens);
  ASSERT_TRUE(hashes.ok());
  // Flip one payload byte of (chunk 1, layer 1) in Redis. The byte is read first and written
  // back changed: a fixed replacement would leave a sealed value (random nonce, so random
  // ciphertext bytes) intact once in 256 runs.
  const std::string key =
      SealedKeyName("kvt", TestKeyring(), BlockKey{.chunk_hash = (*hashes)[1], .layer = 1});
  Result<std::string> old_byte = RedisRawCommand(server_->port(), {"GETRANGE", key, "300", "300"});
  ASSERT_TRUE(old_byte.ok()) << old_byte.status().ToString();
  ASSERT_EQ(old_byte->size(), 1u) << "the stored value is shorter than 301 bytes";
  const std::string flipped(1, static_cast<char>((*old_byte)[0] ^ 0x01));
  ASSERT_TRUE(RedisRawCommand(server_->port(), {"SETRANGE", key, "300", flipped}).ok());

  remote_test::ExpectOnlyTheDamagedLayerFailsClosed(*b, ns, tokens);
  const EngineStats stats = b->Stats();
  ASSERT_TRUE(stats.remote.has_value());
  EXPECT_EQ(stats.remote->auth_failures, 1u);  // Sealed: a flipped byte fails authentication.
  ASSERT_FALSE(stats.tiers.empty());
  EXPECT_EQ(stats.tiers.back().kind, TierKind::kRemote);
  EXPECT_EQ(stats.tiers.back().name, "redis");  // The store's registered name.
}

TEST_F(EngineRemoteTest, RedisDownCostsOnlyMissesAndRestartRecovers) {
  StartServer();
  std::unique_ptr<Engine> a = Open(NodeOptions({server_->endpoint()}, 64, "ssd-a"));
  std::unique_ptr<Engine> b = Open(NodeOptions({server_->endpoint()}, 64, ""));
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const Namespace ns = Ns(*a, "t");
  const std::vector<uint32_t> stored = Tokens(4, 2 * kBlockTokens);
  ASSERT_TRUE(StoreChunks(*a, ns, stored, 2).ok());
  server_->Kill();

  // A keeps serving its own blocks and storing new ones (locally; the put failures are counted).
  EXPECT_EQ(Matched(*a, ns, stored), 2u * kBlockTokens);
  for (const Status& s : LoadAndCheck(*a, ns, stored, 2)) EXPECT_TRUE(s.ok()) << s.ToString();
  const std::vector<uint32_t> fresh = Tokens(5, 2 * kBlockTokens);
  EXPECT_TRUE(StoreChunks(*a, ns, fresh, 2).ok());
  EXPECT_EQ(Matched(*a, ns, fresh), 2u * kBlockTokens);
  EXPECT_GT(a->Stats().remote_put_errors, 0u);
  EXPECT_GE(logger_.CountContaining("engine: remote write failed"), 1u);

  // B's lookups of remote-only chunks are misses, quickly; the breaker opens.
  for (int i = 0; i < 5; ++i) {
    const auto start = steady_clock::now();
    EXPECT_EQ(Matched(*b, ns, stored), 0u);
    EXPECT_LT(MillisSince(start), 600);
  }
  for (const Status& s : LoadAndCheck(*b, ns, stored, 2)) EXPECT_TRUE(s.IsNotFound());
  EngineStats stats = b->Stats();
  ASSERT_TRUE(stats.remote.has_value());
  EXPECT_EQ(stats.remote->breaker_state, BreakerState::kOpen);
  EXPECT_GT(stats.remote_lookup_errors, 0u);

  // Restart (empty: no persistence) and let the breakers probe again.
  ASSERT_TRUE(server_->Restart().ok());
  breaker_clock_.Advance(2'000'000);
  const std::vector<uint32_t> after = Tokens(6, 2 * kBlockTokens);
  ASSERT_TRUE(StoreChunks(*a, ns, after, 2).ok());
  EXPECT_EQ(Matched(*b, ns, after), 2u * kBlockTokens);
  for (const Status& s : LoadAndCheck(*b, ns, after, 2)) EXPECT_TRUE(s.ok()) << s.ToString();
  stats = b->Stats();
  EXPECT_EQ(stats.remote->breaker_state, BreakerState::kClosed);
  EXPECT_GE(logger_.CountContaining("engine: remote tier answers again"), 1u);
}

TEST_F(EngineRemoteTest, WriteBackPutsBlocksWhenEvictedAndOnFlush) {
  StartServer();
  EngineOptions oa = NodeOptions({server_->endpoint()}, kLayers, "");  // One chunk of memory.
  oa.remote->write_policy = WritePolicy::kWriteBack;
  std::unique_ptr<Engine> a = Open(oa);
  std::unique_ptr<Engine> b = Open(NodeOptions({server_->endpoint()}, 64, ""));
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  remote_test::ExpectWriteBackOnEvictionAndFlush(*a, *b, 7);
}

TEST_F(EngineRemoteTest, MultiMiBBlocksRoundTrip) {
  StartServer();
  // 2 x 1024 tokens x 8 heads x 128 dims x 2 bytes = 4 MiB per block.
  const KvLayout big{
      .layers = 2, .kv_heads = 8, .head_dim = 128, .dtype = DType::kF16, .block_tokens = 1024};
  ASSERT_EQ(big.BlockBytes(), 4 * kMiB);
  std::unique_ptr<Engine> a = Open(NodeOptions({server_->endpoint()}, 2, "", big));
  std::unique_ptr<Engine> b = Open(NodeOptions({server_->endpoint()}, 2, "", big));
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const Namespace ns = Ns(*a, "t");
  const std::vector<uint32_t> tokens = Tokens(9, 1024);
  ASSERT_TRUE(StoreChunks(*a, ns, tokens, 1).ok());
  EXPECT_EQ(Matched(*b, ns, tokens), 1024u);
  for (const Status& s : LoadAndCheck(*b, ns, tokens, 1)) EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST_F(EngineRemoteTest, TwoNodesShareARedisCluster) {
  Result<std::unique_ptr<RedisCluster>> cluster = RedisCluster::Start(3);
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  std::vector<std::string> seeds;
  for (size_t i = 0; i < (*cluster)->size(); ++i) seeds.push_back((*cluster)->node(i).endpoint());
  EngineOptions oa = NodeOptions(seeds, 64, "ssd-a");
  EngineOptions ob = NodeOptions({seeds[1]}, 64, "");  // One seed is enough to learn the map.
  oa.remote->stores.Get<RedisStoreOptions>(kRedisStoreName).mode = RedisMode::kCluster;
  ob.remote->stores.Get<RedisStoreOptions>(kRedisStoreName).mode = RedisMode::kCluster;
  std::unique_ptr<Engine> a = Open(oa);
  std::unique_ptr<Engine> b = Open(ob);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const Namespace ns = Ns(*a, "t");
  const std::vector<uint32_t> tokens = Tokens(10, 12 * kBlockTokens);
  ASSERT_TRUE(StoreChunks(*a, ns, tokens, 12).ok());
  EXPECT_EQ(a->Stats().remote_put_errors, 0u);
  EXPECT_EQ(Matched(*b, ns, tokens), 12u * kBlockTokens);
  for (const Status& s : LoadAndCheck(*b, ns, tokens, 12)) EXPECT_TRUE(s.ok()) << s.ToString();
  // The chunks spread over the masters: more than one node holds keys.
  size_t nodes_with_keys = 0;
  for (size_t i = 0; i < (*cluster)->size(); ++i) {
    Result<std::string> n = RedisRawCommand((*cluster)->node(i).port(), {"DBSIZE"});
    if (n.ok() && *n != "0") ++nodes_with_keys;
  }
  EXPECT_GE(nodes_with_keys, 2u);
}

TEST(EngineRemoteOptionsTest, ExactlyOneStoreSourceAndKnownPolicies) {
  RemoteTierOptions o;
  EXPECT_TRUE(o.Validate().IsInvalidArgument()) << "neither redis nor store";
  o.stores.Emplace(kRedisStoreName,
                   RedisStoreOptions{.endpoints = {"127.0.0.1:1"}, .insecure_plaintext = true});
  EXPECT_TRUE(o.Validate().ok());
  o.write_policy = static_cast<WritePolicy>(9);
  EXPECT_TRUE(o.Validate().IsInvalidArgument());
  o.write_policy = WritePolicy::kWriteBack;
  o.admission = SsdAdmission::kAfterRequests;
  o.admission_slots = 0;
  EXPECT_TRUE(o.Validate().IsInvalidArgument());
  EngineOptions e;
  e.layout = SmallLayout();
  e.host.capacity_bytes = 64 * SmallLayout().BlockBytes();
  e.remote = o;
  const Status s = e.Validate();
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(s.message().find("remote: admission_slots"), std::string::npos) << s.ToString();
}

// A Redis that trickles its EXISTS replies (a byte every 100 ms, as a hostile or broken server
// could) costs a lookup its command deadline, not a stall: the lookup is a miss, the node's
// breaker opens after failures_to_open such lookups and the next lookup is a miss without the
// network. A fake server (tiers/redis/redis_test_util.h): no redis-server needed.
TEST(EngineRemoteHostileTest, TrickledRemoteLookupIsAMissWithinTheDeadline) {
  using Answer = FakeRedisServer::Answer;
  FakeRedisServer server("127.0.0.1", [](const std::vector<std::string>& args) -> Answer {
    if (args[0] == "PING") return {"+PONG\r\n"};
    if (args[0] == "EXISTS") return {"$1000000\r\n", FakeRedisServer::Tail::kTrickle};
    return {"+OK\r\n"};
  });
  ManualClock clock;  // Never advanced: an open breaker stays open.
  EngineOptions o = remote_test::LocalNodeOptions(64, "");
  o.remote = RemoteTierOptions{
      .stores = TierOptionsSet::Of(
          kRedisStoreName,
          RedisStoreOptions{.endpoints = {server.endpoint()},
                            .connect_timeout_ms = 300,
                            .command_timeout_ms = 300,
                            .breaker = {.failures_to_open = 2, .open_cooldown_us = 60'000'000},
                            .keyring = TestKeyring(),
                            .clock = &clock})};
  std::unique_ptr<Engine> e = remote_test::OpenEngine(o);
  ASSERT_NE(e, nullptr);
  const Namespace ns = Ns(*e, "t");
  for (uint32_t i = 0; i < 3; ++i) {
    const auto start = steady_clock::now();
    EXPECT_EQ(Matched(*e, ns, Tokens(40 + i, 2 * kBlockTokens)), 0u);
    EXPECT_LT(MillisSince(start), 5000) << "lookup " << i << " waited for the trickled reply";
  }
  const EngineStats stats = e->Stats();
  ASSERT_TRUE(stats.remote.has_value());
  EXPECT_GE(stats.remote->timeouts, 1u);
  EXPECT_EQ(stats.remote->breaker_state, BreakerState::kOpen);
  EXPECT_GT(stats.remote_lookup_errors, 0u);
  // Each connection (the read lanes and the put lane) once at open, and read lane 0 (sequential
  // lookups use it) once more after its first timeout: then the open breaker lets no connection
  // through.
  EXPECT_LE(server.accepted(), static_cast<int>(o.remote->connections) + 2)
      << "the open breaker still let connections through";
}

}  // namespace
}  // namespace kvtier
