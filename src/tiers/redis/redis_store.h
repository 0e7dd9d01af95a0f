// RedisStore: the RemoteStore on a single Redis server or a Redis Cluster, over hiredis.
//
// Each call builds one command per entry (SET key value [PX ttl] / GET / EXISTS / UNLINK), groups
// them by node (by hash slot in cluster mode) and sends each group as a pipeline. MOVED updates
// the slot map and schedules a CLUSTER SLOTS refresh; ASK re-sends that one command with ASKING;
// both are retried on the new node at most `redirects_max` times. Connection errors also schedule
// a refresh. An endpoint learned from CLUSTER SLOTS, MOVED or ASK is used only when its host is a
// seed's host (or one of its addresses) or listed in `cluster_allowed_hosts`: any other is
// refused and counted (endpoints_refused), never connected to, never sent the password. Each
// node has its own connection (reconnected automatically) and circuit breaker, so a dead, stalled
// or hostile node turns only its own entries into fast Unavailable / TimedOut results while the
// others are served. See docs/remote_tier.md.
//
// A Get has each value received straight into the caller's buffer (redis_connection.h,
// RedisBulkTarget): the payload, or a sealed value's payload ciphertext, lands in the entry's
// dst, its headers and tag in small buffers of the call; it is then verified (CRC32C, key,
// layout) or opened in place (AES-GCM), and wiped unless the entry ends Ok. A value that would
// not fit dst is read into a reply as before and refused. A plaintext value is verified as soon
// as it has landed, on the reading thread, while it is still in cache and the next values keep
// arriving in the socket's buffer.
//
// With a keyring and SealedOpen::kAsRead (the default), a Get opens (authenticates and decrypts)
// each value in place as soon as it has landed, on the reading thread, in the same way. With
// kOverlapped, each large value is opened on the store's open worker thread as soon as its reply
// has been read, while the later replies of the pipeline are still arriving.
//
// Thread safety: safe for concurrent calls; the network part of calls is serialized by one mutex
// (the engine drives the remote tier from one worker, and a blocking hiredis context serves one
// request at a time). Stats() reads atomics and never waits for a call in progress.
// Ownership: borrows the Clock and Logger from the options (both must outlive the store); owns
// its connections and its open worker thread (joined by the destructor).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "core/logger.h"
#include "core/mutex.h"
#include "env/env.h"
#include "tiers/circuit_breaker.h"
#include "tiers/redis/redis_cluster.h"
#include "tiers/redis/redis_connection.h"
#include "tiers/redis/redis_options.h"
#include "tiers/remote_crypto.h"
#include "tiers/remote_store.h"

namespace kvtier {

struct RedisOp;             // One command in flight; defined in redis_store.cc.
struct RedisStoreCounters;  // The stats counters; defined in redis_store.cc.
class RedisOpenWorker;      // Opens sealed values off the reading thread (redis_open_worker.h).

class RedisStore final : public RemoteStore {
 public:
  // Validates the options and connects. A rejected AUTH is InvalidArgument with the server's
  // message; an unreachable server is not an error (the store opens, serves misses, and
  // reconnects when the server is back).
  static Result<std::unique_ptr<RedisStore>> Open(RedisStoreOptions options);
  ~RedisStore() override;

  Status Put(std::span<RemotePut> entries) override KV_EXCLUDES(mu_);
  Status Get(std::span<RemoteGet> entries) override KV_EXCLUDES(mu_);
  Status Exists(std::span<RemoteExists> entries) override KV_EXCLUDES(mu_);
  Status Delete(std::span<RemoteDelete> entries) override KV_EXCLUDES(mu_);
  RemoteStoreStats Stats() const override;

  // The key name an entry is stored under: a keyed hash with a keyring, else the chunk hash.
  std::string KeyName(const BlockKey& key) const;

  // Test hook: pretend that `endpoint` owns slots [first, last], as a stale map would after a
  // resharding, so tests can drive MOVED handling. Cluster mode only.
  Status TestOnlyAssignSlots(uint16_t first, uint16_t last, const std::string& endpoint)
      KV_EXCLUDES(mu_);

 private:
  struct Node;

