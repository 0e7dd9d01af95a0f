// Test-only helpers for the Redis store tests: run real redis-server processes on free loopback
// ports in temporary directories (killed when the helper is destroyed, and by the kernel if the
// test process dies first), form a Redis Cluster with redis-cli, and talk to a server with a raw
// hiredis connection (to plant garbage values, migrate slots, sleep the server); and
// FakeRedisServer, a scripted RESP server on a loopback address that plays a slow or hostile
// node (trickled, endless or oversized replies, a slot map or redirects of its choice).
//
// Test-only: linked into test binaries, never into the engine.
// Thread safety: none, except FakeRedisServer's counters (read from the test thread while its
// own thread serves).
// Ownership: RedisServer owns its process and directory; RedisCluster owns its servers;
// FakeRedisServer owns its socket and thread (stopped and joined by its destructor).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/block_key.h"
#include "core/mutex.h"
#include "kvtier/result.h"
#include "testing/test_util.h"

namespace kvtier {

// True when a redis-server binary is on PATH. When it is not and the environment says
// KVTIER_REQUIRE_RESOURCES=1 (CI), also records a fatal test failure, so the caller's GTEST_SKIP
// leaves the test failed (and its body unrun): a run without redis-server cannot pass by skipping.
bool RedisServerInstalled();

class RedisServer {
 public:
  // Starts redis-server on a free port (or `port` when non-zero) and waits until it accepts
  // connections. "{dir}" in an extra argument is replaced by the server's directory.
  static Result<std::unique_ptr<RedisServer>> Start(std::vector<std::string> extra_args = {},
                                                    uint16_t port = 0);
  ~RedisServer();  // SIGKILL and reap.

  uint16_t port() const { return port_; }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }
  const std::string& dir() const { return dir_.path(); }

  void Kill();       // SIGKILL and reap; no-op when not running.
  Status Restart();  // Starts again on the same port with the same arguments.
  void Pause();      // SIGSTOP: the socket accepts, nothing answers.
  void Resume();     // SIGCONT.

 private:
  RedisServer(ScopedTempDir dir, uint16_t port, std::vector<std::string> extra_args)
      : dir_(std::move(dir)), port_(port), extra_args_(std::move(extra_args)) {}
  Status Spawn();

  ScopedTempDir dir_;
  uint16_t port_;
  std::vector<std::string> extra_args_;
  pid_t pid_ = -1;
};

// Sends one command on a fresh connection and returns the reply as text: a string, status or
// integer reply as its text, nil as "(nil)", an array as its elements joined by '\n'. An error
// reply becomes an IoError Status carrying the server's text.
Result<std::string> RedisRawCommand(uint16_t port, const std::vector<std::string>& args,
                                    const std::string& user = "", const std::string& password = "");

// Three (or `masters`) cluster-enabled servers joined by `redis-cli --cluster create`, waited on
// until every node reports cluster_state:ok and agrees on the slot map.
class RedisCluster {
 public:
  static Result<std::unique_ptr<RedisCluster>> Start(int masters = 3);
  RedisServer& node(size_t i) { return *nodes_[i]; }
  size_t size() const { return nodes_.size(); }
  // The node id (CLUSTER MYID) of node i.
  Result<std::string> NodeId(size_t i);
  // Index of the node whose port is `port`, or size() if none.
  size_t IndexOfPort(uint16_t port) const;

 private:
  std::vector<std::unique_ptr<RedisServer>> nodes_;
};

// A scripted Redis on `address` (a loopback address such as "127.0.0.2") and a free port. It
// serves each connection on its own thread: each complete command (a RESP array of bulk strings) is
// answered with what the handler returns for its arguments, then, by the answer's tail, with
// nothing more, a byte every trickle_interval_ms, or an endless stream of 'x'. A trickle or a
// stream ends (and the connection is closed) when the client hangs up, after tail_bytes_max
// bytes or tail_ms_max, or when the server is destroyed. Without a handler every command gets
// +OK (PING gets +PONG).
class FakeRedisServer {
 public:
  enum class Tail : uint8_t { kNone = 0, kTrickle = 1, kEndless = 2 };
  struct Answer {
    std::string bytes;
    Tail tail = Tail::kNone;
  };
  // Called on the connections' threads, possibly concurrently.
  using Handler = std::function<Answer(const std::vector<std::string>& args)>;
  struct Options {
    uint32_t trickle_interval_ms = 100;
    uint64_t tail_bytes_max = 64ull << 20;
    uint32_t tail_ms_max = 10'000;
  };

  FakeRedisServer(const std::string& address, Handler handler);
  FakeRedisServer(const std::string& address, Handler handler, Options options);
  ~FakeRedisServer();
  FakeRedisServer(const FakeRedisServer&) = delete;
  FakeRedisServer& operator=(const FakeRedisServer&) = delete;

  uint16_t port() const { return port_; }
  std::string endpoint() const { return address_ + ":" + std::to_string(port_); }
  int accepted() const { return accepted_.load(); }           // Connections accepted.
  int commands(const std::string& name) const KV_EXCLUDES(seen_mu_);  // Received, by name.
  uint64_t tail_bytes_sent() const { return tail_bytes_.load(); }  // Over all tails so far.

 private:
  void Serve();
  void ServeClient(int fd);
  void SendTail(int fd, Tail tail);

  const std::string address_;
  const Handler handler_;
  const Options options_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::atomic<uint64_t> tail_bytes_{0};
  mutable Mutex seen_mu_;
  std::vector<std::string> seen_ KV_GUARDED_BY(seen_mu_);  // Each command's first argument.
  std::thread thread_;
};

// A block key whose chunk hash is derived from `chunk` (distinct chunks, distinct keys), for
// `layer`; and `n` payload bytes derived from `seed` (distinct seeds, distinct bytes).
BlockKey RedisTestKey(uint32_t chunk, uint32_t layer);
std::vector<std::byte> RedisTestPayload(size_t n, uint32_t seed);

// A loopback server for one connection that plays a broken Redis: it answers PING with +PONG,
// then, once a GET has arrived, sends `chunks` one after another (waiting `pause` before each, so
// that they arrive as separate reads) and closes the connection.
class ScriptedRedisServer {
 public:
  explicit ScriptedRedisServer(std::vector<std::string> chunks,
                               std::chrono::milliseconds pause = std::chrono::milliseconds(0));
  ~ScriptedRedisServer();  // Joins the serving thread (it ends once the connection is served).
  ScriptedRedisServer(const ScriptedRedisServer&) = delete;
  ScriptedRedisServer& operator=(const ScriptedRedisServer&) = delete;

  uint16_t port() const { return port_; }

 private:
  void Serve();

  const std::vector<std::string> chunks_;
  const std::chrono::milliseconds pause_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::thread thread_;
};

}  // namespace kvtier
