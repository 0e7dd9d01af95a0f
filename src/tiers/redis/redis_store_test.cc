// Goal: RedisStore against a real single redis-server: values round trip (4 MiB included), a
// pipelined batch of 100, exists/delete, TTL expiry, corrupt / truncated / foreign values are
// misses and are counted, ACL AUTH works and a wrong password is a clear error, and the failure
// behaviour: a killed server gives fast Unavailable results, the breaker opens with one log line,
// a restarted server is reconnected and the breaker closes; a stalled server gives TimedOut
// within the command timeout.
// Method: each test starts its own redis-server on a free loopback port in a temp dir
// (redis_test_util.h) and kills it at the end; garbage is planted with a raw hiredis SET; the
// breaker's cool-down runs on a ManualClock. Skipped when redis-server is not installed.
#include "tiers/redis/redis_store.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "testing/test_util.h"
#include "tiers/redis/redis_test_util.h"

namespace kvtier {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;


Hash256 Digest(uint8_t v) {
  Hash256 d{};
  d.fill(v);
  return d;
}

int64_t MillisSince(steady_clock::time_point start) {
  return std::chrono::duration_cast<milliseconds>(steady_clock::now() - start).count();
}

class RedisStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!RedisServerInstalled()) GTEST_SKIP() << "redis-server is not installed; skipping";
    Result<std::unique_ptr<RedisServer>> server = RedisServer::Start();
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
  }

  RedisStoreOptions Options() {
    return {.endpoints = {server_->endpoint()},
            .connect_timeout_ms = 200,
            .command_timeout_ms = 300,
            .breaker = {.failures_to_open = 3, .open_cooldown_us = 1'000'000},
            .insecure_plaintext = true,  // These tests look at plain values; sealed ones have
                                         // their own (redis_sealed_test.cc).
            .layout_digest = Digest(7),
            .logger = &logger_};
  }

  std::unique_ptr<RedisStore> OpenStore(RedisStoreOptions options) {
    Result<std::unique_ptr<RedisStore>> store = RedisStore::Open(std::move(options));
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::move(*store) : nullptr;
  }

  // Puts one value and returns its status.
  Status PutOne(RedisStore* store, const BlockKey& key, std::span<const std::byte> payload,
                uint64_t ttl_ms = 0) {
    RemotePut put{.key = key, .codec_id = 1, .raw_bytes = 99, .payload = payload, .ttl_ms = ttl_ms};
    KV_RETURN_IF_ERROR(store->Put({&put, 1}));
    return put.status;
  }

  Status GetOne(RedisStore* store, const BlockKey& key, std::vector<std::byte>* out) {
    RemoteGet get{.key = key, .dst = *out};
    KV_RETURN_IF_ERROR(store->Get({&get, 1}));
    if (get.status.ok()) out->resize(get.payload_bytes);
    return get.status;
  }

  CapturingLogger logger_;
  std::unique_ptr<RedisServer> server_;
};

TEST_F(RedisStoreTest, RoundTripSmallAnd4MiBValues) {
  std::unique_ptr<RedisStore> store = OpenStore(Options());
  ASSERT_NE(store, nullptr);
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{4096}, size_t{4} << 20}) {
    const BlockKey key = RedisTestKey(1, static_cast<uint32_t>(bytes % 1000));
    const std::vector<std::byte> payload = RedisTestPayload(bytes, 3);
    ASSERT_TRUE(PutOne(store.get(), key, payload).ok());
    std::vector<std::byte> out(bytes + 16);
    RemoteGet get{.key = key, .dst = out};
    ASSERT_TRUE(store->Get({&get, 1}).ok());
    ASSERT_TRUE(get.status.ok()) << get.status.ToString();
    EXPECT_EQ(get.payload_bytes, bytes);
    EXPECT_EQ(get.codec_id, 1);
    EXPECT_EQ(get.raw_bytes, 99u);
    if (bytes > 0) {
      EXPECT_EQ(std::memcmp(out.data(), payload.data(), bytes), 0);
    }
  }
  std::vector<std::byte> small(10);
  RemoteGet too_small{.key = RedisTestKey(1, 4096 % 1000), .dst = small};
  ASSERT_TRUE(store->Get({&too_small, 1}).ok());
  EXPECT_EQ(too_small.status.code(), StatusCode::kInvalidArgument);
  const RemoteStoreStats stats = store->Stats();
  EXPECT_EQ(stats.hits, 4u);
  EXPECT_EQ(stats.puts, 4u);
  EXPECT_EQ(stats.errors, 0u);
}

