// See redis_store.h. Layout of this file: option checks and Open; the routing core (RunOps,
// RouteOps, ExecuteOnNode, TakeReply, topology refresh); then the four calls, each of which
// builds its commands, runs them and turns every reply into the entry's Status and counters.
// Get's open call (and the constructor, which starts the open worker of redis_open_worker.h) sits
// just before Get.
#include "tiers/redis/redis_store.h"

#include <arpa/inet.h>
#include <hiredis/hiredis.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "core/assert.h"
#include "tiers/redis/redis_open_worker.h"

namespace kvtier {

// One reply holds the largest value the tier stores: a sealed value of kRemoteValueBytesMax
// payload bytes, with its header, its sealing and the bulk string's framing.
static_assert(kRedisReplyBytesMax >=
              kRemoteValueBytesMax + kRemoteValueHeaderBytes + kSealedOverheadBytes + 64);

struct RedisOp {
  RedisCommand command;
  uint16_t slot = 0;
  uint16_t node = SlotMap::kNoNode;  // Set by routing or by a redirect.
  bool done = false;
  RedisReplyPtr reply;  // Set when the node answered (done and status Ok).
  Status status;        // Why there is no reply.
};

struct RedisStoreCounters {
  std::atomic<uint64_t> gets{0};
  std::atomic<uint64_t> hits{0};
  std::atomic<uint64_t> misses{0};
  std::atomic<uint64_t> corrupt{0};
  std::atomic<uint64_t> mismatched{0};
  std::atomic<uint64_t> auth_failures{0};
  std::atomic<uint64_t> puts{0};
  std::atomic<uint64_t> errors{0};
  std::atomic<uint64_t> timeouts{0};
  std::atomic<uint64_t> reconnects{0};
  std::atomic<uint64_t> breaker_trips{0};
  std::atomic<uint32_t> breakers_open{0};
  std::atomic<uint8_t> breaker_state{0};
  std::atomic<uint64_t> redirects_moved{0};
  std::atomic<uint64_t> redirects_ask{0};
  std::atomic<uint64_t> redirects_refused{0};
  std::atomic<uint64_t> endpoints_refused{0};
  std::atomic<uint64_t> topology_refreshes{0};
};

struct RedisStore::Node {
  Node(const RedisEndpoint& endpoint, const RedisStoreOptions& options, Clock* clock)
      : connection(endpoint,
                   {.connect_timeout_ms = options.connect_timeout_ms,
                    .command_timeout_ms = options.command_timeout_ms,
                    .user = options.user,
                    .password = options.password},
                   options.logger),
        breaker("redis " + endpoint.ToString(), options.breaker, clock, options.logger) {}
  RedisConnection connection;
  CircuitBreaker breaker;
};

namespace {

GcmImpl GcmOf(const RedisStoreOptions& o) { return o.aes_gcm.value_or(DefaultGcmImpl()); }

Status CheckOptions(const RedisStoreOptions& o) {
  if (o.endpoints.empty()) return Status::InvalidArgument("redis: no endpoint configured");
  if (o.mode == RedisMode::kStandalone && o.endpoints.size() != 1) {
    return Status::InvalidArgument("redis: standalone mode takes exactly one endpoint");
  }
  if (o.endpoints.size() > kRedisNodesMax) return Status::InvalidArgument("redis: too many seeds");
  for (const std::string& e : o.endpoints) KV_RETURN_IF_ERROR(ParseRedisEndpoint(e).status());
  if (o.key_prefix.empty() || o.key_prefix.size() > kRemoteKeyPrefixBytesMax ||
      o.key_prefix.find_first_of("{}") != std::string::npos) {
    return Status::InvalidArgument(
        "redis: key_prefix must be 1..64 bytes without braces (they would change the hash tag)");
  }
  if (o.cluster_allowed_hosts.size() > kRedisNodesMax) {
    return Status::InvalidArgument("redis: more than kRedisNodesMax cluster_allowed_hosts");
  }
  for (const std::string& host : o.cluster_allowed_hosts) {
    if (host.empty() || host.size() > 255 ||
        std::any_of(host.begin(), host.end(), [](char c) { return c <= ' ' || c == ','; })) {
      return Status::InvalidArgument("redis: cluster_allowed_hosts: '" + host +
                                     "' is not a host name or address");
    }
  }
  if (o.redirects_max > kRedisRedirectsMax) {
    return Status::InvalidArgument("redis: redirects_max above kRedisRedirectsMax");
  }
  if (o.connect_timeout_ms == 0 || o.command_timeout_ms == 0) {
    return Status::InvalidArgument("redis: timeouts must be positive");
  }
  if (o.breaker.failures_to_open == 0) {
    return Status::InvalidArgument("redis: breaker.failures_to_open must be >= 1");
  }
  if (!o.user.empty() && o.password.empty()) {
    return Status::InvalidArgument("redis: an ACL user needs a password");
  }
  if (o.aes_gcm.has_value() && !GcmImplAvailable(*o.aes_gcm)) {
    return Status::InvalidArgument(std::string("redis: AES-GCM implementation ") +
                                   GcmImplName(*o.aes_gcm) + " is not available here");
  }
  if (o.keyring.has_value() && o.insecure_plaintext) {
    return Status::InvalidArgument("redis: both a remote key and insecure_plaintext were given");
  }
  if (!o.keyring.has_value() && !o.insecure_plaintext) {
    return Status::InvalidArgument(
        "redis: the remote tier needs a key (a key file or the key environment variable) so that "
        "values are encrypted and authenticated; to store KV in the clear on a Redis nobody else "
        "can reach, set insecure_plaintext explicitly (docs/security.md)");
  }
  if (o.keyring.has_value() && o.keyring->empty()) {
    return Status::InvalidArgument("redis: the remote keyring is empty");
  }
  return Status::Ok();
}

Status CheckBatch(size_t entries) {
  if (entries > kRemoteBatchMax) {
    return Status::InvalidArgument("remote store: batch of " + std::to_string(entries) +
                                   " entries exceeds kRemoteBatchMax");
  }
  return Status::Ok();
}

void SetArgs(RedisCommand* command, std::initializer_list<std::string_view> args) {
  KV_CHECK(args.size() <= RedisCommand::kArgsMax);
  command->argc = 0;
  for (std::string_view arg : args) command->args[command->argc++] = arg;
}

// The outcome of a command whose reply is not interpreted further: the op's failure, an error
// reply as a Status, or Ok.
Status OpStatus(const RedisOp& op) {
  if (op.reply == nullptr) return op.status;
  const char* error = RedisErrorText(op.reply.get());
  if (error == nullptr) return Status::Ok();
  if (std::strncmp(error, "OOM", 3) == 0) return Status::NoSpace(std::string("redis: ") + error);
  return Status::Unavailable(std::string("redis: ") + error);
}

void CountFailure(RedisStoreCounters* c, const Status& s) {
  if (s.ok()) return;
  if (s.code() == StatusCode::kTimedOut) {
    c->timeouts.fetch_add(1, std::memory_order_relaxed);
  } else {
    c->errors.fetch_add(1, std::memory_order_relaxed);
  }
}

// A host as compared with the allowed hosts: an IP address in its canonical text (so "::1" and
// "0::1" match), a name in lower case.
std::string CanonicalHost(std::string_view host) {
  const std::string text(host);
  std::array<unsigned char, sizeof(in6_addr)> addr{};
  std::array<char, INET6_ADDRSTRLEN> out{};
  for (const int family : {AF_INET, AF_INET6}) {
    if (inet_pton(family, text.c_str(), addr.data()) == 1 &&
        inet_ntop(family, addr.data(), out.data(), out.size()) != nullptr) {
      return std::string(out.data());
    }
  }
  std::string lower = text;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower;
}

// `host` and the addresses it resolves to now (a name's; an address resolves to itself).
void AddHostAndAddresses(const std::string& host, std::set<std::string>* hosts) {
  constexpr int kAddressesMax = 64;
  hosts->insert(CanonicalHost(host));
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return;  // Unresolvable now.
  int count = 0;
  for (const addrinfo* a = found; a != nullptr && count < kAddressesMax; a = a->ai_next, ++count) {
    std::array<char, NI_MAXHOST> text{};
    if (getnameinfo(a->ai_addr, a->ai_addrlen, text.data(), text.size(), nullptr, 0,
                    NI_NUMERICHOST) == 0) {
      hosts->insert(CanonicalHost(text.data()));
    }
  }
  freeaddrinfo(found);
}

}  // namespace

Result<std::unique_ptr<RedisStore>> RedisStore::Open(RedisStoreOptions options) {
  KV_RETURN_IF_ERROR(CheckOptions(options));
  std::unique_ptr<RedisStore> store(new RedisStore(std::move(options)));
  KV_RETURN_IF_ERROR(store->Init());
  return store;
}

std::string RedisStore::KeyName(const BlockKey& key) const {
  if (options_.keyring.has_value()) return SealedKeyName(options_.key_prefix, *options_.keyring, key);
  return RemoteKeyName(options_.key_prefix, key);
}

Status RedisStore::MakeValue(const RemotePut& e, const std::string& key_name, uint64_t wall_us,
                             std::vector<std::byte>* value, RemoteCipher* cipher) const {
  const uint64_t expiry_us = e.ttl_ms == 0 ? 0 : wall_us + e.ttl_ms * 1000;
  const RemoteValueInfo info{.key = e.key,
                             .layout_digest = options_.layout_digest,
                             .codec_id = e.codec_id,
                             .raw_bytes = e.raw_bytes,
                             .expiry_wall_us = expiry_us};
  if (!options_.keyring.has_value()) {
    EncodeRemoteValue(info, e.payload, value);
    return Status::Ok();
  }
  // Sealed: the header is encoded apart and the payload encrypted from the caller's buffer.
  std::array<std::byte, kRemoteValueHeaderBytes> head;
  EncodeRemoteValueHeader(info, e.payload, head);
  return SealRemoteValue(*options_.keyring, key_name, head, e.payload, value, cipher);
}

void RedisStore::LogAuthFailure(uint32_t key_id, const Status& why) {
  constexpr size_t kLoggedKeyIdsMax = 64;
  {
    MutexLock lock(&log_mu_);
    if (logged_key_ids_.size() >= kLoggedKeyIdsMax || !logged_key_ids_.insert(key_id).second) {
      return;
    }
  }
  LogTo(options_.logger, LogLevel::kWarn,
        "redis: a remote value was refused and served as a miss (logged once per key id): " +
            why.ToString());
}

Status RedisStore::Init() {
  MutexLock lock(&mu_);
  for (const std::string& text : options_.endpoints) {
    KV_ASSIGN_OR_RETURN(RedisEndpoint endpoint, ParseRedisEndpoint(text));
    KV_RETURN_IF_ERROR(NodeFor(endpoint).status());
    trusted_endpoints_.insert(endpoint.ToString());
    if (options_.mode == RedisMode::kCluster) AddHostAndAddresses(endpoint.host, &allowed_hosts_);
  }
  if (options_.mode == RedisMode::kCluster) {
    for (const std::string& host : options_.cluster_allowed_hosts) {
      AddHostAndAddresses(host, &allowed_hosts_);
    }
  }
  for (std::unique_ptr<Node>& node : nodes_) {
    Status s = node->connection.EnsureConnected();
    // A rejected AUTH is a configuration error: fail the open with the server's message. An
    // unreachable server is an operating condition: the store opens and serves misses.
    if (s.code() == StatusCode::kInvalidArgument) return s;
    if (s.ok()) {
      node->breaker.RecordSuccess();
    } else {
      node->breaker.RecordFailure();
    }
  }
  if (options_.mode == RedisMode::kCluster) {
    Status s = RefreshTopology();
    if (s.code() == StatusCode::kInvalidArgument) return s;
    refresh_pending_ = !s.ok();
  }
  PublishBreakers();
  return Status::Ok();
}

Result<uint16_t> RedisStore::NodeFor(const RedisEndpoint& endpoint) {
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i]->connection.endpoint() == endpoint) return static_cast<uint16_t>(i);
  }
  if (nodes_.size() >= kRedisNodesMax) {
    return Status::Unavailable("redis: more than kRedisNodesMax nodes; not adding " +
                               endpoint.ToString());
  }
  nodes_.push_back(std::make_unique<Node>(endpoint, options_, clock_));
  return static_cast<uint16_t>(nodes_.size() - 1);
}

