// Helpers shared by the engine's remote-tier tests (engine_remote_test.cc on real Redis servers,
// engine_fake_remote_test.cc on FakeRemoteStore) and its asynchronous data path test
// (engine_async_test.cc): a tiny layout (3 layers, 2 KiB blocks) whose
// block bytes are derived from (chunk hash, layer), so any expected block can be recomputed, and
// synchronous Store / Load / Lookup wrappers that check every byte that comes back.
// Test-only (included by *_test.cc files). Not thread-safe beyond what Engine is.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "testing/test_util.h"
#include "tiers/ssd/ssd_options.h"

namespace kvtier::remote_test {

inline constexpr uint32_t kLayers = 3;
inline constexpr uint32_t kBlockTokens = 16;

inline KvLayout SmallLayout() {
  return {.layers = kLayers,
          .kv_heads = 2,
          .head_dim = 16,
          .dtype = DType::kF16,
          .block_tokens = kBlockTokens};
}

// The tier's row; a failure and an empty row when the engine has no such tier (never null).
inline const TierStats* FindTier(const EngineStats& s, TierKind kind) {
  for (const TierStats& t : s.tiers) {
    if (t.kind == kind) return &t;
  }
  ADD_FAILURE() << "the engine has no tier of kind " << static_cast<int>(kind);
  static const TierStats kNone{};
  return &kNone;
}

// A node without its remote tier: host memory for `host_blocks` blocks, an SSD in `ssd_dir` when
// it is not empty, write-through, 8 staging buffers.
inline EngineOptions LocalNodeOptions(uint32_t host_blocks, const std::string& ssd_dir,
                                      const KvLayout& layout = SmallLayout()) {
  EngineOptions o;
  o.layout = layout;
  o.model.name = "remote-test-model";
  o.host.capacity_bytes = host_blocks * layout.BlockBytes();
  o.host.huge_pages = HugePages::kOff;
  o.host.lock = MemoryLock::kOff;
  o.host.prefault = false;
  if (!ssd_dir.empty()) {
    SsdTierOptions s;
    s.dirs = {ssd_dir};
    s.segment_bytes = 1 * kMiB;
    s.capacity_bytes = 16 * kMiB;
    o.tiers.Emplace(kSsdTierName, s);
  }
  o.write_policy = WritePolicy::kWriteThrough;
  o.staging_buffers = 8;
  return o;
}

inline std::unique_ptr<Engine> OpenEngine(const EngineOptions& o) {
  Result<std::unique_ptr<Engine>> e = Engine::Open(o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? std::move(e).value() : nullptr;
}

inline Namespace Ns(Engine& e, std::string_view salt) {
  Result<Namespace> ns = e.MakeNamespace(salt);
  EXPECT_TRUE(ns.ok());
  return ns.ok() ? *ns : Namespace{};
}

// Stores the first `chunks` chunks of `tokens` and waits; the status of Store or Wait.
inline Status StoreChunks(Engine& e, const Namespace& ns, std::span<const uint32_t> tokens,
                          size_t chunks) {
  const KvLayout& layout = e.options().layout;
  KV_ASSIGN_OR_RETURN(std::vector<Hash256> hashes,
                      ChunkHashes(ns.digest, tokens, layout.block_tokens));
  std::vector<std::vector<std::byte>> bufs;
  for (size_t c = 0; c < chunks; ++c) {
    for (uint32_t l = 0; l < layout.layers; ++l) {
      bufs.push_back(TestBlockPayload(hashes[c], l, layout.BlockBytes()));
    }
  }
  std::vector<std::span<const std::byte>> src(bufs.begin(), bufs.end());
  KV_ASSIGN_OR_RETURN(std::unique_ptr<StoreHandle> h, e.Store(ns, tokens, src));
  return h->Wait();
}

// StoreChunks, tried again while it is Busy (at most about 10 s): a store that needs a dirty
// block evicted gets Busy while the engine's cleaner writes the block back.
inline Status StoreChunksRetrying(Engine& e, const Namespace& ns,
                                  std::span<const uint32_t> tokens, size_t chunks) {
  Status s = StoreChunks(e, ns, tokens, chunks);
  for (int i = 0; i < 2000 && s.IsBusy(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    s = StoreChunks(e, ns, tokens, chunks);
  }
  return s;
}

// Loads `chunks` chunks; per layer its status, with every byte of an OK layer checked.
inline std::vector<Status> LoadAndCheck(Engine& e, const Namespace& ns,
                                        std::span<const uint32_t> tokens, size_t chunks) {
  const KvLayout& layout = e.options().layout;
  Result<std::vector<Hash256>> hashes = ChunkHashes(ns.digest, tokens, layout.block_tokens);
  EXPECT_TRUE(hashes.ok());
  std::vector<std::vector<std::byte>> bufs(chunks * layout.layers,
                                           std::vector<std::byte>(layout.BlockBytes()));
  std::vector<std::span<std::byte>> dst(bufs.begin(), bufs.end());
  Result<std::unique_ptr<LoadHandle>> h = e.Load(ns, tokens, dst);
  EXPECT_TRUE(h.ok()) << h.status().ToString();
  std::vector<Status> out(layout.layers, Status::Aborted("load not issued"));
  if (!h.ok()) return out;
  for (uint32_t l = 0; l < layout.layers; ++l) {
    out[l] = (*h)->WaitLayer(l);
    if (!out[l].ok()) continue;
    for (size_t c = 0; c < chunks; ++c) {
      EXPECT_TRUE(bufs[c * layout.layers + l] ==
                  TestBlockPayload((*hashes)[c], l, layout.BlockBytes()))
          << "chunk " << c << " layer " << l << " differs";
    }
  }
  return out;
}

inline size_t Matched(Engine& e, const Namespace& ns, std::span<const uint32_t> tokens) {
  Result<LookupResult> r = e.Lookup(ns, tokens);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? r->matched_tokens : 0;
}

// Shared scenarios: the same steps and expectations whatever the store behind the remote tier.

// Node A (write-through) stores 4 chunks under `salt`; node B, empty, finds every one in the
// remote tier, loads it byte for byte, promotes it into its host tier (so the next lookup is
// served from there) and matches only the stored prefix of a longer prompt.
inline void ExpectNodeBFindsWhatNodeAStored(Engine& a, Engine& b, uint32_t seed) {
  const std::vector<uint32_t> tokens = TestTokens(seed, 4 * kBlockTokens + 5);
  ASSERT_TRUE(StoreChunks(a, Ns(a, "tenant"), tokens, 4).ok());
  EXPECT_EQ(FindTier(a.Stats(), TierKind::kRemote)->writebacks, 4u * kLayers);

  const Namespace ns_b = Ns(b, "tenant");
  Result<LookupResult> r = b.Lookup(ns_b, tokens);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->matched_tokens, 4u * kBlockTokens);
  for (TierKind k : r->chunk_tiers) EXPECT_EQ(k, TierKind::kRemote);
  for (const Status& s : LoadAndCheck(b, ns_b, tokens, 4)) EXPECT_TRUE(s.ok()) << s.ToString();

  const EngineStats stats = b.Stats();
  EXPECT_EQ(FindTier(stats, TierKind::kRemote)->hits, 4u * kLayers);
  EXPECT_EQ(FindTier(stats, TierKind::kHost)->promotions, 4u * kLayers);
  ASSERT_TRUE(stats.remote.has_value());
  EXPECT_EQ(stats.remote->hits, 4u * kLayers);
  EXPECT_EQ(stats.remote->breaker_state, BreakerState::kClosed);
  // Promoted: the next lookup is served from B's own host memory.
  r = b.Lookup(ns_b, tokens);
  ASSERT_TRUE(r.ok());
  for (TierKind k : r->chunk_tiers) EXPECT_EQ(k, TierKind::kHost);
  // A partial remote prefix: a chunk only partly in the store ends the match.
  EXPECT_EQ(Matched(b, ns_b, TestTokens(seed, 6 * kBlockTokens)), 4u * kBlockTokens);
}

// Node A has one chunk of memory and a write-back remote tier: a chunk reaches the store when
// it is evicted, the last one on Flush, and B finds each only then.
inline void ExpectWriteBackOnEvictionAndFlush(Engine& a, Engine& b, uint32_t seed) {
  const Namespace ns = Ns(a, "t");
  const std::vector<uint32_t> first = TestTokens(seed, kBlockTokens);
  const std::vector<uint32_t> second = TestTokens(seed + 1, kBlockTokens);
  ASSERT_TRUE(StoreChunks(a, ns, first, 1).ok());
  EXPECT_EQ(Matched(b, ns, first), 0u) << "write-back: not remote before eviction";
  // Evicts `first` from A's only tier (the cleaner puts it; the store is Busy meanwhile).
  ASSERT_TRUE(StoreChunksRetrying(a, ns, second, 1).ok());
  EXPECT_EQ(Matched(b, ns, first), kBlockTokens);
  for (const Status& s : LoadAndCheck(b, ns, first, 1)) EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(Matched(b, ns, second), 0u);
  ASSERT_TRUE(a.Flush().ok());
  EXPECT_EQ(Matched(b, ns, second), kBlockTokens);
  EXPECT_EQ(FindTier(a.Stats(), TierKind::kRemote)->writebacks, 2u * kLayers);
}

// After block (chunk 1, layer 1) of the 2 chunks of `tokens` was damaged in the store: B still
// finds both chunks (Exists does not verify values), its Load fails only layer 1, closed, and
// counts one corrupt block and one load failure.
inline void ExpectOnlyTheDamagedLayerFailsClosed(Engine& b, const Namespace& ns,
                                                 std::span<const uint32_t> tokens) {
  EXPECT_EQ(Matched(b, ns, tokens), 2u * kBlockTokens) << "Exists does not verify values";
  const std::vector<Status> layers = LoadAndCheck(b, ns, tokens, 2);
  EXPECT_TRUE(layers[0].ok()) << layers[0].ToString();
  EXPECT_TRUE(layers[1].IsNotFound()) << layers[1].ToString();
  EXPECT_TRUE(layers[2].ok()) << layers[2].ToString();
  const EngineStats stats = b.Stats();
  EXPECT_EQ(stats.corrupt_blocks, 1u);
  EXPECT_EQ(stats.load_failures, 1u);
}

}  // namespace kvtier::remote_test
