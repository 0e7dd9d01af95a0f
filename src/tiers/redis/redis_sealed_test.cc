// Goal: show, against a real redis-server, what someone with plain access to the shared store
// (no key, no kvtier code) can and cannot do once values are sealed: listing keys reveals no
// chunk hash; no 64-byte run of a stored block appears in any value; a value forged with valid
// CRCs, a value copied from another key (another tenant's chunk), and a value written under
// another deployment's key are all misses, counted and logged once per key id, also among good
// values of one pipeline whose values are opened while its later replies arrive; threads reading
// through one store at once each get their own values; keys rotate (values written under the old
// key stay readable, new ones use the new key); a store opens only with a key or an explicit
// insecure_plaintext; values sealed by either AES-GCM implementation open with the other; and a
// cluster MOVED to a host outside the slot map is refused without
// connecting to it.
// Method: each test starts its own redis-server (redis_test_util.h) and inspects it with raw
// commands; the redirect test runs a small fake cluster node on loopback that answers CLUSTER
// SLOTS with itself and every GET with a MOVED to a second loopback listener, which counts the
// connections it gets.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/assert.h"
#include "core/sha256.h"
#include "testing/test_util.h"
#include "tiers/redis/redis_store.h"
#include "tiers/redis/redis_test_util.h"

namespace kvtier {
namespace {

const std::string kKey1 = "1 " + std::string(64, '1');
const std::string kKey2 = "2 " + std::string(64, '2');

RemoteKeyring Ring(const std::string& text) {
  Result<RemoteKeyring> r = RemoteKeyring::Parse(text);
  KV_CHECK_OK(r.status());
  return std::move(r).value();
}


class RedisSealedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!RedisServerInstalled()) GTEST_SKIP() << "redis-server is not installed; skipping";
    Result<std::unique_ptr<RedisServer>> server = RedisServer::Start();
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
  }

  RedisStoreOptions Options(std::optional<RemoteKeyring> keyring) {
    RedisStoreOptions o{.endpoints = {server_->endpoint()}, .logger = &logger_};
    o.layout_digest.fill(9);
    if (keyring.has_value()) {
      o.keyring = std::move(keyring);
    } else {
      o.insecure_plaintext = true;
    }
    return o;
  }

  std::unique_ptr<RedisStore> Open(std::optional<RemoteKeyring> keyring) {
    Result<std::unique_ptr<RedisStore>> s = RedisStore::Open(Options(std::move(keyring)));
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(*s) : nullptr;
  }

  static Status PutOne(RedisStore& store, const BlockKey& key, std::span<const std::byte> p) {
    RemotePut put{.key = key, .codec_id = 2, .raw_bytes = 77, .payload = p};
    KV_RETURN_IF_ERROR(store.Put({&put, 1}));
    return put.status;
  }

  // Reads `key`; OK only when the payload equals `want`.
  static Status GetOne(RedisStore& store, const BlockKey& key, std::span<const std::byte> want) {
    std::vector<std::byte> out(want.size() + 64);
    RemoteGet get{.key = key, .dst = out};
    KV_RETURN_IF_ERROR(store.Get({&get, 1}));
    KV_RETURN_IF_ERROR(get.status);
    if (get.payload_bytes != want.size() ||
        !std::equal(want.begin(), want.end(), out.begin())) {
      return Status::Corruption("payload differs");
    }
    return Status::Ok();
  }

  Result<std::string> Raw(const std::vector<std::string>& args) {
    return RedisRawCommand(server_->port(), args);
  }

  CapturingLogger logger_;
  std::unique_ptr<RedisServer> server_;
};