void RedisStore::RunOps(std::span<RedisOp> ops, RedisReplyObserver* settled) {
  if (options_.mode == RedisMode::kCluster && (slots_.empty() || refresh_pending_)) {
    RefreshTopology().IgnoreError();  // On failure the stale map is used and refresh stays due.
  }
  std::vector<std::vector<size_t>> groups;
  // Round 0 is the first attempt; each further round follows one MOVED/ASK hop.
  for (uint32_t round = 0; round <= options_.redirects_max; ++round) {
    if (!RouteOps(ops, &groups)) break;
    for (size_t node = 0; node < groups.size(); ++node) {
      if (groups[node].empty()) continue;
      ExecuteOnNode(static_cast<uint16_t>(node), ops, groups[node], settled);
    }
  }
  for (RedisOp& op : ops) {
    if (op.done) continue;
    op.status = Status::Unavailable("redis: more than redirects_max redirects for slot " +
                                    std::to_string(op.slot));
    op.done = true;
  }
  if (refresh_pending_) RefreshTopology().IgnoreError();
  PublishBreakers();
}

bool RedisStore::RouteOps(std::span<RedisOp> ops, std::vector<std::vector<size_t>>* groups) {
  groups->assign(nodes_.size(), {});
  bool any = false;
  for (size_t i = 0; i < ops.size(); ++i) {
    RedisOp& op = ops[i];
    if (op.done) continue;
    if (op.node == SlotMap::kNoNode) {
      op.node = options_.mode == RedisMode::kStandalone ? uint16_t{0} : slots_.Owner(op.slot);
    }
    if (op.node == SlotMap::kNoNode) {
      op.status = Status::Unavailable("redis cluster: no known node serves slot " +
                                      std::to_string(op.slot));
      op.done = true;
      refresh_pending_ = true;
      continue;
    }
    (*groups)[op.node].push_back(i);
    any = true;
  }
  return any;
}

