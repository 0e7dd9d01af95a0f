// Goal: show that FakeRemoteStore keeps the RemoteStore contract the engine relies on (round
// trips with codec and sizes, misses, TTLs, per-entry statuses, bounds, counters) and that each
// injected fault looks to a caller as the real failure does: a dead store fails every entry with
// Unavailable and opens the breaker, which then fails calls at once and lets one probe through
// after its cool-down; a slow store answers late or times out; a damaged value is a Corruption
// miss, counted, and never returned.
// Method: a ManualClock drives TTLs, slow calls (SleepForMicros advances it) and the breaker, so
// every case is deterministic and instant; keys and payloads are small and derived from an index.
#include "testing/fake_remote_store.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvtier {
namespace {

BlockKey Key(uint8_t i) {
  BlockKey k;
  k.chunk_hash.fill(i);
  k.layer = i % 3;
  return k;
}

std::vector<std::byte> Payload(uint8_t i, size_t bytes = 300) {
  std::vector<std::byte> p(bytes);
  for (size_t b = 0; b < bytes; ++b) p[b] = std::byte(static_cast<uint8_t>(b * 31 + i));
  return p;
}

class FakeRemoteStoreTest : public ::testing::Test {
 protected:
  FakeRemoteStore& Store() { return store_; }

  Status PutOne(uint8_t i, uint64_t ttl_ms = 0) {
    const std::vector<std::byte> payload = Payload(i);
    RemotePut p{.key = Key(i), .codec_id = 2, .raw_bytes = 600, .payload = payload,
                .ttl_ms = ttl_ms};
    KV_RETURN_IF_ERROR(store_.Put(std::span(&p, 1)));
    return p.status;
  }
  // The Get's status; on Ok, checks every byte and header field.
  Status GetOne(uint8_t i, size_t dst_bytes = 1024) {
    std::vector<std::byte> dst(dst_bytes);
    RemoteGet g{.key = Key(i), .dst = dst};
    KV_RETURN_IF_ERROR(store_.Get(std::span(&g, 1)));
    if (!g.status.ok()) return g.status;
    const std::vector<std::byte> want = Payload(i);
    EXPECT_EQ(g.codec_id, 2);
    EXPECT_EQ(g.raw_bytes, 600u);
    EXPECT_EQ(g.payload_bytes, want.size());
    EXPECT_TRUE(std::equal(want.begin(), want.end(), dst.begin()));
    return Status::Ok();
  }
  bool ExistsOne(uint8_t i, Status* status = nullptr) {
    RemoteExists x{.key = Key(i)};
    EXPECT_TRUE(store_.Exists(std::span(&x, 1)).ok());
    if (status != nullptr) *status = x.status;
    return x.exists;
  }