TEST_F(RedisStoreTest, PipelinedBatchOf100WithMisses) {
  std::unique_ptr<RedisStore> store = OpenStore(Options());
  ASSERT_NE(store, nullptr);
  std::vector<std::vector<std::byte>> payloads;
  std::vector<RemotePut> puts;
  for (uint32_t i = 0; i < 100; ++i) payloads.push_back(RedisTestPayload(1000 + i, i));
  for (uint32_t i = 0; i < 100; ++i) {
    puts.push_back({.key = RedisTestKey(i / 10, i % 10), .payload = payloads[i]});
  }
  ASSERT_TRUE(store->Put(puts).ok());
  for (const RemotePut& p : puts) ASSERT_TRUE(p.status.ok()) << p.status.ToString();
  std::vector<std::vector<std::byte>> outs(110, std::vector<std::byte>(2000));
  std::vector<RemoteGet> gets;
  for (uint32_t i = 0; i < 110; ++i)
    gets.push_back({.key = RedisTestKey(i / 10, i % 10), .dst = outs[i]});
  ASSERT_TRUE(store->Get(gets).ok());
  for (uint32_t i = 0; i < 110; ++i) {
    if (i >= 100) {
      EXPECT_EQ(gets[i].status.code(), StatusCode::kNotFound);
      continue;
    }
    ASSERT_TRUE(gets[i].status.ok()) << i << ": " << gets[i].status.ToString();
    ASSERT_EQ(gets[i].payload_bytes, payloads[i].size());
    EXPECT_EQ(std::memcmp(outs[i].data(), payloads[i].data(), payloads[i].size()), 0) << i;
  }
  const RemoteStoreStats stats = store->Stats();
  EXPECT_EQ(stats.gets, 110u);
  EXPECT_EQ(stats.hits, 100u);
  EXPECT_EQ(stats.misses, 10u);
  EXPECT_EQ(stats.corrupt, 0u);
  std::vector<RemotePut> too_many(kRemoteBatchMax + 1);
  EXPECT_EQ(store->Put(too_many).code(), StatusCode::kInvalidArgument);
}

TEST_F(RedisStoreTest, ExistsAndDelete) {
  std::unique_ptr<RedisStore> store = OpenStore(Options());
  ASSERT_NE(store, nullptr);
  const std::vector<std::byte> payload = RedisTestPayload(100, 1);
  ASSERT_TRUE(PutOne(store.get(), RedisTestKey(1, 0), payload).ok());
  std::vector<RemoteExists> exists = {{.key = RedisTestKey(1, 0)}, {.key = RedisTestKey(1, 1)}};
  ASSERT_TRUE(store->Exists(exists).ok());
  ASSERT_TRUE(exists[0].status.ok());
  EXPECT_TRUE(exists[0].exists);
  EXPECT_FALSE(exists[1].exists);
  std::vector<RemoteDelete> deletes = {{.key = RedisTestKey(1, 0)}, {.key = RedisTestKey(1, 1)}};
  ASSERT_TRUE(store->Delete(deletes).ok());
  EXPECT_TRUE(deletes[0].status.ok());
  EXPECT_TRUE(deletes[1].status.ok());
  ASSERT_TRUE(store->Exists(exists).ok());
  EXPECT_FALSE(exists[0].exists);
}

TEST_F(RedisStoreTest, TtlExpires) {
  std::unique_ptr<RedisStore> store = OpenStore(Options());
  ASSERT_NE(store, nullptr);
  const std::vector<std::byte> payload = RedisTestPayload(100, 1);
  ASSERT_TRUE(PutOne(store.get(), RedisTestKey(2, 0), payload, /*ttl_ms=*/150).ok());
  ASSERT_TRUE(PutOne(store.get(), RedisTestKey(2, 1), payload).ok());
  Result<std::string> pttl =
      RedisRawCommand(server_->port(), {"PTTL", store->KeyName(RedisTestKey(2, 0))});
  ASSERT_TRUE(pttl.ok());
  EXPECT_GT(std::stoi(*pttl), 0);
  EXPECT_LE(std::stoi(*pttl), 150);
  std::vector<std::byte> out(200);
  EXPECT_TRUE(GetOne(store.get(), RedisTestKey(2, 0), &out).ok());
  std::this_thread::sleep_for(milliseconds(300));
  out.resize(200);
  EXPECT_EQ(GetOne(store.get(), RedisTestKey(2, 0), &out).code(), StatusCode::kNotFound);
  out.resize(200);
  EXPECT_TRUE(GetOne(store.get(), RedisTestKey(2, 1), &out).ok());
}