namespace {

// Passes on, by op index, the replies of one node's pipeline that settle their op: any but an
// error reply, which may be a redirect that sends the op elsewhere.
class SettledReplies final : public RedisReplyObserver {
 public:
  SettledReplies(std::span<const size_t> indices, RedisReplyObserver* next)
      : indices_(indices), next_(next) {}
  void OnReply(size_t index, const redisReply& reply) override {
    if (RedisErrorText(&reply) == nullptr) next_->OnReply(indices_[index], reply);
  }

 private:
  const std::span<const size_t> indices_;
  RedisReplyObserver* const next_;
};

}  // namespace

void RedisStore::ExecuteOnNode(uint16_t node_index, std::span<RedisOp> ops,
                               std::span<const size_t> indices, RedisReplyObserver* settled) {
  Node& node = *nodes_[node_index];
  if (!node.breaker.Allow()) {
    for (size_t i : indices) {
      ops[i].status = Status::Unavailable("redis " + node.connection.endpoint().ToString() +
                                          ": circuit breaker open");
      ops[i].done = true;
    }
    return;
  }
  std::vector<RedisCommand> commands;
  commands.reserve(indices.size());
  for (size_t i : indices) commands.push_back(ops[i].command);
  std::vector<RedisReplyPtr> replies(indices.size());
  std::optional<SettledReplies> observer;
  if (settled != nullptr) observer.emplace(indices, settled);
  const Status s = node.connection.Execute(commands, replies, observer ? &*observer : nullptr);
  if (s.ok()) {
    node.breaker.RecordSuccess();
  } else {
    node.breaker.RecordFailure();
    if (options_.mode == RedisMode::kCluster) refresh_pending_ = true;
  }
  for (size_t k = 0; k < indices.size(); ++k) {
    RedisOp& op = ops[indices[k]];
    if (replies[k] != nullptr) {
      TakeReply(&op, std::move(replies[k]));
    } else {
      op.status = s;
      op.done = true;
    }
  }
}

