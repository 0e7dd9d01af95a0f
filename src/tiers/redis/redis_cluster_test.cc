// Goal: RedisStore in cluster mode against a real 3-master Redis Cluster: keys spread over all
// masters and are all readable; a stale slot map is repaired through MOVED; a slot in migration
// is served through ASK (read of a migrated key, write of a new key) and then MOVED once the
// migration completes; a killed master turns only its own keys into fast Unavailable misses while
// the other masters keep serving.
// Method: each test forms its own cluster (redis_test_util.h: three redis-server processes in temp
// dirs, `redis-cli --cluster create`, wait for cluster_state:ok); the stale map comes from the
// TestOnlyAssignSlots hook; the migration is driven with raw CLUSTER SETSLOT / MIGRATE commands.
// Skipped when redis-server is not installed.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "testing/test_util.h"
#include "tiers/redis/crc16.h"
#include "tiers/redis/redis_store.h"
#include "tiers/redis/redis_test_util.h"

namespace kvtier {
namespace {

using std::chrono::steady_clock;

constexpr uint32_t kChunks = 100;
constexpr uint32_t kLayers = 3;

BlockKey MakeKey(uint32_t chunk, uint32_t layer) {
  BlockKey key;
  for (size_t i = 0; i < key.chunk_hash.size(); ++i) {
    key.chunk_hash[i] = static_cast<uint8_t>((chunk * 2654435761u >> (i % 24)) + i);
  }
  key.layer = layer;
  return key;
}

std::vector<std::byte> PayloadFor(const BlockKey& key) {
  std::vector<std::byte> p(256 + key.layer);
  for (size_t i = 0; i < p.size(); ++i) {
    p[i] = static_cast<std::byte>(key.chunk_hash[i % 32] ^ static_cast<uint8_t>(i));
  }
  return p;
}

class RedisClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!RedisServerInstalled()) GTEST_SKIP() << "redis-server is not installed; skipping";
    Result<std::unique_ptr<RedisCluster>> cluster = RedisCluster::Start(3);
    ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
    cluster_ = std::move(*cluster);
    Result<std::unique_ptr<RedisStore>> store =
        RedisStore::Open({.endpoints = {cluster_->node(0).endpoint()},
                          .mode = RedisMode::kCluster,
                          .connect_timeout_ms = 200,
                          .command_timeout_ms = 500,
                          .topology_refresh_interval_us = 0,
                          .insecure_plaintext = true,
                          .logger = &logger_});
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
  }

  std::vector<BlockKey> AllKeys() const {
    std::vector<BlockKey> keys;
    for (uint32_t c = 0; c < kChunks; ++c) {
      for (uint32_t l = 0; l < kLayers; ++l) keys.push_back(MakeKey(c, l));
    }
    return keys;
  }

  void PutAll(const std::vector<BlockKey>& keys) {
    std::vector<std::vector<std::byte>> payloads;
    for (const BlockKey& k : keys) payloads.push_back(PayloadFor(k));
    std::vector<RemotePut> puts;
    for (size_t i = 0; i < keys.size(); ++i)
      puts.push_back({.key = keys[i], .payload = payloads[i]});
    ASSERT_TRUE(store_->Put(puts).ok());
    for (const RemotePut& p : puts) ASSERT_TRUE(p.status.ok()) << p.status.ToString();
  }

  // Reads every key; returns the statuses and checks the payload of each hit.
  std::vector<Status> GetAll(const std::vector<BlockKey>& keys) {
    std::vector<std::vector<std::byte>> outs(keys.size(), std::vector<std::byte>(512));
    std::vector<RemoteGet> gets;
    for (size_t i = 0; i < keys.size(); ++i) gets.push_back({.key = keys[i], .dst = outs[i]});
    EXPECT_TRUE(store_->Get(gets).ok());
    std::vector<Status> statuses;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (gets[i].status.ok()) {
        const std::vector<std::byte> want = PayloadFor(keys[i]);
        EXPECT_EQ(gets[i].payload_bytes, want.size());
        EXPECT_EQ(std::memcmp(outs[i].data(), want.data(), want.size()), 0);
      }
      statuses.push_back(gets[i].status);
    }
    return statuses;
  }

  // The node that holds `key` (non-owners answer a raw EXISTS with MOVED).
  size_t OwnerOf(const BlockKey& key) {
    for (size_t i = 0; i < cluster_->size(); ++i) {
      if (RedisRawCommand(cluster_->node(i).port(), {"EXISTS", store_->KeyName(key)}).ok())
        return i;
    }
    return cluster_->size();
  }

  CapturingLogger logger_;
  std::unique_ptr<RedisCluster> cluster_;
  std::unique_ptr<RedisStore> store_;
};

