// A client of kvtier's node service (serve/server.h): an Engine whose calls go to the service over
// its Unix socket, with KV bytes in the staging region the service shares with the connection.
//
// The same Engine interface as the in-process engine, with these differences:
//   - Load and Store take any buffers; buffers from AcquireStaging (inside the shared region)
//     are used in place, others are copied into and out of leased staging.
//   - Namespaces name tenants: MakeNamespace(salt) sends the salt as a tenant id, from which the
//     service derives the namespace (serve/server.h); the Namespace a client holds is a local
//     handle, valid across reconnects.
//   - Either side may die. While the service is unreachable, Lookup returns 0 matched tokens,
//     Load fails with Unavailable, Store skips (Unavailable), Prefetch, Hint and Pin do nothing;
//     the client reconnects by itself at the next call after reconnect_interval_ms. A call never
//     waits longer than timeout_ms for the service; a load in flight when the connection drops
//     fails its remaining layers with Unavailable (recompute them).
//   - options() holds the service's layout; Stats() is the service engine's.
//
// Thread safety: every method may be called from any thread. Ownership: as Engine; buffers are
// borrowed until the handle's Wait returned (as Engine).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/kv_layout.h"
#include "core/logger.h"
#include "engine/engine.h"

namespace kvtier::serve {

struct ClientOptions {
  std::string socket_path;  // Required.
  std::string token;        // Sent in the hello; required when the service has one.
  std::string name;         // How the service names this client in logs and /metrics.
  // With a layout, Connect succeeds while the service is not reachable yet (lookups miss until
  // it is), and a service with another layout is refused at each connect. Without, the first
  // connect must succeed and the service's layout is taken.
  std::optional<KvLayout> layout;
  uint32_t timeout_ms = 10000;            // Longest wait for any reply.
  uint32_t reconnect_interval_ms = 1000;  // Between connection attempts while down.
  Logger* logger = nullptr;               // Borrowed; nullptr: silent.

  Status Validate() const;
};

// What a connected client knows about the service (for tools and tests).
struct ClientState {
  bool connected = false;
  uint64_t connects = 0;        // Successful handshakes.
  uint64_t disconnects = 0;     // Connections lost (service died, timeout, protocol error).
  uint64_t failed_requests = 0; // Requests failed with Unavailable/TimedOut by a lost connection.
  uint64_t copied_bytes = 0;    // Bytes copied through staging for buffers outside the region.
};

class RemoteEngine : public Engine {
 public:
  // Staging in the shared region: `bytes` rounded up to whole blocks, alive until released.
  // Buffers from here make Load and Store zero-copy. Unavailable while disconnected; Busy when
  // the region is full.
  virtual Result<std::span<std::byte>> AcquireStaging(size_t bytes) = 0;
  virtual void ReleaseStaging(std::span<std::byte> buffer) = 0;
  virtual ClientState State() = 0;
  // The service's state and its engine's stats as JSON (ServerStats, kvtier ctl stats).
  virtual Result<std::string> ServiceStatsJson() = 0;
  virtual Status Drain() = 0;
  // Server::ClearTenant on the service: the tenant `tenant` of uid `uid` (this client's own, or
  // any when the client runs as the service's uid or root) moves to a new namespace.
  struct ClearResult {
    uint64_t generation = 0;
    bool persistent = false;  // Recorded in the service's state file (survives restarts).
  };
  virtual Result<ClearResult> ClearTenant(uint32_t uid, std::string_view tenant) = 0;
};

Result<std::unique_ptr<RemoteEngine>> Connect(const ClientOptions& options);

}  // namespace kvtier::serve