void RedisStore::TakeReply(RedisOp* op, RedisReplyPtr reply) {
  const char* error = RedisErrorText(reply.get());
  RedisRedirect redirect;
  if (error == nullptr || options_.mode != RedisMode::kCluster ||
      !ParseRedisRedirect(error, &redirect)) {
    op->reply = std::move(reply);
    op->status = Status::Ok();
    op->done = true;
    return;
  }
  if (!HostAllowed(redirect.target.host)) {
    counters_->redirects_refused.fetch_add(1, std::memory_order_relaxed);
    RefuseEndpoint(redirect.target, error);
    op->status = Status::Unavailable("redis cluster: refused a redirect to " +
                                     redirect.target.ToString() +
                                     ": its host is neither a seed's nor an allowed host");
    op->done = true;
    return;
  }
  if (!TrustedRedirect(redirect.target)) {
    counters_->redirects_refused.fetch_add(1, std::memory_order_relaxed);
    op->status = Status::Unavailable("redis cluster: refused a redirect to " +
                                     redirect.target.ToString() +
                                     ", which is not in the cluster's slot map");
    LogTo(options_.logger, LogLevel::kWarn, op->status.ToString());
    op->done = true;
    return;
  }
  Result<uint16_t> target = NodeFor(redirect.target);
  if (!target.ok()) {
    op->status = target.status();
    op->done = true;
    return;
  }
  op->node = *target;
  if (redirect.kind == RedisRedirectKind::kMoved) {
    // The slot has a new owner for good: fix it now, and refresh the whole map after this call
    // since a resharding rarely moves a single slot.
    slots_.Assign(redirect.slot, redirect.slot, *target);
    refresh_pending_ = true;
    op->command.asking = false;
    counters_->redirects_moved.fetch_add(1, std::memory_order_relaxed);
  } else {
    op->command.asking = true;
    counters_->redirects_ask.fetch_add(1, std::memory_order_relaxed);
  }
}

Status RedisStore::RefreshTopology() {
  const uint64_t now_us = clock_->NowMicros();
  if (refreshed_once_ && now_us - last_refresh_us_ < options_.topology_refresh_interval_us) {
    return Status::Busy("redis cluster: topology refreshed recently");
  }
  refreshed_once_ = true;
  last_refresh_us_ = now_us;
  Status last = Status::Unavailable("redis cluster: no node answered CLUSTER SLOTS");
  RedisCommand command;
  SetArgs(&command, {"CLUSTER", "SLOTS"});
  command.reply_elements_max = kRedisClusterSlotsElementsMax;  // The only array reply.
  // Bounded by the node count at entry; ApplyTopology may append nodes.
  const size_t count = nodes_.size();
  for (size_t i = 0; i < count; ++i) {
    Node& node = *nodes_[i];
    if (!node.breaker.Allow()) continue;
    RedisReplyPtr reply;
    Status s = node.connection.Execute({&command, 1}, {&reply, 1});
    if (!s.ok()) {
      node.breaker.RecordFailure();
      if (s.code() == StatusCode::kInvalidArgument) return s;
      last = std::move(s);
      continue;
    }
    node.breaker.RecordSuccess();
    s = ApplyTopology(reply.get(), node.connection.endpoint());
    if (s.ok()) {
      refresh_pending_ = false;
      counters_->topology_refreshes.fetch_add(1, std::memory_order_relaxed);
      return s;
    }
    last = std::move(s);
  }
  return last;
}

Status RedisStore::ApplyTopology(const redisReply* reply, const RedisEndpoint& from) {
  if (const char* error = RedisErrorText(reply); error != nullptr) {
    return Status::Unavailable("redis " + from.ToString() + ": CLUSTER SLOTS: " + error);
  }
  KV_ASSIGN_OR_RETURN(std::vector<RedisSlotRange> ranges, ParseClusterSlots(reply, from.host));
  if (ranges.empty()) return Status::Unavailable("redis cluster: no slot is assigned yet");
  // Ranges served by a foreign host are left without an owner (their entries fail as misses):
  // the map never makes the client connect, or send the password, where the seeds did not say.
  std::vector<RedisSlotRange> allowed;
  allowed.reserve(ranges.size());
  for (RedisSlotRange& range : ranges) {
    if (HostAllowed(range.master.host)) {
      allowed.push_back(std::move(range));
    } else {
      RefuseEndpoint(range.master, "CLUSTER SLOTS from " + from.ToString());
    }
  }
  if (allowed.empty()) {
    return Status::Unavailable("redis cluster: CLUSTER SLOTS from " + from.ToString() + " named " +
                               std::to_string(ranges.size()) +
                               " slot range(s), all on hosts that are neither a seed's nor "
                               "allowed (remote_cluster_allowed_hosts)");
  }
  ranges = std::move(allowed);
  slots_.Clear();
  std::set<std::string> trusted;
  for (const std::string& seed : options_.endpoints) {
    if (Result<RedisEndpoint> e = ParseRedisEndpoint(seed); e.ok()) trusted.insert(e->ToString());
  }
  for (const RedisSlotRange& range : ranges) {
    KV_ASSIGN_OR_RETURN(uint16_t node, NodeFor(range.master));
    slots_.Assign(range.first, range.last, node);
    trusted.insert(range.master.ToString());
  }
  trusted_endpoints_ = std::move(trusted);
  return Status::Ok();
}

bool RedisStore::HostAllowed(const std::string& host) const {
  return allowed_hosts_.count(CanonicalHost(host)) != 0;
}

void RedisStore::RefuseEndpoint(const RedisEndpoint& endpoint, std::string_view learned_from) {
  constexpr size_t kLoggedRefusedMax = 64;
  counters_->endpoints_refused.fetch_add(1, std::memory_order_relaxed);
  const std::string name = endpoint.ToString();
  if (logged_refused_.size() >= kLoggedRefusedMax || !logged_refused_.insert(name).second) return;
  LogTo(options_.logger, LogLevel::kWarn,
        "redis cluster: refused " + name + " (named by " + std::string(learned_from) +
            "): its host is neither a seed's nor in remote_cluster_allowed_hosts; not connecting "
            "(logged once per endpoint)");
}

bool RedisStore::TrustedRedirect(const RedisEndpoint& endpoint) {
  if (trusted_endpoints_.count(endpoint.ToString()) != 0) return true;
  // Perhaps a resharding this client has not seen yet: ask a known node once, then decide.
  RefreshTopology().IgnoreError();
  return trusted_endpoints_.count(endpoint.ToString()) != 0;
}

