// The node service's client (client.h): connecting and reconnecting, the connection's reader,
// namespaces, and the calls that need no staging. Loads, stores and pins: client_handles.cc.
#include "serve/client.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "core/escape.h"
#include "serve/client_impl.h"

namespace kvtier::serve {

Connection::~Connection() {
  if (base != nullptr) ::munmap(base, size);
}

bool Connection::Dead() {
  MutexLock lock(&mu);
  return dead;
}

void Connection::Drop() {
  (void)::shutdown(fd.get(), SHUT_RDWR);
  MutexLock lock(&mu);
  MarkDead();
}

void Connection::MarkDead() {
  dead = true;
  for (auto& entry : pending) entry.second->lost = true;
  pending.clear();
  cv.SignalAll();
}

void Connection::Read(uint32_t) {
  FrameHeader h;
  std::vector<std::byte> payload;
  while (RecvFrame(fd.get(), &h, &payload).ok()) {
    MutexLock lock(&mu);
    auto it = pending.find(h.id);
    if (it == pending.end()) continue;  // A request given up on (timed out): ignore.
    Pending& p = *it->second;
    WireReader r(payload);
    if (h.op == Op::kReply) {
      p.status = r.GetStatus();
      p.payload.assign(payload.end() - static_cast<ptrdiff_t>(payload.size() - r.consumed()),
                       payload.end());
      p.replied = true;
      if (!p.status.ok() || (p.layers.empty() && !p.wants_store)) pending.erase(it);
    } else if (h.op == Op::kLayerDone) {  // Layers [first, first + count).
      uint32_t first = r.U32(), count = r.U32();
      for (uint32_t i = 0; i < count && r.ok(); ++i) {
        Status s = r.GetStatus();
        uint64_t layer = uint64_t{first} + i;
        if (!r.ok() || layer >= p.layers.size() || p.layers[layer].has_value()) break;
        p.layers[layer] = std::move(s);
        ++p.layers_done;
      }
      if (p.layers_done == p.layers.size()) pending.erase(it);
    } else if (h.op == Op::kStoreDone) {
      p.store_status = r.GetStatus();
      p.store_done = true;
      pending.erase(it);
    }
    cv.SignalAll();
  }
  MutexLock lock(&mu);
  MarkDead();
}

Status Connection::Send(Op op, uint64_t request, const WireWriter& w,
                        std::shared_ptr<Pending> p) {
  {
    MutexLock lock(&mu);
    if (dead) return Status::Unavailable("the connection to the kvtier service was lost");
    pending[request] = std::move(p);
  }
  MutexLock lock(&send_mu);
  Status s = SendFrame(fd.get(), op, request, w.bytes());
  if (!s.ok()) Drop();
  return s;
}

void Connection::SendOnly(Op op, const WireWriter& w) {
  MutexLock lock(&send_mu);
  if (!SendFrame(fd.get(), op, 0, w.bytes()).ok()) Drop();
}

std::optional<uint64_t> Connection::Alloc(uint64_t bytes) {
  bytes = (bytes + kStagingAlign - 1) / kStagingAlign * kStagingAlign;
  MutexLock lock(&alloc_mu);
  for (auto it = free_ranges.begin(); it != free_ranges.end(); ++it) {
    if (it->second < bytes) continue;
    uint64_t offset = it->first, left = it->second - bytes;
    free_ranges.erase(it);
    if (left > 0) free_ranges[offset + bytes] = left;
    return offset;
  }
  return std::nullopt;
}

void Connection::Free(uint64_t offset, uint64_t bytes) {
  bytes = (bytes + kStagingAlign - 1) / kStagingAlign * kStagingAlign;
  MutexLock lock(&alloc_mu);
  auto next = free_ranges.lower_bound(offset);
  if (next != free_ranges.end() && offset + bytes == next->first) {
    bytes += next->second;
    next = free_ranges.erase(next);
  }
  if (next != free_ranges.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      prev->second += bytes;
      return;
    }
  }
  free_ranges[offset] = bytes;
}

// --- RemoteEngineImpl --------------------------------------------------------------------------

RemoteEngineImpl::RemoteEngineImpl(const ClientOptions& options) : client_(options) {
  std::random_device rd;
  tag_ = (uint64_t{rd()} << 32) | rd();
}

