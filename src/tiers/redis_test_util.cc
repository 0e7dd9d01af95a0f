// See redis_test_util.h.
#include "tiers/redis_test_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string_view>
#include <thread>

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

}  // namespace kvtier