  explicit RedisStore(RedisStoreOptions options);
  Status Init() KV_EXCLUDES(mu_);
  // Runs every op to its final reply or failure. `settled`, when given, is told of each op
  // (by its index in `ops`) whose final reply is not an error reply, as soon as it is read.
  void RunOps(std::span<RedisOp> ops, RedisReplyObserver* settled = nullptr) KV_REQUIRES(mu_);
  bool RouteOps(std::span<RedisOp> ops, std::vector<std::vector<size_t>>* groups) KV_REQUIRES(mu_);
  void ExecuteOnNode(uint16_t node, std::span<RedisOp> ops, std::span<const size_t> indices,
                     RedisReplyObserver* settled) KV_REQUIRES(mu_);
  void TakeReply(RedisOp* op, RedisReplyPtr reply) KV_REQUIRES(mu_);
  Result<uint16_t> NodeFor(const RedisEndpoint& endpoint) KV_REQUIRES(mu_);
  Status RefreshTopology() KV_REQUIRES(mu_);
  Status ApplyTopology(const redisReply* reply, const RedisEndpoint& from) KV_REQUIRES(mu_);
  void PublishBreakers() KV_REQUIRES(mu_);
  // The value to SET for an entry: sealed with a keyring, else the plain remote value.
  Status MakeValue(const RemotePut& e, const std::string& key_name, uint64_t wall_us,
                   std::vector<std::byte>* value, RemoteCipher* cipher) const;
  // Logs a refused sealed value once per key id (bounded: a store full of forgeries cannot make
  // the log grow without limit).
  void LogAuthFailure(uint32_t key_id, const Status& why) KV_EXCLUDES(log_mu_);

  const RedisStoreOptions options_;
  Clock* const clock_;
  mutable Mutex mu_;
  std::vector<std::unique_ptr<Node>> nodes_ KV_GUARDED_BY(mu_);
  SlotMap slots_ KV_GUARDED_BY(mu_);  // Cluster mode only.
  bool refresh_pending_ KV_GUARDED_BY(mu_) = false;
  uint64_t last_refresh_us_ KV_GUARDED_BY(mu_) = 0;
  bool refreshed_once_ KV_GUARDED_BY(mu_) = false;
  // Where a MOVED/ASK may send a command (and the password): the seed endpoints and the masters
  // of the last CLUSTER SLOTS answer. A redirect anywhere else is refused (docs/security.md).
  std::set<std::string> trusted_endpoints_ KV_GUARDED_BY(mu_);
  // Whether `endpoint` may receive commands; refreshes the map once from a known node first.
  bool TrustedRedirect(const RedisEndpoint& endpoint) KV_REQUIRES(mu_);
  // The hosts learned endpoints may name (canonical forms): the seeds' and cluster_allowed_hosts,
  // with the addresses they resolve to. Set by Init, then read-only.
  std::set<std::string> allowed_hosts_;
  bool HostAllowed(const std::string& host) const;
  // Counts an endpoint refused for its host, and logs it once (at most 64 endpoints are logged).
  void RefuseEndpoint(const RedisEndpoint& endpoint, std::string_view learned_from)
      KV_REQUIRES(mu_);
  std::set<std::string> logged_refused_ KV_GUARDED_BY(mu_);
  std::unique_ptr<RedisStoreCounters> counters_;  // Atomics; read by Stats().
  Mutex log_mu_;
  std::set<uint32_t> logged_key_ids_ KV_GUARDED_BY(log_mu_);
  // Put's value buffers, kept between calls: a value of a MiB or more is an mmap'd allocation
  // whose pages fault in on every call otherwise (more time than sealing it). At most
  // kRedisValuePoolBytesMax of capacity waits here.
  std::vector<std::vector<std::byte>> TakeValueBuffers(size_t n) KV_EXCLUDES(pool_mu_);
  void ReturnValueBuffers(std::vector<std::vector<std::byte>> buffers) KV_EXCLUDES(pool_mu_);
  Mutex pool_mu_;
  std::vector<std::vector<std::byte>> value_pool_ KV_GUARDED_BY(pool_mu_);
  // With a keyring and SealedOpen::kOverlapped; nullptr otherwise. Declared last: destroyed (and
  // joined) first.
  std::unique_ptr<RedisOpenWorker> open_worker_;
};

}  // namespace kvtier
