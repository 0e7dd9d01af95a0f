// Goal: show that the Engine serves exactly the bytes that were stored, for every layer and chunk,
// from whichever tier holds them (device, host, CXL, SSD), and that its guards hold: partial tails
// and other tenants' salts never match, expired blocks are misses, pinned blocks stay (Pin reads a
// chunk's blocks from the SSD in one batch), a store into an all-pinned tier returns Busy quickly,
// the sink chunk outlives normal chunks, a corrupted SSD record fails its layer closed (NotFound)
// instead of serving wrong bytes, an SSD block that cannot be read or decoded is erased so that it
// is stored again, the SSD contents are found again after a restart (also by an engine opened with
// another codec), host slots reach the SSD without a staging copy, a Store leaves write-back to the
// cleaner (Busy meanwhile), the device backend is chosen as EngineOptions::device_backend says,
// and the tiers below memory open first (a held SSD directory is refused before host memory).
// Method: a tiny layout (3 layers, 2 KiB blocks) and tiers of a few slots so that eviction,
// demotion and write-back happen within a handful of blocks; payload bytes are derived from
// (chunk hash, layer) so any expected block can be recomputed; real files in a ScopedTempDir for
// the SSD tier; a ManualClock for TTLs. Pin's promotion from the SSD is watched through a tier
// factory that wraps the standard tiers and records the size of every read batch.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <utility>
#include <vector>

#include "codecs/codec.h"
#include "engine/lower_tier_factory.h"
#include "engine/staging.h"
#include "testing/fault_injection_env.h"
#include "testing/gate_env.h"
#include "testing/test_util.h"
#include "tiers/redis/redis_options.h"
#include "tiers/ssd/ssd_options.h"
#include "tiers/ssd/ssd_tier.h"

#ifdef KVTIER_HAVE_CUDA  // Only to know whether kAuto must pick CUDA on this machine.
#include "cuda/cuda_status.h"
#endif

namespace kvtier {
namespace {

#ifdef KVTIER_HAVE_CUDA
constexpr bool kCudaBuild = true;
#else
constexpr bool kCudaBuild = false;
#endif

constexpr uint32_t kLayers = 3;
constexpr uint32_t kBlockTokens = 16;

KvLayout TestLayout() {
  return {.layers = kLayers,
          .kv_heads = 2,
          .head_dim = 16,
          .dtype = DType::kF16,
          .block_tokens = kBlockTokens};
}
const uint64_t kBlockBytes = TestLayout().BlockBytes();

// Deterministic bytes of block (chunk_hash, layer): finite FP16 values so every codec takes them.
std::vector<std::byte> Payload(const Hash256& chunk, uint32_t layer, uint64_t bytes = kBlockBytes) {
  return TestBlockPayload(chunk, layer, bytes);
}

std::vector<uint32_t> Tokens(uint32_t seed, size_t n) { return TestTokens(seed, n); }

// A tier below memory that forwards every call to the real one and records the items of each
// ReadBatch call.
class ReadRecordingTier final : public Tier {
 public:
  ReadRecordingTier(std::unique_ptr<Tier> inner, std::vector<size_t>* batches, Mutex* mu)
      : inner_(std::move(inner)), batches_(batches), mu_(mu) {}
  std::string_view name() const override { return inner_->name(); }
  TierCapabilities capabilities() const override { return inner_->capabilities(); }
  size_t batch_max() const override { return inner_->batch_max(); }
  uint64_t ReadBufferBytes(uint64_t payload_bytes) const override {
    return inner_->ReadBufferBytes(payload_bytes);
  }
  uint64_t PayloadOffset() const override { return inner_->PayloadOffset(); }
  void ReadBatch(std::span<TierRead> reads, Callback done) override {
    {
      MutexLock lock(mu_);
      batches_->push_back(reads.size());
    }
    inner_->ReadBatch(reads, std::move(done));
  }
  void WriteBatch(std::span<TierWrite> writes, Callback done) override {
    inner_->WriteBatch(writes, std::move(done));
  }
  Status Contains(std::span<TierContains> items) override { return inner_->Contains(items); }
  Status Erase(std::span<const BlockKey> keys) override { return inner_->Erase(keys); }
  Status Flush() override { return inner_->Flush(); }
  TierStoreStats Stats() override { return inner_->Stats(); }
  Status Close() override { return inner_->Close(); }

 private:
  std::unique_ptr<Tier> inner_;
  std::vector<size_t>* batches_;
  Mutex* mu_;
};

// StandardLowerTiers, each tier wrapped in a ReadRecordingTier.
class ReadRecordingFactory final : public LowerTierFactory {
 public:
  Status Validate(const EngineOptions& options) const override {
    return StandardLowerTiers().Validate(options);
  }
  Result<OpenedLowerTiers> Open(const EngineOptions& options,
                                const LowerTierContext& context) const override {
    KV_ASSIGN_OR_RETURN(OpenedLowerTiers out, StandardLowerTiers().Open(options, context));
    for (OpenedLowerTier& t : out.tiers) {
      t.tier = std::make_unique<ReadRecordingTier>(std::move(t.tier), &batches, &mu);
    }
    return out;
  }
  std::vector<size_t> Batches() const {
    MutexLock lock(&mu);
    return batches;
  }

  mutable Mutex mu;
  mutable std::vector<size_t> batches;
};

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<ScopedTempDir> d = ScopedTempDir::Create();
    ASSERT_TRUE(d.ok());
    dir_ = std::make_unique<ScopedTempDir>(std::move(d).value());
    env_ = NewPosixEnv({.clock = &clock_});
  }

  EngineOptions Options(uint32_t device_blocks, uint32_t host_blocks, bool ssd) {
    EngineOptions o;
    o.layout = TestLayout();
    o.model.name = "test-model";
    o.device.capacity_bytes = device_blocks * kBlockBytes;
    o.host.capacity_bytes = host_blocks * kBlockBytes;
    o.host.huge_pages = HugePages::kOff;
    o.host.lock = MemoryLock::kOff;
    o.host.prefault = false;
    if (ssd) {
      SsdTierOptions s;
      s.dirs = {dir_->Join("ssd")};
      s.segment_bytes = 1 * kMiB;
      s.capacity_bytes = 16 * kMiB;
      o.tiers.Emplace(kSsdTierName, s);
    }
    o.env = env_.get();
    return o;
  }

  std::unique_ptr<Engine> OpenOrDie(const EngineOptions& o) {
    Result<std::unique_ptr<Engine>> e = Engine::Open(o);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? std::move(e).value() : nullptr;
  }

  // Stores the first `chunks` chunks of `tokens`; returns the status of Store or Wait.
  Status StoreChunks(Engine& e, const Namespace& ns, std::span<const uint32_t> tokens,
                     size_t chunks, const StoreOptions& so = {}) {
    Result<std::vector<Hash256>> hashes = ChunkHashes(ns.digest, tokens, kBlockTokens);
    KV_RETURN_IF_ERROR(hashes.status());
    std::vector<std::vector<std::byte>> bufs;
    std::vector<std::span<const std::byte>> src;
    for (size_t c = 0; c < chunks; ++c) {
      for (uint32_t l = 0; l < kLayers; ++l) bufs.push_back(Payload((*hashes)[c], l));
    }
    for (const auto& b : bufs) src.emplace_back(b);
    KV_ASSIGN_OR_RETURN(std::unique_ptr<StoreHandle> h, e.Store(ns, tokens, src, so));
    return h->Wait();
  }

