// Goal: a slow or hostile Redis node costs the client a bounded time and bounded memory, and
// cannot send it (and its password) to a host of the node's choosing:
//   - a reply trickled a byte at a time fails its command at the command's deadline (TimedOut),
//     trips the node's circuit breaker, and the next call is refused without the network; a
//     trickled handshake (PING) does not hold Open either;
//   - a bulk string declaring more bytes than a reply may hold is refused at its header, an
//     endless status line or a reply that never ends once it passes the byte cap;
//   - an array reply to a command that expects none, arrays nested too deep, and arrays whose
//     declared sizes add up past the reply's element budget are refused;
//   - CLUSTER SLOTS ranges, MOVED and ASK naming a host that is neither a seed's nor allowed are
//     refused and counted, never connected to, never sent AUTH; an allowed host is used.
// Method: FakeRedisServer (redis_test_util.h) plays the node on 127.0.0.1 and a trap on
// 127.0.0.2 (another loopback address: another host as far as the client can tell); the store or
// a bare RedisConnection talks to them. Deadlines are a few hundred ms; no outcome depends on
// timing except "completes within a generous bound". No redis-server is needed.
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "testing/test_util.h"
#include "tiers/redis/crc16.h"
#include "tiers/redis/redis_connection.h"
#include "tiers/redis/redis_store.h"
#include "tiers/redis/redis_test_util.h"

