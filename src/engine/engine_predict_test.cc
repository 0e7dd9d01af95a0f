// Goal: show that access prediction (EngineOptions::prediction) pays where sessions come back in
// a learnable order and stays out of the way elsewhere: after learning, the next session's blocks
// are in the host tier before its own Lookup (round robin, an agent's loop, noisy repetition), the
// measured accuracy is high for structured traces and near chance for uniformly random ones,
// hints promote at once and lead the prediction, disabled prediction does nothing, every bound
// holds (blocks per access, half the host tier, chunks and sessions remembered), a session whose
// blocks are gone costs nothing, blocks only in the remote tier are promoted too, session ids are
// per namespace, and a request asked twice is one access.
// Method: real tiers (host memory and an SSD in a ScopedTempDir, write-through so that every
// block also lives on the SSD and host victims are clean) with a host tier far smaller than the
// sessions' blocks, so that each session's blocks have left memory by the time it comes back;
// synthetic traces from seeded generators (seeds printed); each request is Lookup, Load of the
// cached prefix (bytes checked), Store of the rest, then a wait until no promotion task is pending
// (the compute time a real request would give the background work). Accuracy and promotion
// counters come from EngineStats. An in-memory RemoteStore stands in for Redis.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <unordered_map>

#include "core/mutex.h"
#include "engine/engine.h"
#include "testing/test_util.h"
#include "tiers/ssd/ssd_options.h"

namespace kvtier {
namespace {

constexpr uint32_t kLayers = 3;
constexpr uint32_t kBlockTokens = 16;
constexpr size_t kChunks = 4;                  // Chunks per session request.
constexpr size_t kBlocks = kChunks * kLayers;  // Blocks per session request.

KvLayout TestLayout() {
  return {.layers = kLayers,
          .kv_heads = 2,
          .head_dim = 16,
          .dtype = DType::kF16,
          .block_tokens = kBlockTokens};
}
const uint64_t kBlockBytes = TestLayout().BlockBytes();

// Deterministic, finite FP16 bytes of block (chunk hash, layer).
std::vector<std::byte> Payload(const Hash256& chunk, uint32_t layer) {
  return TestBlockPayload(chunk, layer, kBlockBytes);
}

std::vector<uint32_t> Tokens(uint32_t seed, size_t n) { return TestTokens(seed, n); }

// Session s's request: kChunks chunks of its own tokens (so derived session ids differ).
std::vector<std::vector<uint32_t>> SessionRequests(size_t sessions) {
  std::vector<std::vector<uint32_t>> out;
  for (size_t s = 0; s < sessions; ++s) {
    out.push_back(Tokens(1000 + static_cast<uint32_t>(s), kChunks * kBlockTokens));
  }
  return out;
}

// A RemoteStore in memory: values by key, no encoding of its own (the engine's payload as is).
class MapRemoteStore final : public RemoteStore {
 public:
  Status Put(std::span<RemotePut> entries) override {
    MutexLock lock(&mu_);
    for (RemotePut& p : entries) {
      values_[p.key] = {p.codec_id, p.raw_bytes, {p.payload.begin(), p.payload.end()}};
      p.status = Status::Ok();
      ++stats_.puts;
    }
    return Status::Ok();
  }
  Status Get(std::span<RemoteGet> entries) override {
    MutexLock lock(&mu_);
    for (RemoteGet& g : entries) {
      ++stats_.gets;
      auto it = values_.find(g.key);
      if (it == values_.end() || it->second.payload.size() > g.dst.size()) {
        ++stats_.misses;
        g.status = Status::NotFound("no such value");
        continue;
      }
      ++stats_.hits;
      std::memcpy(g.dst.data(), it->second.payload.data(), it->second.payload.size());
      g.codec_id = it->second.codec_id;
      g.raw_bytes = it->second.raw_bytes;
      g.payload_bytes = static_cast<uint32_t>(it->second.payload.size());
      g.status = Status::Ok();
    }
    return Status::Ok();
  }
  Status Exists(std::span<RemoteExists> entries) override {
    MutexLock lock(&mu_);
    for (RemoteExists& x : entries) {
      x.exists = values_.count(x.key) != 0;
      x.status = Status::Ok();
    }
    return Status::Ok();
  }
  Status Delete(std::span<RemoteDelete> entries) override {
    MutexLock lock(&mu_);
    for (RemoteDelete& d : entries) {
      values_.erase(d.key);
      d.status = Status::Ok();
    }
    return Status::Ok();
  }
  RemoteStoreStats Stats() const override {
    MutexLock lock(&mu_);
    return stats_;
  }

