// Goal: RedisConnection's own wire path (commands written with writev straight from the caller's
// memory, replies read in large reads and parsed by hiredis's reader) is byte-exact and fails
// clearly: pipelined arguments that are empty, binary (NUL, CR, LF) and several MiB (larger than
// a socket buffer, so writes are partial) arrive exactly and come back exactly, also with an
// ASKING prefix; hiredis's reader buffer is kept between replies only up to a bound, so one
// huge reply does not pin its size to the connection; a reply that breaks the protocol is
// Unavailable naming the parse error, a server that closes in the middle of a value is
// Unavailable saying so, and either leaves the connection reconnectable.
// Method: a real redis-server (redis_test_util.h) for the round trips; for the failures, a
// loopback socket in a thread that answers the connection's PING and then writes the bytes the
// test gives it. Skipped when redis-server is not installed.
#include "tiers/redis/redis_connection.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

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
  if (n >= 4) s.replace(0, 4, std::string("\r\n\0$", 4));  // Framing bytes inside a value.
  return s;
}

RedisCommand Command(std::initializer_list<std::string_view> args, bool asking = false) {
  RedisCommand c;
  for (std::string_view a : args) c.args[c.argc++] = a;
  c.asking = asking;
  return c;
}

TEST(RedisConnectionTest, PipelinedBinaryAndMultiMiBArgumentsRoundTripExactly) {
  if (!RedisServerInstalled()) GTEST_SKIP() << "redis-server is not installed; skipping";
  Result<std::unique_ptr<RedisServer>> server = RedisServer::Start();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  RedisConnection conn(RedisEndpoint{.host = "127.0.0.1", .port = (*server)->port()},
                       RedisConnectionOptions{.command_timeout_ms = 5000}, nullptr);
  const std::vector<std::string> values = {"", std::string(1, '\0'), Binary(4, 1),
                                           Binary(3 * 1024 * 1024 + 7, 2),
                                           Binary(9 * 1024 * 1024, 3)};
  const std::vector<std::string> keys = {"k0", "k1", "k2", "k3", "k4"};
  std::vector<RedisCommand> commands;
  for (size_t i = 0; i < keys.size(); ++i) commands.push_back(Command({"SET", keys[i], values[i]}));
  for (size_t i = 0; i < keys.size(); ++i) {
    // ASKING on a server without cluster support is an error reply, which the connection
    // consumes; the GET's reply takes its place.
    commands.push_back(Command({"GET", keys[i]}, /*asking=*/i % 2 == 1));
  }
  commands.push_back(Command({"STRLEN", keys[4]}));
  std::vector<RedisReplyPtr> replies(commands.size());
  ASSERT_TRUE(conn.Execute(commands, replies).ok());
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_EQ(replies[i]->type, REDIS_REPLY_STATUS) << i;
    EXPECT_EQ(std::string(replies[i]->str, replies[i]->len), "OK");
    const redisReply* got = replies[keys.size() + i].get();
    ASSERT_EQ(got->type, REDIS_REPLY_STRING) << "GET " << keys[i];
    EXPECT_TRUE(std::string(got->str, got->len) == values[i]) << "GET " << keys[i];
  }
  EXPECT_EQ(replies.back()->integer, static_cast<long long>(values[4].size()));

  // The same connection keeps working for a second batch (its buffers are reused).
  std::vector<RedisCommand> again = {Command({"GET", keys[3]}), Command({"GET", keys[2]})};
  std::vector<RedisReplyPtr> replies2(again.size());
  ASSERT_TRUE(conn.Execute(again, replies2).ok());
  EXPECT_TRUE(std::string(replies2[0]->str, replies2[0]->len) == values[3]);
  EXPECT_TRUE(std::string(replies2[1]->str, replies2[1]->len) == values[2]);
}