void RedisStore::PublishBreakers() {
  uint64_t trips = 0;
  uint64_t reconnects = 0;
  uint32_t open = 0;
  BreakerState worst = BreakerState::kClosed;
  for (const std::unique_ptr<Node>& node : nodes_) {
    trips += node->breaker.trips();
    reconnects += node->connection.reconnects();
    const BreakerState state = node->breaker.state();
    if (state != BreakerState::kClosed) ++open;
    if (state == BreakerState::kOpen ||
        (state == BreakerState::kHalfOpen && worst == BreakerState::kClosed)) {
      worst = state;
    }
  }
  counters_->breaker_trips.store(trips, std::memory_order_relaxed);
  counters_->reconnects.store(reconnects, std::memory_order_relaxed);
  counters_->breakers_open.store(open, std::memory_order_relaxed);
  counters_->breaker_state.store(static_cast<uint8_t>(worst), std::memory_order_relaxed);
}

Status RedisStore::TestOnlyAssignSlots(uint16_t first, uint16_t last, const std::string& endpoint) {
  if (options_.mode != RedisMode::kCluster) return Status::InvalidArgument("not a cluster store");
  if (first > last || last >= kRedisClusterSlots) return Status::InvalidArgument("bad slot range");
  KV_ASSIGN_OR_RETURN(RedisEndpoint parsed, ParseRedisEndpoint(endpoint));
  MutexLock lock(&mu_);
  KV_ASSIGN_OR_RETURN(uint16_t node, NodeFor(parsed));
  slots_.Assign(first, last, node);
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// The calls.

Status RedisStore::Put(std::span<RemotePut> entries) {
  KV_RETURN_IF_ERROR(CheckBatch(entries.size()));
  for (const RemotePut& e : entries) {
    if (e.payload.size() > kRemoteValueBytesMax) {
      return Status::InvalidArgument("remote store: value above kRemoteValueBytesMax");
    }
  }
  const size_t n = entries.size();
  std::vector<std::string> keys(n);
  std::vector<std::vector<std::byte>> values = TakeValueBuffers(n);
  std::vector<std::string> ttls(n);
  std::vector<RedisOp> ops(n);
  const uint64_t wall_us = clock_->WallMicros();
  std::optional<RemoteCipher> cipher;  // One context and key schedule for the whole call.
  if (options_.keyring.has_value()) cipher.emplace(GcmOf(options_));
  for (size_t i = 0; i < n; ++i) {
    const RemotePut& e = entries[i];
    keys[i] = KeyName(e.key);
    KV_RETURN_IF_ERROR(MakeValue(e, keys[i], wall_us, &values[i], cipher ? &*cipher : nullptr));
    const std::string_view value(reinterpret_cast<const char*>(values[i].data()), values[i].size());
    if (e.ttl_ms == 0) {
      SetArgs(&ops[i].command, {"SET", keys[i], value});
    } else {
      ttls[i] = std::to_string(e.ttl_ms);
      SetArgs(&ops[i].command, {"SET", keys[i], value, "PX", ttls[i]});
    }
    ops[i].slot = RedisKeySlot(keys[i]);
  }
  {
    MutexLock lock(&mu_);
    RunOps(ops);
  }
  counters_->puts.fetch_add(n, std::memory_order_relaxed);
  for (size_t i = 0; i < n; ++i) {
    entries[i].status = OpStatus(ops[i]);
    CountFailure(counters_.get(), entries[i].status);
  }
  ReturnValueBuffers(std::move(values));
  return Status::Ok();
}

std::vector<std::vector<std::byte>> RedisStore::TakeValueBuffers(size_t n) {
  std::vector<std::vector<std::byte>> out(n);
  MutexLock lock(&pool_mu_);
  for (size_t i = 0; i < n && !value_pool_.empty(); ++i) {
    out[i] = std::move(value_pool_.back());
    value_pool_.pop_back();
  }
  return out;
}

void RedisStore::ReturnValueBuffers(std::vector<std::vector<std::byte>> buffers) {
  MutexLock lock(&pool_mu_);
  size_t kept = 0;
  for (const std::vector<std::byte>& b : value_pool_) kept += b.capacity();
  for (std::vector<std::byte>& b : buffers) {
    if (kept + b.capacity() > kRedisValuePoolBytesMax) break;  // The rest is freed.
    kept += b.capacity();
    value_pool_.push_back(std::move(b));
  }
}

namespace {

// Why a sealed value was refused, for the log (written once per key id by the calling thread).
using Refusal = std::optional<std::pair<uint32_t, Status>>;

// Where one GET's value lands (RedisBulkTarget) when the connection reads it straight from the
// socket: a plaintext value's record header into front(), its payload into the caller's dst; a
// sealed value's seal header and record header ciphertext into front(), its payload ciphertext
// into dst (opened there, in place) and its GCM tag into tag(). A value too short for its headers
// or whose payload would not fit dst is declined, so it is read into a reply and refused as
// before. Nothing that lands is used before it is verified (FinishLanded*), and whatever landed
// in dst is wiped unless the entry ends Ok (WipeUnlessOk).
class GetLanding final : public RedisBulkTarget {
 public:
  void Init(std::span<std::byte> dst, bool sealed) {
    dst_ = dst;
    sealed_ = sealed;
  }
  std::span<const iovec> Place(uint64_t bytes) override {
    const uint64_t overhead = front_bytes() + (sealed_ ? kSealedTagBytes : 0);
    if (bytes < overhead || bytes - overhead > dst_.size()) return {};
    body_bytes_ = static_cast<size_t>(bytes - overhead);
    placed_max_ = std::max(placed_max_, body_bytes_);
    iov_[0] = iovec{front_.data(), front_bytes()};
    iov_[1] = iovec{dst_.data(), body_bytes_};
    iov_[2] = iovec{tag_.data(), tag_.size()};
    return std::span(iov_.data(), sealed_ ? 3 : 2);
  }
  std::span<const std::byte> front() const { return {front_.data(), front_bytes()}; }
  std::span<std::byte> body() const { return dst_.first(body_bytes_); }
  std::span<const std::byte, kSealedTagBytes> tag() const { return tag_; }
  void WipeUnlessOk(const Status& outcome) const {
    if (!outcome.ok() && placed_max_ != 0) std::memset(dst_.data(), 0, placed_max_);
  }

 private:
  size_t front_bytes() const {
    return (sealed_ ? kSealedHeaderBytes : 0) + kRemoteValueHeaderBytes;
  }
  std::span<std::byte> dst_;
  bool sealed_ = false;
  size_t body_bytes_ = 0;  // Of the last Place.
  size_t placed_max_ = 0;  // Bytes of dst any Place handed to the socket.
  std::array<std::byte, kSealedHeaderBytes + kRemoteValueHeaderBytes> front_{};
  std::array<std::byte, kSealedTagBytes> tag_{};
  std::array<iovec, 3> iov_{};
};

// What opening a GET answer needs besides the answer; shared by the calling thread and the open
// worker, each of which writes only the entries it opens.
struct GetContext {
  const Hash256& layout_digest;
  const RemoteKeyring* keyring;  // nullptr: plaintext values.
  RedisStoreCounters* counters;
  GcmImpl gcm = GcmImpl::kOpenSsl;  // With a keyring: the calling thread's cipher's.
};

// Records a verified value's outcome in the entry and counts a refused one.
void Settle(const GetContext& g, Status verified, RemoteValueCheck check,
            const ssd::RecordHeader& header, RemoteGet* e) {
  RedisStoreCounters* c = g.counters;
  if (check == RemoteValueCheck::kCorrupt) c->corrupt.fetch_add(1, std::memory_order_relaxed);
  if (check == RemoteValueCheck::kMismatched) {
    c->mismatched.fetch_add(1, std::memory_order_relaxed);
  }
  e->status = std::move(verified);
  if (!e->status.ok()) return;
  e->codec_id = header.codec_id;
  e->raw_bytes = header.raw_bytes;
  e->payload_bytes = header.payload_bytes;
}

// A sealed value whose `opened` (the outcome of its GCM pass) failed: a counted refusal.
void Refuse(const GetContext& g, const Status& opened, uint32_t key_id, RemoteGet* e,
            Refusal* refused) {
  g.counters->auth_failures.fetch_add(1, std::memory_order_relaxed);
  e->status = Status::Corruption("remote value refused: " + opened.message());
  *refused = std::pair(key_id, e->status);
}

// The header checks of an opened sealed value (`head`, then `body_bytes` in dst). The payload
// CRC is not checked again: the GCM tag has already authenticated every byte. Nothing refused
// stays in dst.
void SettleOpened(const GetContext& g, std::span<const std::byte> head, size_t body_bytes,
                  RemoteGet* e) {
  ssd::RecordHeader header;
  RemoteValueCheck check;
  Status s = VerifyRemoteHeader(head, kRemoteValueHeaderBytes + body_bytes, e->key,
                                g.layout_digest, &header, &check);
  if (!s.ok() && body_bytes != 0) std::memset(e->dst.data(), 0, body_bytes);
  Settle(g, std::move(s), check, header, e);
}

// With a keyring, a value read into a reply: opens it straight into the caller's buffer (the
// header into a local one), then checks the header as VerifyRemoteValue does.
void FinishSealedGet(const GetContext& g, std::string_view key_name,
                     std::span<const std::byte> value, RemoteGet* e, RemoteCipher* cipher,
                     Refusal* refused) {
  std::array<std::byte, kRemoteValueHeaderBytes> head;
  size_t body_bytes = 0;
  uint32_t key_id = 0;
  const Status opened = OpenRemoteValueInto(*g.keyring, key_name, value, head, e->dst,
                                            &body_bytes, &key_id, cipher);
  if (opened.IsInvalidArgument()) {
    e->status = Status::InvalidArgument("remote get: destination smaller than the value");
    return;
  }
  if (!opened.ok()) return Refuse(g, opened, key_id, e, refused);
  SettleOpened(g, head, body_bytes, e);
}

// With a keyring, a value that landed (GetLanding): opened in place in the caller's buffer.
void FinishLandedSealedGet(const GetContext& g, std::string_view key_name,
                           const GetLanding& landing, RemoteGet* e, RemoteCipher* cipher,
                           Refusal* refused) {
  std::array<std::byte, kRemoteValueHeaderBytes> head;
  uint32_t key_id = 0;
  const Status opened = OpenRemoteValueInPlace(*g.keyring, key_name, landing.front(), head,
                                               landing.body(), landing.tag(), &key_id, cipher);
  if (!opened.ok()) return Refuse(g, opened, key_id, e, refused);  // Get wipes dst.
  SettleOpened(g, head, landing.body().size(), e);
}

// Without a keyring, a value read into a reply: verified in hiredis's buffer, then its payload
// copied once.
void FinishPlainGet(const GetContext& g, std::span<const std::byte> value, RemoteGet* e) {
  ssd::RecordHeader header;
  std::span<const std::byte> payload;
  RemoteValueCheck check;
  Status s = VerifyRemoteValue(value, e->key, g.layout_digest, &header, &payload, &check);
  if (s.ok() && payload.size() > e->dst.size()) {
    s = Status::InvalidArgument("remote get: destination smaller than the value");
  }
  if (s.ok() && !payload.empty()) std::memcpy(e->dst.data(), payload.data(), payload.size());
  Settle(g, std::move(s), check, header, e);
}

// Without a keyring, a value that landed: its payload is verified where it landed, in dst.
void FinishLandedPlainGet(const GetContext& g, const GetLanding& landing, RemoteGet* e) {
  ssd::RecordHeader header;
  RemoteValueCheck check;
  Status s = VerifyRemoteValueParts(landing.front(), landing.body(), e->key, g.layout_digest,
                                    &header, &check);
  Settle(g, std::move(s), check, header, e);  // Get wipes dst unless Ok.
}

// Turns a GET answer that is not an error reply into the entry's outcome, opening (with a
// keyring) and verifying the value before anything is used, and counts it.
void FinishAnswer(const GetContext& g, const redisReply& r, std::string_view key_name,
                  const GetLanding& landing, RemoteGet* e, RemoteCipher* cipher,
                  Refusal* refused) {
  RedisStoreCounters* c = g.counters;
  if (r.type == REDIS_REPLY_NIL) {
    e->status = Status::NotFound("remote miss");
  } else if (r.type != REDIS_REPLY_STRING) {
    e->status = Status::Corruption("remote value: unexpected reply type");
    c->corrupt.fetch_add(1, std::memory_order_relaxed);
  } else if (RedisReplyLanded(r)) {
    if (g.keyring != nullptr) {
      FinishLandedSealedGet(g, key_name, landing, e, cipher, refused);
    } else {
      FinishLandedPlainGet(g, landing, e);
    }
  } else {
    const std::span<const std::byte> value(reinterpret_cast<const std::byte*>(r.str), r.len);
    if (g.keyring != nullptr) {
      FinishSealedGet(g, key_name, value, e, cipher, refused);
    } else {
      FinishPlainGet(g, value, e);
    }
  }
  (e->status.ok() ? c->hits : c->misses).fetch_add(1, std::memory_order_relaxed);
}

// The same for any op: a failed op or an error reply is a miss, counted as a failure too.
void FinishGet(const GetContext& g, const RedisOp& op, std::string_view key_name,
               const GetLanding& landing, RemoteGet* e, RemoteCipher* cipher, Refusal* refused) {
  e->status = OpStatus(op);
  if (e->status.ok()) {
    FinishAnswer(g, *op.reply, key_name, landing, e, cipher, refused);
    return;
  }
  g.counters->misses.fetch_add(1, std::memory_order_relaxed);
  if (e->status.code() == StatusCode::kUnavailable || e->status.code() == StatusCode::kTimedOut ||
      e->status.code() == StatusCode::kNoSpace) {
    CountFailure(g.counters, e->status);
  }
}

}  // namespace

// One sealed Get call as the open worker sees it: the entries, their key names, and for each
// entry whether it was handed over (or opened during the reads) and why it was refused.
// Thread safety: the calling thread writes `taken` and queues; the worker writes entries[i] and
// refused[i] of the entries it was given. The caller reads entries and refusals only after Wait.
struct SealedGetCall final : public RedisOpenCall {
  SealedGetCall(const GetContext& c, std::span<RemoteGet> e, std::span<const std::string> k,
                std::span<const GetLanding> l)
      : context(c),
        entries(e),
        keys(k),
        landings(l),
        taken(e.size(), 0),
        refused(e.size()),
        cipher(c.gcm) {}
  void Open(size_t index, const redisReply& reply, RemoteCipher* with) override {
    FinishAnswer(context, reply, keys[index], landings[index], &entries[index], with,
                 &refused[index]);
  }

  const GetContext& context;
  std::span<RemoteGet> entries;
  std::span<const std::string> keys;
  std::span<const GetLanding> landings;
  std::vector<uint8_t> taken;  // 1: opened during the reads, not after them.
  std::vector<Refusal> refused;
  RemoteCipher cipher;         // The calling thread's, for values it opens itself.
};

// Here, not beside Open: the open worker must be a complete type.
RedisStore::RedisStore(RedisStoreOptions options)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock : SystemClock()),
      counters_(std::make_unique<RedisStoreCounters>()) {
  if (options_.keyring.has_value() && options_.sealed_open == SealedOpen::kOverlapped) {
    open_worker_ = std::make_unique<RedisOpenWorker>(GcmOf(options_));
  }
}