TEST_F(RedisStoreTest, CorruptAndTruncatedValuesAreCountedMisses) {
  std::unique_ptr<RedisStore> store = OpenStore(Options());
  ASSERT_NE(store, nullptr);
  const BlockKey garbage_key = RedisTestKey(3, 0);
  ASSERT_TRUE(
      RedisRawCommand(server_->port(), {"SET", store->KeyName(garbage_key), "garbage"}).ok());
  // A valid value, then truncated by one byte behind the store's back.
  const BlockKey truncated_key = RedisTestKey(3, 1);
  ASSERT_TRUE(PutOne(store.get(), truncated_key, RedisTestPayload(5000, 2)).ok());
  Result<std::string> whole =
      RedisRawCommand(server_->port(), {"GET", store->KeyName(truncated_key)});
  ASSERT_TRUE(whole.ok());
  ASSERT_TRUE(RedisRawCommand(server_->port(), {"SET", store->KeyName(truncated_key),
                                                whole->substr(0, whole->size() - 1)})
                  .ok());
  // A valid value for another key, copied under this key.
  const BlockKey moved_key = RedisTestKey(3, 2);
  ASSERT_TRUE(RedisRawCommand(server_->port(), {"SET", store->KeyName(moved_key), *whole}).ok());
  std::vector<std::vector<std::byte>> outs(3, std::vector<std::byte>(6000));
  std::vector<RemoteGet> gets = {{.key = garbage_key, .dst = outs[0]},
                                 {.key = truncated_key, .dst = outs[1]},
                                 {.key = moved_key, .dst = outs[2]}};
  ASSERT_TRUE(store->Get(gets).ok());
  for (const RemoteGet& g : gets) EXPECT_EQ(g.status.code(), StatusCode::kCorruption);
  const RemoteStoreStats stats = store->Stats();
  EXPECT_EQ(stats.hits, 0u);
  EXPECT_EQ(stats.misses, 3u);
  EXPECT_EQ(stats.corrupt, 2u);
  EXPECT_EQ(stats.mismatched, 1u);
}

TEST_F(RedisStoreTest, OtherLayoutDigestIsAMiss) {
  std::unique_ptr<RedisStore> writer = OpenStore(Options());
  RedisStoreOptions other = Options();
  other.layout_digest = Digest(8);
  std::unique_ptr<RedisStore> reader = OpenStore(std::move(other));
  ASSERT_NE(writer, nullptr);
  ASSERT_NE(reader, nullptr);
  ASSERT_TRUE(PutOne(writer.get(), RedisTestKey(4, 0), RedisTestPayload(64, 1)).ok());
  std::vector<std::byte> out(64);
  EXPECT_EQ(GetOne(reader.get(), RedisTestKey(4, 0), &out).code(), StatusCode::kCorruption);
  EXPECT_EQ(reader->Stats().mismatched, 1u);
  EXPECT_EQ(reader->Stats().misses, 1u);
  out.resize(64);
  EXPECT_TRUE(GetOne(writer.get(), RedisTestKey(4, 0), &out).ok());
}

