// The node service's lifecycle (server.h): the socket and its lock, the accept loop, stopping and
// draining, and the service's counters (stats, Prometheus text, JSON).
#include "serve/server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <span>

#include "core/escape.h"
#include "engine/engine_metrics.h"
#include "engine/stats_table.h"
#include "serve/server_internal.h"
#include "tiers/remote_crypto.h"

namespace kvtier::serve {
namespace {

std::string Json(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned char>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// Prometheus label values: the client-chosen name, escaped and bounded.
std::string Label(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 64)) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x7f) {
      out += c;
    } else {
      out += '?';
    }
  }
  return out;
}

// The socket's lock file: held (flock) while a service serves the socket, with its pid inside.
Result<UniqueFd> LockSocket(const std::string& socket_path) {
  std::string path = socket_path + ".lock";
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd.valid()) return Status::FromErrno(errno, "opening the socket's lock " + path);
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    char buf[32] = {};
    ssize_t n = ::pread(fd.get(), buf, sizeof(buf) - 1, 0);
    std::string pid = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "unknown";
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    return Status::Busy("the socket " + socket_path + " is served by another kvtier serve (pid " +
                        EscapeForMessage(pid) + ", which holds " + path + "); stop it first");
  }
  std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd.get(), 0) != 0 ||
      ::pwrite(fd.get(), pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    return Status::FromErrno(errno, "writing the socket's lock " + path);
  }
  return fd;
}

// The socket path's length, and what is there now: InvalidArgument for a file that is not a
// socket; *socket_there for a socket (one left by a service that died, when nobody holds its
// lock).
Status CheckSocketFile(const std::string& path, bool* socket_there) {
  *socket_there = false;
  if (path.size() >= sizeof(sockaddr_un{}.sun_path)) {
    return Status::InvalidArgument("the socket path " + path + " is longer than " +
                                   std::to_string(sizeof(sockaddr_un{}.sun_path) - 1) + " bytes");
  }
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return Status::InvalidArgument("the socket path " + path +
                                     " exists and is not a socket; not replacing it");
    }
    *socket_there = true;
  }
  return Status::Ok();
}

Result<UniqueFd> Listen(const std::string& path) {
  sockaddr_un addr{};
  bool socket_there = false;
  KV_RETURN_IF_ERROR(CheckSocketFile(path, &socket_there));
  // A socket left by a service that died: we hold the lock, so nobody serves it.
  if (socket_there && ::unlink(path.c_str()) != 0) {
    return Status::FromErrno(errno, "removing " + path);
  }
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Status::FromErrno(errno, "socket");
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  mode_t old = ::umask(0117);  // The socket is 0660: the directory's mode decides who reaches it.
  int rc = ::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  int err = errno;
  ::umask(old);
  if (rc != 0) return Status::FromErrno(err, "binding the socket " + path);
  if (::listen(fd.get(), 128) != 0) return Status::FromErrno(errno, "listen on " + path);
  return fd;
}

}  // namespace

Status ServerOptions::Validate() const {
  if (socket_path.empty()) return Status::InvalidArgument("socket_path: required");
  if (!tenant_secret.empty() && tenant_secret.size() < 16) {
    return Status::InvalidArgument("tenant_secret: at least 16 bytes");
  }
  if (client_staging_bytes < (uint64_t{1} << 20) || client_staging_bytes > kClientStagingBytesMax) {
    return Status::InvalidArgument("client_staging_bytes: between 1 MiB and 64 GiB");
  }
  if (clients_max == 0 || clients_max > kClientsMaxLimit) {
    return Status::InvalidArgument("clients_max: between 1 and 4096");
  }
  if (send_timeout_ms == 0) return Status::InvalidArgument("send_timeout_ms: at least 1");
  if (token.size() > kNameBytesMax) return Status::InvalidArgument("token: at most 256 bytes");
  return Status::Ok();
}

void Server::Impl::Log(LogLevel level, const std::string& message) const {
  LogTo(options.logger, level, "kvtier serve: " + message);
}

void Server::Impl::Refused(const ucred& cred, const std::string& why) {
  ++clients_refused;
  MutexLock lock(&mu);
  std::string key = std::to_string(cred.pid) + ":" + why;
  if (refusals_logged.size() < 4096 && refusals_logged.emplace(key, true).second) {
    Log(LogLevel::kWarn, "refused a client (pid " + std::to_string(cred.pid) + ", uid " +
                             std::to_string(cred.uid) + "): " + why);
  }
}