  // StoreChunks, tried again while it is Busy (at most about 10 s): a store that needs a dirty
  // block evicted gets Busy while the cleaner writes the block back.
  Status StoreChunksRetrying(Engine& e, const Namespace& ns, std::span<const uint32_t> tokens,
                             size_t chunks, const StoreOptions& so = {}) {
    Status s = StoreChunks(e, ns, tokens, chunks, so);
    for (int i = 0; i < 2000 && s.IsBusy(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      s = StoreChunks(e, ns, tokens, chunks, so);
    }
    return s;
  }

  // Loads `chunks` chunks and checks every byte; returns the per-layer statuses.
  std::vector<Status> LoadAndCheck(Engine& e, const Namespace& ns, std::span<const uint32_t> tokens,
                                   size_t chunks) {
    Result<std::vector<Hash256>> hashes = ChunkHashes(ns.digest, tokens, kBlockTokens);
    EXPECT_TRUE(hashes.ok());
    std::vector<std::vector<std::byte>> bufs(chunks * kLayers, std::vector<std::byte>(kBlockBytes));
    std::vector<std::span<std::byte>> dst;
    for (auto& b : bufs) dst.emplace_back(b);
    Result<std::unique_ptr<LoadHandle>> h = e.Load(ns, tokens, dst);
    EXPECT_TRUE(h.ok()) << h.status().ToString();
    if (!h.ok()) return {};
    std::vector<Status> out;
    for (uint32_t l = 0; l < kLayers; ++l) {
      out.push_back((*h)->WaitLayer(l));
      EXPECT_TRUE((*h)->LayerReady(l));
      if (!out.back().ok()) continue;
      for (size_t c = 0; c < chunks; ++c) {
        EXPECT_EQ(bufs[c * kLayers + l], Payload((*hashes)[c], l))
            << "chunk " << c << " layer " << l;
      }
    }
    return out;
  }

  static bool AllOk(const std::vector<Status>& v) {
    for (const Status& s : v) {
      if (!s.ok()) return false;
    }
    return !v.empty();
  }

  ManualClock clock_{1'000'000'000};
  std::unique_ptr<ScopedTempDir> dir_;
  std::unique_ptr<Env> env_;
};

TEST_F(EngineTest, StoreLookupLoadRoundTrip) {
  auto e = OpenOrDie(Options(/*device=*/16, /*host=*/16, /*ssd=*/false));
  ASSERT_NE(e, nullptr);
  Result<Namespace> ns = e->MakeNamespace("tenant-a");
  ASSERT_TRUE(ns.ok());
  const std::vector<uint32_t> tokens = Tokens(1, 4 * kBlockTokens + 5);  // Partial tail of 5.
  ASSERT_TRUE(StoreChunks(*e, *ns, tokens, 4).ok());
  Result<LookupResult> r = e->Lookup(*ns, tokens);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->matched_tokens, 4 * kBlockTokens);
  ASSERT_EQ(r->chunk_tiers.size(), 4u);
  for (TierKind k : r->chunk_tiers) EXPECT_EQ(k, TierKind::kDevice);
  EXPECT_TRUE(AllOk(LoadAndCheck(*e, *ns, tokens, 4)));
  // A second store of the same prefix takes nothing new.
  Result<std::vector<Hash256>> hashes = ChunkHashes(ns->digest, tokens, kBlockTokens);
  std::vector<std::vector<std::byte>> bufs;
  std::vector<std::span<const std::byte>> src;
  for (uint32_t l = 0; l < kLayers; ++l) bufs.push_back(Payload((*hashes)[0], l));
  for (const auto& b : bufs) src.emplace_back(b);
  Result<std::unique_ptr<StoreHandle>> h = e->Store(*ns, tokens, src);
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE((*h)->Wait().ok());
  EXPECT_EQ((*h)->chunks_stored(), 0u);
  const EngineStats st = e->Stats();
  EXPECT_EQ(st.store_blocks, 4u * kLayers);
  EXPECT_EQ(st.load_blocks, 4u * kLayers);
  EXPECT_EQ(st.load_failures, 0u);
}

TEST_F(EngineTest, PartialTailAndDivergenceAreIgnored) {
  auto e = OpenOrDie(Options(0, 16, false));
  ASSERT_NE(e, nullptr);
  Namespace ns = *e->MakeNamespace("t");
  std::vector<uint32_t> tokens = Tokens(2, 2 * kBlockTokens + 7);
  ASSERT_TRUE(StoreChunks(*e, ns, tokens, 2).ok());
  tokens.back() ^= 1;  // A different tail changes nothing.
  EXPECT_EQ(e->Lookup(ns, tokens)->matched_tokens, 2 * kBlockTokens);
  tokens[kBlockTokens + 1] ^= 1;  // A change in chunk 1 ends the match there.
  EXPECT_EQ(e->Lookup(ns, tokens)->matched_tokens, kBlockTokens);
  EXPECT_EQ(e->Lookup(ns, std::span(tokens).first(kBlockTokens - 1))->matched_tokens, 0u);
}

TEST_F(EngineTest, SaltsIsolateTenants) {
  auto e = OpenOrDie(Options(0, 16, false));
  ASSERT_NE(e, nullptr);
  Namespace a = *e->MakeNamespace("salt-a");
  Namespace b = *e->MakeNamespace("salt-b");
  std::vector<std::string> lora = {"lora:1"};
  Namespace a_lora = *e->MakeNamespace("salt-a", lora);
  const std::vector<uint32_t> tokens = Tokens(3, 2 * kBlockTokens);
  ASSERT_TRUE(StoreChunks(*e, a, tokens, 2).ok());
  EXPECT_EQ(e->Lookup(a, tokens)->matched_tokens, 2 * kBlockTokens);
  EXPECT_EQ(e->Lookup(b, tokens)->matched_tokens, 0u);
  EXPECT_EQ(e->Lookup(a_lora, tokens)->matched_tokens, 0u);
  // Loading another tenant's chunks fails closed.
  std::vector<std::vector<std::byte>> bufs(kLayers, std::vector<std::byte>(kBlockBytes));
  std::vector<std::span<std::byte>> dst(bufs.begin(), bufs.end());
  auto h = e->Load(b, tokens, dst);
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE((*h)->WaitLayer(0).IsNotFound());
  EXPECT_TRUE((*h)->Wait().IsNotFound());
}

TEST_F(EngineTest, ArgumentsAreValidated) {
  auto e = OpenOrDie(Options(0, 16, false));
  ASSERT_NE(e, nullptr);
  Namespace ns = *e->MakeNamespace("t");
  const std::vector<uint32_t> tokens = Tokens(4, 2 * kBlockTokens);
  std::vector<std::vector<std::byte>> bufs(2 * kLayers, std::vector<std::byte>(kBlockBytes));
  bufs[4].resize(kBlockBytes - 2);
  std::vector<std::span<std::byte>> dst(bufs.begin(), bufs.end());
  Result<std::unique_ptr<LoadHandle>> h = e->Load(ns, tokens, dst);
  ASSERT_TRUE(h.status().IsInvalidArgument());
  EXPECT_NE(h.status().message().find("dst[4]"), std::string::npos) << h.status().ToString();
  EXPECT_TRUE(e->Load(ns, tokens, std::span(dst).first(2)).status().IsInvalidArgument());
  std::vector<std::span<const std::byte>> src(bufs.begin(), bufs.end());
  EXPECT_TRUE(e->Store(ns, std::span(tokens).first(kBlockTokens), src)
                  .status()
                  .IsInvalidArgument());  // Two chunks of buffers, one chunk of tokens.
}

// The tier factory opens the SSD (on a PosixEnv of its own: no Env in the options), then the
// remote store refuses its options: Open fails with that error, and the SSD closes before the
// Env it runs on goes.
TEST_F(EngineTest, ARemoteRefusedAfterTheSsdOpenedFailsOpenCleanly) {
  EngineOptions o = Options(0, 16, true);
  o.env = nullptr;
  o.remote = RemoteTierOptions{
      .stores = TierOptionsSet::Of(kRedisStoreName, RedisStoreOptions{.endpoints = {"127.0.0.1:1"},
                                                                      .user = "u",
                                                                      .insecure_plaintext = true})};
  Result<std::unique_ptr<Engine>> e = Engine::Open(o);
  ASSERT_FALSE(e.ok());
  EXPECT_TRUE(e.status().IsInvalidArgument()) << e.status().ToString();
  EXPECT_NE(e.status().message().find("password"), std::string::npos) << e.status().ToString();
  // The SSD directory was left closed: it opens again.
  o.remote.reset();
  EXPECT_NE(OpenOrDie(o), nullptr);
}

// The tiers below memory open before the memory tiers: a second engine on a held SSD directory
// is refused by the directory's LOCK before its host tier is even tried (here one that could not
// open: more slots than a tier may have), so a held cache fails before gigabytes of host memory
// are faulted in. When the memory tiers then fail, the SSD directory is left closed.
TEST_F(EngineTest, LowerTiersOpenBeforeTheMemoryTiers) {
  auto first = OpenOrDie(Options(0, 16, true));
  EngineOptions o = Options(0, 16, true);
  o.host.capacity_bytes = uint64_t{1} << 50;
  Result<std::unique_ptr<Engine>> second = Engine::Open(o);
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(second.status().IsBusy()) << second.status().ToString();
  first.reset();
  second = Engine::Open(o);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("slots"), std::string::npos)
      << second.status().ToString();
  EXPECT_NE(OpenOrDie(Options(0, 16, true)), nullptr);
}