TEST_F(RedisStoreTest, AclUserAndWrongPassword) {
  server_.reset();
  Result<std::unique_ptr<RedisServer>> server = RedisServer::Start(
      {"--user", "kvt", "on", ">s3cret", "~kvt:*", "+@all", "--user", "default", "off"});
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  server_ = std::move(*server);
  RedisStoreOptions good = Options();
  good.user = "kvt";
  good.password = "s3cret";
  std::unique_ptr<RedisStore> store = OpenStore(good);
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(PutOne(store.get(), RedisTestKey(5, 0), RedisTestPayload(10, 1)).ok());
  std::vector<std::byte> out(10);
  EXPECT_TRUE(GetOne(store.get(), RedisTestKey(5, 0), &out).ok());

  RedisStoreOptions bad = Options();
  bad.user = "kvt";
  bad.password = "wrong";
  Result<std::unique_ptr<RedisStore>> rejected = RedisStore::Open(bad);
  ASSERT_FALSE(rejected.ok());
  EXPECT_EQ(rejected.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(rejected.status().message().find("AUTH as user 'kvt' failed"), std::string::npos)
      << rejected.status().ToString();
  EXPECT_NE(rejected.status().message().find("WRONGPASS"), std::string::npos);

  Result<std::unique_ptr<RedisStore>> no_password = RedisStore::Open(Options());
  ASSERT_FALSE(no_password.ok());
  EXPECT_NE(no_password.status().message().find("requires AUTH"), std::string::npos)
      << no_password.status().ToString();
}

TEST_F(RedisStoreTest, KilledServerFailsFastBreakerOpensAndRestartRecovers) {
  ManualClock clock;
  RedisStoreOptions options = Options();
  options.clock = &clock;
  std::unique_ptr<RedisStore> store = OpenStore(options);
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(PutOne(store.get(), RedisTestKey(6, 0), RedisTestPayload(100, 1)).ok());
  server_->Kill();

  std::vector<std::byte> out(100);
  for (int i = 0; i < 6; ++i) {
    const auto start = steady_clock::now();
    out.resize(100);
    const Status s = GetOne(store.get(), RedisTestKey(6, 0), &out);
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
    EXPECT_LT(MillisSince(start), 250);
  }
  RemoteStoreStats stats = store->Stats();
  EXPECT_EQ(stats.breaker_state, BreakerState::kOpen);
  EXPECT_EQ(stats.breaker_trips, 1u);
  EXPECT_EQ(stats.misses, 6u);
  EXPECT_EQ(stats.errors, 6u);
  EXPECT_EQ(logger_.CountContaining("circuit breaker opened"), 1u);
  EXPECT_EQ(logger_.CountContaining("connection lost"), 1u);

  ASSERT_TRUE(server_->Restart().ok());
  out.resize(100);
  EXPECT_EQ(GetOne(store.get(), RedisTestKey(6, 0), &out).code(), StatusCode::kUnavailable)
      << "the breaker is still cooling down";
  clock.Advance(1'000'000);
  out.resize(100);
  EXPECT_EQ(GetOne(store.get(), RedisTestKey(6, 0), &out).code(), StatusCode::kNotFound)
      << "the restarted server is empty";
  ASSERT_TRUE(PutOne(store.get(), RedisTestKey(6, 0), RedisTestPayload(100, 1)).ok());
  stats = store->Stats();
  EXPECT_EQ(stats.breaker_state, BreakerState::kClosed);
  EXPECT_EQ(stats.reconnects, 1u);
  EXPECT_EQ(logger_.CountContaining("circuit breaker closed"), 1u);
  EXPECT_EQ(logger_.CountContaining("connection restored"), 1u);
  EXPECT_EQ(logger_.CountContaining("circuit breaker opened"), 1u);
}

TEST_F(RedisStoreTest, StalledServerTimesOutWithinTheTimeout) {
  server_.reset();
  Result<std::unique_ptr<RedisServer>> server =
      RedisServer::Start({"--enable-debug-command", "local"});
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  server_ = std::move(*server);
  std::unique_ptr<RedisStore> store = OpenStore(Options());
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(PutOne(store.get(), RedisTestKey(7, 0), RedisTestPayload(100, 1)).ok());
  // DEBUG SLEEP blocks the whole server, as a long fork or a swap storm would.
  std::thread sleeper([&] {
    RedisRawCommand(server_->port(), {"DEBUG", "SLEEP", "1"}).status().IgnoreError();
  });
  std::this_thread::sleep_for(milliseconds(100));
  std::vector<std::byte> out(100);
  auto start = steady_clock::now();
  EXPECT_EQ(GetOne(store.get(), RedisTestKey(7, 0), &out).code(), StatusCode::kTimedOut);
  EXPECT_LT(MillisSince(start), 600);
  sleeper.join();
  EXPECT_EQ(store->Stats().timeouts, 1u);

  // A stopped process: the kernel still accepts connections, nothing answers.
  server_->Pause();
  start = steady_clock::now();
  out.resize(100);
  EXPECT_EQ(GetOne(store.get(), RedisTestKey(7, 0), &out).code(), StatusCode::kTimedOut);
  EXPECT_LT(MillisSince(start), 600);
  server_->Resume();
  out.resize(100);
  EXPECT_TRUE(GetOne(store.get(), RedisTestKey(7, 0), &out).ok());
}

TEST_F(RedisStoreTest, ConcurrentCallersShareOneStore) {
  std::unique_ptr<RedisStore> store = OpenStore(Options());
  ASSERT_NE(store, nullptr);
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (uint32_t i = 0; i < 20; ++i) {
        const BlockKey key = RedisTestKey(100 + t, i);
        const std::vector<std::byte> payload = RedisTestPayload(300 + i, t);
        EXPECT_TRUE(PutOne(store.get(), key, payload).ok());
        std::vector<std::byte> out(400);
        EXPECT_TRUE(GetOne(store.get(), key, &out).ok());
        EXPECT_EQ(out, payload);
        EXPECT_LE(store->Stats().hits, 80u);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(store->Stats().hits, 80u);
}

TEST_F(RedisStoreTest, UnreachableAtOpenStillOpensAndServesMisses) {
  RedisStoreOptions options = Options();
  server_->Kill();
  std::unique_ptr<RedisStore> store = OpenStore(options);
  ASSERT_NE(store, nullptr);
  std::vector<std::byte> out(10);
  EXPECT_EQ(GetOne(store.get(), RedisTestKey(8, 0), &out).code(), StatusCode::kUnavailable);
  EXPECT_EQ(RedisStore::Open({.endpoints = {"nohost"}}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(RedisStore::Open({.endpoints = {"127.0.0.1:1"}, .key_prefix = "a{b}"}).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier
