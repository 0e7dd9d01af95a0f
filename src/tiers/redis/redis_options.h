// The Redis store's options (RedisStoreOptions), apart from the store: what the engine's options
// hold and the options table sets, without hiredis behind them. RedisStore::Open checks them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/block_key.h"
#include "core/logger.h"
#include "env/env.h"
#include "tiers/aes_gcm.h"
#include "tiers/circuit_breaker.h"
#include "tiers/remote_crypto.h"
#include "tiers/tier_options.h"

namespace kvtier {

enum class RedisMode : uint8_t { kStandalone = 0, kCluster = 1 };

// When a Get with a keyring opens its values.
enum class SealedOpen : uint8_t {
  // A value of at least kRedisOverlapOpenBytesMin is handed to the open worker as soon as its
  // reply has been read, while the later replies are still arriving; a smaller one (the hand-off
  // would cost more than the decryption) is opened as with kAfterReads.
  kOverlapped = 0,
  // Every value after all replies of the call have been read, on the calling thread.
  kAfterReads = 1,
  // Every value that landed in its destination (all but those that would not fit it) as soon
  // as its reply has been read, on the reading thread: no hand-off, the value is still in this
  // core's cache, and the next values keep arriving in the socket's buffer meanwhile. The
  // default: it measured as fast as kOverlapped or faster on 2 shared vCPUs
  // (docs/benchmarks-history.md, 2026-12-06), where the worker finds no free core.
  kAsRead = 2,
};

inline constexpr size_t kRedisNodesMax = 1024;  // Nodes a cluster client ever learns about.
inline constexpr uint32_t kRedisRedirectsMax = 16;
// About 10 us of AES-GCM at 5-6 GB/s: more than waking the worker costs.
inline constexpr size_t kRedisOverlapOpenBytesMin = 64 * 1024;
// Capacity of Put's value buffers kept between calls, at most.
inline constexpr size_t kRedisValuePoolBytesMax = size_t{64} << 20;

// The Redis store's registered name (tiers/tier_registry.h): RemoteTierOptions::stores holds its
// RedisStoreOptions under it.
inline constexpr std::string_view kRedisStoreName = "redis";

struct RedisStoreOptions {
  // "host:port". Standalone: exactly one. Cluster: one or more seed nodes.
  std::vector<std::string> endpoints;
  RedisMode mode = RedisMode::kStandalone;
  std::string user;      // ACL user; empty = the default user.
  std::string password;  // Empty = no AUTH.
  uint32_t connect_timeout_ms = 200;
  // The deadline of one command's write and, apart, of its whole reply: a stalled or trickling
  // server fails the command (TimedOut) when it passes (RedisConnectionOptions).
  uint32_t command_timeout_ms = 500;
  CircuitBreakerOptions breaker;      // Per node.
  uint32_t redirects_max = 5;         // MOVED/ASK hops per entry; at most kRedisRedirectsMax.
  uint64_t topology_refresh_interval_us = 100'000;  // Minimum time between CLUSTER SLOTS.
  // Cluster mode: hosts besides the seeds' that CLUSTER SLOTS, MOVED and ASK may name (host
  // names or IP addresses, compared without the port; a name also allows the addresses it
  // resolves to at open). Empty: only the seeds' hosts. At most kRedisNodesMax.
  std::vector<std::string> cluster_allowed_hosts;
  std::string key_prefix = "kvt";
  // Values are sealed with AES-256-GCM and key names are keyed hashes under these keys
  // (remote_crypto.h, docs/security.md). Required unless insecure_plaintext is set.
  std::optional<RemoteKeyring> keyring;
  // The explicit opt-out: values in the clear and key names that carry the chunk hash. Anyone who
  // can read the store then reads every tenant's KV and sees which prefixes they share, and
  // anyone who can write it can plant KV that passes the CRC checks. Only for a store nobody
  // else can reach. Open fails when neither a keyring nor this is given, or both are.
  bool insecure_plaintext = false;
  SealedOpen sealed_open = SealedOpen::kAsRead;  // With a keyring only.
  // Which AES-256-GCM implementation seals and opens values (aes_gcm.h); nullopt: the fastest
  // available. Open refuses one this build or CPU lacks. Both write the same bytes.
  std::optional<GcmImpl> aes_gcm;
  Hash256 layout_digest{};  // Written into every value; values with another digest are misses.
  Clock* clock = nullptr;   // nullptr = SystemClock(). Drives the breakers and refresh limits.
  Logger* logger = nullptr;
};

// The Redis store's options among `stores` (RemoteTierOptions::stores); nullptr when none.
inline RedisStoreOptions* FindRedisOptions(TierOptionsSet& stores) {
  return stores.Find<RedisStoreOptions>(kRedisStoreName);
}
inline const RedisStoreOptions* FindRedisOptions(const TierOptionsSet& stores) {
  return stores.Find<RedisStoreOptions>(kRedisStoreName);
}

}  // namespace kvtier