TEST_F(EngineTest, OptionsValidationNamesTheField) {
  EngineOptions o = Options(0, 16, false);
  o.host.capacity_bytes = 0;
  Status s = o.Validate();
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(s.message().find("host.capacity_bytes"), std::string::npos) << s.ToString();
  o = Options(0, 16, false);
  o.worker_threads = 0;
  EXPECT_NE(o.Validate().message().find("worker_threads"), std::string::npos);
  o = Options(0, 16, false);
  o.layout.block_tokens = 17;
  EXPECT_NE(o.Validate().message().find("layout"), std::string::npos);
  o = Options(1, 16, false);
  o.device.capacity_bytes = kBlockBytes - 1;
  EXPECT_NE(o.Validate().message().find("device.capacity_bytes"), std::string::npos);
  o = Options(0, 16, false);
  o.ssd_codec.zstd_level = 99;
  EXPECT_NE(o.Validate().message().find("ssd_codec"), std::string::npos);
  o = Options(0, 16, false);
  o.staging_buffers = 1;
  EXPECT_NE(o.Validate().message().find("staging_buffers"), std::string::npos);
  EXPECT_TRUE(Options(4, 16, true).Validate().ok());
  EXPECT_FALSE(Engine::Open(o).ok());
}

// A zstd level or group size of 0 is the codec's default, as in every other surface: the C++
// options {.codec = kShuffleZstd} open an engine at level 1 (they were refused with "level must be
// in [1, 22]"), and int8/int4 without a group size use groups of 32.
TEST_F(EngineTest, CodecZerosAreTheCodecsDefaults) {
  const std::vector<std::pair<codecs::CodecParams, codecs::CodecParams>> cases = {
      {{.codec = codecs::CodecId::kShuffleZstd}, codecs::CodecParams::ShuffleZstd(1)},
      {{.codec = codecs::CodecId::kInt8}, codecs::CodecParams::Int8(32, 0)},
      {{.codec = codecs::CodecId::kInt4, .zstd_level = 3}, codecs::CodecParams::Int4(32, 3)},
      {{.codec = codecs::CodecId::kShuffleZstd, .zstd_level = 7},
       codecs::CodecParams::ShuffleZstd(7)},
  };
  for (const auto& [given, used] : cases) {
    EngineOptions o = Options(0, 16, true);
    o.ssd_codec = given;
    EXPECT_TRUE(o.Validate().ok()) << given.ToString();
    std::unique_ptr<Engine> e = OpenOrDie(o);
    ASSERT_NE(e, nullptr) << given.ToString();
    EXPECT_EQ(e->options().ssd_codec, used) << given.ToString();
  }
  EngineOptions o = Options(0, 16, true);
  o.ssd_codec = {.codec = codecs::CodecId::kShuffleZstd, .zstd_level = 23};  // Still checked.
  EXPECT_NE(o.Validate().message().find("ssd_codec"), std::string::npos);
}

