// See redis_test_util.h.
#include "tiers/redis/redis_test_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <string_view>
#include <thread>

#include "core/assert.h"

namespace kvtier {
namespace {

constexpr int kStartWaitMs = 5000;

bool PortFree(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

// A free loopback port whose cluster bus port (port + 10000) is free too.
uint16_t PickPort() {
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    uint16_t port = 0;
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port = ntohs(addr.sin_port);
    }
    close(fd);
    if (port != 0 && port < 55000 && PortFree(static_cast<uint16_t>(port + 10000))) return port;
  }
  return 0;
}

// fork + exec with the child killed when the test process dies; argv is built before fork so
// the child only calls async-signal-safe functions.
pid_t SpawnProcess(const std::vector<std::string>& args, const std::string& output_path) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid != 0) return pid;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  const int out = open(output_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (out >= 0) {
    dup2(out, 1);
    dup2(out, 2);
  }
  execvp(argv[0], argv.data());
  _exit(127);
}

void SleepMs(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// Text of a scalar reply.
std::string LeafText(const redisReply* r) {
  switch (r->type) {
    case REDIS_REPLY_INTEGER:
      return std::to_string(r->integer);
    case REDIS_REPLY_NIL:
      return "(nil)";
    case REDIS_REPLY_ARRAY:
      return "(array)";
    default:
      return std::string(r->str, r->len);
  }
}

// Text of a reply; an array's elements (one level, no recursion) are joined by '\n'.
std::string ReplyText(const redisReply* r) {
  if (r->type != REDIS_REPLY_ARRAY) return LeafText(r);
  std::string text;
  for (size_t i = 0; i < r->elements; ++i) {
    if (i > 0) text += "\n";
    text += LeafText(r->element[i]);
  }
  return text;
}

}  // namespace

bool RedisServerInstalled() {
  const bool installed = std::system("command -v redis-server >/dev/null 2>&1") == 0;
  const char* required = std::getenv("KVTIER_REQUIRE_RESOURCES");
  if (!installed && required != nullptr && std::string_view(required) == "1") {
    // A fatal failure (FAIL() needs a void function, hence the lambda): a fixture's SetUp that
    // then skips does not run the test body, and the test stays failed.
    [] {
      FAIL() << "redis-server is not on PATH and KVTIER_REQUIRE_RESOURCES=1 makes a missing "
                "resource fail";
    }();
  }
  return installed;
}

Result<std::unique_ptr<RedisServer>> RedisServer::Start(std::vector<std::string> extra_args,
                                                        uint16_t port) {
  KV_ASSIGN_OR_RETURN(ScopedTempDir dir, ScopedTempDir::Create());
  if (port == 0) port = PickPort();
  if (port == 0) return Status::Unavailable("no free loopback port");
  std::unique_ptr<RedisServer> server(new RedisServer(std::move(dir), port, std::move(extra_args)));
  KV_RETURN_IF_ERROR(server->Spawn());
  return server;
}

RedisServer::~RedisServer() { Kill(); }

Status RedisServer::Spawn() {
  std::vector<std::string> args = {"redis-server",
                                   "--port",
                                   std::to_string(port_),
                                   "--bind",
                                   "127.0.0.1",
                                   "--dir",
                                   dir_.path(),
                                   "--save",
                                   "",
                                   "--appendonly",
                                   "no",
                                   "--protected-mode",
                                   "no"};
  for (std::string arg : extra_args_) {
    const size_t at = arg.find("{dir}");
    if (at != std::string::npos) arg.replace(at, 5, dir_.path());
    args.push_back(std::move(arg));
  }
  pid_ = SpawnProcess(args, dir_.Join("redis.log"));
  if (pid_ < 0) return Status::FromErrno(errno, "fork redis-server");
  for (int waited_ms = 0; waited_ms < kStartWaitMs; waited_ms += 20) {
    redisContext* c = redisConnect("127.0.0.1", port_);
    const bool up = c != nullptr && c->err == 0;
    if (c != nullptr) redisFree(c);
    if (up) return Status::Ok();
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return Status::Unavailable("redis-server exited at start; see " + dir_.Join("redis.log"));
    }
    SleepMs(20);
  }
  return Status::TimedOut("redis-server did not start on port " + std::to_string(port_));
}

void RedisServer::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGCONT);
  kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

Status RedisServer::Restart() {
  Kill();
  return Spawn();
}

void RedisServer::Pause() {
  if (pid_ > 0) kill(pid_, SIGSTOP);
}

void RedisServer::Resume() {
  if (pid_ > 0) kill(pid_, SIGCONT);
}

