// Driver of `kvtier bench remote`: put and get throughput of the remote tier on a real
// Redis (or on a directory: the fs tier), with sealed values (the deployment keys, the
// default) and with insecure_plaintext, in alternating rounds so that both see the same server and the same machine load; the CLI adds
// redis-benchmark's figures for the same value size beside them.
//
// Thread safety: one call at a time per server (it writes and deletes its own keys, under a
// prefix of its own). Ownership: borrows nothing past the call.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kvtier/result.h"
#include "tiers/redis/redis_store.h"
#include "tiers/remote_crypto.h"

namespace kvtier {

inline constexpr uint64_t kRemoteBenchTotalBytesMax = uint64_t{16} << 30;
inline constexpr uint32_t kRemoteBenchRoundsMax = 100;

struct RemoteBenchOptions {
  std::string endpoint;        // "host:port" (the first seed in cluster mode); or fs_dir.
  // The fs tier (tiers/fs/fs_store.h) on this directory instead of a Redis, beside plain files
  // of the same sizes written, synced, renamed and read back without any check.
  std::string fs_dir;
  bool fs_cold = false;  // fs: each round's values leave the page cache before they are read.
  bool fs_fsync = true;  // fs: each value (and each plain file) synced before it is published.
  bool cluster = false;
  std::string user, password;  // AUTH; empty password = none.
  uint64_t block_bytes = 1 << 20;    // Payload per value, 1 B..kRemoteValueBytesMax.
  uint64_t total_bytes = 256 << 20;  // Per round and mode; at least one block.
  uint32_t batch = 8;                // Values per Put/Get call (one pipeline).
  uint32_t rounds = 5;               // Rounds per mode, alternating.
  // Connections used side by side (the engine's remote_connections lanes), each running its own
  // batches on a thread of its own; 1..kRemoteConnectionsMax.
  uint32_t connections = 1;
  // The keys for the sealed rounds; empty: a fresh random key for this run.
  std::optional<RemoteKeyring> keyring;
  // When the sealed rounds open their values (RedisStoreOptions::sealed_open).
  SealedOpen sealed_open = SealedOpen::kAsRead;
  // Which AES-256-GCM implementation seals and opens (RedisStoreOptions::aes_gcm); nullopt: the
  // fastest available.
  std::optional<GcmImpl> aes_gcm;

  Status Validate() const;
};

struct RemoteBenchMode {
  std::vector<double> put_bytes_per_s, get_bytes_per_s;  // One per round.
  double put_bytes_per_s_median = 0, get_bytes_per_s_median = 0;
};

struct RemoteBenchReport {
  uint64_t block_bytes = 0, blocks = 0, batch = 0, rounds = 0, connections = 0;
  bool fs = false, fs_cold = false, fs_fsync = true;
  RemoteBenchMode sealed, plaintext;
  RemoteBenchMode files;  // fs only: the plain files, the directory's own rate for this pattern.
  // 1 - sealed / plaintext of the medians: what encryption costs.
  double sealed_put_cost = 0, sealed_get_cost = 0;
};

// Each round of a mode puts `blocks` values in batches, reads them all back (checking every
// byte), then deletes them. With several connections, each step runs one batch per connection at
// once (puts, then gets, then deletes), and a rate is the bytes over the steps' wall time. Unavailable when the server does not answer; Corruption when a value
// does not read back intact.
Result<RemoteBenchReport> BenchRemote(const RemoteBenchOptions& options);

}  // namespace kvtier