// The rotated codecs need a power-of-two head_dim (the Hadamard transform's length): an engine
// whose layout has another is refused at open, naming ssd_codec and the head_dim, instead of
// failing every SSD write later; the same codec opens with a power-of-two head_dim.
TEST_F(EngineTest, RotatedCodecNeedsPowerOfTwoHeadDim) {
  for (const codecs::CodecId id :
       {codecs::CodecId::kInt8Rot, codecs::CodecId::kInt4Rot, codecs::CodecId::kK8V4Rot}) {
    EngineOptions o = Options(0, 16, true);
    o.ssd_codec = codecs::CodecParams::Quantized(id);
    EXPECT_TRUE(o.Validate().ok()) << o.ssd_codec.ToString();
    o.layout.head_dim = 12;
    o.host.capacity_bytes = 16 * o.layout.BlockBytes();
    const Status s = o.Validate();
    EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
    EXPECT_NE(s.message().find("ssd_codec"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("head_dim, not 12"), std::string::npos) << s.message();
  }
}

TEST_F(EngineTest, WriteBackEvictsToSsdAndLoadsBack) {
  EngineOptions o = Options(/*device=*/3, /*host=*/3, /*ssd=*/true);
  o.write_policy = WritePolicy::kWriteBack;
  auto e = OpenOrDie(o);
  ASSERT_NE(e, nullptr);
  Namespace ns = *e->MakeNamespace("t");
  const std::vector<uint32_t> tokens = Tokens(5, 5 * kBlockTokens);
  // One chunk at a time: each store evicts older dirty blocks (device -> host -> SSD).
  for (size_t c = 1; c <= 5; ++c) ASSERT_TRUE(StoreChunksRetrying(*e, ns, tokens, c).ok()) << c;
  EngineStats st = e->Stats();
  uint64_t writebacks = 0;
  for (const TierStats& t : st.tiers) writebacks += t.writebacks;
  EXPECT_GT(writebacks, 0u);
  Result<LookupResult> r = e->Lookup(ns, tokens);
  EXPECT_EQ(r->matched_tokens, 5 * kBlockTokens);
  // Device overflow demotes to host while host has clean room, else writes back to the SSD.
  EXPECT_GE(std::count(r->chunk_tiers.begin(), r->chunk_tiers.end(), TierKind::kSsd), 1);
  EXPECT_EQ(r->chunk_tiers.back(), TierKind::kDevice);
  EXPECT_TRUE(AllOk(LoadAndCheck(*e, ns, tokens, 5)));
  EXPECT_EQ(e->Stats().corrupt_blocks, 0u);
}

TEST_F(EngineTest, WriteThroughPersistsBeforeWaitReturns) {
  EngineOptions o = Options(0, 16, true);
  o.write_policy = WritePolicy::kWriteThrough;
  auto e = OpenOrDie(o);
  ASSERT_NE(e, nullptr);
  Namespace ns = *e->MakeNamespace("t");
  const std::vector<uint32_t> tokens = Tokens(6, 2 * kBlockTokens);
  ASSERT_TRUE(StoreChunks(*e, ns, tokens, 2).ok());
  EngineStats st = e->Stats();
  ASSERT_EQ(st.tiers.back().kind, TierKind::kSsd);
  EXPECT_EQ(st.tiers.back().blocks, 2u * kLayers);
  // Encoded from the caller's sources into a staging buffer, and written from there.
  EXPECT_GE(st.tiers.back().write_bytes, 2u * kLayers * kBlockBytes);
  EXPECT_EQ(st.tiers.back().staged_write_bytes, 0u);
}

TEST_F(EngineTest, FlushWritesDirtyBlocksOnce) {
  auto e = OpenOrDie(Options(0, 16, true));  // Write-back.
  ASSERT_NE(e, nullptr);
  Namespace ns = *e->MakeNamespace("t");
  const std::vector<uint32_t> tokens = Tokens(20, 2 * kBlockTokens);
  ASSERT_TRUE(StoreChunks(*e, ns, tokens, 2).ok());
  EXPECT_EQ(e->Stats().tiers.back().blocks, 0u);  // Nothing written yet.
  ASSERT_TRUE(e->Flush().ok());
  EXPECT_EQ(e->Stats().tiers.back().blocks, 2u * kLayers);
  ASSERT_TRUE(e->Flush().ok());  // Clean now: nothing more to write.
  EXPECT_EQ(e->Stats().tiers.back().blocks, 2u * kLayers);
  // Still served from memory.
  EXPECT_EQ(e->Lookup(ns, tokens)->chunk_tiers.at(1), TierKind::kHost);
}

// Host slots are encoded where they are on their way to the SSD (Flush and eviction alike);
// only device slots are copied out into a staging buffer first. The SSD tier writes every record
// from the engine's encode buffer (TierStats::staged_write_bytes 0): one copy before the disk,
// the encode's. The bytes read back are checked.
TEST_F(EngineTest, WritesToSsdCopyOutOnlyDeviceSlots) {
  auto host_only = OpenOrDie(Options(0, kLayers, true));  // Write-back.
  ASSERT_NE(host_only, nullptr);
  Namespace ns = *host_only->MakeNamespace("t");
  const std::vector<uint32_t> a = Tokens(42, kBlockTokens);
  const std::vector<uint32_t> b = Tokens(43, kBlockTokens);
  ASSERT_TRUE(StoreChunks(*host_only, ns, a, 1).ok());
  ASSERT_TRUE(StoreChunksRetrying(*host_only, ns, b, 1).ok());  // Evicts a: written back.
  ASSERT_TRUE(host_only->Flush().ok());                         // Writes b.
  EngineStats st = host_only->Stats();
  EXPECT_EQ(st.tiers.back().blocks, 2u * kLayers);
  EXPECT_EQ(st.staged_copy_bytes, 0u);
  EXPECT_GE(st.tiers.back().write_bytes, 2u * kLayers * kBlockBytes);
  EXPECT_EQ(st.tiers.back().staged_write_bytes, 0u);
  EXPECT_EQ(host_only->Lookup(ns, a)->chunk_tiers.at(0), TierKind::kSsd);
  EXPECT_TRUE(AllOk(LoadAndCheck(*host_only, ns, a, 1)));
  host_only.reset();

  auto with_device = OpenOrDie(Options(16, 16, true));
  ASSERT_NE(with_device, nullptr);
  ns = *with_device->MakeNamespace("t");
  const std::vector<uint32_t> c = Tokens(44, 2 * kBlockTokens);
  ASSERT_TRUE(StoreChunks(*with_device, ns, c, 2).ok());  // Into the device tier.
  ASSERT_TRUE(with_device->Flush().ok());
  st = with_device->Stats();
  EXPECT_EQ(st.staged_copy_bytes, 2u * kLayers * kBlockBytes);
  EXPECT_EQ(st.tiers.back().blocks, 4u * kLayers);
  EXPECT_EQ(st.tiers.back().staged_write_bytes, 0u);
}

TEST_F(EngineTest, CleanerWritesDirtyBlocksBackWithoutEviction) {
  EngineOptions o = Options(0, 32, true);  // Write-back; watermark 0.5 x 32 = 16 dirty blocks.
  ASSERT_EQ(o.write_policy, WritePolicy::kWriteBack);
  auto e = OpenOrDie(o);
  ASSERT_NE(e, nullptr);
  Namespace ns = *e->MakeNamespace("t");
  const std::vector<uint32_t> tokens = Tokens(40, 8 * kBlockTokens);
  ASSERT_TRUE(StoreChunks(*e, ns, tokens, 8).ok());  // 24 dirty blocks: over the watermark.
  // Bounded wait for the cleaner (no timing assert: only that it happens at all).
  EngineStats st = e->Stats();
  for (int i = 0; i < 1000 && st.background_writebacks == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    st = e->Stats();
  }
  EXPECT_GT(st.background_writebacks, 0u);
  ASSERT_EQ(st.tiers.back().kind, TierKind::kSsd);
  EXPECT_GT(st.tiers.back().blocks, 0u);
  EXPECT_EQ(st.tiers.front().evictions, 0u);  // Written by the cleaner, not by eviction.
  EXPECT_GE(st.tiers.front().writebacks, st.background_writebacks);
  EXPECT_TRUE(AllOk(LoadAndCheck(*e, ns, tokens, 8)));
}

TEST_F(EngineTest, CleanerOffAtFractionOneAndFractionValidated) {
  EngineOptions o = Options(0, 32, true);
  o.writeback_dirty_fraction = 0;
  EXPECT_NE(o.Validate().message().find("writeback_dirty_fraction"), std::string::npos);
  o.writeback_dirty_fraction = 1;
  auto e = OpenOrDie(o);
  ASSERT_NE(e, nullptr);
  Namespace ns = *e->MakeNamespace("t");
  ASSERT_TRUE(StoreChunks(*e, ns, Tokens(41, 8 * kBlockTokens), 8).ok());
  EXPECT_EQ(e->Stats().background_writebacks, 0u);
  EXPECT_EQ(e->Stats().tiers.back().blocks, 0u);
}

TEST_F(EngineTest, SsdEncodesFeedTheRatioMonitor) {
  EngineOptions o = Options(0, 16, true);
  o.write_policy = WritePolicy::kWriteThrough;
  o.ssd_codec = codecs::CodecParams::ShuffleZstd(1);
  auto e = OpenOrDie(o);
  ASSERT_NE(e, nullptr);
  Namespace ns = *e->MakeNamespace("t");
  EXPECT_EQ(e->Stats().ratio_samples, 0u);
  ASSERT_TRUE(StoreChunks(*e, ns, Tokens(42, 2 * kBlockTokens), 2).ok());
  EngineStats st = e->Stats();
  EXPECT_EQ(st.ratio_samples, 2u * kLayers);
  EXPECT_EQ(st.ratio_cv_events, 0u);  // Fewer samples than the monitor judges.
}

TEST_F(EngineTest, ConcurrentStoresOfOneKeyStoreItOnce) {
  auto e = OpenOrDie(Options(4, 32, false));
  ASSERT_NE(e, nullptr);
  Namespace ns = *e->MakeNamespace("t");
  const std::vector<uint32_t> tokens = Tokens(21, 3 * kBlockTokens);
  Result<std::vector<Hash256>> hashes = ChunkHashes(ns.digest, tokens, kBlockTokens);
  std::vector<std::vector<std::byte>> bufs;
  for (size_t c = 0; c < 3; ++c) {
    for (uint32_t l = 0; l < kLayers; ++l) bufs.push_back(Payload((*hashes)[c], l));
  }
  std::vector<std::span<const std::byte>> src(bufs.begin(), bufs.end());
  std::atomic<size_t> stored{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      Result<std::unique_ptr<StoreHandle>> h = e->Store(ns, tokens, src);
      ASSERT_TRUE(h.ok()) << h.status().ToString();
      EXPECT_TRUE((*h)->Wait().ok());
      stored += (*h)->chunks_stored();
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(e->Stats().store_blocks, 3u * kLayers);
  EXPECT_GE(stored.load(), 3u);  // A chunk split between two stores counts in both.
  EXPECT_TRUE(AllOk(LoadAndCheck(*e, ns, tokens, 3)));
}

TEST_F(EngineTest, ReopenFindsBlocksOnSsd) {
  const std::vector<uint32_t> tokens = Tokens(7, 3 * kBlockTokens);
  Namespace ns;
  {
    auto e = OpenOrDie(Options(2, 4, true));  // Write-back: the clean shutdown flushes.
    ASSERT_NE(e, nullptr);
    ns = *e->MakeNamespace("t");
    for (size_t c = 1; c <= 3; ++c) ASSERT_TRUE(StoreChunksRetrying(*e, ns, tokens, c).ok());
  }
  auto e = OpenOrDie(Options(2, 16, true));
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->MakeNamespace("t")->digest, ns.digest);
  Result<LookupResult> r = e->Lookup(ns, tokens);
  EXPECT_EQ(r->matched_tokens, 3 * kBlockTokens);
  for (TierKind k : r->chunk_tiers) EXPECT_EQ(k, TierKind::kSsd);
  EXPECT_TRUE(AllOk(LoadAndCheck(*e, ns, tokens, 3)));
  // The SSD hits were promoted to the host tier.
  EXPECT_EQ(e->Lookup(ns, std::span(tokens).first(kBlockTokens))->chunk_tiers[0], TierKind::kHost);
}

TEST_F(EngineTest, ExpiredBlocksAreMisses) {
  EngineOptions o = Options(0, 16, true);
  o.default_ttl_ms = 1000;
  o.write_policy = WritePolicy::kWriteThrough;
  auto e = OpenOrDie(o);
  ASSERT_NE(e, nullptr);
  Namespace ns = *e->MakeNamespace("t");
  const std::vector<uint32_t> a = Tokens(8, kBlockTokens);
  const std::vector<uint32_t> b = Tokens(9, kBlockTokens);
  ASSERT_TRUE(StoreChunks(*e, ns, a, 1).ok());
  ASSERT_TRUE(StoreChunks(*e, ns, b, 1, {.ttl_ms = 5000}).ok());
  EXPECT_EQ(e->Lookup(ns, a)->matched_tokens, kBlockTokens);
  clock_.Advance(2'000'000);
  EXPECT_EQ(e->Lookup(ns, a)->matched_tokens, 0u);  // Memory and SSD copies expired.
  EXPECT_EQ(e->Lookup(ns, b)->matched_tokens, kBlockTokens);
  clock_.Advance(4'000'000);
  EXPECT_EQ(e->Lookup(ns, b)->matched_tokens, 0u);
  // An expired block can be stored again.
  ASSERT_TRUE(StoreChunks(*e, ns, a, 1).ok());
  EXPECT_EQ(e->Lookup(ns, a)->matched_tokens, kBlockTokens);
}

TEST_F(EngineTest, PinsPreventEvictionAndAllPinnedStoreIsBusy) {
  auto e = OpenOrDie(Options(0, kLayers, false));  // One chunk fits.
  ASSERT_NE(e, nullptr);
  Namespace ns = *e->MakeNamespace("t");
  const std::vector<uint32_t> a = Tokens(10, kBlockTokens);
  const std::vector<uint32_t> b = Tokens(11, kBlockTokens);
  ASSERT_TRUE(StoreChunks(*e, ns, a, 1).ok());
  {
    Result<PinHandle> pin = e->Pin(ns, a);
    ASSERT_TRUE(pin.ok());
    EXPECT_EQ(pin->chunks(), 1u);
    const auto start = std::chrono::steady_clock::now();
    Status s = StoreChunks(*e, ns, b, 1);
    EXPECT_TRUE(s.IsBusy()) << s.ToString();
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
    EXPECT_EQ(e->Lookup(ns, a)->matched_tokens, kBlockTokens);
    EXPECT_EQ(e->Stats().busy_rejections, 1u);
    PinHandle moved = std::move(*pin);  // Moving keeps the pin.
    EXPECT_TRUE(StoreChunks(*e, ns, b, 1).IsBusy());
  }
  EXPECT_TRUE(StoreChunks(*e, ns, b, 1).ok());
  EXPECT_EQ(e->Lookup(ns, a)->matched_tokens, 0u);
  EXPECT_EQ(e->Lookup(ns, b)->matched_tokens, kBlockTokens);
}

// StoreOptions::first_chunk: a suffix is stored under the keys of its position (chained over every
// token before it); it is found once its predecessors are cached, and a load returns its bytes.
TEST_F(EngineTest, StoreFromAChunkStoresTheSuffixUnderItsOwnKeys) {
  std::unique_ptr<Engine> e = OpenOrDie(Options(0, 16, false));
  ASSERT_NE(e, nullptr);
  const Namespace ns = *e->MakeNamespace("t", {});
  const std::vector<uint32_t> tokens = Tokens(31, 3 * kBlockTokens);
  Result<std::vector<Hash256>> hashes = ChunkHashes(ns.digest, tokens, kBlockTokens);
  ASSERT_TRUE(hashes.ok());
  std::vector<std::vector<std::byte>> suffix;
  for (size_t c = 1; c < 3; ++c) {
    for (uint32_t l = 0; l < kLayers; ++l) suffix.push_back(Payload((*hashes)[c], l));
  }
  std::vector<std::span<const std::byte>> src(suffix.begin(), suffix.end());
  Result<std::unique_ptr<StoreHandle>> h = e->Store(ns, tokens, src, {.first_chunk = 1});
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_TRUE((*h)->Wait().ok());
  EXPECT_EQ((*h)->chunks_stored(), 2u);
  EXPECT_EQ(e->Lookup(ns, tokens)->matched_tokens, 0u);  // Chunk 0 is missing: no prefix.
  ASSERT_TRUE(StoreChunks(*e, ns, tokens, 1).ok());
  EXPECT_EQ(e->Lookup(ns, tokens)->matched_tokens, 3 * kBlockTokens);
  for (const Status& s : LoadAndCheck(*e, ns, tokens, 3)) EXPECT_TRUE(s.ok()) << s.ToString();

  // A first chunk past the tokens, or spans past their full chunks, are refused by name.
  EXPECT_FALSE(e->Store(ns, tokens, src, {.first_chunk = 4}).ok());
  EXPECT_FALSE(e->Store(ns, tokens, src, {.first_chunk = 2}).ok());
}

TEST_F(EngineTest, StoreLargerThanMemoryIsBusyAndLeavesNothingBehind) {
  auto e = OpenOrDie(Options(2, 2 * kLayers, true));
  ASSERT_NE(e, nullptr);
  Namespace ns = *e->MakeNamespace("t");
  const std::vector<uint32_t> big = Tokens(28, 4 * kBlockTokens);
  EXPECT_TRUE(StoreChunks(*e, ns, big, 4).IsBusy());  // 12 blocks, 8 slots.
  EXPECT_EQ(e->Lookup(ns, big)->matched_tokens, 0u);
  for (const TierStats& t : e->Stats().tiers) EXPECT_EQ(t.blocks, 0u) << TierKindName(t.kind);
  // In pieces it fits: older chunks move down to the SSD.
  for (size_t c = 1; c <= 4; ++c) ASSERT_TRUE(StoreChunksRetrying(*e, ns, big, c).ok());
  EXPECT_EQ(e->Lookup(ns, big)->matched_tokens, 4 * kBlockTokens);
  EXPECT_TRUE(AllOk(LoadAndCheck(*e, ns, big, 4)));
}

// Pin promotes every layer of every chunk that only the SSD holds in one batched read (all
// chunks at once, not chunk after chunk), pins the leading cached chunks and stops at the first
// chunk no tier holds; the pinned blocks are the stored bytes, from host memory.
TEST_F(EngineTest, PinPromotesEveryChunkFromTheSsdInOneReadBatch) {
  const std::vector<uint32_t> tokens = Tokens(15, 4 * kBlockTokens);
  Namespace ns;
  {
    std::unique_ptr<Engine> e = OpenOrDie(Options(0, 16, true));
    ASSERT_NE(e, nullptr);
    ns = *e->MakeNamespace("t");
    ASSERT_TRUE(StoreChunks(*e, ns, tokens, 3).ok());  // The fourth chunk is never stored.
    ASSERT_TRUE(e->Flush().ok());
  }
  ReadRecordingFactory factory;
  Result<std::unique_ptr<Engine>> opened = Engine::Open(Options(0, 16, true), &factory);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Engine& e = **opened;
  ASSERT_EQ(e.Lookup(ns, tokens)->chunk_tiers, std::vector<TierKind>(3, TierKind::kSsd));
  Result<PinHandle> pin = e.Pin(ns, tokens);
  ASSERT_TRUE(pin.ok()) << pin.status().ToString();
  EXPECT_EQ(pin->chunks(), 3u);
  EXPECT_EQ(factory.Batches(), std::vector<size_t>{3 * kLayers});
  EXPECT_EQ(e.Stats().tiers.front().promotions, 3u * kLayers);
  EXPECT_EQ(e.Lookup(ns, tokens)->chunk_tiers, std::vector<TierKind>(3, TierKind::kHost));
  EXPECT_TRUE(AllOk(LoadAndCheck(e, ns, tokens, 3)));
  EXPECT_EQ(factory.Batches().size(), 1u);  // The load read host memory only.
}

// Pin promotes every chunk at once into host slots reserved before the reads: with room for two
// chunks and one more block, the third chunk's reservation is Busy, so Pin pins exactly the two
// leading chunks, from one read batch; while it holds them no chunk can be stored, and once the
// handle is gone their slots take new chunks.
TEST_F(EngineTest, PinStopsAtTheFirstChunkWithoutRoomAndPinsNothingBeyondIt) {
  const std::vector<uint32_t> tokens = Tokens(17, 4 * kBlockTokens);
  EngineOptions o = Options(0, 16, true);
  Namespace ns;
  {
    std::unique_ptr<Engine> e = OpenOrDie(o);
    ASSERT_NE(e, nullptr);
    ns = *e->MakeNamespace("t");
    ASSERT_TRUE(StoreChunks(*e, ns, tokens, 4).ok());
    ASSERT_TRUE(e->Flush().ok());
  }
  o.host.capacity_bytes = (2 * kLayers + 1) * kBlockBytes;
  ReadRecordingFactory factory;
  Result<std::unique_ptr<Engine>> opened = Engine::Open(o, &factory);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Engine& e = **opened;
  {
    Result<PinHandle> pin = e.Pin(ns, tokens);
    ASSERT_TRUE(pin.ok()) << pin.status().ToString();
    EXPECT_EQ(pin->chunks(), 2u);
    EXPECT_EQ(factory.Batches(), std::vector<size_t>{2 * kLayers + 1});
    EXPECT_TRUE(AllOk(LoadAndCheck(e, ns, tokens, 2)));
    EXPECT_EQ(factory.Batches().size(), 1u);  // The pinned chunks came from host memory.
    // Six of the seven host slots are pinned: a chunk of three blocks does not fit.
    const std::vector<uint32_t> other = Tokens(18, kBlockTokens);
    EXPECT_TRUE(StoreChunks(e, ns, other, 1).IsBusy());
  }
  const std::vector<uint32_t> bigger = Tokens(19, 2 * kBlockTokens);
  EXPECT_TRUE(StoreChunks(e, ns, bigger, 2).ok());
}

// A chunk of more layers than a Load's read batch (kLoadStagingBatchMax) is promoted by Pin in
// reads of half the staging pool (two in flight), not of a Load's 8, and its bytes are the
// stored ones.
TEST_F(EngineTest, PinReadsAChunkOfManyLayersInHalvesOfTheStagingPool) {
  constexpr uint32_t kManyLayers = 2 * kLoadStagingBatchMax + 3;
  EngineOptions o = Options(0, 0, true);
  o.layout.layers = kManyLayers;
  o.host.capacity_bytes = 2 * kManyLayers * kBlockBytes;
  const std::vector<uint32_t> tokens = Tokens(16, kBlockTokens);
  std::vector<std::vector<std::byte>> blocks;
  Namespace ns;
  {
    std::unique_ptr<Engine> e = OpenOrDie(o);
    ASSERT_NE(e, nullptr);
    ns = *e->MakeNamespace("t");
    const Hash256 chunk = (*ChunkHashes(ns.digest, tokens, kBlockTokens))[0];
    for (uint32_t l = 0; l < kManyLayers; ++l) blocks.push_back(Payload(chunk, l));
    const std::vector<std::span<const std::byte>> src(blocks.begin(), blocks.end());
    Result<std::unique_ptr<StoreHandle>> h = e->Store(ns, tokens, src);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    ASSERT_TRUE((*h)->Wait().ok());
    ASSERT_TRUE(e->Flush().ok());
  }
  ReadRecordingFactory factory;
  Result<std::unique_ptr<Engine>> opened = Engine::Open(o, &factory);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Engine& e = **opened;
  Result<PinHandle> pin = e.Pin(ns, tokens);
  ASSERT_TRUE(pin.ok()) << pin.status().ToString();
  EXPECT_EQ(pin->chunks(), 1u);
  const size_t half = o.staging_buffers / 2;
  ASSERT_LT(half, kManyLayers);
  EXPECT_EQ(factory.Batches(), (std::vector<size_t>{half, kManyLayers - half}));
  std::vector<std::vector<std::byte>> out(kManyLayers, std::vector<std::byte>(kBlockBytes));
  const std::vector<std::span<std::byte>> dst(out.begin(), out.end());
  Result<std::unique_ptr<LoadHandle>> load = e.Load(ns, tokens, dst);
  ASSERT_TRUE(load.ok()) << load.status().ToString();
  ASSERT_TRUE((*load)->Wait().ok());
  EXPECT_EQ(out, blocks);
  EXPECT_EQ(factory.Batches().size(), 2u);  // The load read host memory only.
}

TEST_F(EngineTest, PinHandleMayOutliveEngine) {
  auto e = OpenOrDie(Options(0, 16, false));
  ASSERT_NE(e, nullptr);
  Namespace ns = *e->MakeNamespace("t");
  const std::vector<uint32_t> a = Tokens(12, kBlockTokens);
  ASSERT_TRUE(StoreChunks(*e, ns, a, 1).ok());
  Result<PinHandle> pin = e->Pin(ns, a);
  ASSERT_TRUE(pin.ok());
  ASSERT_EQ(pin->chunks(), 1u);  // Else the handle would have nothing to release late.
  e.reset();
  PinHandle gone = std::move(*pin);  // Destroyed after the engine: does nothing.
  EXPECT_EQ(gone.chunks(), 1u);
}

TEST_F(EngineTest, SinkChunkOutlivesNormalChunks) {
  auto e = OpenOrDie(Options(0, 2 * kLayers, false));
  ASSERT_NE(e, nullptr);
  Namespace ns = *e->MakeNamespace("t");
  const std::vector<uint32_t> s = Tokens(13, 2 * kBlockTokens);
  ASSERT_TRUE(StoreChunks(*e, ns, s, 2).ok());  // Chunk 0 is the sink (kHigh), chunk 1 normal.
  const std::vector<uint32_t> t = Tokens(14, kBlockTokens);
  ASSERT_TRUE(StoreChunks(*e, ns, t, 1).ok());  // Needs 3 slots: chunk 1 of s goes.
  EXPECT_EQ(e->Lookup(ns, s)->matched_tokens, kBlockTokens);
  EXPECT_EQ(e->Lookup(ns, t)->matched_tokens, kBlockTokens);
}

TEST_F(EngineTest, CorruptSsdRecordFailsClosed) {
  EngineOptions o = Options(0, kLayers, true);
  o.write_policy = WritePolicy::kWriteThrough;
  o.promote_on_load = false;
  auto e = OpenOrDie(o);
  ASSERT_NE(e, nullptr);
  Namespace ns = *e->MakeNamespace("t");
  const std::vector<uint32_t> a = Tokens(15, kBlockTokens);
  const std::vector<uint32_t> b = Tokens(16, kBlockTokens);
  ASSERT_TRUE(StoreChunks(*e, ns, a, 1).ok());
  ASSERT_TRUE(StoreChunks(*e, ns, b, 1).ok());  // Pushes a out of memory (clean: on SSD).
  EXPECT_EQ(e->Lookup(ns, a)->chunk_tiers.at(0), TierKind::kSsd);
  // Flip one payload byte of the first record (a's layer 0) in the first segment.
  std::string segment;
  for (const auto& f : std::filesystem::directory_iterator(dir_->Join("ssd"))) {
    if (f.path().extension() == ".kvs" && (segment.empty() || f.path().string() < segment)) {
      segment = f.path().string();
    }
  }
  ASSERT_FALSE(segment.empty());
  {
    std::fstream f(segment, std::ios::in | std::ios::out | std::ios::binary);
    const std::streamoff at = 4096 + 128 + 300;
    f.seekg(at);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x5A);
    f.seekp(at);
    f.write(&c, 1);
  }
  std::vector<Status> layers = LoadAndCheck(*e, ns, a, 1);
  ASSERT_EQ(layers.size(), kLayers);
  EXPECT_TRUE(layers[0].IsNotFound()) << layers[0].ToString();
  EXPECT_TRUE(layers[1].ok());
  EXPECT_TRUE(layers[2].ok());
  const EngineStats st = e->Stats();
  EXPECT_GE(st.corrupt_blocks, 1u);
  EXPECT_GE(st.load_failures, 1u);
}