 private:
  struct Value {
    uint8_t codec_id = 0;
    uint32_t raw_bytes = 0;
    std::vector<std::byte> payload;
  };
  mutable Mutex mu_;
  std::unordered_map<BlockKey, Value> values_ KV_GUARDED_BY(mu_);
  RemoteStoreStats stats_ KV_GUARDED_BY(mu_);
};

// What one trace measured.
struct TraceResult {
  size_t lookups = 0;       // After the warm-up.
  size_t host_lookups = 0;  // ... whose every chunk was cached and in the host tier.
  EngineStats stats;
  double host_fraction() const {
    return lookups == 0 ? 0.0 : static_cast<double>(host_lookups) / static_cast<double>(lookups);
  }
};

class EnginePredictTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<ScopedTempDir> d = ScopedTempDir::Create();
    ASSERT_TRUE(d.ok());
    dir_ = std::make_unique<ScopedTempDir>(std::move(d).value());
    env_ = NewPosixEnv({.clock = &clock_});
  }

  // Host tier of `host_blocks` blocks, an SSD, write-through; prediction on or off.
  EngineOptions Options(uint32_t host_blocks, bool predict, bool ssd = true) {
    EngineOptions o;
    o.layout = TestLayout();
    o.model.name = "test-model";
    o.host.capacity_bytes = host_blocks * kBlockBytes;
    o.host.huge_pages = HugePages::kOff;
    o.host.lock = MemoryLock::kOff;
    o.host.prefault = false;
    if (ssd) {
      SsdTierOptions s;
      s.dirs = {dir_->Join("ssd")};
      s.segment_bytes = 1 * kMiB;
      s.capacity_bytes = 16 * kMiB;
      s.sync = SsdSyncMode::kNone;
      o.tiers.Emplace(kSsdTierName, s);
    }
    o.write_policy = WritePolicy::kWriteThrough;
    o.prediction.enabled = predict;
    o.env = env_.get();
    return o;
  }

  std::unique_ptr<Engine> OpenOrDie(const EngineOptions& o) {
    Result<std::unique_ptr<Engine>> e = Engine::Open(o);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? std::move(e).value() : nullptr;
  }

  // The background work a request's compute time would leave room for.
  static void WaitForPromotions(Engine& e) {
    for (int i = 0; i < 5000 && e.Stats().prediction_tasks_pending != 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_EQ(e.Stats().prediction_tasks_pending, 0u);
  }

  // One request: Lookup, Load of the cached prefix (bytes checked), Store of the full chunks.
  LookupResult Request(Engine& e, const Namespace& ns, std::span<const uint32_t> tokens,
                       uint64_t session_id = 0, const StoreOptions& so = {}) {
    Result<LookupResult> r = e.Lookup(ns, tokens, {.session_id = session_id});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return {};
    Result<std::vector<Hash256>> hashes = ChunkHashes(ns.digest, tokens, kBlockTokens);
    EXPECT_TRUE(hashes.ok());
    const size_t hit = r->chunk_tiers.size();
    if (hit != 0) {
      std::vector<std::vector<std::byte>> bufs(hit * kLayers, std::vector<std::byte>(kBlockBytes));
      std::vector<std::span<std::byte>> dst(bufs.begin(), bufs.end());
      Result<std::unique_ptr<LoadHandle>> h = e.Load(ns, tokens, dst);
      EXPECT_TRUE(h.ok()) << h.status().ToString();
      EXPECT_TRUE((*h)->Wait().ok());
      for (size_t i = 0; i < bufs.size(); ++i) {
        EXPECT_EQ(bufs[i], Payload((*hashes)[i / kLayers], static_cast<uint32_t>(i % kLayers)));
      }
    }
    if (hit < hashes->size()) {
      std::vector<std::vector<std::byte>> bufs;
      for (const Hash256& c : *hashes) {
        for (uint32_t l = 0; l < kLayers; ++l) bufs.push_back(Payload(c, l));
      }
      std::vector<std::span<const std::byte>> src(bufs.begin(), bufs.end());
      Result<std::unique_ptr<StoreHandle>> h = e.Store(ns, tokens, src, so);
      EXPECT_TRUE(h.ok()) << h.status().ToString();
      if (h.ok()) {
        EXPECT_TRUE((*h)->Wait().ok());
      }
    }
    WaitForPromotions(e);
    return *r;
  }

  static bool AllHost(const LookupResult& r, size_t chunks) {
    if (r.chunk_tiers.size() != chunks) return false;
    for (TierKind k : r.chunk_tiers) {
      if (k != TierKind::kHost) return false;
    }
    return true;
  }

  // Replays `trace` (indexes into `requests`); session ids are index + 1, or 0 (derived) when
  // !use_ids. Lookups from index `warmup` on are scored for host hits.
  TraceResult Replay(Engine& e, const Namespace& ns,
                     const std::vector<std::vector<uint32_t>>& requests,
                     const std::vector<size_t>& trace, size_t warmup, bool use_ids) {
    TraceResult out;
    for (size_t i = 0; i < trace.size(); ++i) {
      const std::vector<uint32_t>& tokens = requests[trace[i]];
      const LookupResult r = Request(e, ns, tokens, use_ids ? trace[i] + 1 : 0);
      if (i < warmup) continue;
      ++out.lookups;
      if (AllHost(r, tokens.size() / kBlockTokens)) ++out.host_lookups;
    }
    out.stats = e.Stats();
    return out;
  }

  static void Print(const char* name, const TraceResult& t) {
    const EngineStats& s = t.stats;
    std::printf(
        "%s: accuracy %.3f (%llu/%llu), lookups all in host %.3f (%zu/%zu), promoted %llu, "
        "useful %llu, dropped %llu, sessions %llu\n",
        name, s.prediction_accuracy, static_cast<unsigned long long>(s.prediction_hits),
        static_cast<unsigned long long>(s.prediction_scored), t.host_fraction(), t.host_lookups,
        t.lookups, static_cast<unsigned long long>(s.prediction_promoted_blocks),
        static_cast<unsigned long long>(s.prediction_useful_blocks),
        static_cast<unsigned long long>(s.prediction_dropped_blocks),
        static_cast<unsigned long long>(s.prediction_sessions));
  }

  ManualClock clock_{1'000'000'000};
  std::unique_ptr<ScopedTempDir> dir_;
  std::unique_ptr<Env> env_;
};

std::vector<size_t> RoundRobin(size_t sessions, size_t rounds) {
  std::vector<size_t> trace;
  for (size_t r = 0; r < rounds; ++r) {
    for (size_t s = 0; s < sessions; ++s) trace.push_back(s);
  }
  return trace;
}

// 8 sessions of 12 blocks each visit in turn; the host tier holds 4 sessions, so without
// prediction every returning session is on the SSD only.
TEST_F(EnginePredictTest, RoundRobinSessionsArePromotedBeforeTheirLookup) {
  auto e = OpenOrDie(Options(/*host_blocks=*/4 * kBlocks, /*predict=*/true));
  ASSERT_NE(e, nullptr);
  const Namespace ns = *e->MakeNamespace("t");
  // Derived session ids: every session's first chunk differs.
  const TraceResult t =
      Replay(*e, ns, SessionRequests(8), RoundRobin(8, 10), /*warmup=*/16, /*use_ids=*/false);
  Print("round robin", t);
  EXPECT_EQ(t.host_lookups, t.lookups);  // From the third round on, always promoted in time.
  EXPECT_GT(t.stats.prediction_accuracy, 0.85);
  EXPECT_EQ(t.stats.prediction_accesses, 80u);
  EXPECT_EQ(t.stats.prediction_sessions, 8u);
  // The sink chunk (BlockPriority::kHigh) of every session stays in memory: the other three
  // chunks of each session are promoted.
  EXPECT_GE(t.stats.prediction_promoted_blocks, (80u - 16u) * (kChunks - 1) * kLayers);
  // Every promoted block but those of the last prediction was loaded from memory.
  EXPECT_GE(t.stats.prediction_useful_blocks + kBlocks, t.stats.prediction_promoted_blocks);
  EXPECT_EQ(t.stats.prediction_dropped_blocks, 0u);
  EXPECT_EQ(t.stats.load_failures, 0u);
}

// The control: the same trace with prediction off finds every returning session on the SSD, and
// the engine keeps no prediction state.
TEST_F(EnginePredictTest, DisabledPredictionDoesNothing) {
  auto e = OpenOrDie(Options(4 * kBlocks, /*predict=*/false));
  ASSERT_NE(e, nullptr);
  const Namespace ns = *e->MakeNamespace("t");
  const TraceResult t = Replay(*e, ns, SessionRequests(8), RoundRobin(8, 4), 8, /*use_ids=*/true);
  Print("round robin, prediction off", t);
  EXPECT_EQ(t.host_lookups, 0u);
  EXPECT_EQ(t.stats.prediction_accesses, 0u);
  EXPECT_EQ(t.stats.prediction_scored, 0u);
  EXPECT_EQ(t.stats.prediction_sessions, 0u);
  EXPECT_EQ(t.stats.prediction_promoted_blocks, 0u);
  EXPECT_EQ(t.stats.prediction_tasks_pending, 0u);
  EXPECT_EQ(t.stats.prediction_accuracy, 0.0);
}

// An agent cycles plan -> search -> read -> code -> test; a failing test (30 %) goes back to
// code, else to plan. Every step's prompt starts with the same system prompt chunk, so only
// explicit session ids tell the steps apart.
TEST_F(EnginePredictTest, AgentLoopNeedsSessionIdsAndIsMostlyPredicted) {
  const uint32_t seed = 4242;
  std::printf("seed %u\n", seed);
  std::vector<std::vector<uint32_t>> steps;
  for (uint32_t s = 0; s < 5; ++s) {
    std::vector<uint32_t> t = Tokens(7, kBlockTokens);  // The shared system prompt.
    const std::vector<uint32_t> own = Tokens(200 + s, (kChunks - 1) * kBlockTokens);
    t.insert(t.end(), own.begin(), own.end());
    steps.push_back(std::move(t));
  }
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<size_t> trace;
  size_t step = 0;
  for (int i = 0; i < 150; ++i) {
    trace.push_back(step);
    step = step == 4 ? (u(rng) < 0.3 ? 3 : 0) : step + 1;
  }
  // The host tier holds about two steps (the system prompt chunk stays: every step loads it).
  EngineOptions o = Options(/*host_blocks=*/30, /*predict=*/true);
  {
    auto e = OpenOrDie(o);
    ASSERT_NE(e, nullptr);
    const TraceResult t = Replay(*e, *e->MakeNamespace("t"), steps, trace, 20, /*use_ids=*/true);
    Print("agent loop, session ids", t);
    EXPECT_GT(t.stats.prediction_accuracy, 0.8);
    EXPECT_GT(t.host_fraction(), 0.75);
    EXPECT_EQ(t.stats.prediction_sessions, 5u);
  }
  // Derived ids: one session for all steps (same first chunk); nothing to predict or promote.
  o.tiers.Get<SsdTierOptions>(kSsdTierName).dirs = {dir_->Join("ssd-derived")};
  auto e = OpenOrDie(o);
  ASSERT_NE(e, nullptr);
  const TraceResult t = Replay(*e, *e->MakeNamespace("t"), steps, trace, 20, /*use_ids=*/false);
  Print("agent loop, derived ids", t);
  EXPECT_EQ(t.stats.prediction_sessions, 1u);
  EXPECT_EQ(t.stats.prediction_promoted_blocks, 0u);
}

// Round robin where 15 % of the requests are replaced by a random session.
TEST_F(EnginePredictTest, NoisyRepetitionIsMostlyPredicted) {
  const uint32_t seed = 777;
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  std::uniform_int_distribution<size_t> any(0, 7);
  std::vector<size_t> trace = RoundRobin(8, 12);
  for (size_t& s : trace) {
    if (u(rng) < 0.15) s = any(rng);
  }
  auto e = OpenOrDie(Options(4 * kBlocks, true));
  ASSERT_NE(e, nullptr);
  const TraceResult t = Replay(*e, *e->MakeNamespace("t"), SessionRequests(8), trace, 16, true);
  Print("noisy round robin", t);
  EXPECT_GT(t.stats.prediction_accuracy, 0.6);
  EXPECT_GT(t.host_fraction(), 0.5);
}

// 16 sessions drawn uniformly at random: nothing to learn, accuracy near chance (1/15 with one
// guess, as a session asked twice in a row is one access), few promoted blocks used.
TEST_F(EnginePredictTest, UniformRandomSessionsStayNearChance) {
  const uint32_t seed = 31337;
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<size_t> any(0, 15);
  std::vector<size_t> trace(200);
  for (size_t& s : trace) s = any(rng);
  auto e = OpenOrDie(Options(4 * kBlocks, true));
  ASSERT_NE(e, nullptr);
  const TraceResult t = Replay(*e, *e->MakeNamespace("t"), SessionRequests(16), trace, 32, true);
  Print("uniform random", t);
  EXPECT_LT(t.stats.prediction_accuracy, 0.2);
  EXPECT_LT(t.host_fraction(), 0.4);
}

// A reopened engine starts with empty memory: every block is on the SSD only. The hint
// promotes at once (also with prediction off) and, with prediction on, leads the prediction made
// at the next access.
TEST_F(EnginePredictTest, HintPromotesAtOnceAndLeadsThePrediction) {
  const std::vector<std::vector<uint32_t>> requests = SessionRequests(3);
  for (const bool predict : {false, true}) {
    SCOPED_TRACE(predict ? "prediction on" : "prediction off");
    EngineOptions o = Options(4 * kBlocks, predict);
    o.tiers.Get<SsdTierOptions>(kSsdTierName).dirs = {dir_->Join(predict ? "ssd-on" : "ssd-off")};
    Namespace ns;
    {
      auto e = OpenOrDie(o);
      ASSERT_NE(e, nullptr);
      ns = *e->MakeNamespace("t");
      for (size_t s = 0; s < 3; ++s) Request(*e, ns, requests[s], s + 1);
    }
    auto e = OpenOrDie(o);
    ASSERT_NE(e, nullptr);
    Request(*e, ns, requests[1], 2);
    // The caller's queue says session 1 comes soon: its blocks are promoted now.
    ASSERT_TRUE(e->Hint(ns, requests[0], /*session_id=*/1).ok());
    WaitForPromotions(*e);
    EngineStats st = e->Stats();
    EXPECT_EQ(st.hints, 1u);
    EXPECT_EQ(st.hint_promoted_blocks, kBlocks);
    EXPECT_EQ(st.prediction_promoted_blocks, 0u);
    Request(*e, ns, requests[2], 3);  // Its prediction names the hinted session first.
    EXPECT_TRUE(AllHost(Request(*e, ns, requests[0], 1), kChunks));
    st = e->Stats();
    EXPECT_EQ(st.hint_useful_blocks, kBlocks);
    EXPECT_EQ(st.prediction_scored, predict ? 1u : 0u);
    EXPECT_EQ(st.prediction_hits, predict ? 1u : 0u);
  }
}

TEST_F(EnginePredictTest, BoundsHold) {
  const std::vector<std::vector<uint32_t>> requests = SessionRequests(8);
  // blocks_max: at most 7 blocks per access (whole chunks of the session's missing blocks).
  EngineOptions o = Options(4 * kBlocks, true);
  o.prediction.blocks_max = 2 * kLayers + 1;
  auto e = OpenOrDie(o);
  ASSERT_NE(e, nullptr);
  const Namespace ns = *e->MakeNamespace("t");
  const std::vector<size_t> trace = RoundRobin(8, 3);
  uint64_t promoted = 0;
  for (const size_t s : trace) {
    Request(*e, ns, requests[s], s + 1);
    const uint64_t now = e->Stats().prediction_promoted_blocks;
    EXPECT_LE(now - promoted, o.prediction.blocks_max);
    promoted = now;
  }
  EXPECT_GT(promoted, 0u);
  e.reset();

  // Half the host tier at most (16 slots: 8 blocks), whatever blocks_max says.
  o = Options(16, true);
  o.tiers.Get<SsdTierOptions>(kSsdTierName).dirs = {dir_->Join("ssd-small")};
  e = OpenOrDie(o);
  ASSERT_NE(e, nullptr);
  promoted = 0;
  for (const size_t s : trace) {
    Request(*e, ns, requests[s], s + 1);
    const uint64_t now = e->Stats().prediction_promoted_blocks;
    EXPECT_LE(now - promoted, 8u);
    promoted = now;
  }
  EXPECT_GT(promoted, 0u);
  e.reset();

  // session_chunks_max: only the leading chunk is remembered, so only it is promoted; and
  // sessions_max: 4 sessions remembered although 8 come round.
  o = Options(4 * kBlocks, true);
  o.tiers.Get<SsdTierOptions>(kSsdTierName).dirs = {dir_->Join("ssd-chunks")};
  o.prediction.session_chunks_max = 1;
  o.prediction.sessions_max = 4;
  e = OpenOrDie(o);
  ASSERT_NE(e, nullptr);
  const TraceResult t = Replay(*e, ns, requests, trace, 0, true);
  EXPECT_EQ(t.stats.prediction_sessions, 4u);
  // The predictor forgets a session before it comes back: nothing is ever predicted right.
  EXPECT_EQ(t.stats.prediction_hits, 0u);
  EXPECT_LE(t.stats.prediction_promoted_blocks, t.stats.prediction_accesses * kLayers);
}

// Session 2's blocks expire everywhere after the predictor learned 1 -> 2: predicting it again
// promotes nothing, reads nothing, and drops nothing (no promotion batch is even queued).
TEST_F(EnginePredictTest, SessionWhoseBlocksAreGoneCostsNothing) {
  auto e = OpenOrDie(Options(4 * kBlocks, true));
  ASSERT_NE(e, nullptr);
  const Namespace ns = *e->MakeNamespace("t");
  const std::vector<std::vector<uint32_t>> requests = SessionRequests(8);
  for (size_t round = 0; round < 3; ++round) {
    for (size_t s = 0; s < 8; ++s) {
      Request(*e, ns, requests[s], s + 1, {.ttl_ms = s == 1 ? 60'000u : 0u});
    }
  }
  clock_.Advance(120'000'000);  // Session 2's blocks expire in memory and on the SSD.
  const EngineStats before = e->Stats();
  const LookupResult r = Request(*e, ns, requests[0], 1);  // Predicts session 2.
  EXPECT_EQ(r.chunk_tiers.size(), kChunks);
  const EngineStats after = e->Stats();
  EXPECT_EQ(after.prediction_promoted_blocks, before.prediction_promoted_blocks);
  EXPECT_EQ(after.prediction_dropped_blocks, before.prediction_dropped_blocks);
  EXPECT_EQ(after.corrupt_blocks, 0u);
  EXPECT_TRUE(e->Lookup(ns, requests[1]).value().chunk_tiers.empty());
}

// No SSD: the session's blocks live in the remote tier only once they leave memory.
TEST_F(EnginePredictTest, RemoteTierBlocksArePromoted) {
  MapRemoteStore store;
  EngineOptions o = Options(4 * kBlocks, true, /*ssd=*/false);
  o.remote = RemoteTierOptions{.store = &store};
  auto e = OpenOrDie(o);
  ASSERT_NE(e, nullptr);
  const TraceResult t =
      Replay(*e, *e->MakeNamespace("t"), SessionRequests(8), RoundRobin(8, 5), 16, true);
  Print("round robin, remote tier", t);
  EXPECT_EQ(t.host_lookups, t.lookups);
  EXPECT_GE(t.stats.prediction_promoted_blocks, (40u - 16u) * (kChunks - 1) * kLayers);
  EXPECT_EQ(t.stats.load_failures, 0u);
}

TEST_F(EnginePredictTest, SessionIdsArePerNamespaceAndRepeatsAreOneAccess) {
  auto e = OpenOrDie(Options(4 * kBlocks, true));
  ASSERT_NE(e, nullptr);
  const Namespace a = *e->MakeNamespace("a");
  const Namespace b = *e->MakeNamespace("b");
  const std::vector<uint32_t> tokens = Tokens(5, 2 * kBlockTokens);
  ASSERT_TRUE(e->Lookup(a, tokens, {.session_id = 7}).ok());
  ASSERT_TRUE(e->Lookup(a, tokens, {.session_id = 7}).ok());  // Asked again: the same access.
  ASSERT_TRUE(e->Lookup(b, tokens, {.session_id = 7}).ok());
  ASSERT_TRUE(e->Lookup(b, std::span(tokens).first(kBlockTokens - 1)).ok());  // No full chunk.
  const EngineStats st = e->Stats();
  EXPECT_EQ(st.prediction_sessions, 2u);
  EXPECT_EQ(st.prediction_accesses, 2u);
  EXPECT_EQ(st.lookups, 4u);
}

TEST_F(EnginePredictTest, ConcurrentRequestsAndHints) {
  auto e = OpenOrDie(Options(4 * kBlocks, true));
  ASSERT_NE(e, nullptr);
  const Namespace ns = *e->MakeNamespace("t");
  const std::vector<std::vector<uint32_t>> requests = SessionRequests(8);
  for (size_t s = 0; s < 8; ++s) Request(*e, ns, requests[s], s + 1);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = 0; i < 40; ++i) {
        const size_t s = (t * 2 + i) % 8;
        EXPECT_TRUE(e->Lookup(ns, requests[s], {.session_id = s + 1}).ok());
        EXPECT_TRUE(e->Hint(ns, requests[(s + 1) % 8], (s + 1) % 8 + 1).ok());
        (void)e->Stats();
      }
    });
  }
  for (std::thread& th : threads) th.join();
  WaitForPromotions(*e);
  EXPECT_EQ(e->Stats().hints, 160u);
}

TEST_F(EnginePredictTest, OptionsAreValidated) {
  struct Case {
    const char* field;
    void (*set)(PredictionOptions*);
  };
  const Case cases[] = {
      {"window", [](PredictionOptions* p) { p->window = 0; }},
      {"window", [](PredictionOptions* p) { p->window = 17; }},
      {"successors_max", [](PredictionOptions* p) { p->successors_max = 65; }},
      {"sessions_max", [](PredictionOptions* p) { p->sessions_max = 0; }},
      {"session_chunks_max", [](PredictionOptions* p) { p->session_chunks_max = 4097; }},
      {"predict_k", [](PredictionOptions* p) { p->predict_k = 0; }},
      {"blocks_max", [](PredictionOptions* p) { p->blocks_max = 0; }},
  };
  for (const Case& c : cases) {
    EngineOptions o = Options(16, false);  // Checked also while disabled.
    c.set(&o.prediction);
    const Status s = o.Validate();
    EXPECT_TRUE(s.IsInvalidArgument()) << c.field;
    EXPECT_NE(s.message().find(std::string("prediction: ") + c.field), std::string::npos)
        << s.message();
  }
  EXPECT_TRUE(Options(16, true).Validate().ok());
}

}  // namespace
}  // namespace kvtier
