// Goal: the get path that reads a bulk-string reply straight into its destination
// (RedisBulkTarget; RedisStore's GET lands each payload in the caller's block) returns exactly
// the bytes hiredis would have, and fails as cleanly as the reader it bypasses:
//   - values of 0 bytes to several MiB, with RESP framing bytes inside, land byte-exact in a
//     target split into pieces, pipelined with nil, error and ASKING replies and with a target
//     that declines its value (read into a reply as before); hiredis's reader buffer then never
//     grows to a value's size (no copy through it);
//   - a reply whose header arrives a byte at a time lands as well; a huge or over-the-cap
//     length is refused at its header before the target is asked; a value cut short, a value
//     not ended by CRLF, a malformed length, an integer or an array are each a clear error or
//     an ordinary reply (never landed), never a crash or an allocation of the declared size;
//   - through the store, plaintext and sealed values of 0 B to 1 MiB read back exactly, and a
//     damaged value (payload or ciphertext), or one whose reply stops half-way, is a miss that
//     leaves no 64-byte run of what landed in the caller's buffer.
// Method: a real redis-server (redis_test_util.h) for the round trips; a loopback server in a
// thread that answers PING and then writes the test's chunks (a short pause between them, so
// the reads see them apart; the outcome does not depend on it) for the hostile replies; the
// store against FakeRedisServer for a reply that stops half-way.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "core/assert.h"
#include "testing/test_util.h"
#include "tiers/redis/redis_connection.h"
#include "tiers/redis/redis_store.h"
#include "tiers/redis/redis_test_util.h"

namespace kvtier {
namespace {

std::string Binary(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1103515245u + 12345u;
    s[i] = static_cast<char>(x >> 24);
  }
  if (n >= 6) s.replace(0, 6, std::string("\r\n\0$-1", 6));  // Framing bytes inside a value.
  return s;
}

RedisCommand Command(std::initializer_list<std::string_view> args,
                     RedisBulkTarget* target = nullptr, bool asking = false) {
  RedisCommand c;
  for (std::string_view a : args) c.args[c.argc++] = a;
  c.bulk_target = target;
  c.asking = asking;
  return c;
}

// A target of `capacity` bytes that hands a value out in three pieces (a third each), or
// declines every value (`decline`) or one larger than its capacity.
class SplitTarget final : public RedisBulkTarget {
 public:
  explicit SplitTarget(size_t capacity, bool decline = false)
      : buf_(capacity, '#'), decline_(decline) {}
  std::span<const iovec> Place(uint64_t bytes) override {
    ++places_;
    if (decline_ || bytes > buf_.size()) return {};
    declared_ = static_cast<size_t>(bytes);
    const size_t a = declared_ / 3;
    const size_t b = 2 * declared_ / 3;
    iov_ = {iovec{buf_.data(), a}, iovec{buf_.data() + a, b - a},
            iovec{buf_.data() + b, declared_ - b}};
    return iov_;
  }
  std::string landed() const { return std::string(buf_.data(), declared_); }
  int places() const { return places_; }

 private:
  std::vector<char> buf_;
  bool decline_;
  size_t declared_ = 0;
  int places_ = 0;
  std::array<iovec, 3> iov_{};
};

TEST(RedisLandingTest, BulkRepliesLandInTheirTargetsByteExactly) {
  if (!RedisServerInstalled()) GTEST_SKIP() << "redis-server is not installed; skipping";
  Result<std::unique_ptr<RedisServer>> server = RedisServer::Start();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const RedisEndpoint endpoint{.host = "127.0.0.1", .port = (*server)->port()};
  const std::vector<std::string> values = {"", std::string(1, '\0'), Binary(6, 1),
                                           Binary(200 * 1024 + 1, 2), Binary(3 * kMiB + 7, 3)};
  const std::vector<std::string> keys = {"k0", "k1", "k2", "k3", "k4"};
  RedisConnection writer(endpoint, RedisConnectionOptions{.command_timeout_ms = 5000}, nullptr);
  std::vector<RedisCommand> sets;
  for (size_t i = 0; i < keys.size(); ++i) sets.push_back(Command({"SET", keys[i], values[i]}));
  sets.push_back(Command({"RPUSH", "list", "a"}));
  std::vector<RedisReplyPtr> set_replies(sets.size());
  ASSERT_TRUE(writer.Execute(sets, set_replies).ok());

  // Only targets: every value lands, none passes through hiredis's reader buffer.
  RedisConnection reader(endpoint, RedisConnectionOptions{.command_timeout_ms = 5000}, nullptr);
  std::vector<SplitTarget> targets;
  for (int i = 0; i < 5; ++i) targets.emplace_back(4 * kMiB);
  std::vector<RedisCommand> gets;
  for (size_t i = 0; i < keys.size(); ++i) {
    gets.push_back(Command({"GET", keys[i]}, &targets[i], /*asking=*/i % 2 == 1));
  }
  std::vector<RedisReplyPtr> replies(gets.size());
  ASSERT_TRUE(reader.Execute(gets, replies).ok());
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(RedisReplyLanded(*replies[i])) << keys[i];
    EXPECT_EQ(replies[i]->len, values[i].size()) << keys[i];
    EXPECT_TRUE(targets[i].landed() == values[i]) << keys[i];
  }
  EXPECT_LT(reader.reader_buffer_bytes(), 64 * kKiB) << "a landed value went through hiredis";