RedisStore::~RedisStore() = default;

namespace {

// Hands each large sealed answer to the open worker as soon as it is read (RunOps calls it on
// the reading thread, by op index); the reading thread opens it itself when the queue is full.
class OverlappedOpens final : public RedisReplyObserver {
 public:
  OverlappedOpens(RedisOpenWorker* worker, SealedGetCall* call) : worker_(worker), call_(call) {}
  // Whatever happens to the call, nothing the worker may still touch is freed before it is done.
  ~OverlappedOpens() override { worker_->Wait(call_); }
  OverlappedOpens(const OverlappedOpens&) = delete;
  OverlappedOpens& operator=(const OverlappedOpens&) = delete;

  void OnReply(size_t index, const redisReply& reply) override {
    if (reply.type != REDIS_REPLY_STRING || reply.len < kRedisOverlapOpenBytesMin) return;
    KV_DCHECK(call_->taken[index] == 0);
    call_->taken[index] = 1;
    if (worker_->Submit(call_, index, &reply)) return;
    call_->Open(index, reply, &call_->cipher);
  }

 private:
  RedisOpenWorker* const worker_;
  SealedGetCall* const call_;
};

// Verifies (plaintext) or opens (sealed) each value that landed as soon as its reply has been
// read, on the reading thread: the value is still in this core's cache, and the next values
// keep arriving in the socket's buffer meanwhile, so the pass overlaps the transfer.
class OpensAsRead final : public RedisReplyObserver {
 public:
  explicit OpensAsRead(SealedGetCall* call) : call_(call) {}
  void OnReply(size_t index, const redisReply& reply) override {
    if (!RedisReplyLanded(reply)) return;
    KV_DCHECK(call_->taken[index] == 0);
    call_->taken[index] = 1;
    call_->Open(index, reply, &call_->cipher);
  }