TEST_F(RedisSealedTest, OpenNeedsAKeyOrAnExplicitInsecureChoice) {
  RedisStoreOptions neither{.endpoints = {server_->endpoint()}};
  Result<std::unique_ptr<RedisStore>> s = RedisStore::Open(neither);
  EXPECT_TRUE(s.status().IsInvalidArgument());
  EXPECT_NE(s.status().message().find("insecure_plaintext"), std::string::npos);
  RedisStoreOptions both = Options(Ring(kKey1));
  both.insecure_plaintext = true;
  EXPECT_TRUE(RedisStore::Open(both).status().IsInvalidArgument());
}

TEST_F(RedisSealedTest, ListingAndReadingTheStoreRevealsNothing) {
  std::unique_ptr<RedisStore> store = Open(Ring(kKey1));
  ASSERT_NE(store, nullptr);
  std::vector<std::vector<std::byte>> payloads;
  for (uint32_t c = 0; c < 3; ++c) {
    for (uint32_t l = 0; l < 2; ++l) {
      payloads.push_back(RedisTestPayload(8192, c * 2 + l));
      ASSERT_TRUE(PutOne(*store, RedisTestKey(c, l), payloads.back()).ok());
    }
  }
  Result<std::string> keys = Raw({"KEYS", "*"});
  ASSERT_TRUE(keys.ok());
  for (uint32_t c = 0; c < 3; ++c) {
    const std::string hex = ToHex(RedisTestKey(c, 0).chunk_hash);
    EXPECT_EQ(keys->find(hex.substr(0, 16)), std::string::npos) << *keys;
  }
  size_t values = 0;
  for (uint32_t c = 0; c < 3; ++c) {
    for (uint32_t l = 0; l < 2; ++l) {
      Result<std::string> v = Raw({"GET", store->KeyName(RedisTestKey(c, l))});
      ASSERT_TRUE(v.ok());
      ++values;
      for (const std::vector<std::byte>& p : payloads) {
        const std::string run(reinterpret_cast<const char*>(p.data()) + 1000, 64);
        EXPECT_EQ(v->find(run), std::string::npos) << "plaintext in the value of " << c << "/" << l;
      }
      EXPECT_TRUE(GetOne(*store, RedisTestKey(c, l), payloads[c * 2 + l]).ok());
    }
  }
  EXPECT_EQ(values, 6u);
}

TEST_F(RedisSealedTest, ForgedCopiedAndForeignValuesAreCountedMisses) {
  std::unique_ptr<RedisStore> store = Open(Ring(kKey1));
  std::unique_ptr<RedisStore> plain = Open(std::nullopt);
  std::unique_ptr<RedisStore> foreign = Open(Ring("1 " + std::string(64, 'e')));
  ASSERT_TRUE(store != nullptr && plain != nullptr && foreign != nullptr);
  const std::vector<std::byte> good = RedisTestPayload(4096, 1);
  const std::vector<std::byte> planted(4096, std::byte{0x3c});  // FP16 1.0s.
  const BlockKey victim = RedisTestKey(10, 0), other = RedisTestKey(11, 0);
  ASSERT_TRUE(PutOne(*store, victim, good).ok());
  ASSERT_TRUE(PutOne(*store, other, RedisTestPayload(4096, 2)).ok());
  const std::string victim_name = store->KeyName(victim);

  // 1. A forgery with valid CRCs: the plain value kvtier itself would write for that key.
  ASSERT_TRUE(PutOne(*plain, victim, planted).ok());
  Result<std::string> forged = Raw({"GET", plain->KeyName(victim)});
  ASSERT_TRUE(forged.ok());
  ASSERT_TRUE(Raw({"SET", victim_name, *forged}).ok());
  EXPECT_TRUE(GetOne(*store, victim, planted).IsCorruption());
  // 2. Another key's (another tenant's chunk's) sealed value copied under this key's name.
  Result<std::string> copied = Raw({"GET", store->KeyName(other)});
  ASSERT_TRUE(copied.ok());
  ASSERT_TRUE(Raw({"SET", victim_name, *copied}).ok());
  EXPECT_FALSE(GetOne(*store, victim, good).ok());
  // 3. A value sealed by another deployment (its own key, claiming the same key id).
  ASSERT_TRUE(PutOne(*foreign, victim, planted).ok());
  Result<std::string> alien = Raw({"GET", foreign->KeyName(victim)});
  ASSERT_TRUE(alien.ok());
  ASSERT_TRUE(Raw({"SET", victim_name, *alien}).ok());
  EXPECT_FALSE(GetOne(*store, victim, planted).ok());

  const RemoteStoreStats stats = store->Stats();
  EXPECT_EQ(stats.auth_failures, 3u);
  EXPECT_EQ(stats.hits, 0u);
  // Logged once per key id: the unsealed forgery (no key id, 0) and key id 1 (copied, foreign).
  EXPECT_EQ(logger_.CountContaining("remote value was refused"), 2u);
}