  // Mixed with a nil, an error and a declining target on the same connection.
  SplitTarget for_nil(kMiB), for_error(kMiB), declining(kMiB, /*decline=*/true), again(kMiB);
  std::vector<RedisCommand> mixed = {
      Command({"GET", "missing"}, &for_nil), Command({"GET", "list"}, &for_error),
      Command({"GET", keys[3]}, &declining), Command({"GET", keys[2]}, &again, true)};
  std::vector<RedisReplyPtr> mixed_replies(mixed.size());
  ASSERT_TRUE(reader.Execute(mixed, mixed_replies).ok());
  EXPECT_EQ(mixed_replies[0]->type, REDIS_REPLY_NIL);
  EXPECT_EQ(for_nil.places(), 0);
  ASSERT_NE(RedisErrorText(mixed_replies[1].get()), nullptr);
  EXPECT_NE(std::string(RedisErrorText(mixed_replies[1].get())).find("WRONGTYPE"),
            std::string::npos);
  EXPECT_EQ(for_error.places(), 0);
  ASSERT_FALSE(RedisReplyLanded(*mixed_replies[2]));
  EXPECT_EQ(declining.places(), 1);
  EXPECT_TRUE(std::string(mixed_replies[2]->str, mixed_replies[2]->len) == values[3]);
  ASSERT_TRUE(RedisReplyLanded(*mixed_replies[3]));
  EXPECT_TRUE(again.landed() == values[2]);
}

struct Outcome {
  Status status;
  RedisReplyPtr reply;
  int places = 0;
  std::string landed;
};

// One GET with a 1 MiB target against `chunks`, on a connection whose replies hold at most 1 MiB
// and a byte more than the target (so one length can pass the cap and not fit the target).
Outcome GetWithTarget(std::vector<std::string> chunks) {
  ScriptedRedisServer server(std::move(chunks), std::chrono::milliseconds(5));
  RedisConnection conn(RedisEndpoint{.host = "127.0.0.1", .port = server.port()},
                       RedisConnectionOptions{.command_timeout_ms = 5000,
                                              .reply_bytes_max = 2 * kMiB},
                       nullptr);
  SplitTarget target(kMiB);
  RedisCommand get = Command({"GET", "k"}, &target);
  Outcome out;
  out.status = conn.Execute({&get, 1}, {&out.reply, 1});
  if (!out.status.ok()) {
    EXPECT_FALSE(conn.connected()) << "a failed connection is dropped";
  }
  out.places = target.places();
  if (out.reply != nullptr && RedisReplyLanded(*out.reply)) out.landed = target.landed();
  return out;
}

bool Says(const Status& s, std::string_view text) {
  return s.ToString().find(text) != std::string::npos;
}

TEST(RedisLandingTest, AHeaderArrivingByteByByteStillLands) {
  Outcome o = GetWithTarget({"$", "1", "1", "\r", "\nhello", " world", "\r", "\n"});
  ASSERT_TRUE(o.status.ok()) << o.status.ToString();
  EXPECT_EQ(o.landed, "hello world");
  o = GetWithTarget({"$0\r\n\r\n"});
  ASSERT_TRUE(o.status.ok()) << o.status.ToString();
  ASSERT_TRUE(RedisReplyLanded(*o.reply));
  EXPECT_EQ(o.reply->len, 0u);
}