 private:
  SealedGetCall* const call_;
};

}  // namespace

Status RedisStore::Get(std::span<RemoteGet> entries) {
  KV_RETURN_IF_ERROR(CheckBatch(entries.size()));
  const size_t n = entries.size();
  std::vector<std::string> keys(n);
  // Where each value lands, and the answers: both outlive `call` and `overlap`.
  std::vector<GetLanding> landings(n);
  std::vector<RedisOp> ops(n);
  for (size_t i = 0; i < n; ++i) {
    keys[i] = KeyName(entries[i].key);
    SetArgs(&ops[i].command, {"GET", keys[i]});
    landings[i].Init(entries[i].dst, options_.keyring.has_value());
    ops[i].command.bulk_target = &landings[i];
    ops[i].slot = RedisKeySlot(keys[i]);
  }
  const GetContext context{
      .layout_digest = options_.layout_digest,
      .keyring = options_.keyring.has_value() ? &*options_.keyring : nullptr,
      .counters = counters_.get(),
      .gcm = GcmOf(options_)};
  SealedGetCall call(context, entries, keys, landings);
  {
    std::optional<OverlappedOpens> overlap;  // Its destructor waits for the worker.
    std::optional<OpensAsRead> as_read;
    RedisReplyObserver* observer = nullptr;
    if (open_worker_ != nullptr) {
      observer = &overlap.emplace(open_worker_.get(), &call);
    } else if (!options_.keyring.has_value() || options_.sealed_open == SealedOpen::kAsRead) {
      observer = &as_read.emplace(&call);  // kAfterReads keeps every open after the reads.
    }
    MutexLock lock(&mu_);
    RunOps(ops, observer);
  }
  counters_->gets.fetch_add(n, std::memory_order_relaxed);
  for (size_t i = 0; i < n; ++i) {
    if (call.taken[i] == 0) {
      FinishGet(context, ops[i], keys[i], landings[i], &entries[i], &call.cipher,
                &call.refused[i]);
    }
    // A value that landed but was refused, or whose read failed half-way, leaves nothing.
    landings[i].WipeUnlessOk(entries[i].status);
    if (const Refusal& r = call.refused[i]; r.has_value()) LogAuthFailure(r->first, r->second);
  }
  return Status::Ok();
}