TEST_F(EngineTest, BitFlipsOnSsdReadsNeverServeWrongBytes) {
  FaultInjectionEnv faulty(env_.get());
  EngineOptions o = Options(0, kLayers, true);
  o.env = &faulty;
  o.write_policy = WritePolicy::kWriteThrough;
  o.promote_on_load = false;
  auto e = OpenOrDie(o);
  ASSERT_NE(e, nullptr);
  Namespace ns = *e->MakeNamespace("t");
  const std::vector<uint32_t> a = Tokens(22, kBlockTokens);
  ASSERT_TRUE(StoreChunks(*e, ns, a, 1).ok());
  ASSERT_TRUE(StoreChunks(*e, ns, Tokens(23, kBlockTokens), 1).ok());  // a: SSD only now.
  ASSERT_TRUE(faulty
                  .ArmFault({.kind = FaultKind::kBitFlip,
                             .op = FaultOp::kRead,
                             .path_substring = ".kvs",
                             .repeat = FaultRepeat::kEveryAfter,
                             .bit_index = (128 + 100) * 8})  // In the payload, past the header.
                  .ok());
  const std::vector<Status> layers = LoadAndCheck(*e, ns, a, 1);  // Checks bytes of OK layers.
  ASSERT_EQ(layers.size(), kLayers);
  for (const Status& s : layers) EXPECT_TRUE(s.IsNotFound()) << s.ToString();
  EXPECT_EQ(e->Stats().corrupt_blocks, kLayers);
  faulty.DisarmAllFaults();
}