TEST_F(RedisSealedTest, RotationReadsOldValuesAndWritesWithTheNewKey) {
  std::unique_ptr<RedisStore> before = Open(Ring(kKey1));
  ASSERT_NE(before, nullptr);
  const std::vector<std::byte> old_value = RedisTestPayload(2048, 3);
  ASSERT_TRUE(PutOne(*before, RedisTestKey(20, 0), old_value).ok());
  std::unique_ptr<RedisStore> after = Open(Ring(kKey1 + "\n" + kKey2));
  ASSERT_NE(after, nullptr);
  EXPECT_EQ(after->KeyName(RedisTestKey(20, 0)), before->KeyName(RedisTestKey(20, 0)));
  EXPECT_TRUE(GetOne(*after, RedisTestKey(20, 0), old_value).ok());
  const std::vector<std::byte> new_value = RedisTestPayload(2048, 4);
  ASSERT_TRUE(PutOne(*after, RedisTestKey(21, 0), new_value).ok());
  Result<std::string> raw = Raw({"GET", after->KeyName(RedisTestKey(21, 0))});
  ASSERT_TRUE(raw.ok());
  ASSERT_GE(raw->size(), kSealedHeaderBytes);
  EXPECT_EQ(static_cast<uint8_t>((*raw)[8]), 2u) << "written with key id 2";
  EXPECT_TRUE(GetOne(*after, RedisTestKey(21, 0), new_value).ok());
  EXPECT_FALSE(GetOne(*before, RedisTestKey(21, 0), new_value).ok()) << "key 2 unknown before";
}

// The two AES-GCM implementations (aes_gcm.h) write values the other opens, large (opened on the
// worker) and small, through the real server; one this build lacks is refused at Open.
TEST_F(RedisSealedTest, ValuesSealedByOneAesGcmImplementationOpenWithTheOther) {
  std::vector<GcmImpl> impls{GcmImpl::kOpenSsl};
  if (GcmImplAvailable(GcmImpl::kIpsecMb)) {
    impls.push_back(GcmImpl::kIpsecMb);
  } else {
    RedisStoreOptions o = Options(Ring(kKey1));
    o.aes_gcm = GcmImpl::kIpsecMb;
    Result<std::unique_ptr<RedisStore>> refused = RedisStore::Open(o);
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.status().message().find("not available"), std::string::npos);
  }
  uint32_t chunk = 40;
  for (const GcmImpl writer : impls) {
    for (const GcmImpl reader : impls) {
      SCOPED_TRACE(std::string(GcmImplName(writer)) + " -> " + GcmImplName(reader));
      RedisStoreOptions w = Options(Ring(kKey1));
      w.aes_gcm = writer;
      RedisStoreOptions r = Options(Ring(kKey1));
      r.aes_gcm = reader;
      Result<std::unique_ptr<RedisStore>> ws = RedisStore::Open(w);
      Result<std::unique_ptr<RedisStore>> rs = RedisStore::Open(r);
      ASSERT_TRUE(ws.ok() && rs.ok());
      for (const size_t bytes : {size_t{4096}, 4 * kRedisOverlapOpenBytesMin}) {
        const std::vector<std::byte> value = RedisTestPayload(bytes, chunk);
        ASSERT_TRUE(PutOne(**ws, RedisTestKey(chunk, 0), value).ok());
        EXPECT_TRUE(GetOne(**rs, RedisTestKey(chunk, 0), value).ok());
        ++chunk;
      }
    }
  }
}