Status RedisStore::Exists(std::span<RemoteExists> entries) {
  KV_RETURN_IF_ERROR(CheckBatch(entries.size()));
  const size_t n = entries.size();
  std::vector<std::string> keys(n);
  std::vector<RedisOp> ops(n);
  for (size_t i = 0; i < n; ++i) {
    keys[i] = KeyName(entries[i].key);
    SetArgs(&ops[i].command, {"EXISTS", keys[i]});
    ops[i].slot = RedisKeySlot(keys[i]);
  }
  {
    MutexLock lock(&mu_);
    RunOps(ops);
  }
  for (size_t i = 0; i < n; ++i) {
    RemoteExists& e = entries[i];
    e.status = OpStatus(ops[i]);
    if (e.status.ok() && ops[i].reply->type != REDIS_REPLY_INTEGER) {
      e.status = Status::Unavailable("redis: EXISTS answered with a non-integer");
    }
    e.exists = e.status.ok() && ops[i].reply->integer > 0;
    CountFailure(counters_.get(), e.status);
  }
  return Status::Ok();
}

Status RedisStore::Delete(std::span<RemoteDelete> entries) {
  KV_RETURN_IF_ERROR(CheckBatch(entries.size()));
  const size_t n = entries.size();
  std::vector<std::string> keys(n);
  std::vector<RedisOp> ops(n);
  for (size_t i = 0; i < n; ++i) {
    keys[i] = KeyName(entries[i].key);
    // UNLINK frees a multi-MiB value in a background thread instead of blocking the server.
    SetArgs(&ops[i].command, {"UNLINK", keys[i]});
    ops[i].slot = RedisKeySlot(keys[i]);
  }
  {
    MutexLock lock(&mu_);
    RunOps(ops);
  }
  for (size_t i = 0; i < n; ++i) {
    entries[i].status = OpStatus(ops[i]);
    CountFailure(counters_.get(), entries[i].status);
  }
  return Status::Ok();
}

RemoteStoreStats RedisStore::Stats() const {
  const RedisStoreCounters& c = *counters_;
  const auto load = [](const auto& v) { return v.load(std::memory_order_relaxed); };
  return {.gets = load(c.gets),
          .hits = load(c.hits),
          .misses = load(c.misses),
          .corrupt = load(c.corrupt),
          .mismatched = load(c.mismatched),
          .auth_failures = load(c.auth_failures),
          .puts = load(c.puts),
          .errors = load(c.errors),
          .timeouts = load(c.timeouts),
          .reconnects = load(c.reconnects),
          .breaker_trips = load(c.breaker_trips),
          .breakers_open = load(c.breakers_open),
          .breaker_state = static_cast<BreakerState>(load(c.breaker_state)),
          .redirects_moved = load(c.redirects_moved),
          .redirects_ask = load(c.redirects_ask),
          .redirects_refused = load(c.redirects_refused),
          .endpoints_refused = load(c.endpoints_refused),
          .topology_refreshes = load(c.topology_refreshes)};
}

}  // namespace kvtier
