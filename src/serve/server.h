// kvtier's node service (docs/serve.md): one process owns the node's tiers (an Engine) and serves
// inference engines on a Unix socket. Clients (serve/client.h) get the same Engine interface as
// the in-process engine; KV bytes never cross the socket: each connection shares a staging
// region (a sealed memfd, mapped once per connection on both sides) in which the client's loads
// land and from which its stores are taken.
//
//   Server::Start   takes the socket's lock (a second service on it is refused, naming the
//                   holder's pid), binds, listens, and serves each client on its own threads;
//   Server::Stop    stops accepting, closes every connection, waits for every request in flight
//                   (its leases end), and returns; the caller then flushes the engine.
//
// Clients and tenants: a client is admitted when its uid (SO_PEERCRED) is the service's own, or
// in allowed_uids, or its gid or one of its groups in allowed_gids, and, when `token` is set,
// when its hello carries that token. A namespace the client asks for by tenant id (the salt
// argument of MakeNamespace) is derived on the service: its salt is
// DeriveTenantSalt("uid:<uid>/" + tenant id, tenant_secret), so clients of two uids never share
// KV, and a client cannot name another uid's tenant into existence. Refusals are counted and
// logged once per client process. Operations (Drain, ClearTenant) are taken only from clients
// of the service's own uid or root; a client may clear the tenants of its own uid.
//
// Leases: a request that reads or writes the connection's staging region (Load, Store) holds a
// lease from the moment the service accepted it until the engine no longer touches the region
// (a load's last layer has arrived, a store's Wait returned). A client that disconnects (or is
// killed) in the middle of a request leaves the request to finish on the service's side; its
// leases end then, and nothing the client had not handed over completely (a Store frame) is
// stored. ServerStats::leases_active counts leases; 0 when no request is in flight.
//
// Thread safety: every method may be called from any thread. Ownership: the Server shares the
// Engine with its caller; the engine outlives every request the server runs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/logger.h"
#include "engine/engine.h"
#include "kvtier/status.h"

namespace kvtier::serve {

inline constexpr uint64_t kClientStagingBytesDefault = uint64_t{1} << 30;
inline constexpr uint64_t kClientStagingBytesMax = uint64_t{64} << 30;
inline constexpr uint32_t kClientsMaxDefault = 64;
inline constexpr uint32_t kClientsMaxLimit = 4096;

struct ServerOptions {
  std::string socket_path;  // Required. Its directory must exist (serve creates it 0700).
  // Also admitted besides the service's own uid (and, when it runs as root, root's clients).
  std::vector<uint32_t> allowed_uids;
  std::vector<uint32_t> allowed_gids;  // A client's primary or supplementary group.
  std::string token;                   // Non-empty: every client must present it.
  std::string tenant_secret;           // Non-empty: at least 16 bytes (DeriveTenantSalt).
  // The staging region of each connection (a memfd; pages are committed when first touched).
  uint64_t client_staging_bytes = kClientStagingBytesDefault;
  uint32_t clients_max = kClientsMaxDefault;
  // A client that does not read its replies for this long is disconnected.
  uint32_t send_timeout_ms = 5000;
  // Where the tenants' generations persist (serve/namespace_state.h: what ClearTenant changes),
  // so that a cleared tenant stays cleared after a restart. Empty: kept in memory only.
  std::string namespace_state_path;
  Logger* logger = nullptr;  // Borrowed; nullptr: silent.

  Status Validate() const;
};

struct ClientStats {
  uint64_t id = 0;  // The connection's number, from 1.
  uint32_t pid = 0, uid = 0, gid = 0;
  std::string name;  // What the client called itself (its hello).
  uint64_t requests = 0, lookups = 0, lookup_tokens = 0, lookup_hit_tokens = 0;
  uint64_t loads = 0, load_blocks = 0, stores = 0, store_blocks = 0, errors = 0;
  uint64_t leases_active = 0;
};

struct TenantStats {
  std::string tenant;  // "uid:<uid>/" + a digest prefix of the tenant id (ids may be secret).
  uint64_t lookups = 0, lookup_tokens = 0, lookup_hit_tokens = 0, loads = 0, stores = 0;
};

struct ServerStats {
  uint64_t clients_active = 0, clients_total = 0;
  uint64_t clients_refused = 0;  // Connections refused (uid, group, token, version, clients_max).
  uint64_t requests = 0, bad_requests = 0;  // Malformed frames and out-of-range references.
  uint64_t leases_active = 0;               // Requests that may still touch a staging region.
  uint64_t leases_total = 0;
  uint64_t leases_orphaned = 0;  // Leases whose client disconnected before they ended.
  uint64_t disconnects_mid_request = 0;
  uint64_t tenants_cleared = 0;  // ClearTenant calls that moved a tenant to a new namespace.
  bool draining = false;
  std::vector<ClientStats> clients;  // Connected clients.
  std::vector<TenantStats> tenants;  // Every tenant seen since the start.
};

// Whether Server::Start could serve `socket_path` now, checked without binding: InvalidArgument
// for a path longer than a Unix socket address holds or one where a file other than a socket
// exists, Busy naming the holder's pid when another service holds the socket's lock (taken and
// released at once). For a caller to fail before slow work such as opening an engine; Start
// checks again, so a service that starts in between is still refused.
Status CheckSocketPath(const std::string& socket_path);

class Server {
 public:
  static Result<std::unique_ptr<Server>> Start(const ServerOptions& options,
                                               std::shared_ptr<Engine> engine);
  ~Server();  // Stop().
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  void Stop();
  // Refuses new Load and Store requests with Unavailable (clients see misses and skipped
  // stores) and new connections, while lookups and requests in flight go on: a deployment that
  // replaces the service drains the old one, then stops it.
  void Drain();
  // Moves the tenant `tenant` of uid `uid` to a new namespace: from now on (and after restarts,
  // when namespace_state_path is set) every block it stored before is a miss in every tier, for
  // every client, including namespaces clients already hold; the tiers evict the old blocks as
  // they evict any block nobody reads. Returns the tenant's new generation.
  Result<uint64_t> ClearTenant(uint32_t uid, const std::string& tenant);
  ServerStats Stats();
  // Prometheus text: the engine's metrics (Engine::MetricsText), the service's counters, and
  // per client and per tenant counters.
  std::string MetricsText();
  // The service's state and the engine's stats as one JSON object (kvtier ctl stats).
  std::string StatsJson();
  const std::string& socket_path() const;

  struct Impl;

 private:
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier::serve