TEST_F(EngineTest, FailedWriteBackDropsTheBlockWithoutHanging) {
  FaultInjectionEnv faulty(env_.get());
  EngineOptions o = Options(0, kLayers, true);
  o.env = &faulty;
  auto e = OpenOrDie(o);  // Write-back.
  ASSERT_NE(e, nullptr);
  Namespace ns = *e->MakeNamespace("t");
  const std::vector<uint32_t> a = Tokens(24, kBlockTokens);
  const std::vector<uint32_t> b = Tokens(25, kBlockTokens);
  ASSERT_TRUE(StoreChunks(*e, ns, a, 1).ok());
  ASSERT_TRUE(
      faulty
          .ArmFault(
              {.op = FaultOp::kWrite, .path_substring = ".kvs", .repeat = FaultRepeat::kEveryAfter})
          .ok());
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(StoreChunksRetrying(*e, ns, b, 1).ok());  // Evicts a: its write-back fails.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(e->Lookup(ns, a)->matched_tokens, 0u);
  EXPECT_EQ(e->Lookup(ns, b)->matched_tokens, kBlockTokens);
  EXPECT_TRUE(AllOk(LoadAndCheck(*e, ns, b, 1)));
  faulty.DisarmAllFaults();
}

// A Store that needs a dirty block evicted never writes it back on its own thread: the cleaner
// does, and the Store gets Busy meanwhile. The cleaner's write is held at the segment file's Sync
// (a Store doing the write-back itself would wait there, then succeed).
TEST_F(EngineTest, StoreLeavesWriteBackToTheCleanerAndGetsBusy) {
  GateEnv gated(env_.get());
  EngineOptions o = Options(0, kLayers, true);  // Write-back, one chunk fits.
  o.env = &gated;
  auto e = OpenOrDie(o);
  ASSERT_NE(e, nullptr);
  Namespace ns = *e->MakeNamespace("t");
  const std::vector<uint32_t> a = Tokens(45, kBlockTokens);
  const std::vector<uint32_t> b = Tokens(46, kBlockTokens);
  ASSERT_TRUE(StoreChunks(*e, ns, a, 1).ok());
  gated.sync_gate.Arm(Status::Ok());
  const Status s = StoreChunks(*e, ns, b, 1);
  EXPECT_TRUE(s.IsBusy()) << s.ToString();
  EXPECT_NE(s.message().find("cleaner"), std::string::npos) << s.ToString();
  EXPECT_TRUE(gated.sync_gate.WaitEntered());  // The cleaner is writing a back.
  gated.sync_gate.Release();
  ASSERT_TRUE(StoreChunksRetrying(*e, ns, b, 1).ok());
  EngineStats st = e->Stats();
  EXPECT_GE(st.busy_rejections, 1u);
  EXPECT_GE(st.tiers.front().writebacks, 1u);
  EXPECT_EQ(e->Lookup(ns, a)->chunk_tiers.at(0), TierKind::kSsd);
  EXPECT_TRUE(AllOk(LoadAndCheck(*e, ns, a, 1)));
  EXPECT_TRUE(AllOk(LoadAndCheck(*e, ns, b, 1)));
}