RemoteEngineImpl::~RemoteEngineImpl() {
  lender_->Detach();
  std::vector<std::shared_ptr<Connection>> all;
  {
    MutexLock lock(&mu_);
    if (conn_ != nullptr) all.push_back(conn_);
    conn_.reset();
    all.insert(all.end(), retired_.begin(), retired_.end());
    retired_.clear();
  }
  for (auto& c : all) {
    c->Drop();
    if (c->reader.joinable()) c->reader.join();
  }
}

void RemoteEngineImpl::Log(LogLevel level, const std::string& message) {
  LogTo(client_.logger, level, "kvtier client: " + message);
}

Result<std::shared_ptr<Connection>> RemoteEngineImpl::Handshake() {
  sockaddr_un addr{};
  const std::string& path = client_.socket_path;
  if (path.size() >= sizeof(addr.sun_path)) {
    return Status::InvalidArgument("the socket path " + path + " is too long");
  }
  auto c = std::make_shared<Connection>();
  c->fd = UniqueFd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!c->fd.valid()) return Status::FromErrno(errno, "socket");
  timeval tv{static_cast<time_t>(client_.timeout_ms / 1000),
             static_cast<suseconds_t>((client_.timeout_ms % 1000) * 1000)};
  (void)::setsockopt(c->fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  (void)::setsockopt(c->fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  if (::connect(c->fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return Status::Unavailable("no kvtier service at " + path + ": " + std::strerror(errno));
  }
  WireWriter hello;
  hello.U32(kProtocolVersion);
  hello.Str(client_.token);
  hello.Str(client_.name);
  KV_RETURN_IF_ERROR(SendFrame(c->fd.get(), Op::kHello, 0, hello.bytes()));
  FrameHeader h;
  std::vector<std::byte> payload;
  int memfd = -1;
  KV_RETURN_IF_ERROR(RecvFrame(c->fd.get(), &h, &payload, &memfd));
  UniqueFd owned(memfd);
  WireReader r(payload);
  Status status = r.GetStatus();
  if (h.op != Op::kHelloReply) return Status::Corruption("the service's hello reply is malformed");
  KV_RETURN_IF_ERROR(status);
  std::string layout_text = r.Str(4096);
  uint64_t block_bytes = r.U64();
  c->size = r.U64();
  c->id = r.U64();
  if (!r.done() || !owned.valid()) {
    return Status::Corruption("the service's hello reply is malformed");
  }
  KV_ASSIGN_OR_RETURN(KvLayout layout, ParseLayout(layout_text));
  KV_RETURN_IF_ERROR(CheckLayout(layout, block_bytes));
  KV_RETURN_IF_ERROR(MapStaging(c.get(), owned.get()));
  c->slot_bytes = (block_bytes + kStagingAlign - 1) / kStagingAlign * kStagingAlign;
  c->free_ranges[0] = c->size / kStagingAlign * kStagingAlign;
  timeval none{0, 0};
  (void)::setsockopt(c->fd.get(), SOL_SOCKET, SO_RCVTIMEO, &none, sizeof(none));
  uint32_t layers = layout.layers;
  Connection* raw = c.get();
  c->reader = std::thread([raw, layers] { raw->Read(layers); });
  return c;
}

Status RemoteEngineImpl::CheckLayout(const KvLayout& layout, uint64_t block_bytes) {
  if (layout.BlockBytes() != block_bytes) {
    return Status::Corruption("the service's layout and block size disagree");
  }
  MutexLock lock(&mu_);
  if (!have_layout_) {
    options_.layout = layout;
    have_layout_ = true;
    return Status::Ok();
  }
  if (layout.ToString() != options_.layout.ToString()) {
    return Status::InvalidArgument("the kvtier service at " + client_.socket_path +
                                   " serves layout " + layout.ToString() + ", not " +
                                   options_.layout.ToString());
  }
  return Status::Ok();
}

Status RemoteEngineImpl::MapStaging(Connection* c, int memfd) {
  struct stat st;
  int seals = ::fcntl(memfd, F_GET_SEALS);
  if (::fstat(memfd, &st) != 0 || static_cast<uint64_t>(st.st_size) < c->size || seals < 0 ||
      (seals & F_SEAL_SHRINK) == 0) {
    return Status::Corruption("the service's staging region is not a sealed region of " +
                              std::to_string(c->size) + " bytes");
  }
  void* p = ::mmap(nullptr, c->size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
  if (p == MAP_FAILED) return Status::FromErrno(errno, "mapping the service's staging region");
  c->base = static_cast<std::byte*>(p);
  return Status::Ok();
}

Result<std::shared_ptr<Connection>> RemoteEngineImpl::Live(bool force) {
  std::shared_ptr<Connection> stale;
  {
    MutexLock lock(&mu_);
    if (conn_ != nullptr && !conn_->Dead()) return conn_;
    if (conn_ != nullptr) {
      ++state_.disconnects;
      Log(LogLevel::kWarn, "lost the connection to the kvtier service at " +
                                  client_.socket_path + "; lookups miss until it is back");
      retired_.push_back(std::move(conn_));
      conn_.reset();
    }
    auto now = std::chrono::steady_clock::now();
    if (!force && attempted_ &&
        now - last_attempt_ < std::chrono::milliseconds(client_.reconnect_interval_ms)) {
      return Status::Unavailable("the kvtier service at " + client_.socket_path +
                                 " is not reachable (" + last_error_ + ")");
    }
    attempted_ = true;
    last_attempt_ = now;
  }
  JoinRetired();
  Result<std::shared_ptr<Connection>> c = Handshake();
  MutexLock lock(&mu_);
  if (!c.ok()) {
    if (last_error_ != c.status().message()) {
      Log(LogLevel::kWarn, "cannot reach the kvtier service: " + c.status().message());
    }
    last_error_ = c.status().message();
    return Status(c.status().code(), "the kvtier service at " + client_.socket_path +
                                         " is not reachable (" + last_error_ + ")");
  }
  if (conn_ != nullptr && !conn_->Dead()) {  // Another thread connected meanwhile.
    retired_.push_back(std::move(*c));
    retired_.back()->Drop();
    return conn_;
  }
  conn_ = std::move(*c);
  ++state_.connects;
  last_error_.clear();
  if (state_.connects > 1) Log(LogLevel::kInfo, "reconnected to " + client_.socket_path);
  return conn_;
}

void RemoteEngineImpl::JoinRetired() {
  std::vector<std::shared_ptr<Connection>> dead;
  {
    MutexLock lock(&mu_);
    for (auto it = retired_.begin(); it != retired_.end();) {
      if ((*it)->Dead()) {
        dead.push_back(std::move(*it));
        it = retired_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& c : dead) {
    if (c->reader.joinable()) c->reader.join();
  }
}

uint64_t RemoteEngineImpl::NextId() { return next_id_.fetch_add(1) + 1; }

Status RemoteEngineImpl::Request(const std::shared_ptr<Connection>& c, Op op,
                                 const WireWriter& w, const std::shared_ptr<Pending>& p,
                                 std::chrono::milliseconds timeout) {
  Status s = c->Send(op, NextId(), w, p);
  if (s.ok()) s = c->Wait(p, timeout, [](const Pending& q) { return q.replied; });
  if (!s.ok()) {
    if (s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kTimedOut) CountFailed();
    return s;
  }
  MutexLock lock(&c->mu);
  return p->status;
}

Result<std::vector<std::byte>> RemoteEngineImpl::Call(const std::shared_ptr<Connection>& c, Op op,
                                                      const WireWriter& w,
                                                      std::chrono::milliseconds timeout) {
  auto p = std::make_shared<Pending>();
  KV_RETURN_IF_ERROR(Request(c, op, w, p, timeout));
  return std::move(p->payload);
}

void RemoteEngineImpl::CountFailed() {
  MutexLock lock(&mu_);
  ++state_.failed_requests;
}

Result<uint64_t> RemoteEngineImpl::ServiceNamespace(const std::shared_ptr<Connection>& c,
                                                    const Namespace& ns) {
  uint64_t local = 0, tag = 0;
  std::memcpy(&local, ns.digest.data(), 8);
  std::memcpy(&tag, ns.digest.data() + 8, 8);
  NsSpec spec;
  {
    MutexLock lock(&mu_);
    if (tag != tag_ || local == 0 || local > specs_.size()) {
      return Status::InvalidArgument("a namespace not made by this kvtier client");
    }
    spec = specs_[local - 1];
  }
  {
    MutexLock lock(&c->mu);
    auto it = c->ns_handles.find(local);
    if (it != c->ns_handles.end()) return it->second;
  }
  WireWriter w;
  w.Str(spec.tenant);
  w.U32(static_cast<uint32_t>(spec.extra.size()));
  for (const std::string& e : spec.extra) w.Str(e);
  KV_ASSIGN_OR_RETURN(std::vector<std::byte> reply, Call(c, Op::kMakeNamespace, w, Timeout()));
  WireReader r(reply);
  uint64_t handle = r.U64();
  if (!r.done()) return Status::Corruption("a malformed namespace reply from the service");
  MutexLock lock(&c->mu);
  c->ns_handles[local] = handle;
  return handle;
}

Result<Namespace> RemoteEngineImpl::MakeNamespace(std::string_view salt,
                                                  std::span<const std::string> extra_keys) {
  if (salt.size() > kTenantBytesMax) {
    return Status::InvalidArgument("a tenant id longer than 4096 bytes");
  }
  if (extra_keys.size() > kExtraKeysMax) {
    return Status::InvalidArgument("more than 64 extra keys");
  }
  for (const std::string& e : extra_keys) {
    if (e.size() > kTenantBytesMax) {
      return Status::InvalidArgument("an extra key longer than 4096 bytes");
    }
  }
  NsSpec spec{std::string(salt), std::vector<std::string>(extra_keys.begin(), extra_keys.end())};
  Namespace ns;
  {
    MutexLock lock(&mu_);
    uint64_t local = 0;
    for (size_t i = 0; i < specs_.size(); ++i) {
      if (specs_[i].tenant == spec.tenant && specs_[i].extra == spec.extra) local = i + 1;
    }
    if (local == 0) {
      if (specs_.size() >= (1u << 20)) return Status::Busy("too many namespaces in one client");
      specs_.push_back(spec);
      local = specs_.size();
    }
    std::memcpy(ns.digest.data(), &local, 8);
    std::memcpy(ns.digest.data() + 8, &tag_, 8);
  }
  // Checked by the service now when it is reachable; otherwise at the first use.
  if (auto c = Live(false); c.ok()) KV_RETURN_IF_ERROR(ServiceNamespace(*c, ns).status());
  return ns;
}

Result<LookupResult> RemoteEngineImpl::Lookup(const Namespace& ns,
                                              std::span<const uint32_t> tokens,
                                              const LookupOptions& options) {
  LookupResult miss;
  Result<std::shared_ptr<Connection>> c = Live(false);
  if (!c.ok()) return miss;
  Result<uint64_t> handle = ServiceNamespace(*c, ns);
  if (!handle.ok()) {
    if (handle.status().code() == StatusCode::kInvalidArgument) return handle.status();
    return miss;
  }
  WireWriter w;
  w.U64(*handle);
  w.U64(options.session_id);
  w.U32s(tokens);
  Result<std::vector<std::byte>> reply = Call(*c, Op::kLookup, w, Timeout());
  if (!reply.ok()) {
    if (reply.status().code() == StatusCode::kInvalidArgument) return reply.status();
    return miss;  // The service is gone or slow: a miss, never a stall.
  }
  WireReader r(*reply);
  LookupResult result;
  result.matched_tokens = r.U64();
  uint32_t n = r.U32();
  for (uint32_t i = 0; i < n && r.ok(); ++i) {
    uint8_t t = r.U8();
    result.chunk_tiers.push_back(t <= static_cast<uint8_t>(TierKind::kRemote)
                                     ? static_cast<TierKind>(t)
                                     : TierKind::kNone);
  }
  if (!r.done() || result.matched_tokens > tokens.size()) return miss;
  return result;
}

Status RemoteEngineImpl::Promote(Op op, const Namespace& ns, std::span<const uint32_t> tokens,
                                 uint64_t session_id) {
  Result<std::shared_ptr<Connection>> c = Live(false);
  if (!c.ok()) return Status::Ok();  // Best effort: nothing to promote while down.
  Result<uint64_t> handle = ServiceNamespace(*c, ns);
  if (!handle.ok()) return handle.status();
  WireWriter w;
  w.U64(*handle);
  if (op == Op::kHint) w.U64(session_id);
  w.U32s(tokens);
  Result<std::vector<std::byte>> reply = Call(*c, op, w, Timeout());
  if (!reply.ok() && reply.status().code() == StatusCode::kInvalidArgument) {
    return reply.status();
  }
  return Status::Ok();
}

Status RemoteEngineImpl::Flush() {
  KV_ASSIGN_OR_RETURN(std::shared_ptr<Connection> c, Live(true));
  // Writing every dirty block down may take long; still bounded.
  return Call(c, Op::kFlush, WireWriter(), std::chrono::milliseconds(kFlushTimeoutMs)).status();
}

Status RemoteEngineImpl::Drain() {
  KV_ASSIGN_OR_RETURN(std::shared_ptr<Connection> c, Live(true));
  return Call(c, Op::kDrain, WireWriter(), Timeout()).status();
}

Result<RemoteEngine::ClearResult> RemoteEngineImpl::ClearTenant(uint32_t uid,
                                                               std::string_view tenant) {
  KV_ASSIGN_OR_RETURN(std::shared_ptr<Connection> c, Live(true));
  WireWriter w;
  w.U32(uid);
  w.Str(tenant);
  KV_ASSIGN_OR_RETURN(std::vector<std::byte> reply, Call(c, Op::kClearTenant, w, Timeout()));
  WireReader r(reply);
  ClearResult result;
  result.generation = r.U64();
  result.persistent = r.U8() != 0;
  if (!r.done()) return Status::Corruption("a malformed clear reply from the service");
  return result;
}

EngineStats RemoteEngineImpl::Stats() {
  Result<std::shared_ptr<Connection>> c = Live(false);
  if (!c.ok()) return {};
  WireWriter request;
  request.U8(kStatsWithRemoteStore);
  Result<std::vector<std::byte>> reply = Call(*c, Op::kStats, request, Timeout());
  if (!reply.ok()) return {};
  WireReader r(*reply);
  EngineStats stats = GetEngineStats(&r);
  return r.ok() ? stats : EngineStats{};
}

Result<std::string> RemoteEngineImpl::ServiceStatsJson() {
  KV_ASSIGN_OR_RETURN(std::shared_ptr<Connection> c, Live(true));
  KV_ASSIGN_OR_RETURN(std::vector<std::byte> reply,
                      Call(c, Op::kServiceStats, WireWriter(), Timeout()));
  WireReader r(reply);
  std::string json = r.Str(kFramePayloadMax);
  if (!r.done()) return Status::Corruption("a malformed stats reply from the service");
  return json;
}

ClientState RemoteEngineImpl::State() {
  bool connected;
  {
    MutexLock lock(&mu_);
    connected = conn_ != nullptr && !conn_->Dead();
  }
  MutexLock lock(&mu_);
  ClientState s = state_;
  s.connected = connected;
  s.copied_bytes = copied_bytes_.load();
  return s;
}

Status ClientOptions::Validate() const {
  if (socket_path.empty()) return Status::InvalidArgument("socket_path: required");
  if (token.size() > kNameBytesMax) return Status::InvalidArgument("token: at most 256 bytes");
  if (name.size() > kNameBytesMax) return Status::InvalidArgument("name: at most 256 bytes");
  if (timeout_ms == 0 || timeout_ms > 3600 * 1000) {
    return Status::InvalidArgument("timeout_ms: between 1 and 3600000");
  }
  if (reconnect_interval_ms > 3600 * 1000) {
    return Status::InvalidArgument("reconnect_interval_ms: at most 3600000");
  }
  if (layout.has_value()) KV_RETURN_IF_ERROR(layout->Validate());
  return Status::Ok();
}

Result<std::unique_ptr<RemoteEngine>> Connect(const ClientOptions& options) {
  KV_RETURN_IF_ERROR(options.Validate());
  auto engine = std::make_unique<RemoteEngineImpl>(options);
  if (options.layout.has_value()) {
    MutexLock lock(&engine->mu_);
    engine->options_.layout = *options.layout;
    engine->have_layout_ = true;
  }
  Result<std::shared_ptr<Connection>> c = engine->Live(true);
  if (!c.ok() && !options.layout.has_value()) return c.status();
  if (!c.ok() && c.status().code() != StatusCode::kUnavailable) return c.status();
  return std::unique_ptr<RemoteEngine>(std::move(engine));
}

}  // namespace kvtier::serve