Result<std::string> RedisRawCommand(uint16_t port, const std::vector<std::string>& args,
                                    const std::string& user, const std::string& password) {
  const timeval tv{.tv_sec = 5, .tv_usec = 0};
  redisContext* c = redisConnectWithTimeout("127.0.0.1", port, tv);
  if (c == nullptr || c->err != 0) {
    const std::string why = c != nullptr ? c->errstr : "no context";
    if (c != nullptr) redisFree(c);
    return Status::Unavailable("raw connect to " + std::to_string(port) + ": " + why);
  }
  if (!password.empty()) {
    redisReply* auth = static_cast<redisReply*>(
        redisCommand(c, "AUTH %s %s", user.empty() ? "default" : user.c_str(), password.c_str()));
    if (auth != nullptr) freeReplyObject(auth);
  }
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const std::string& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  redisReply* r = static_cast<redisReply*>(
      redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data()));
  if (r == nullptr) {
    const std::string why = c->errstr;
    redisFree(c);
    return Status::Unavailable("raw command: " + why);
  }
  const bool error = r->type == REDIS_REPLY_ERROR;
  std::string text = ReplyText(r);
  freeReplyObject(r);
  redisFree(c);
  if (error) return Status::IoError(text);
  return text;
}

Result<std::unique_ptr<RedisCluster>> RedisCluster::Start(int masters) {
  std::unique_ptr<RedisCluster> cluster(new RedisCluster());
  std::vector<std::string> create = {"redis-cli", "--cluster", "create"};
  for (int i = 0; i < masters; ++i) {
    KV_ASSIGN_OR_RETURN(std::unique_ptr<RedisServer> server,
                        RedisServer::Start({"--cluster-enabled", "yes", "--cluster-config-file",
                                            "{dir}/nodes.conf", "--cluster-node-timeout", "3000",
                                            "--cluster-require-full-coverage", "no"}));
    create.push_back(server->endpoint());
    cluster->nodes_.push_back(std::move(server));
  }
  create.push_back("--cluster-yes");
  const pid_t pid = SpawnProcess(create, cluster->nodes_[0]->dir() + "/cluster-create.log");
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Status::Unavailable("redis-cli --cluster create failed; see " +
                               cluster->nodes_[0]->dir() + "/cluster-create.log");
  }
  for (int waited_ms = 0; waited_ms < 10000; waited_ms += 50) {
    bool ok = true;
    for (const auto& node : cluster->nodes_) {
      Result<std::string> info = RedisRawCommand(node->port(), {"CLUSTER", "INFO"});
      ok = ok && info.ok() && info->find("cluster_state:ok") != std::string::npos;
      // Every node must know all masters, each serving slots, before a client may trust any
      // one node's view of the map.
      const std::string n = std::to_string(masters);
      ok = ok && info->find("cluster_known_nodes:" + n) != std::string::npos &&
           info->find("cluster_size:" + n) != std::string::npos;
    }
    if (ok) return cluster;
    SleepMs(50);
  }
  return Status::TimedOut("redis cluster did not reach cluster_state:ok");
}

Result<std::string> RedisCluster::NodeId(size_t i) {
  return RedisRawCommand(nodes_[i]->port(), {"CLUSTER", "MYID"});
}

size_t RedisCluster::IndexOfPort(uint16_t port) const {
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i]->port() == port) return i;
  }
  return nodes_.size();
}

namespace {

// Parses one complete command (a RESP array of bulk strings) at in[*pos]; false when it has not
// all arrived (or is not such a command).
bool ParseRespCommand(const std::string& in, size_t* pos, std::vector<std::string>* args) {
  const auto line = [&](std::string* text) {
    const size_t end = in.find("\r\n", *pos);
    if (end == std::string::npos) return false;
    *text = in.substr(*pos, end - *pos);
    *pos = end + 2;
    return true;
  };
  std::string head;
  if (!line(&head) || head.size() < 2 || head[0] != '*') return false;
  const int n = std::atoi(head.c_str() + 1);
  for (int i = 0; i < n; ++i) {
    std::string len;
    if (!line(&len) || len.size() < 2 || len[0] != '$') return false;
    const size_t bytes = std::strtoul(len.c_str() + 1, nullptr, 10);
    if (in.size() < *pos + bytes + 2) return false;
    args->push_back(in.substr(*pos, bytes));
    *pos += bytes + 2;
  }
  return true;
}

// Writes all of `bytes` unless the client hangs up or `stop` is set; false then.
bool WriteAll(int fd, std::string_view bytes, const std::atomic<bool>& stop) {
  while (!bytes.empty()) {
    if (stop.load()) return false;
    const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n > 0) {
      bytes.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    return false;
  }
  return true;
}

}  // namespace

FakeRedisServer::FakeRedisServer(const std::string& address, Handler handler)
    : FakeRedisServer(address, std::move(handler), Options{}) {}

FakeRedisServer::FakeRedisServer(const std::string& address, Handler handler, Options options)
    : address_(address), handler_(std::move(handler)), options_(options) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  KV_CHECK(listen_fd_ >= 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  KV_CHECK(::inet_pton(AF_INET, address.c_str(), &sa.sin_addr) == 1);
  KV_CHECK(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0);
  KV_CHECK(::listen(listen_fd_, 8) == 0);
  socklen_t len = sizeof(sa);
  KV_CHECK(::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&sa), &len) == 0);
  port_ = ntohs(sa.sin_port);
  thread_ = std::thread([this] { Serve(); });
}