TEST_F(RedisClusterTest, KeysSpreadOverAllMastersAndAreReadable) {
  const std::vector<BlockKey> keys = AllKeys();
  PutAll(keys);
  for (size_t i = 0; i < cluster_->size(); ++i) {
    Result<std::string> dbsize = RedisRawCommand(cluster_->node(i).port(), {"DBSIZE"});
    ASSERT_TRUE(dbsize.ok());
    EXPECT_GT(std::stoi(*dbsize), 30) << "node " << i;
  }
  for (const Status& s : GetAll(keys)) EXPECT_TRUE(s.ok()) << s.ToString();
  // All layers of a chunk share the chunk's slot, hence its node.
  for (uint32_t c = 0; c < 5; ++c) EXPECT_EQ(OwnerOf(MakeKey(c, 0)), OwnerOf(MakeKey(c, 2)));
  const RemoteStoreStats stats = store_->Stats();
  EXPECT_EQ(stats.hits, keys.size());
  EXPECT_EQ(stats.redirects_moved, 0u);
}

TEST_F(RedisClusterTest, StaleSlotMapIsRepairedThroughMoved) {
  const std::vector<BlockKey> keys = AllKeys();
  PutAll(keys);
  ASSERT_TRUE(
      store_->TestOnlyAssignSlots(0, kRedisClusterSlots - 1, cluster_->node(0).endpoint()).ok());
  for (const Status& s : GetAll(keys)) EXPECT_TRUE(s.ok()) << s.ToString();
  const uint64_t moved = store_->Stats().redirects_moved;
  EXPECT_GT(moved, 0u);
  // The map was refreshed after the MOVED replies: no further redirects.
  for (const Status& s : GetAll(keys)) EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(store_->Stats().redirects_moved, moved);
}

TEST_F(RedisClusterTest, MigratingSlotIsServedThroughAskThenMoved) {
  const BlockKey key = MakeKey(7, 0);
  PutAll({key});
  const size_t src = OwnerOf(key);
  ASSERT_LT(src, cluster_->size());
  const size_t dst = (src + 1) % cluster_->size();
  const std::string slot = std::to_string(RedisKeySlot(store_->KeyName(key)));
  Result<std::string> src_id = cluster_->NodeId(src);
  Result<std::string> dst_id = cluster_->NodeId(dst);
  ASSERT_TRUE(src_id.ok() && dst_id.ok());
  const uint16_t src_port = cluster_->node(src).port();
  const uint16_t dst_port = cluster_->node(dst).port();
  ASSERT_TRUE(RedisRawCommand(dst_port, {"CLUSTER", "SETSLOT", slot, "IMPORTING", *src_id}).ok());
  ASSERT_TRUE(RedisRawCommand(src_port, {"CLUSTER", "SETSLOT", slot, "MIGRATING", *dst_id}).ok());
  Result<std::string> migrate = RedisRawCommand(
      src_port,
      {"MIGRATE", "127.0.0.1", std::to_string(dst_port), store_->KeyName(key), "0", "5000"});
  ASSERT_TRUE(migrate.ok()) << migrate.status().ToString();

  // The source no longer has the key: it answers ASK, the store asks the target.
  for (const Status& s : GetAll({key})) EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_GE(store_->Stats().redirects_ask, 1u);
  // A new key of the same chunk (same slot) is written to the target through ASK too.
  const BlockKey sibling = MakeKey(7, 1);
  PutAll({sibling});
  EXPECT_EQ(store_->Stats().redirects_moved, 0u);

  for (size_t i = 0; i < cluster_->size(); ++i) {
    ASSERT_TRUE(
        RedisRawCommand(cluster_->node(i).port(), {"CLUSTER", "SETSLOT", slot, "NODE", *dst_id})
            .ok());
  }
  // Migration done: the source answers MOVED, the store follows it and updates its map.
  for (const Status& s : GetAll({key, sibling})) EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_GE(store_->Stats().redirects_moved, 1u);
  EXPECT_EQ(OwnerOf(sibling), dst);
}

TEST_F(RedisClusterTest, KilledMasterMissesOnlyItsOwnKeysQuickly) {
  const std::vector<BlockKey> keys = AllKeys();
  PutAll(keys);
  const size_t victim = 2;
  std::vector<size_t> owners;
  for (const BlockKey& k : keys) owners.push_back(OwnerOf(k));
  cluster_->node(victim).Kill();
  for (int round = 0; round < 3; ++round) {
    const auto start = steady_clock::now();
    const std::vector<Status> statuses = GetAll(keys);
    const auto elapsed_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(steady_clock::now() - start).count();
    EXPECT_LT(elapsed_ms, 1000) << "round " << round;
    size_t lost = 0;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (owners[i] == victim) {
        ++lost;
        EXPECT_EQ(statuses[i].code(), StatusCode::kUnavailable) << statuses[i].ToString();
      } else {
        EXPECT_TRUE(statuses[i].ok()) << statuses[i].ToString();
      }
    }
    EXPECT_GT(lost, 0u);
  }
  EXPECT_EQ(logger_.CountContaining("connection lost"), 1u);
}

}  // namespace
}  // namespace kvtier
