// Goal: the pure parts of the remote tier are right without any server: CRC16/XMODEM and the
// Redis Cluster key slot (spec test vector and hash tags), key names (the chunk hash as the hash
// tag, so every layer of a chunk shares a slot), the remote value codec (round trip; every kind of
// damage or foreign value is rejected and classified), the redirect and CLUSTER SLOTS parsers,
// and the circuit breaker's state machine on a ManualClock with its log lines.
// Method: direct calls with hand-made inputs; byte mutation over the whole encoded value.
#include "tiers/remote_store.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/block_key.h"
#include "testing/test_util.h"
#include "tiers/circuit_breaker.h"
#include "tiers/redis/crc16.h"
#include "tiers/redis/redis_cluster.h"

namespace kvtier {
namespace {

BlockKey MakeKey(uint8_t seed, uint32_t layer) {
  BlockKey key;
  for (size_t i = 0; i < key.chunk_hash.size(); ++i) {
    key.chunk_hash[i] = static_cast<uint8_t>(seed + i * 7);
  }
  key.layer = layer;
  return key;
}

Hash256 MakeDigest(uint8_t seed) {
  Hash256 d{};
  d.fill(seed);
  return d;
}

std::vector<std::byte> MakePayload(size_t n) {
  std::vector<std::byte> p(n);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<std::byte>((i * 31 + 5) & 0xFF);
  return p;
}

TEST(Crc16Test, SpecTestVector) {
  EXPECT_EQ(Crc16Xmodem("123456789"), 0x31C3);
  EXPECT_EQ(Crc16Xmodem(""), 0);
}

TEST(Crc16Test, KeySlotsAndHashTags) {
  // Slots published in the Redis documentation and checkable with CLUSTER KEYSLOT.
  EXPECT_EQ(RedisKeySlot("foo"), 12182);
  EXPECT_EQ(RedisKeySlot("bar"), 5061);
  EXPECT_EQ(RedisKeySlot("{user1000}.following"), RedisKeySlot("{user1000}.followers"));
  EXPECT_EQ(RedisHashTag("foo{}{bar}"), "foo{}{bar}");  // Empty first tag: whole key.
  EXPECT_EQ(RedisHashTag("foo{{bar}}zap"), "{bar");
  EXPECT_EQ(RedisHashTag("foo{bar}{zap}"), "bar");
  EXPECT_EQ(RedisHashTag("no-tag"), "no-tag");
  EXPECT_EQ(RedisHashTag("open{only"), "open{only");
}

TEST(RemoteKeyTest, ChunkHashIsTheHashTag) {
  const BlockKey a = MakeKey(1, 0);
  const BlockKey b = MakeKey(1, 31);
  const std::string name = RemoteKeyName("kvt", a);
  EXPECT_EQ(name, "kvt:{" + ToHex(a.chunk_hash) + "}:0");
  EXPECT_EQ(RemoteKeyName("kvt", b), "kvt:{" + ToHex(b.chunk_hash) + "}:31");
  EXPECT_EQ(RedisKeySlot(name), RedisKeySlot(RemoteKeyName("kvt", b)));
  EXPECT_EQ(RedisHashTag(name), ToHex(a.chunk_hash));
}

TEST(RemoteValueTest, RoundTrip) {
  const BlockKey key = MakeKey(3, 5);
  const std::vector<std::byte> payload = MakePayload(10'000);
  std::vector<std::byte> value;
  EncodeRemoteValue(
      {.key = key, .layout_digest = MakeDigest(9), .codec_id = 2, .raw_bytes = 12'345}, payload,
      &value);
  ASSERT_EQ(value.size(), kRemoteValueHeaderBytes + payload.size());
  ssd::RecordHeader header;
  std::span<const std::byte> got;
  RemoteValueCheck check;
  ASSERT_TRUE(VerifyRemoteValue(value, key, MakeDigest(9), &header, &got, &check).ok());
  EXPECT_EQ(check, RemoteValueCheck::kOk);
  EXPECT_EQ(header.codec_id, 2);
  EXPECT_EQ(header.raw_bytes, 12'345u);
  ASSERT_EQ(got.size(), payload.size());
  EXPECT_EQ(std::memcmp(got.data(), payload.data(), payload.size()), 0);
}

TEST(RemoteValueTest, EveryByteFlipIsRejectedAsCorrupt) {
  const BlockKey key = MakeKey(4, 1);
  std::vector<std::byte> value;
  EncodeRemoteValue({.key = key, .layout_digest = MakeDigest(1)}, MakePayload(300), &value);
  for (size_t i = 0; i < value.size(); ++i) {
    std::vector<std::byte> bad = value;
    bad[i] ^= std::byte{0x40};
    ssd::RecordHeader header;
    std::span<const std::byte> got;
    RemoteValueCheck check;
    EXPECT_FALSE(VerifyRemoteValue(bad, key, MakeDigest(1), &header, &got, &check).ok())
        << "flip at " << i;
    EXPECT_EQ(check, RemoteValueCheck::kCorrupt) << "flip at " << i;
  }
}

TEST(RemoteValueTest, TruncatedExtendedForeignAndGarbageAreRejected) {
  const BlockKey key = MakeKey(5, 2);
  std::vector<std::byte> value;
  EncodeRemoteValue({.key = key, .layout_digest = MakeDigest(1)}, MakePayload(500), &value);
  ssd::RecordHeader header;
  std::span<const std::byte> got;
  RemoteValueCheck check;
  const std::span<const std::byte> all(value);
  EXPECT_FALSE(
      VerifyRemoteValue(all.first(value.size() - 1), key, MakeDigest(1), &header, &got, &check)
          .ok());
  EXPECT_FALSE(VerifyRemoteValue(all.first(100), key, MakeDigest(1), &header, &got, &check).ok());
  std::vector<std::byte> longer = value;
  longer.push_back(std::byte{0});
  EXPECT_FALSE(VerifyRemoteValue(longer, key, MakeDigest(1), &header, &got, &check).ok());
  EXPECT_EQ(check, RemoteValueCheck::kCorrupt);
  EXPECT_FALSE(VerifyRemoteValue(value, MakeKey(5, 3), MakeDigest(1), &header, &got, &check).ok());
  EXPECT_EQ(check, RemoteValueCheck::kMismatched);
  EXPECT_FALSE(VerifyRemoteValue(value, key, MakeDigest(2), &header, &got, &check).ok());
  EXPECT_EQ(check, RemoteValueCheck::kMismatched);
  const std::string garbage = "definitely not a record";
  const std::span<const std::byte> g(reinterpret_cast<const std::byte*>(garbage.data()),
                                     garbage.size());
  EXPECT_FALSE(VerifyRemoteValue(g, key, MakeDigest(1), &header, &got, &check).ok());
  EXPECT_EQ(check, RemoteValueCheck::kCorrupt);
}

TEST(RedisRedirectTest, ParsesMovedAndAsk) {
  RedisRedirect r;
  ASSERT_TRUE(ParseRedisRedirect("MOVED 3999 127.0.0.1:6381", &r));
  EXPECT_EQ(r.kind, RedisRedirectKind::kMoved);
  EXPECT_EQ(r.slot, 3999);
  EXPECT_EQ(r.target.ToString(), "127.0.0.1:6381");
  ASSERT_TRUE(ParseRedisRedirect("ASK 0 10.0.0.2:7000", &r));
  EXPECT_EQ(r.kind, RedisRedirectKind::kAsk);
  EXPECT_EQ(r.slot, 0);
  EXPECT_FALSE(ParseRedisRedirect("MOVED 16384 127.0.0.1:1", &r));
  EXPECT_FALSE(ParseRedisRedirect("MOVED x 127.0.0.1:1", &r));
  EXPECT_FALSE(ParseRedisRedirect("ERR wrong number of arguments", &r));
  EXPECT_FALSE(ParseRedisRedirect("MOVED 1 127.0.0.1:0", &r));
}

TEST(SlotMapTest, AssignAndCount) {
  SlotMap map;
  EXPECT_TRUE(map.empty());
  map.Assign(0, 5460, 0);
  map.Assign(5461, 16383, 1);
  EXPECT_FALSE(map.empty());
  EXPECT_EQ(map.Owner(0), 0);
  EXPECT_EQ(map.Owner(16383), 1);
  map.Assign(100, 100, 2);
  EXPECT_EQ(map.Owner(100), 2);
  map.Clear();
  EXPECT_EQ(map.Owner(100), SlotMap::kNoNode);
}

TEST(CircuitBreakerTest, OpensHalfOpensAndClosesWithOneLinePerChange) {
  ManualClock clock;
  CapturingLogger logger;
  CircuitBreaker breaker("redis x", {.failures_to_open = 3, .open_cooldown_us = 1000}, &clock,
                         &logger);
  EXPECT_TRUE(breaker.Allow());
  breaker.RecordFailure();
  breaker.RecordFailure();
  EXPECT_EQ(breaker.state(), BreakerState::kClosed);
  breaker.RecordSuccess();  // Resets the consecutive count.
  breaker.RecordFailure();
  breaker.RecordFailure();
  EXPECT_EQ(breaker.state(), BreakerState::kClosed);
  breaker.RecordFailure();
  EXPECT_EQ(breaker.state(), BreakerState::kOpen);
  EXPECT_EQ(breaker.trips(), 1u);
  EXPECT_FALSE(breaker.Allow());
  clock.Advance(999);
  EXPECT_FALSE(breaker.Allow());
  clock.Advance(1);
  EXPECT_TRUE(breaker.Allow());  // The probe.
  EXPECT_EQ(breaker.state(), BreakerState::kHalfOpen);
  EXPECT_FALSE(breaker.Allow());  // Only one probe at a time.
  breaker.RecordFailure();        // Probe failed: open again.
  EXPECT_EQ(breaker.state(), BreakerState::kOpen);
  EXPECT_EQ(breaker.trips(), 2u);
  clock.Advance(1000);
  EXPECT_TRUE(breaker.Allow());
  breaker.RecordSuccess();
  EXPECT_EQ(breaker.state(), BreakerState::kClosed);
  EXPECT_TRUE(breaker.Allow());
  EXPECT_EQ(logger.CountContaining("circuit breaker opened"), 2u);
  EXPECT_EQ(logger.CountContaining("circuit breaker half-open"), 2u);
  EXPECT_EQ(logger.CountContaining("circuit breaker closed"), 1u);
  EXPECT_EQ(logger.lines().size(), 5u);
}

}  // namespace
}  // namespace kvtier