TEST(RedisLandingTest, HostileBulkRepliesFailCleanly) {
  // Lengths past the cap are refused at the header: the target is never asked.
  Outcome o = GetWithTarget({"$999999999999\r\n", std::string(100000, 'x')});
  EXPECT_TRUE(o.status.IsUnavailable()) << o.status.ToString();
  EXPECT_TRUE(Says(o.status, "bulk string of 999999999999 bytes")) << o.status.ToString();
  EXPECT_EQ(o.places, 0);
  o = GetWithTarget({"$3000000\r\n", std::string(100000, 'x')});
  EXPECT_TRUE(Says(o.status, "bulk string of 3000000 bytes")) << o.status.ToString();
  EXPECT_EQ(o.places, 0);
  // Within the cap but larger than the target: declined, read as a reply, then cut short.
  o = GetWithTarget({"$1048577\r\n", std::string(1000, 'x')});
  EXPECT_TRUE(Says(o.status, "closed the connection")) << o.status.ToString();
  EXPECT_EQ(o.places, 1);
  // A value cut short while landing.
  o = GetWithTarget({"$100000\r\n", std::string(70000, 'x')});
  EXPECT_TRUE(o.status.IsUnavailable()) << o.status.ToString();
  EXPECT_TRUE(Says(o.status, "closed the connection")) << o.status.ToString();
  EXPECT_EQ(o.places, 1);
  // A value not ended by CRLF.
  o = GetWithTarget({"$5\r\nhello", "XY"});
  EXPECT_TRUE(o.status.IsUnavailable()) << o.status.ToString();
  EXPECT_TRUE(Says(o.status, "does not end in CRLF")) << o.status.ToString();
  // Malformed lengths are not the direct path's: they go to hiredis's parser, which refuses
  // them or (hiredis 0.14 is lenient: "$12a" reads as nil) makes a reply of them; either way
  // nothing lands.
  for (const std::string& bad :
       {std::string("$12a\r\nxx\r\n"), std::string("$+5\r\nhello\r\n"),
        std::string("$\r\n\r\n"), "$" + std::string(30, '1') + "\r\nx\r\n"}) {
    o = GetWithTarget({bad});
    EXPECT_EQ(o.places, 0) << bad;
    EXPECT_TRUE(!o.status.ok() || !RedisReplyLanded(*o.reply)) << bad;
  }
  // Other types are replies as before: nil, an integer; an array is refused.
  o = GetWithTarget({"$-1\r\n"});
  ASSERT_TRUE(o.status.ok()) << o.status.ToString();
  EXPECT_EQ(o.reply->type, REDIS_REPLY_NIL);
  o = GetWithTarget({":7\r\n"});
  ASSERT_TRUE(o.status.ok()) << o.status.ToString();
  EXPECT_EQ(o.reply->type, REDIS_REPLY_INTEGER);
  o = GetWithTarget({"*1\r\n:1\r\n"});
  EXPECT_TRUE(Says(o.status, "refused an array reply")) << o.status.ToString();
  EXPECT_EQ(o.places, 0);
}

// ---------------------------------------------------------------------------------------------
// Through the store.

BlockKey MakeKey(uint32_t chunk) { return RedisTestKey(chunk, chunk); }

// Whether `buffer` holds, at any offset, one of the 64-byte runs `value` is cut into.
bool HoldsRunOf(std::span<const std::byte> buffer, std::span<const std::byte> value) {
  constexpr size_t kRun = 64;
  const auto view = [](std::span<const std::byte> b, size_t at) {
    return std::string_view(reinterpret_cast<const char*>(b.data()) + at, kRun);
  };
  std::unordered_set<std::string_view> runs;
  for (size_t at = 0; at + kRun <= value.size(); at += kRun) runs.insert(view(value, at));
  for (size_t at = 0; at + kRun <= buffer.size(); ++at) {
    if (runs.count(view(buffer, at)) != 0) return true;
  }
  return false;
}

class RedisLandingStoreTest : public ::testing::TestWithParam<bool> {  // Sealed or not.
 protected:
  void SetUp() override {
    if (!RedisServerInstalled()) GTEST_SKIP() << "redis-server is not installed; skipping";
    Result<std::unique_ptr<RedisServer>> server = RedisServer::Start();
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
    RedisStoreOptions o{.endpoints = {server_->endpoint()}, .command_timeout_ms = 5000};
    if (GetParam()) {
      Result<RemoteKeyring> ring = RemoteKeyring::Parse("1 " + std::string(64, '7'));
      ASSERT_TRUE(ring.ok());
      o.keyring = *ring;
    } else {
      o.insecure_plaintext = true;
    }
    Result<std::unique_ptr<RedisStore>> store = RedisStore::Open(std::move(o));
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
  }

  std::unique_ptr<RedisServer> server_;
  std::unique_ptr<RedisStore> store_;
};