  ManualClock clock_;
  FakeRemoteStore store_{{.capacity_bytes = 4096,
                          .timeout_us = 1000,
                          .breaker = {.failures_to_open = 2, .open_cooldown_us = 10'000},
                          .clock = &clock_}};
};

TEST_F(FakeRemoteStoreTest, RoundTripMissDeleteAndTtl) {
  ASSERT_TRUE(PutOne(1).ok());
  ASSERT_TRUE(PutOne(2, /*ttl_ms=*/5).ok());
  EXPECT_TRUE(GetOne(1).ok());
  EXPECT_TRUE(GetOne(2).ok());
  EXPECT_TRUE(GetOne(3).IsNotFound());
  EXPECT_TRUE(ExistsOne(1));
  EXPECT_FALSE(ExistsOne(3));
  EXPECT_TRUE(GetOne(1, 100).IsInvalidArgument()) << "destination smaller than the value";
  clock_.Advance(5'000);  // Key 2's TTL passes.
  EXPECT_FALSE(ExistsOne(2));
  EXPECT_TRUE(GetOne(2).IsNotFound());
  RemoteDelete d{.key = Key(1)};
  ASSERT_TRUE(Store().Delete(std::span(&d, 1)).ok());
  EXPECT_TRUE(d.status.ok());
  EXPECT_FALSE(Store().Contains(Key(1)));
  const RemoteStoreStats s = Store().Stats();
  EXPECT_EQ(s.puts, 2u);
  EXPECT_EQ(s.hits, 2u);
  EXPECT_EQ(s.gets, s.hits + s.misses);
  EXPECT_EQ(s.breaker_state, BreakerState::kClosed);
}

TEST_F(FakeRemoteStoreTest, BoundsAreEnforced) {
  std::vector<RemoteExists> many(kRemoteBatchMax + 1);
  EXPECT_TRUE(Store().Exists(many).IsInvalidArgument());
  const std::vector<std::byte> big(kRemoteValueBytesMax + 1);
  RemotePut p{.key = Key(1), .payload = big};
  EXPECT_TRUE(Store().Put(std::span(&p, 1)).IsInvalidArgument());
  // Capacity: 4096 bytes hold 9 values of 128 + 300 bytes; the 10th is refused.
  for (uint8_t i = 0; i < 9; ++i) ASSERT_TRUE(PutOne(i).ok()) << int{i};
  EXPECT_TRUE(PutOne(9).IsNoSpace());
  EXPECT_TRUE(PutOne(3).ok()) << "replacing a value needs no more room";
  EXPECT_EQ(Store().value_count(), 9u);
}

TEST_F(FakeRemoteStoreTest, DamagedValuesAreCorruptMissesNeverReturned) {
  ASSERT_TRUE(PutOne(1).ok());
  ASSERT_TRUE(PutOne(2).ok());
  ASSERT_TRUE(Store().CorruptStoredValue(Key(1), 200).ok());
  EXPECT_TRUE(GetOne(1).IsCorruption());
  EXPECT_TRUE(GetOne(2).ok());
  EXPECT_TRUE(ExistsOne(1)) << "Exists does not verify values";
  EXPECT_TRUE(Store().CorruptStoredValue(Key(7), 0).IsNotFound());
  // A transient fault: only the armed call reads a damaged copy.
  Result<FaultId> f = Store().ArmFault({.kind = RemoteFaultKind::kCorrupt});
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(GetOne(2).IsCorruption());
  EXPECT_TRUE(GetOne(2).ok());
  EXPECT_EQ(Store().FiredCount(*f), 1u);
  const RemoteStoreStats s = Store().Stats();
  EXPECT_EQ(s.corrupt, 2u);
  EXPECT_EQ(s.misses, 2u);
  EXPECT_TRUE(Store().ArmFault({.kind = RemoteFaultKind::kCorrupt, .op = RemoteOp::kPut})
                  .status()
                  .IsInvalidArgument());
}

TEST_F(FakeRemoteStoreTest, UnavailableOpensTheBreakerUntilAProbeSucceeds) {
  ASSERT_TRUE(PutOne(1).ok());
  Result<FaultId> down =
      Store().ArmFault({.kind = RemoteFaultKind::kUnavailable, .repeat = FaultRepeat::kEveryAfter});
  ASSERT_TRUE(down.ok());
  Status s;
  EXPECT_FALSE(ExistsOne(1, &s));
  EXPECT_TRUE(s.IsUnavailable()) << s.ToString();
  EXPECT_TRUE(GetOne(1).IsUnavailable());
  EXPECT_EQ(Store().Stats().breaker_state, BreakerState::kOpen);  // Two failures open it.
  // Open: calls fail at once without reaching the store, so the fault sees no more calls.
  EXPECT_TRUE(PutOne(2).IsUnavailable());
  EXPECT_EQ(Store().FiredCount(*down), 2u);
  // After the cool-down one probe goes through; the store is still down, so it opens again.
  clock_.Advance(10'000);
  EXPECT_TRUE(GetOne(1).IsUnavailable());
  EXPECT_EQ(Store().FiredCount(*down), 3u);
  EXPECT_EQ(Store().Stats().breaker_state, BreakerState::kOpen);
  // Back up: the next probe closes it, and the stored value is still there.
  Store().DisarmFault(*down);
  clock_.Advance(10'000);
  EXPECT_TRUE(GetOne(1).ok());
  const RemoteStoreStats stats = Store().Stats();
  EXPECT_EQ(stats.breaker_state, BreakerState::kClosed);
  EXPECT_EQ(stats.breaker_trips, 2u);
  EXPECT_EQ(stats.errors, 4u);
}

TEST_F(FakeRemoteStoreTest, SlowCallsAnswerLateOrTimeOut) {
  ASSERT_TRUE(PutOne(1).ok());
  ASSERT_TRUE(Store().ArmFault({.kind = RemoteFaultKind::kSlow, .delay_us = 400}).ok());
  const uint64_t t0 = clock_.NowMicros();
  EXPECT_TRUE(GetOne(1).ok()) << "slow but within the timeout";
  EXPECT_EQ(clock_.NowMicros() - t0, 400u);
  ASSERT_TRUE(
      Store().ArmFault({.kind = RemoteFaultKind::kSlow, .op = RemoteOp::kGet, .delay_us = 5000})
          .ok());
  const uint64_t t1 = clock_.NowMicros();
  EXPECT_TRUE(GetOne(1).IsTimedOut());
  EXPECT_EQ(clock_.NowMicros() - t1, 1000u) << "a timed-out call takes the timeout";
  EXPECT_EQ(Store().Stats().timeouts, 1u);
  EXPECT_TRUE(GetOne(1).ok());
}

TEST_F(FakeRemoteStoreTest, ClearForgetsEverything) {
  ASSERT_TRUE(PutOne(1).ok());
  Store().Clear();
  EXPECT_EQ(Store().value_count(), 0u);
  EXPECT_TRUE(GetOne(1).IsNotFound());
  ASSERT_TRUE(PutOne(1).ok());
  EXPECT_TRUE(GetOne(1).ok());
}

}  // namespace
}  // namespace kvtier