TEST_F(EngineTest, BlocksRefusedByAdmissionAreWrittenBackLater) {
  EngineOptions o = Options(0, kLayers, true);
  o.write_policy = WritePolicy::kWriteThrough;
  o.tiers.Get<SsdTierOptions>(kSsdTierName).admission = SsdAdmission::kAfterRequests;
  o.tiers.Get<SsdTierOptions>(kSsdTierName).admission_requests = 2;
  auto e = OpenOrDie(o);
  ASSERT_NE(e, nullptr);
  Namespace ns = *e->MakeNamespace("t");
  const std::vector<uint32_t> a = Tokens(26, kBlockTokens);
  ASSERT_TRUE(StoreChunks(*e, ns, a, 1).ok());
  EXPECT_EQ(e->Stats().tiers.back().blocks, 0u);  // First request: not admitted, still dirty.
  // Evicts a: written back.
  ASSERT_TRUE(StoreChunksRetrying(*e, ns, Tokens(27, kBlockTokens), 1).ok());
  EXPECT_EQ(e->Lookup(ns, a)->chunk_tiers.at(0), TierKind::kSsd);
  EXPECT_TRUE(AllOk(LoadAndCheck(*e, ns, a, 1)));
}

TEST_F(EngineTest, LayersCompleteAndReadinessIsMonotone) {
  auto e = OpenOrDie(Options(0, 8, true));
  ASSERT_NE(e, nullptr);
  Namespace ns = *e->MakeNamespace("t");
  const std::vector<uint32_t> tokens = Tokens(17, 4 * kBlockTokens);
  for (size_t c = 1; c <= 4; ++c) ASSERT_TRUE(StoreChunksRetrying(*e, ns, tokens, c).ok());
  std::vector<std::vector<std::byte>> bufs(4 * kLayers, std::vector<std::byte>(kBlockBytes));
  std::vector<std::span<std::byte>> dst(bufs.begin(), bufs.end());
  auto h = e->Load(ns, tokens, dst);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ((*h)->chunks(), 4u);
  std::vector<bool> seen(kLayers, false);
  for (int spin = 0; spin < 1000; ++spin) {
    for (uint32_t l = 0; l < kLayers; ++l) {
      const bool ready = (*h)->LayerReady(l);
      EXPECT_FALSE(seen[l] && !ready) << "layer " << l << " became unready";
      seen[l] = seen[l] || ready;
    }
  }
  EXPECT_TRUE((*h)->WaitLayer(0).ok());
  EXPECT_TRUE((*h)->Wait().ok());
  for (uint32_t l = 0; l < kLayers; ++l) EXPECT_TRUE((*h)->LayerReady(l));
}

TEST_F(EngineTest, CxlTierOnNode0WorksLikeASecondHostTier) {
  EngineOptions o = Options(0, kLayers, false);
  HostTierOptions cxl = o.host;
  cxl.name = "cxl";
  cxl.numa_node = 0;
  cxl.capacity_bytes = 8 * kLayers * kBlockBytes;
  o.cxl = cxl;
  Result<std::unique_ptr<Engine>> opened = Engine::Open(o);
  if (!opened.ok() && opened.status().IsNotSupported()) {
    GTEST_SKIP() << "no NUMA support here: " << opened.status().ToString();
  }
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  auto& e = *opened;
  Namespace ns = *e->MakeNamespace("t");
  const std::vector<uint32_t> tokens = Tokens(18, 4 * kBlockTokens);
  for (size_t c = 1; c <= 4; ++c) ASSERT_TRUE(StoreChunks(*e, ns, tokens, c).ok());
  Result<LookupResult> r = e->Lookup(ns, tokens);
  EXPECT_EQ(r->matched_tokens, 4 * kBlockTokens);  // Demoted host -> CXL, nothing lost.
  EXPECT_EQ(r->chunk_tiers.front(), TierKind::kCxl);
  EXPECT_EQ(r->chunk_tiers.back(), TierKind::kHost);
  EXPECT_TRUE(AllOk(LoadAndCheck(*e, ns, tokens, 4)));
  const EngineStats st = e->Stats();
  ASSERT_EQ(st.tiers.size(), 2u);
  EXPECT_EQ(st.tiers[1].kind, TierKind::kCxl);
  EXPECT_EQ(st.tiers[1].blocks, 3u * kLayers);
}

TEST_F(EngineTest, PrefetchPromotesFromSsd) {
  const std::vector<uint32_t> tokens = Tokens(19, 2 * kBlockTokens);
  Namespace ns;
  {
    auto e = OpenOrDie(Options(0, 8, true));
    ASSERT_NE(e, nullptr);
    ns = *e->MakeNamespace("t");
    ASSERT_TRUE(StoreChunks(*e, ns, tokens, 2).ok());
  }
  auto e = OpenOrDie(Options(0, 8, true));
  ASSERT_NE(e, nullptr);
  ASSERT_TRUE(e->Prefetch(ns, tokens).ok());
  for (int i = 0; i < 500 && e->Stats().prefetch_blocks < 2u * kLayers; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_EQ(e->Stats().prefetch_blocks, 2u * kLayers);
  const Result<LookupResult> r = e->Lookup(ns, tokens);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->chunk_tiers.size(), 2u);
  for (TierKind k : r->chunk_tiers) EXPECT_EQ(k, TierKind::kHost);
  EXPECT_TRUE(AllOk(LoadAndCheck(*e, ns, tokens, 2)));
}