TEST_P(RedisLandingStoreTest, ValuesReadBackExactlyAndRefusedOnesLeaveNothing) {
  const std::vector<size_t> sizes = {0, 1, 4096, 256 * 1024 + 3, kMiB};
  std::vector<std::vector<std::byte>> payloads;
  std::vector<RemotePut> puts;
  for (size_t i = 0; i < sizes.size(); ++i) {
    payloads.push_back(RedisTestPayload(sizes[i], uint32_t(i)));
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    puts.push_back({.key = MakeKey(uint32_t(i)), .codec_id = 3, .raw_bytes = 9,
                    .payload = payloads[i]});
  }
  ASSERT_TRUE(store_->Put(puts).ok());
  for (const RemotePut& p : puts) ASSERT_TRUE(p.status.ok()) << p.status.ToString();
  std::vector<std::vector<std::byte>> outs;
  std::vector<RemoteGet> gets;
  for (size_t s : sizes) outs.emplace_back(s + 64, std::byte{0xAA});
  for (size_t i = 0; i < sizes.size(); ++i) {
    gets.push_back({.key = MakeKey(uint32_t(i)), .dst = outs[i]});
  }
  ASSERT_TRUE(store_->Get(gets).ok());
  for (size_t i = 0; i < sizes.size(); ++i) {
    ASSERT_TRUE(gets[i].status.ok()) << i << ": " << gets[i].status.ToString();
    EXPECT_EQ(gets[i].payload_bytes, sizes[i]);
    EXPECT_EQ(gets[i].codec_id, 3);
    EXPECT_EQ(gets[i].raw_bytes, 9u);
    EXPECT_TRUE(std::equal(payloads[i].begin(), payloads[i].end(), outs[i].begin())) << i;
  }

  // Damage one byte in the middle of the 1 MiB value's payload (or its ciphertext).
  const std::string name = store_->KeyName(MakeKey(4));
  Result<std::string> stored = RedisRawCommand(server_->port(), {"GET", name});
  ASSERT_TRUE(stored.ok());
  std::string damaged = *stored;
  damaged[damaged.size() / 2] = static_cast<char>(damaged[damaged.size() / 2] ^ 0x20);
  ASSERT_TRUE(RedisRawCommand(server_->port(), {"SET", name, damaged}).ok());
  std::fill(outs[4].begin(), outs[4].end(), std::byte{0xAA});
  RemoteGet get{.key = MakeKey(4), .dst = outs[4]};
  ASSERT_TRUE(store_->Get({&get, 1}).ok());
  EXPECT_EQ(get.status.code(), StatusCode::kCorruption) << get.status.ToString();
  const RemoteStoreStats stats = store_->Stats();
  EXPECT_EQ(GetParam() ? stats.auth_failures : stats.corrupt, 1u);
  EXPECT_FALSE(HoldsRunOf(outs[4], payloads[4])) << "refused plaintext stayed";
  EXPECT_FALSE(HoldsRunOf(outs[4], std::as_bytes(std::span(damaged))))
      << "refused stored bytes stayed";
}

INSTANTIATE_TEST_SUITE_P(SealedAndPlain, RedisLandingStoreTest, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "Sealed" : "Plaintext"; });

// A reply that stops half-way through a value: the entry fails (TimedOut) and nothing of the
// half that landed stays in the caller's buffer.
TEST(RedisLandingTest, AValueCutShortLeavesNothingInTheDestination) {
  const std::vector<std::byte> payload = RedisTestPayload(300 * 1024, 5);
  std::vector<std::byte> value;
  EncodeRemoteValue({.key = MakeKey(1)}, payload, &value);
  const std::string head = "$" + std::to_string(value.size()) + "\r\n";
  const std::string half(reinterpret_cast<const char*>(value.data()), value.size() / 2);
  FakeRedisServer server("127.0.0.1", [&](const std::vector<std::string>& args) {
    if (args[0] == "GET") return FakeRedisServer::Answer{head + half};
    return FakeRedisServer::Answer{args[0] == "PING" ? "+PONG\r\n" : "+OK\r\n"};
  });
  Result<std::unique_ptr<RedisStore>> store =
      RedisStore::Open({.endpoints = {server.endpoint()},
                        .command_timeout_ms = 300,
                        .insecure_plaintext = true});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  std::vector<std::byte> out(payload.size(), std::byte{0xAA});
  RemoteGet get{.key = MakeKey(1), .dst = out};
  ASSERT_TRUE((*store)->Get({&get, 1}).ok());
  EXPECT_TRUE(get.status.IsTimedOut()) << get.status.ToString();
  EXPECT_FALSE(HoldsRunOf(out, std::span(payload).first(payload.size() / 3)));
}

}  // namespace
}  // namespace kvtier