// One pipeline of large values (opened on the store's worker while later replies still arrive)
// and small ones (opened after the reads), in which one large value was replaced by another
// key's sealed value, one large and one small value had a byte flipped, one key was never
// written and one destination is too small: every good value comes back intact, each bad one is
// a miss of its own (refused ones counted and logged once per key id, nothing of them left in
// the caller's buffer), in each open mode alike (overlapped, after the reads, as read).
TEST_F(RedisSealedTest, APipelineMissesOnlyItsRefusedValuesWithTheOverlapOnAndOff) {
  constexpr size_t kLarge = 4 * kRedisOverlapOpenBytesMin, kSmall = 4096, kValues = 12;
  constexpr size_t kCopied = 4, kFlippedLarge = 8, kFlippedSmall = 3, kNever = 10, kTooSmall = 2;
  int round = 0;
  for (const SealedOpen mode :
       {SealedOpen::kOverlapped, SealedOpen::kAfterReads, SealedOpen::kAsRead}) {
    SCOPED_TRACE(mode == SealedOpen::kOverlapped   ? "overlapped"
                 : mode == SealedOpen::kAfterReads ? "after reads"
                                                   : "as read");
    RedisStoreOptions o = Options(Ring(kKey1));
    o.sealed_open = mode;
    o.key_prefix = "p" + std::to_string(round++);
    Result<std::unique_ptr<RedisStore>> opened = RedisStore::Open(o);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    RedisStore& store = **opened;
    std::vector<std::vector<std::byte>> payloads;
    for (uint32_t i = 0; i < kValues; ++i) {
      payloads.push_back(RedisTestPayload(i % 2 == 0 ? kLarge : kSmall, i));
      if (i == kNever) continue;
      ASSERT_TRUE(PutOne(store, RedisTestKey(40 + i, 0), payloads[i]).ok());
    }
    const auto name = [&](size_t i) {
      return store.KeyName(RedisTestKey(40 + static_cast<uint32_t>(i), 0));
    };
    Result<std::string> other = Raw({"GET", name(6)});
    ASSERT_TRUE(other.ok());
    ASSERT_TRUE(Raw({"SET", name(kCopied), *other}).ok());
    for (const size_t i : {kFlippedLarge, kFlippedSmall}) {
      Result<std::string> v = Raw({"GET", name(i)});
      ASSERT_TRUE(v.ok());
      (*v)[v->size() / 2] ^= 0x20;
      ASSERT_TRUE(Raw({"SET", name(i), *v}).ok());
    }
    const size_t logged_before = logger_.CountContaining("remote value was refused");

    std::vector<std::vector<std::byte>> outs(kValues);
    std::vector<RemoteGet> gets(kValues);
    for (size_t i = 0; i < kValues; ++i) {
      outs[i].assign(i == kTooSmall ? kSmall : kLarge, std::byte{0});
      gets[i] = {.key = RedisTestKey(40 + static_cast<uint32_t>(i), 0), .dst = outs[i]};
    }
    ASSERT_TRUE(store.Get(gets).ok());
    for (size_t i = 0; i < kValues; ++i) {
      const bool zeros = std::all_of(outs[i].begin(), outs[i].end(),
                                     [](std::byte b) { return b == std::byte{0}; });
      if (i == kCopied || i == kFlippedLarge || i == kFlippedSmall) {
        EXPECT_TRUE(gets[i].status.IsCorruption()) << i << ": " << gets[i].status.ToString();
        EXPECT_TRUE(zeros) << i << ": refused bytes left in the buffer";
      } else if (i == kNever) {
        EXPECT_TRUE(gets[i].status.IsNotFound()) << gets[i].status.ToString();
      } else if (i == kTooSmall) {
        EXPECT_TRUE(gets[i].status.IsInvalidArgument()) << gets[i].status.ToString();
      } else {
        ASSERT_TRUE(gets[i].status.ok()) << i << ": " << gets[i].status.ToString();
        EXPECT_EQ(gets[i].payload_bytes, payloads[i].size());
        EXPECT_TRUE(std::equal(payloads[i].begin(), payloads[i].end(), outs[i].begin())) << i;
      }
    }
    const RemoteStoreStats stats = store.Stats();
    EXPECT_EQ(stats.auth_failures, 3u);
    EXPECT_EQ(stats.hits, kValues - 5);
    EXPECT_EQ(stats.misses, 5u);
    EXPECT_EQ(logger_.CountContaining("remote value was refused") - logged_before, 1u)
        << "one line for key id 1";
  }
}