// hiredis's reader buffer is kept between replies up to reader_buffer_retain_bytes: a reply
// larger than that (as a hostile server could send) does not leave its buffer pinned to the
// connection, a smaller one does (no page faults to grow it again for the next value).
TEST(RedisConnectionTest, AHugeReplyDoesNotLeaveItsBufferRetained) {
  if (!RedisServerInstalled()) GTEST_SKIP() << "redis-server is not installed; skipping";
  Result<std::unique_ptr<RedisServer>> server = RedisServer::Start();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  constexpr uint64_t kRetain = 1 * kMiB;
  RedisConnection conn(RedisEndpoint{.host = "127.0.0.1", .port = (*server)->port()},
                       RedisConnectionOptions{.command_timeout_ms = 5000,
                                              .reader_buffer_retain_bytes = kRetain},
                       nullptr);
  const std::string huge = Binary(9 * kMiB, 5);
  const std::string small = Binary(200 * 1024, 6);  // Its buffer: at most twice that.
  std::vector<RedisCommand> puts = {Command({"SET", "huge", huge}),
                                    Command({"SET", "small", small})};
  std::vector<RedisReplyPtr> put_replies(puts.size());
  ASSERT_TRUE(conn.Execute(puts, put_replies).ok());

  std::vector<RedisCommand> get_small = {Command({"GET", "small"})};
  std::vector<RedisReplyPtr> small_reply(1);
  ASSERT_TRUE(conn.Execute(get_small, small_reply).ok());
  EXPECT_TRUE(std::string(small_reply[0]->str, small_reply[0]->len) == small);
  EXPECT_GE(conn.reader_buffer_bytes(), small.size()) << "a buffer under the limit is kept";

  std::vector<RedisCommand> get_huge = {Command({"GET", "huge"})};
  std::vector<RedisReplyPtr> huge_reply(1);
  ASSERT_TRUE(conn.Execute(get_huge, huge_reply).ok());
  EXPECT_TRUE(std::string(huge_reply[0]->str, huge_reply[0]->len) == huge);
  EXPECT_LE(conn.reader_buffer_bytes(), kRetain) << "the huge reply's buffer was released";

  // A pipeline whose earlier reply is huge: released once the last reply is read.
  std::vector<RedisCommand> both = {Command({"GET", "huge"}), Command({"GET", "small"})};
  std::vector<RedisReplyPtr> both_replies(both.size());
  ASSERT_TRUE(conn.Execute(both, both_replies).ok());
  EXPECT_TRUE(std::string(both_replies[0]->str, both_replies[0]->len) == huge);
  EXPECT_TRUE(std::string(both_replies[1]->str, both_replies[1]->len) == small);
  EXPECT_LE(conn.reader_buffer_bytes(), kRetain);

  // The default limit keeps a multi-MiB value's buffer (the fast path of large values).
  RedisConnection keeps(RedisEndpoint{.host = "127.0.0.1", .port = (*server)->port()},
                        RedisConnectionOptions{.command_timeout_ms = 5000}, nullptr);
  std::vector<RedisReplyPtr> kept_reply(1);
  ASSERT_TRUE(keeps.Execute(get_huge, kept_reply).ok());
  EXPECT_GE(keeps.reader_buffer_bytes(), huge.size());
}

Status GetFrom(uint16_t port) {
  RedisConnection conn(RedisEndpoint{.host = "127.0.0.1", .port = port},
                       RedisConnectionOptions{.command_timeout_ms = 5000}, nullptr);
  std::vector<RedisCommand> commands = {Command({"GET", "k"})};
  std::vector<RedisReplyPtr> replies(1);
  const Status s = conn.Execute(commands, replies);
  EXPECT_FALSE(conn.connected()) << "a failed connection is dropped, to be reconnected";
  return s;
}

TEST(RedisConnectionTest, AReplyThatBreaksTheProtocolIsUnavailableAndNamed) {
  ScriptedRedisServer server({"?what\r\n"});
  const Status s = GetFrom(server.port());
  EXPECT_TRUE(s.IsUnavailable()) << s.ToString();
  EXPECT_NE(s.ToString().find("read reply"), std::string::npos) << s.ToString();
  EXPECT_NE(s.ToString().find("Protocol error"), std::string::npos) << s.ToString();
}

TEST(RedisConnectionTest, AServerClosingInsideAValueIsUnavailable) {
  ScriptedRedisServer server({"$1000000\r\n" + std::string(70000, 'x')});
  const Status s = GetFrom(server.port());
  EXPECT_TRUE(s.IsUnavailable()) << s.ToString();
  EXPECT_NE(s.ToString().find("closed the connection"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace kvtier
