// Test-only helpers for the Redis store tests: run real redis-server processes on free loopback
// ports in temporary directories (killed when the helper is destroyed, and by the kernel if the
// test process dies first), form a Redis Cluster with redis-cli, and talk to a server with a raw
// hiredis connection (to plant garbage values, migrate slots, sleep the server).
//
// Test-only: linked into test binaries, never into the engine.
// Thread safety: none; one test thread drives a helper.
// Ownership: RedisServer owns its process and directory; RedisCluster owns its servers.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

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

}  // namespace kvtier