// Several threads reading large and small sealed values through one store at once share its
// open worker: each gets its own values back (run under TSan, this also checks the hand-offs).
TEST_F(RedisSealedTest, ConcurrentGetsShareTheOpenWorker) {
  std::unique_ptr<RedisStore> store = Open(Ring(kKey1));
  ASSERT_NE(store, nullptr);
  constexpr uint32_t kThreads = 3, kValues = 10, kRounds = 8;
  std::vector<std::vector<std::byte>> payloads;
  for (uint32_t i = 0; i < kValues; ++i) {
    payloads.push_back(RedisTestPayload(i % 3 == 0 ? 4096 : 2 * kRedisOverlapOpenBytesMin, i));
    ASSERT_TRUE(PutOne(*store, RedisTestKey(60 + i, 0), payloads[i]).ok());
  }
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (uint32_t r = 0; r < kRounds; ++r) {
        std::vector<std::vector<std::byte>> outs(kValues);
        std::vector<RemoteGet> gets(kValues);
        for (uint32_t k = 0; k < kValues; ++k) {
          const uint32_t i = (k + t + r) % kValues;  // Each thread in its own order.
          outs[k].resize(payloads[i].size());
          gets[k] = {.key = RedisTestKey(60 + i, 0), .dst = outs[k]};
        }
        if (!store->Get(gets).ok()) ++wrong;
        for (uint32_t k = 0; k < kValues; ++k) {
          if (!gets[k].status.ok() || outs[k] != payloads[(k + t + r) % kValues]) ++wrong;
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(store->Stats().hits, uint64_t{kThreads} * kValues * kRounds);
}

// A loopback listener that answers like a one-node cluster whose every GET is MOVED elsewhere.
class FakeClusterNode {
 public:
  FakeClusterNode(const char* address, std::string moved_to) : moved_to_(std::move(moved_to)) {
    fd_ = Listen(address, &port_);
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeClusterNode() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  uint16_t port() const { return port_; }
  int accepted() const { return accepted_.load(); }

  static int Listen(const char* address, uint16_t* port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    KV_CHECK(fd >= 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    KV_CHECK(::inet_pton(AF_INET, address, &sa.sin_addr) == 1);
    KV_CHECK(::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0);
    KV_CHECK(::listen(fd, 8) == 0);
    socklen_t len = sizeof(sa);
    KV_CHECK(::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0);
    *port = ntohs(sa.sin_port);
    return fd;
  }

 private:
  // Replies to each complete command in `in` (RESP arrays of bulk strings); consumes them.
  std::string Answer(std::string* in) {
    std::string out;
    while (true) {
      size_t pos = 0;
      std::vector<std::string> args;
      if (!ParseCommand(*in, &pos, &args)) break;
      in->erase(0, pos);
      const std::string cmd = args.empty() ? "" : args[0];
      if (cmd == "CLUSTER") {
        const std::string p = std::to_string(port_);
        out += "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:" + p + "\r\n";
      } else if (cmd == "GET" || cmd == "SET" || cmd == "EXISTS") {
        out += "-MOVED 1234 " + moved_to_ + "\r\n";
      } else {
        out += "+OK\r\n";
      }
    }
    return out;
  }
  static bool ParseCommand(const std::string& in, size_t* pos, std::vector<std::string>* args) {
    const auto line = [&](std::string* text) {
      const size_t end = in.find("\r\n", *pos);
      if (end == std::string::npos) return false;
      *text = in.substr(*pos, end - *pos);
      *pos = end + 2;
      return true;
    };
    std::string head;
    if (!line(&head) || head.empty() || head[0] != '*') return false;
    const int n = std::stoi(head.substr(1));
    for (int i = 0; i < n; ++i) {
      std::string len;
      if (!line(&len) || len.empty() || len[0] != '$') return false;
      const size_t bytes = std::stoul(len.substr(1));
      if (in.size() < *pos + bytes + 2) return false;
      args->push_back(in.substr(*pos, bytes));
      *pos += bytes + 2;
    }
    return true;
  }
  void Serve() {
    std::vector<std::pair<int, std::string>> clients;
    while (!stop_) {
      std::vector<pollfd> fds{{fd_, POLLIN, 0}};
      for (const auto& c : clients) fds.push_back({c.first, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), 20) <= 0) continue;
      if ((fds[0].revents & POLLIN) != 0) {
        const int c = ::accept(fd_, nullptr, nullptr);
        if (c >= 0) {
          ++accepted_;
          clients.emplace_back(c, "");
        }
      }
      for (size_t i = 1; i < fds.size(); ++i) {
        if ((fds[i].revents & (POLLIN | POLLHUP)) == 0) continue;
        char buf[4096];
        const ssize_t n = ::read(fds[i].fd, buf, sizeof(buf));
        if (n <= 0) continue;
        std::string& in = clients[i - 1].second;
        in.append(buf, static_cast<size_t>(n));
        const std::string out = Answer(&in);
        if (!out.empty()) (void)!::write(fds[i].fd, out.data(), out.size());
      }
    }
    for (const auto& c : clients) ::close(c.first);
  }

  std::string moved_to_;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::thread thread_;
};

TEST(RedisRedirectTest, MovedOutsideTheSlotMapIsRefusedWithoutConnecting) {
  // The host a hostile node would send us (and our password) to: another loopback address,
  // allowed here so that the slot map's own check is what refuses it (redis_hostile_test.cc
  // refuses hosts that are not allowed).
  FakeClusterNode trap("127.0.0.2", "127.0.0.9:1");
  FakeClusterNode node("127.0.0.1", "127.0.0.2:" + std::to_string(trap.port()));
  CapturingLogger logger;
  Result<std::unique_ptr<RedisStore>> store =
      RedisStore::Open({.endpoints = {"127.0.0.1:" + std::to_string(node.port())},
                        .mode = RedisMode::kCluster,
                        .password = "secret",
                        .topology_refresh_interval_us = 0,
                        .cluster_allowed_hosts = {"127.0.0.2"},
                        .keyring = Ring(kKey1),
                        .logger = &logger});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  std::vector<std::byte> out(64);
  RemoteGet get{.key = RedisTestKey(1, 0), .dst = out};
  ASSERT_TRUE((*store)->Get({&get, 1}).ok());
  EXPECT_TRUE(get.status.IsUnavailable()) << get.status.ToString();
  EXPECT_NE(get.status.message().find("not in the cluster's slot map"), std::string::npos);
  EXPECT_EQ((*store)->Stats().redirects_refused, 1u);
  EXPECT_EQ(trap.accepted(), 0) << "the client connected to a host outside the cluster";
}

}  // namespace
}  // namespace kvtier