namespace kvtier {
namespace {

using Answer = FakeRedisServer::Answer;
using Tail = FakeRedisServer::Tail;

constexpr uint32_t kDeadlineMs = 300;
// "Completes within a generous bound": far above the deadline, far below the fake's 10 s tails.
constexpr double kBoundSeconds = 5.0;

BlockKey MakeKey(uint32_t chunk) {
  BlockKey key;
  for (size_t i = 0; i < key.chunk_hash.size(); ++i) {
    key.chunk_hash[i] = static_cast<uint8_t>(chunk * 37 + i);
  }
  return key;
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

bool Contains(const Status& s, std::string_view text) {
  return s.ToString().find(text) != std::string::npos;
}

RedisStoreOptions StandaloneOn(const FakeRedisServer& server) {
  return {.endpoints = {server.endpoint()},
          .connect_timeout_ms = kDeadlineMs,
          .command_timeout_ms = kDeadlineMs,
          .breaker = {.failures_to_open = 1, .open_cooldown_us = 60'000'000},
          .insecure_plaintext = true};
}

TEST(RedisHostileTest, TrickledReplyFailsWithinTheDeadlineAndTripsTheBreaker) {
  FakeRedisServer server("127.0.0.1", [](const std::vector<std::string>& args) -> Answer {
    if (args[0] == "PING") return {"+PONG\r\n"};
    if (args[0] == "EXISTS") return {"$1000000\r\n", Tail::kTrickle};  // A byte every 100 ms.
    return {"+OK\r\n"};
  });
  Result<std::unique_ptr<RedisStore>> store = RedisStore::Open(StandaloneOn(server));
  ASSERT_TRUE(store.ok()) << store.status().ToString();

  RemoteExists exists{.key = MakeKey(1)};
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE((*store)->Exists({&exists, 1}).ok());
  EXPECT_LT(SecondsSince(start), kBoundSeconds) << "the trickled reply held the call";
  EXPECT_TRUE(exists.status.IsTimedOut()) << exists.status.ToString();
  EXPECT_FALSE(exists.exists);
  const RemoteStoreStats stats = (*store)->Stats();
  EXPECT_EQ(stats.timeouts, 1u);
  EXPECT_EQ(stats.breaker_trips, 1u);
  EXPECT_EQ(stats.breaker_state, BreakerState::kOpen);

  // The breaker now answers for the node: no new connection, no command sent.
  RemoteExists again{.key = MakeKey(2)};
  ASSERT_TRUE((*store)->Exists({&again, 1}).ok());
  EXPECT_TRUE(again.status.IsUnavailable()) << again.status.ToString();
  EXPECT_TRUE(Contains(again.status, "circuit breaker open")) << again.status.ToString();
  EXPECT_EQ(server.commands("EXISTS"), 1);
}

TEST(RedisHostileTest, TrickledHandshakeDoesNotHoldOpen) {
  FakeRedisServer server("127.0.0.1", [](const std::vector<std::string>&) -> Answer {
    return {"+PO", Tail::kTrickle};
  });
  const auto start = std::chrono::steady_clock::now();
  Result<std::unique_ptr<RedisStore>> store = RedisStore::Open(StandaloneOn(server));
  EXPECT_LT(SecondsSince(start), kBoundSeconds) << "the trickled PING held Open";
  ASSERT_TRUE(store.ok()) << store.status().ToString();  // Unreachable is not an error.
  EXPECT_EQ((*store)->Stats().breaker_state, BreakerState::kOpen);
}

// A bare connection to `server` with a long deadline, so that only the byte and element bounds
// can end the reads below.
RedisConnection Connect(const FakeRedisServer& server, uint64_t reply_bytes_max) {
  return RedisConnection(RedisEndpoint{.host = "127.0.0.1", .port = server.port()},
                         RedisConnectionOptions{.command_timeout_ms = 10'000,
                                                .reply_bytes_max = reply_bytes_max},
                         nullptr);
}

Status RunOne(RedisConnection* conn, std::string_view name, uint32_t elements_max = 0) {
  RedisCommand command;
  command.args[command.argc++] = name;
  command.reply_elements_max = elements_max;
  RedisReplyPtr reply;
  const Status s = conn->Execute({&command, 1}, {&reply, 1});
  if (!s.ok()) {
    EXPECT_FALSE(conn->connected()) << "a refused reply drops the connection";
  }
  return s;
}

TEST(RedisHostileTest, HugeDeclaredLengthIsRefusedAtItsHeader) {
  FakeRedisServer server("127.0.0.1", [](const std::vector<std::string>& args) -> Answer {
    if (args[0] == "PING") return {"+PONG\r\n"};
    return {"$999999999999\r\n", Tail::kEndless};
  });
  RedisConnection conn = Connect(server, kRedisReplyBytesMax);
  const Status s = RunOne(&conn, "GET");
  EXPECT_TRUE(s.IsUnavailable()) << s.ToString();
  EXPECT_TRUE(Contains(s, "bulk string of 999999999999 bytes")) << s.ToString();
  // Refused at the header: what the server could push before the client hung up is what the
  // sockets buffer, not the declared length nor the fake's 64 MiB.
  EXPECT_LT(server.tail_bytes_sent(), uint64_t{32} << 20);
}

TEST(RedisHostileTest, EndlessRepliesAreRefusedAtTheByteCap) {
  constexpr uint64_t kCap = 4 * kMiB;
  std::string many = "*65536\r\n";  // About 7 MiB of small strings: within the element budget.
  for (int i = 0; i < 65536; ++i) many += "$100\r\n" + std::string(100, 'v') + "\r\n";
  FakeRedisServer server("127.0.0.1", [&many](const std::vector<std::string>& args) -> Answer {
    if (args[0] == "PING") return {"+PONG\r\n"};
    if (args[0] == "LINE") return {"+", Tail::kEndless};
    if (args[0] == "BULK") return {"$3000000\r\n" + std::string(3000000, 'b') + "\r\n"};
    return {many};
  });
  RedisConnection conn = Connect(server, kCap);
  Status s = RunOne(&conn, "LINE");
  EXPECT_TRUE(s.IsUnavailable()) << s.ToString();
  EXPECT_TRUE(Contains(s, "status or error line of more than")) << s.ToString();
  s = RunOne(&conn, "MANY", kRedisClusterSlotsElementsMax);
  EXPECT_TRUE(s.IsUnavailable()) << s.ToString();
  EXPECT_TRUE(Contains(s, "more than " + std::to_string(kCap) + " bytes")) << s.ToString();
  // A bulk string within the cap is read whole.
  RedisCommand bulk;
  bulk.args[bulk.argc++] = "BULK";
  RedisReplyPtr reply;
  ASSERT_TRUE(conn.Execute({&bulk, 1}, {&reply, 1}).ok());
  EXPECT_EQ(reply->len, 3000000u);
}

TEST(RedisHostileTest, ArraysAreBoundedBySizeTotalAndDepth) {
  std::string wide = "*16\r\n";  // 2^20 small integers in 4 MiB: ~75 MiB of reply objects.
  for (int i = 0; i < 16; ++i) {
    wide += "*65536\r\n";
    for (int k = 0; k < 65536; ++k) wide += ":1\r\n";
  }
  const std::string slots =
      "*2\r\n*3\r\n:0\r\n:8191\r\n*4\r\n$9\r\n127.0.0.1\r\n:7000\r\n$2\r\nid\r\n"
      "*2\r\n$8\r\nhostname\r\n$1\r\nh\r\n"
      "*3\r\n:8192\r\n:16383\r\n*3\r\n$9\r\n127.0.0.1\r\n:7001\r\n$2\r\nid\r\n";
  FakeRedisServer server("127.0.0.1", [&](const std::vector<std::string>& args) -> Answer {
    if (args[0] == "PING") return {"+PONG\r\n"};
    if (args[0] == "GET") return {"*1\r\n:1\r\n"};
    if (args[0] == "DEEP") return {"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n"};
    if (args[0] == "WIDE") return {wide};
    return {slots};
  });
  RedisConnection conn = Connect(server, kRedisReplyBytesMax);
  Status s = RunOne(&conn, "GET");
  EXPECT_TRUE(Contains(s, "refused an array reply to this command")) << s.ToString();
  s = RunOne(&conn, "DEEP", kRedisClusterSlotsElementsMax);
  EXPECT_TRUE(Contains(s, "nested more than 4 deep")) << s.ToString();
  s = RunOne(&conn, "WIDE", kRedisClusterSlotsElementsMax);
  EXPECT_TRUE(Contains(s, "elements in all")) << s.ToString();
  // A CLUSTER SLOTS answer (node metadata included: four levels) is within every bound.
  RedisCommand command;
  command.args[command.argc++] = "SLOTS";
  command.reply_elements_max = kRedisClusterSlotsElementsMax;
  RedisReplyPtr reply;
  ASSERT_TRUE(conn.Execute({&command, 1}, {&reply, 1}).ok());
  EXPECT_EQ(reply->elements, 2u);
}

// ---------------------------------------------------------------------------------------------
// Cluster endpoints.

// "*N" then one "[first, last, [host, port]]" per range.
std::string SlotMap(const std::vector<std::tuple<int, int, std::string, uint16_t>>& ranges) {
  std::string out = "*" + std::to_string(ranges.size()) + "\r\n";
  for (const auto& [first, last, host, port] : ranges) {
    out += "*3\r\n:" + std::to_string(first) + "\r\n:" + std::to_string(last) + "\r\n*2\r\n$" +
           std::to_string(host.size()) + "\r\n" + host + "\r\n:" + std::to_string(port) + "\r\n";
  }
  return out;
}

// A node on 127.0.0.1 whose CLUSTER SLOTS gives it slots [0, 8191] and the trap (on 127.0.0.2)
// [8192, 16383], and whose GETs answer `get_answer(n)` for the n-th GET (nil by default).
class HostileCluster {
 public:
  explicit HostileCluster(std::function<std::string(int)> get_answer = nullptr)
      : trap_("127.0.0.2", nullptr),
        node_("127.0.0.1", [this, get_answer](const std::vector<std::string>& args) -> Answer {
          if (args[0] == "CLUSTER") {
            return {SlotMap({{0, 8191, "127.0.0.1", node_port_.load()},
                             {8192, 16383, "127.0.0.2", trap_.port()}})};
          }
          if (args[0] == "GET") return {get_answer ? get_answer(gets_++) : "$-1\r\n"};
          return {args[0] == "PING" ? "+PONG\r\n" : "+OK\r\n"};
        }) {
    node_port_ = node_.port();
  }

  const FakeRedisServer& trap() const { return trap_; }
  RedisStoreOptions Options(CapturingLogger* logger) const {
    return {.endpoints = {node_.endpoint()},
            .mode = RedisMode::kCluster,
            .password = "secret",
            .connect_timeout_ms = kDeadlineMs,
            .command_timeout_ms = kDeadlineMs,
            .topology_refresh_interval_us = 0,
            .insecure_plaintext = true,
            .logger = logger};
  }

 private:
  FakeRedisServer trap_;  // Before node_: node_'s handler reads its port.
  std::atomic<uint16_t> node_port_{0};
  std::atomic<int> gets_{0};
  FakeRedisServer node_;
};

// A key whose slot is below 8192 (`low`) or not.
BlockKey KeyInHalf(const RedisStore& store, bool low) {
  for (uint32_t i = 0;; ++i) {
    const BlockKey key = MakeKey(i);
    if ((RedisKeySlot(store.KeyName(key)) < 8192) == low) return key;
  }
}

TEST(RedisHostileTest, ForeignSlotMapRangesAreRefusedAndNeverConnected) {
  HostileCluster cluster;
  CapturingLogger logger;
  Result<std::unique_ptr<RedisStore>> store = RedisStore::Open(cluster.Options(&logger));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  std::vector<std::byte> out(64);
  std::vector<RemoteGet> gets = {{.key = KeyInHalf(**store, true), .dst = out},
                                 {.key = KeyInHalf(**store, false), .dst = out}};
  ASSERT_TRUE((*store)->Get(gets).ok());
  EXPECT_TRUE(gets[0].status.IsNotFound()) << gets[0].status.ToString();  // The node's half.
  EXPECT_TRUE(gets[1].status.IsUnavailable()) << gets[1].status.ToString();
  EXPECT_EQ(cluster.trap().accepted(), 0) << "connected to a host the seeds did not name";
  EXPECT_EQ(cluster.trap().commands("AUTH"), 0);
  EXPECT_GE((*store)->Stats().endpoints_refused, 1u);
  EXPECT_EQ(logger.CountContaining("refused 127.0.0.2:"), 1u) << "logged once per endpoint";
}

TEST(RedisHostileTest, AnAllowedHostIsUsed) {
  HostileCluster cluster;
  CapturingLogger logger;
  RedisStoreOptions options = cluster.Options(&logger);
  options.cluster_allowed_hosts = {"127.0.0.2"};
  Result<std::unique_ptr<RedisStore>> store = RedisStore::Open(std::move(options));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  std::vector<std::byte> out(64);
  RemoteGet get{.key = KeyInHalf(**store, false), .dst = out};
  ASSERT_TRUE((*store)->Get({&get, 1}).ok());
  EXPECT_GE(cluster.trap().accepted(), 1);
  EXPECT_EQ(cluster.trap().commands("GET"), 1);
  EXPECT_EQ((*store)->Stats().endpoints_refused, 0u);
  // Bad entries in the list are refused at open, naming the entry.
  options = cluster.Options(&logger);
  options.cluster_allowed_hosts = {"a b"};
  const Status bad = RedisStore::Open(std::move(options)).status();
  EXPECT_TRUE(bad.IsInvalidArgument()) << bad.ToString();
  EXPECT_TRUE(Contains(bad, "'a b'")) << bad.ToString();
}

TEST(RedisHostileTest, ForeignMovedAndAskAreRefusedAndNeverConnected) {
  std::atomic<uint16_t> trap_port{0};  // Set before the first GET.
  HostileCluster cluster([&trap_port](int n) {
    return std::string(n == 0 ? "-MOVED " : "-ASK ") + "100 127.0.0.2:" +
           std::to_string(trap_port.load()) + "\r\n";
  });
  trap_port = cluster.trap().port();
  CapturingLogger logger;
  Result<std::unique_ptr<RedisStore>> store = RedisStore::Open(cluster.Options(&logger));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const uint64_t refused_by_map = (*store)->Stats().endpoints_refused;
  std::vector<std::byte> out(64);
  for (const char* kind : {"MOVED", "ASK"}) {
    RemoteGet get{.key = KeyInHalf(**store, true), .dst = out};
    ASSERT_TRUE((*store)->Get({&get, 1}).ok());
    EXPECT_TRUE(get.status.IsUnavailable()) << kind << ": " << get.status.ToString();
    EXPECT_TRUE(Contains(get.status, "neither a seed's nor an allowed host"))
        << kind << ": " << get.status.ToString();
  }
  const RemoteStoreStats stats = (*store)->Stats();
  EXPECT_EQ(stats.redirects_refused, 2u);
  EXPECT_EQ(stats.endpoints_refused, refused_by_map + 2);
  EXPECT_EQ(stats.redirects_moved + stats.redirects_ask, 0u);
  EXPECT_EQ(cluster.trap().accepted(), 0) << "followed a redirect to a foreign host";
}

TEST(RedisHostileTest, ASeedsNameAllowsTheAddressesItResolvesTo) {
  std::atomic<uint16_t> port{0};
  FakeRedisServer node("127.0.0.1", [&port](const std::vector<std::string>& args) -> Answer {
    if (args[0] == "CLUSTER") return {SlotMap({{0, 16383, "127.0.0.1", port.load()}})};
    if (args[0] == "GET") return {"$-1\r\n"};
    return {"+PONG\r\n"};
  });
  port = node.port();
  Result<std::unique_ptr<RedisStore>> store =
      RedisStore::Open({.endpoints = {"localhost:" + std::to_string(node.port())},
                        .mode = RedisMode::kCluster,
                        .command_timeout_ms = kDeadlineMs,
                        .topology_refresh_interval_us = 0,
                        .insecure_plaintext = true});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  std::vector<std::byte> out(64);
  RemoteGet get{.key = MakeKey(3), .dst = out};
  ASSERT_TRUE((*store)->Get({&get, 1}).ok());
  EXPECT_TRUE(get.status.IsNotFound()) << get.status.ToString();
  EXPECT_EQ((*store)->Stats().endpoints_refused, 0u);
}

}  // namespace
}  // namespace kvtier