FakeRedisServer::~FakeRedisServer() {
  stop_ = true;
  thread_.join();
  ::close(listen_fd_);
}

int FakeRedisServer::commands(const std::string& name) const {
  MutexLock lock(&seen_mu_);
  int n = 0;
  for (const std::string& s : seen_) n += s == name ? 1 : 0;
  return n;
}

void FakeRedisServer::Serve() {
  std::vector<std::thread> clients;  // One thread per connection, joined when stopping.
  while (!stop_) {
    pollfd p{.fd = listen_fd_, .events = POLLIN, .revents = 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    const int fd = ::accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) continue;
    ++accepted_;
    // Sends give up after 100 ms so a client that neither reads nor hangs up cannot wedge a
    // thread past stop_.
    const timeval tv{.tv_sec = 0, .tv_usec = 100'000};
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    clients.emplace_back([this, fd] {
      ServeClient(fd);
      ::close(fd);
    });
  }
  for (std::thread& t : clients) t.join();
}

void FakeRedisServer::ServeClient(int fd) {
  std::string in;
  while (!stop_) {
    pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    char buf[65536];
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n <= 0) return;  // The client hung up.
    in.append(buf, static_cast<size_t>(n));
    size_t pos = 0;
    std::vector<std::string> args;
    while (ParseRespCommand(in, &pos, &args)) {
      in.erase(0, pos);
      pos = 0;
      {
        MutexLock lock(&seen_mu_);
        seen_.push_back(args.empty() ? "" : args[0]);
      }
      Answer answer;
      if (handler_) {
        answer = handler_(args);
      } else {
        answer.bytes = !args.empty() && args[0] == "PING" ? "+PONG\r\n" : "+OK\r\n";
      }
      args.clear();
      if (!WriteAll(fd, answer.bytes, stop_)) return;
      if (answer.tail != Tail::kNone) {
        SendTail(fd, answer.tail);
        return;  // The connection closes after a tail.
      }
    }
  }
}

void FakeRedisServer::SendTail(int fd, Tail tail) {
  const auto start = std::chrono::steady_clock::now();
  const std::string chunk(tail == Tail::kTrickle ? 1 : 64 * 1024, 'x');
  uint64_t sent = 0;
  while (!stop_ && sent < options_.tail_bytes_max &&
         std::chrono::steady_clock::now() - start <
             std::chrono::milliseconds(options_.tail_ms_max)) {
    if (tail == Tail::kTrickle) SleepMs(static_cast<int>(options_.trickle_interval_ms));
    const ssize_t n = ::send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<uint64_t>(n);
      tail_bytes_ += static_cast<uint64_t>(n);
      continue;
    }
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    return;  // The client hung up.
  }
}

BlockKey RedisTestKey(uint32_t chunk, uint32_t layer) {
  BlockKey key;
  for (size_t i = 0; i < key.chunk_hash.size(); ++i) {
    key.chunk_hash[i] = static_cast<uint8_t>(chunk * 131 + i);
  }
  key.layer = layer;
  return key;
}

std::vector<std::byte> RedisTestPayload(size_t n, uint32_t seed) {
  std::vector<std::byte> p(n);
  uint32_t x = seed * 2246822519u + 7;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    p[i] = static_cast<std::byte>(x >> 24);
  }
  return p;
}

namespace {

// Reads from `fd` until `marker` has arrived (or EOF).
void ReadUntil(int fd, std::string_view marker) {
  std::string seen;
  char buf[4096];
  while (seen.find(marker) == std::string::npos) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) return;
    seen.append(buf, static_cast<size_t>(n));
  }
}

}  // namespace

ScriptedRedisServer::ScriptedRedisServer(std::vector<std::string> chunks,
                                         std::chrono::milliseconds pause)
    : chunks_(std::move(chunks)), pause_(pause) {
  listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  EXPECT_EQ(getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  port_ = ntohs(addr.sin_port);
  EXPECT_EQ(listen(listen_fd_, 1), 0);
  thread_ = std::thread([this] { Serve(); });
}

ScriptedRedisServer::~ScriptedRedisServer() {
  thread_.join();
  close(listen_fd_);
}

void ScriptedRedisServer::Serve() {
  const int fd = accept(listen_fd_, nullptr, nullptr);
  if (fd < 0) return;
  ReadUntil(fd, "PING\r\n");
  (void)!write(fd, "+PONG\r\n", 7);
  ReadUntil(fd, "GET\r\n");
  for (const std::string& chunk : chunks_) {
    std::this_thread::sleep_for(pause_);
    if (send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL) < 0) break;
  }
  close(fd);
}

}  // namespace kvtier