void Server::Impl::CountTenant(const std::string& tenant, const TenantCounters& d) {
  MutexLock lock(&mu);
  auto it = tenants.find(tenant);
  if (it == tenants.end()) {
    // At most 1024 tenants by name; the rest are counted together as "other".
    it = tenants.try_emplace(tenants.size() >= 1024 ? std::string("other") : tenant).first;
  }
  it->second.lookups += d.lookups;
  it->second.lookup_tokens += d.lookup_tokens;
  it->second.lookup_hit_tokens += d.lookup_hit_tokens;
  it->second.loads += d.loads;
  it->second.stores += d.stores;
}

void Server::Impl::Reap(bool all) {
  std::vector<std::shared_ptr<Conn>> done;
  {
    MutexLock lock(&mu);
    for (auto it = conns.begin(); it != conns.end();) {
      if (all || (*it)->finished()) {
        done.push_back(std::move(*it));
        it = conns.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& c : done) c->Join();
}

void Server::Impl::Accept() {
  while (!stopping) {
    pollfd fds[2] = {{listen_fd.get(), POLLIN, 0}, {wake[0], POLLIN, 0}};
    int n = ::poll(fds, 2, 500);
    Reap(false);
    if (n <= 0 || stopping) continue;
    if ((fds[0].revents & POLLIN) == 0) continue;
    UniqueFd fd(::accept4(listen_fd.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!fd.valid()) continue;
    size_t active;
    {
      MutexLock lock(&mu);
      active = conns.size();
    }
    if (active >= options.clients_max) {
      ucred cred{};
      socklen_t len = sizeof(cred);
      (void)::getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len);
      Refused(cred, "the service already serves clients_max (" +
                        std::to_string(options.clients_max) + ") clients");
      continue;  // Closing the socket: the client sees the refusal as a lost connection.
    }
    auto conn = std::make_shared<Conn>(this, std::move(fd), ++clients_total);
    {
      MutexLock lock(&mu);
      conns.push_back(conn);
    }
    conn->Start();
  }
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Server::~Server() { Stop(); }

Status CheckSocketPath(const std::string& socket_path) {
  bool socket_there = false;
  KV_RETURN_IF_ERROR(CheckSocketFile(socket_path, &socket_there));
  const std::filesystem::path dir = std::filesystem::path(socket_path).parent_path();
  struct stat st {};
  // Without its directory no service holds the lock (its file is in it).
  if (::stat(dir.empty() ? "." : dir.c_str(), &st) != 0) return Status::Ok();
  return LockSocket(socket_path).status();  // Released when the descriptor closes.
}

Result<std::unique_ptr<Server>> Server::Start(const ServerOptions& options,
                                              std::shared_ptr<Engine> engine) {
  KV_RETURN_IF_ERROR(options.Validate());
  if (engine == nullptr) return Status::InvalidArgument("Server::Start: no engine");
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->engine = std::move(engine);
  const KvLayout& layout = impl->engine->options().layout;
  impl->block_bytes = layout.BlockBytes();
  impl->slot_bytes = (impl->block_bytes + kStagingAlign - 1) / kStagingAlign * kStagingAlign;
  impl->layers = layout.layers;
  impl->layout_text = layout.ToString();
  impl->own_uid = ::geteuid();
  if (options.client_staging_bytes < impl->slot_bytes * layout.layers) {
    return Status::InvalidArgument("client_staging_bytes: smaller than one chunk's blocks (" +
                                   std::to_string(impl->slot_bytes * layout.layers) + " bytes)");
  }
  KV_RETURN_IF_ERROR(impl->generations.Open(options.namespace_state_path));
  KV_ASSIGN_OR_RETURN(impl->lock_fd, LockSocket(options.socket_path));
  KV_ASSIGN_OR_RETURN(impl->listen_fd, Listen(options.socket_path));
  if (::pipe2(impl->wake, O_CLOEXEC) != 0) return Status::FromErrno(errno, "pipe2");
  std::unique_ptr<Server> server(new Server(std::move(impl)));
  Impl* i = server->impl_.get();
  i->owner = server.get();
  i->acceptor = std::thread([i] { i->Accept(); });
  i->Log(LogLevel::kInfo, "serving " + options.socket_path + " (layout " + i->layout_text + ")");
  return server;
}

void Server::Stop() {
  if (impl_ == nullptr || impl_->stopped.exchange(true)) return;
  impl_->stopping = true;
  if (impl_->wake[1] >= 0) (void)!::write(impl_->wake[1], "x", 1);
  if (impl_->acceptor.joinable()) impl_->acceptor.join();
  {
    MutexLock lock(&impl_->mu);
    for (auto& c : impl_->conns) c->Shutdown();
  }
  impl_->Reap(true);  // Each connection finishes its requests in flight first.
  ::unlink(impl_->options.socket_path.c_str());
  impl_->listen_fd.Reset();
  for (int& fd : impl_->wake) {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  impl_->Log(LogLevel::kInfo,
             "stopped; " + std::to_string(impl_->leases_active.load()) + " leases active");
}

void Server::Drain() {
  if (!impl_->draining.exchange(true)) {
    impl_->Log(LogLevel::kInfo, "draining: new loads, stores and clients are refused");
  }
}

Result<Namespace> Server::Impl::DeriveNamespace(const std::string& scoped,
                                                const std::vector<std::string>& extra) {
  std::string salt = generations.SaltFor(scoped);
  if (!options.tenant_secret.empty()) {
    KV_ASSIGN_OR_RETURN(salt,
                        DeriveTenantSalt(salt, std::as_bytes(std::span(options.tenant_secret))));
  }
  return engine->MakeNamespace(salt, extra);
}

Result<uint64_t> Server::ClearTenant(uint32_t uid, const std::string& tenant) {
  if (tenant.size() > kTenantBytesMax) {
    return Status::InvalidArgument("a tenant id of more than 4096 bytes");
  }
  const std::string scoped = "uid:" + std::to_string(uid) + "/" + tenant;
  KV_ASSIGN_OR_RETURN(const uint64_t generation, impl_->generations.Bump(scoped));
  ++impl_->clear_epoch;
  impl_->Log(LogLevel::kInfo,
             "cleared a tenant of uid " + std::to_string(uid) + ": generation " +
                 std::to_string(generation) +
                 (impl_->generations.persistent()
                      ? " (recorded in " + impl_->generations.path() + ")"
                      : " (kept in memory only: the service has no namespace state file)"));
  return generation;
}

const std::string& Server::socket_path() const { return impl_->options.socket_path; }

ServerStats Server::Stats() {
  ServerStats s;
  s.clients_total = impl_->clients_total;
  s.clients_refused = impl_->clients_refused;
  s.requests = impl_->requests;
  s.bad_requests = impl_->bad_requests;
  s.leases_active = impl_->leases_active;
  s.leases_total = impl_->leases_total;
  s.leases_orphaned = impl_->leases_orphaned;
  s.disconnects_mid_request = impl_->disconnects_mid_request;
  s.tenants_cleared = impl_->clear_epoch;
  s.draining = impl_->draining;
  MutexLock lock(&impl_->mu);
  for (const auto& c : impl_->conns) {
    if (c->admitted() && !c->finished()) s.clients.push_back(c->Snapshot());
  }
  s.clients_active = s.clients.size();
  for (const auto& [name, t] : impl_->tenants) {
    s.tenants.push_back({name, t.lookups, t.lookup_tokens, t.lookup_hit_tokens, t.loads, t.stores});
  }
  return s;
}

std::string Server::MetricsText() {
  ServerStats s = Stats();
  std::string out = impl_->engine->MetricsText();
  auto gauge = [&out](const char* name, const char* help, uint64_t v, const char* type) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" +
           name + " " + std::to_string(v) + "\n";
  };
  gauge("kvtier_serve_clients", "Clients connected now.", s.clients_active, "gauge");
  gauge("kvtier_serve_clients_total", "Clients admitted since the start.", s.clients_total,
        "counter");
  gauge("kvtier_serve_clients_refused_total", "Connections refused.", s.clients_refused, "counter");
  gauge("kvtier_serve_requests_total", "Requests served.", s.requests, "counter");
  gauge("kvtier_serve_bad_requests_total", "Malformed or out-of-range requests.", s.bad_requests,
        "counter");
  gauge("kvtier_serve_leases", "Loads and stores that may still touch a staging region.",
        s.leases_active, "gauge");
  gauge("kvtier_serve_leases_orphaned_total", "Leases whose client left before they ended.",
        s.leases_orphaned, "counter");
  gauge("kvtier_serve_draining", "1 while draining.", s.draining ? 1 : 0, "gauge");
  out +=
      "# HELP kvtier_serve_client_requests_total Requests per connected client.\n"
      "# TYPE kvtier_serve_client_requests_total counter\n";
  for (const ClientStats& c : s.clients) {
    std::string labels = "{client=\"" + std::to_string(c.id) + "\",name=\"" + Label(c.name) +
                         "\",uid=\"" + std::to_string(c.uid) + "\"}";
    out += "kvtier_serve_client_requests_total" + labels + " " + std::to_string(c.requests) +
           "\nkvtier_serve_client_lookup_hit_tokens_total" + labels + " " +
           std::to_string(c.lookup_hit_tokens) + "\nkvtier_serve_client_load_blocks_total" +
           labels + " " + std::to_string(c.load_blocks) +
           "\nkvtier_serve_client_store_blocks_total" + labels + " " +
           std::to_string(c.store_blocks) + "\n";
  }
  out +=
      "# HELP kvtier_serve_tenant_lookup_tokens_total Tokens looked up per tenant.\n"
      "# TYPE kvtier_serve_tenant_lookup_tokens_total counter\n";
  for (const TenantStats& t : s.tenants) {
    std::string labels = "{tenant=\"" + Label(t.tenant) + "\"}";
    out += "kvtier_serve_tenant_lookup_tokens_total" + labels + " " +
           std::to_string(t.lookup_tokens) + "\nkvtier_serve_tenant_lookup_hit_tokens_total" +
           labels + " " + std::to_string(t.lookup_hit_tokens) +
           "\nkvtier_serve_tenant_loads_total" + labels + " " + std::to_string(t.loads) +
           "\nkvtier_serve_tenant_stores_total" + labels + " " + std::to_string(t.stores) + "\n";
  }
  return out;
}

std::string Server::StatsJson() {
  ServerStats s = Stats();
  EngineStats e = impl_->engine->Stats();
  auto u = [](uint64_t v) { return std::to_string(v); };
  std::string out =
      "{\"socket\": " + Json(impl_->options.socket_path) +
      ", \"layout\": " + Json(impl_->layout_text) + ", \"clients_active\": " + u(s.clients_active) +
      ", \"clients_total\": " + u(s.clients_total) +
      ", \"clients_refused\": " + u(s.clients_refused) + ", \"requests\": " + u(s.requests) +
      ", \"bad_requests\": " + u(s.bad_requests) + ", \"leases_active\": " + u(s.leases_active) +
      ", \"leases_total\": " + u(s.leases_total) +
      ", \"leases_orphaned\": " + u(s.leases_orphaned) +
      ", \"disconnects_mid_request\": " + u(s.disconnects_mid_request) +
      ", \"tenants_cleared\": " + u(s.tenants_cleared) +
      ", \"draining\": " + (s.draining ? "true" : "false") + ", \"clients\": [";
  for (size_t i = 0; i < s.clients.size(); ++i) {
    const ClientStats& c = s.clients[i];
    out += std::string(i ? ", " : "") + "{\"id\": " + u(c.id) + ", \"pid\": " + u(c.pid) +
           ", \"uid\": " + u(c.uid) + ", \"name\": " + Json(c.name) +
           ", \"requests\": " + u(c.requests) + ", \"lookups\": " + u(c.lookups) +
           ", \"lookup_hit_tokens\": " + u(c.lookup_hit_tokens) + ", \"loads\": " + u(c.loads) +
           ", \"stores\": " + u(c.stores) + ", \"errors\": " + u(c.errors) +
           ", \"leases_active\": " + u(c.leases_active) + "}";
  }
  out += "], \"tenants\": [";
  for (size_t i = 0; i < s.tenants.size(); ++i) {
    const TenantStats& t = s.tenants[i];
    out += std::string(i ? ", " : "") + "{\"tenant\": " + Json(t.tenant) +
           ", \"lookups\": " + u(t.lookups) + ", \"lookup_tokens\": " + u(t.lookup_tokens) +
           ", \"lookup_hit_tokens\": " + u(t.lookup_hit_tokens) + ", \"loads\": " + u(t.loads) +
           ", \"stores\": " + u(t.stores) + "}";
  }
  // The engine's counters: every row of the stats table (engine/stats_table.h) by its name.
  return out + "], \"engine\": " + kvtier::StatsJson(e) + "}";
}

}  // namespace kvtier::serve