// Keys do not include the codec, so an engine reopened with another codec must still read what
// the previous one wrote. With this wide layout an identity record (AlignUp(128 + 48 + 16 KiB,
// 4 KiB) = 20 KiB) is larger than anything int8 writes, so read buffers sized for the current
// codec alone would be too small and every load would fail while Lookup kept reporting hits.
TEST_F(EngineTest, ReopenWithAnotherCodecReadsOldRecords) {
  const KvLayout wide{.layers = 2,
                      .kv_heads = 2,
                      .head_dim = 128,
                      .dtype = DType::kF16,
                      .block_tokens = kBlockTokens};
  const uint64_t block = wide.BlockBytes();
  auto options = [&](const codecs::CodecParams& codec) {
    EngineOptions o = Options(0, 0, true);
    o.layout = wide;
    o.host.capacity_bytes = 8 * block;
    o.ssd_codec = codec;
    return o;
  };
  const std::vector<uint32_t> tokens = Tokens(30, 2 * kBlockTokens);
  Namespace ns;
  std::vector<std::vector<std::byte>> want;
  {
    auto e = OpenOrDie(options(codecs::CodecParams::Identity()));  // Write-back: close flushes.
    ASSERT_NE(e, nullptr);
    ns = *e->MakeNamespace("t");
    Result<std::vector<Hash256>> hashes = ChunkHashes(ns.digest, tokens, kBlockTokens);
    ASSERT_TRUE(hashes.ok());
    for (size_t c = 0; c < 2; ++c) {
      for (uint32_t l = 0; l < wide.layers; ++l) want.push_back(Payload((*hashes)[c], l, block));
    }
    std::vector<std::span<const std::byte>> src(want.begin(), want.end());
    Result<std::unique_ptr<StoreHandle>> h = e->Store(ns, tokens, src);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    ASSERT_TRUE((*h)->Wait().ok());
  }
  for (const codecs::CodecParams& codec :
       {codecs::CodecParams::Int8(), codecs::CodecParams::ShuffleZstd(3)}) {
    SCOPED_TRACE(codec.ToString());
    auto e = OpenOrDie(options(codec));
    ASSERT_NE(e, nullptr);
    Result<LookupResult> r = e->Lookup(ns, tokens);
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->matched_tokens, 2 * kBlockTokens);
    for (TierKind k : r->chunk_tiers) EXPECT_EQ(k, TierKind::kSsd);
    std::vector<std::vector<std::byte>> got(want.size(), std::vector<std::byte>(block));
    std::vector<std::span<std::byte>> dst(got.begin(), got.end());
    Result<std::unique_ptr<LoadHandle>> h = e->Load(ns, tokens, dst);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    const Status s = (*h)->Wait();
    EXPECT_TRUE(s.ok()) << s.ToString();
    h->reset();
    for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(got[i] == want[i]) << "block " << i;
    EXPECT_EQ(e->Stats().corrupt_blocks, 0u);
  }
}

// An SSD block that passes the SSD's checks but cannot be used (its payload is not an encoded
// block, or its record is larger than any codec writes) is erased on the failed read: Lookup
// stops reporting it and the next Store rewrites it, instead of failing every Load forever.
TEST_F(EngineTest, UnusableSsdBlocksAreErasedAndRewritten) {
  EngineOptions o = Options(0, 4 * kLayers, true);
  o.promote_on_load = false;
  const std::vector<uint32_t> tokens = Tokens(31, kBlockTokens);
  Namespace ns;
  {
    auto e = OpenOrDie(o);
    ASSERT_NE(e, nullptr);
    ns = *e->MakeNamespace("t");
  }
  Result<std::vector<Hash256>> hashes = ChunkHashes(ns.digest, tokens, kBlockTokens);
  ASSERT_TRUE(hashes.ok());
  {
    // Layer 0: garbage that no codec decodes. Layer 1: a record larger than any read buffer.
    // Layer 2: a valid identity block.
    const codecs::BlockGeometry g{.tokens = kBlockTokens, .kv_heads = 2, .head_dim = 16};
    Result<codecs::CodecContext> ctx = codecs::CodecContext::Create();
    ASSERT_TRUE(ctx.ok());
    std::vector<std::byte> valid(*codecs::MaxEncodedSize(codecs::CodecParams::Identity(), g));
    const std::vector<std::byte> raw = Payload((*hashes)[0], 2);
    Result<size_t> n = codecs::EncodeBlock(codecs::CodecParams::Identity(), g, raw, valid, &*ctx);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    const std::vector<std::byte> garbage(512, std::byte{0xAB});
    const std::vector<std::byte> huge(8 * kBlockBytes, std::byte{0x11});
    const std::span<const std::byte> payloads[] = {garbage, huge, std::span(valid).first(*n)};
    std::vector<SsdBlockWrite> writes;
    for (uint32_t l = 0; l < kLayers; ++l) {
      writes.push_back({.key = {.chunk_hash = (*hashes)[0], .layer = l},
                        .layout_digest = LayoutDigest(TestLayout()),
                        .codec_id = static_cast<uint8_t>(codecs::CodecId::kIdentity),
                        .raw_bytes = static_cast<uint32_t>(kBlockBytes),
                        .payload = payloads[l]});
    }
    Result<std::unique_ptr<SsdTier>> ssd =
        SsdTier::Open(o.tiers.Get<SsdTierOptions>(kSsdTierName), env_.get());
    ASSERT_TRUE(ssd.ok()) << ssd.status().ToString();
    ASSERT_TRUE((*ssd)->WriteBatchSync(writes).ok());
    for (const SsdBlockWrite& w : writes) ASSERT_TRUE(w.status.ok()) << w.status.ToString();
    ASSERT_TRUE((*ssd)->Close().ok());
  }
  auto e = OpenOrDie(o);
  ASSERT_NE(e, nullptr);
  ASSERT_EQ(e->Lookup(ns, tokens)->matched_tokens, kBlockTokens);
  std::vector<Status> layers = LoadAndCheck(*e, ns, tokens, 1);
  ASSERT_EQ(layers.size(), kLayers);
  EXPECT_TRUE(layers[0].IsNotFound()) << layers[0].ToString();
  EXPECT_TRUE(layers[1].IsNotFound()) << layers[1].ToString();
  EXPECT_TRUE(layers[2].ok()) << layers[2].ToString();
  EXPECT_EQ(e->Stats().corrupt_blocks, 1u);  // Layer 0 did not decode; layer 1 is not corrupt.
  EXPECT_EQ(e->Lookup(ns, tokens)->matched_tokens, 0u);  // Both were erased.
  ASSERT_TRUE(StoreChunks(*e, ns, tokens, 1).ok());
  EXPECT_EQ(e->Lookup(ns, tokens)->matched_tokens, kBlockTokens);
  EXPECT_TRUE(AllOk(LoadAndCheck(*e, ns, tokens, 1)));
}

// The device backend: kAuto picks CUDA exactly when the build has it and a GPU is usable, else
// the CPU tiers, and says which in one log line; kCuda without a GPU (or without the CUDA build)
// is NotSupported with a message saying why; kCpu always opens the CPU tiers. Blocks round-trip
// whichever backend serves them.
TEST_F(EngineTest, DeviceBackendIsChosenAndLogged) {
  bool gpu = false;
#ifdef KVTIER_HAVE_CUDA
  Result<int> gpus = cuda::CudaDeviceCount();
  gpu = gpus.ok() && *gpus > 0;
#endif
  std::printf("CUDA build: %s, usable GPU: %s\n", kCudaBuild ? "yes" : "no", gpu ? "yes" : "no");
  CapturingLogger log;
  EngineOptions o = Options(2, 4, false);
  o.logger = &log;
  ASSERT_EQ(o.device_backend, DeviceBackend::kAuto);  // The default.
  {
    auto e = OpenOrDie(o);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->device_backend(), gpu ? DeviceBackend::kCuda : DeviceBackend::kCpu);
    EXPECT_EQ(log.CountContaining("engine: device tier"), 1u);
    EXPECT_EQ(log.CountContaining(gpu ? "device tier cuda" : "device tier cpu"), 1u);
    Namespace ns = *e->MakeNamespace("t");
    const std::vector<uint32_t> tokens = Tokens(40, 2 * kBlockTokens);
    ASSERT_TRUE(StoreChunks(*e, ns, tokens, 2).ok());
    EXPECT_TRUE(AllOk(LoadAndCheck(*e, ns, tokens, 2)));
  }
  o.device_backend = DeviceBackend::kCuda;
  Result<std::unique_ptr<Engine>> cuda_engine = Engine::Open(o);
  if (gpu) {
    ASSERT_TRUE(cuda_engine.ok()) << cuda_engine.status().ToString();
    EXPECT_EQ((*cuda_engine)->device_backend(), DeviceBackend::kCuda);
  } else {
    ASSERT_TRUE(cuda_engine.status().IsNotSupported()) << cuda_engine.status().ToString();
    const std::string message = cuda_engine.status().message();
    EXPECT_NE(message.find("device_backend=cuda"), std::string::npos) << message;
    EXPECT_NE(message.find(kCudaBuild ? "no usable GPU" : "built without the CUDA backend"),
              std::string::npos)
        << message;
  }
  cuda_engine = Status::Aborted("closed");  // Closes the engine before the next one opens.
  o.device_backend = DeviceBackend::kCpu;
  auto cpu = OpenOrDie(o);
  ASSERT_NE(cpu, nullptr);
  EXPECT_EQ(cpu->device_backend(), DeviceBackend::kCpu);
  o.device_backend = static_cast<DeviceBackend>(9);
  EXPECT_TRUE(o.Validate().IsInvalidArgument());
  o.device_backend = DeviceBackend::kAuto;
  o.cuda_device = -1;
  EXPECT_TRUE(o.Validate().IsInvalidArgument());
}

}  // namespace
}  // namespace kvtier
