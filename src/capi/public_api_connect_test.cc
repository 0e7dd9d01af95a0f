// Goal: show that api::Engine::Connect (include/kvtier/engine.h) gives the public API over the
// node service's engine: two clients of one service share its cache (one stores, the other looks
// the chunks up and loads the same bytes), tenants stay apart, the layout comes from the service,
// a client given a layout starts before the service and works once it is up, a service with a
// latent (MLA) layout gives clients its kind and one-plane blocks, and bad options are refused
// naming the field.
// Method: a serve::Server started in this process on a socket in a ScopedTempDir, over an
// in-process host-only engine; clients connect through the public API only.
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "kvtier/engine.h"
#include "serve/server.h"
#include "testing/test_util.h"

namespace kvtier {
namespace {

constexpr api::Layout kLayout{
    .layers = 2, .kv_heads = 1, .head_dim = 16, .dtype = api::DType::kF16, .block_tokens = 16};

// Bytes of block (chunk, layer): distinct per block and per `seed`.
std::vector<std::byte> BlockBytes(uint64_t block_bytes, size_t chunk, uint32_t layer,
                                  uint32_t seed) {
  std::vector<std::byte> b(block_bytes);
  for (size_t i = 0; i < b.size(); ++i) {
    b[i] = static_cast<std::byte>((seed * 131 + chunk * 31 + layer * 7 + i) & 0xff);
  }
  return b;
}

class PublicApiConnectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<ScopedTempDir> d = ScopedTempDir::Create();
    ASSERT_TRUE(d.ok());
    dir_ = std::make_unique<ScopedTempDir>(std::move(d).value());
    socket_ = dir_->Join("kvtier.sock");
  }

  // Starts the service on socket_ over a new host-only engine.
  void StartService(LayoutKind kind = LayoutKind::kKv) {
    EngineOptions options;
    options.layout = KvLayout{.layers = kLayout.layers,
                              .kv_heads = kLayout.kv_heads,
                              .head_dim = kLayout.head_dim,
                              .dtype = DType::kF16,
                              .block_tokens = kLayout.block_tokens,
                              .kind = kind};
    options.host.capacity_bytes = 64 * options.layout.BlockBytes();
    options.host.prefault = false;
    options.device_backend = DeviceBackend::kCpu;
    Result<std::unique_ptr<Engine>> engine = Engine::Open(options);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    engine_ = std::move(engine).value();
    Result<std::unique_ptr<serve::Server>> server =
        serve::Server::Start(serve::ServerOptions{.socket_path = socket_}, engine_);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
  }

  void TearDown() override {
    if (server_ != nullptr) server_->Stop();
  }

  std::unique_ptr<ScopedTempDir> dir_;
  std::string socket_;
  std::shared_ptr<Engine> engine_;
  std::unique_ptr<serve::Server> server_;
};

// Stores `chunks` chunks of `tokens` (bytes of `seed`) through `engine`; the Store's status.
Status StoreChunks(api::Engine& engine, const api::Namespace& ns,
                   const std::vector<uint32_t>& tokens, size_t chunks, uint32_t seed) {
  std::vector<std::vector<std::byte>> src;
  for (size_t c = 0; c < chunks; ++c) {
    for (uint32_t l = 0; l < kLayout.layers; ++l) {
      src.push_back(BlockBytes(engine.block_bytes(), c, l, seed));
    }
  }
  const std::vector<std::span<const std::byte>> spans(src.begin(), src.end());
  KV_ASSIGN_OR_RETURN(api::StoreHandle store, engine.Store(ns, tokens, spans));
  return store.Wait();
}

// Loads `chunks` chunks layer by layer and checks they are the bytes StoreChunks stored.
void ExpectLoadsStoredBytes(api::Engine& engine, const api::Namespace& ns,
                            const std::vector<uint32_t>& tokens, size_t chunks, uint32_t seed) {
  std::vector<std::vector<std::byte>> dst(chunks * kLayout.layers,
                                          std::vector<std::byte>(engine.block_bytes()));
  const std::vector<std::span<std::byte>> spans(dst.begin(), dst.end());
  Result<api::LoadHandle> load = engine.Load(ns, tokens, spans);
  ASSERT_TRUE(load.ok()) << load.status().ToString();
  EXPECT_EQ(load->chunks(), chunks);
  for (uint32_t l = 0; l < kLayout.layers; ++l) ASSERT_TRUE(load->WaitLayer(l).ok()) << l;
  ASSERT_TRUE(load->Wait().ok());
  for (size_t c = 0; c < chunks; ++c) {
    for (uint32_t l = 0; l < kLayout.layers; ++l) {
      EXPECT_EQ(dst[c * kLayout.layers + l], BlockBytes(engine.block_bytes(), c, l, seed))
          << "chunk " << c << " layer " << l;
    }
  }
}

TEST_F(PublicApiConnectTest, TwoClientsShareTheServiceEngine) {
  StartService();
  Result<std::unique_ptr<api::Engine>> a = api::Engine::Connect(socket_, {.name = "writer"});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  Result<std::unique_ptr<api::Engine>> b = api::Engine::Connect(socket_, {.name = "reader"});
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  // No layout given: the service's.
  EXPECT_EQ((*a)->layout().layers, kLayout.layers);
  EXPECT_EQ((*a)->layout().block_tokens, kLayout.block_tokens);
  EXPECT_EQ((*a)->block_bytes(), kLayout.BlockBytes());

  const std::vector<uint32_t> tokens = TestTokens(1, 3 * kLayout.block_tokens + 5);
  Result<api::Namespace> ns_a = (*a)->MakeNamespace("tenant");
  ASSERT_TRUE(ns_a.ok()) << ns_a.status().ToString();
  ASSERT_TRUE(StoreChunks(**a, *ns_a, tokens, 3, 9).ok());

  Result<api::Namespace> ns_b = (*b)->MakeNamespace("tenant");
  ASSERT_TRUE(ns_b.ok());
  Result<api::LookupResult> hit = (*b)->Lookup(*ns_b, tokens);
  ASSERT_TRUE(hit.ok()) << hit.status().ToString();
  EXPECT_EQ(hit->matched_tokens, 3u * kLayout.block_tokens);
  EXPECT_EQ(hit->chunk_tiers, std::vector<api::TierKind>(3, api::TierKind::kHost));
  ExpectLoadsStoredBytes(**b, *ns_b, tokens, 3, 9);

  // Another tenant of the same uid misses.
  Result<api::Namespace> other = (*b)->MakeNamespace("other-tenant");
  ASSERT_TRUE(other.ok());
  hit = (*b)->Lookup(*other, tokens);
  ASSERT_TRUE(hit.ok());
  EXPECT_EQ(hit->matched_tokens, 0u);

  // Stats() are the service engine's.
  const api::EngineStats stats = (*b)->Stats();
  EXPECT_EQ(stats.stores, engine_->Stats().stores);
  EXPECT_GE(stats.stores, 1u);
  EXPECT_GE(stats.load_blocks, 3u * kLayout.layers);
}

TEST_F(PublicApiConnectTest, LatentServiceGivesItsKindAndOnePlaneBlocks) {
  StartService(LayoutKind::kLatent);
  Result<std::unique_ptr<api::Engine>> a = api::Engine::Connect(socket_, {.name = "mla"});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ((*a)->layout().kind, api::LayoutKind::kLatent);
  EXPECT_EQ((*a)->block_bytes(), kLayout.BlockBytes() / 2);
  const std::vector<uint32_t> tokens = TestTokens(2, 2 * kLayout.block_tokens);
  Result<api::Namespace> ns = (*a)->MakeNamespace("tenant");
  ASSERT_TRUE(ns.ok()) << ns.status().ToString();
  ASSERT_TRUE(StoreChunks(**a, *ns, tokens, 2, 4).ok());
  ExpectLoadsStoredBytes(**a, *ns, tokens, 2, 4);

  // A client that names the layout must name its kind: as K|V it is refused, as latent it works.
  api::ConnectOptions named{.layout = kLayout, .timeout_ms = 2000};
  EXPECT_FALSE(api::Engine::Connect(socket_, named).ok());
  named.layout->kind = api::LayoutKind::kLatent;
  Result<std::unique_ptr<api::Engine>> b = api::Engine::Connect(socket_, named);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  Result<api::Namespace> ns_b = (*b)->MakeNamespace("tenant");
  ASSERT_TRUE(ns_b.ok()) << ns_b.status().ToString();
  ExpectLoadsStoredBytes(**b, *ns_b, tokens, 2, 4);
}

TEST_F(PublicApiConnectTest, ClientWithLayoutStartsBeforeTheService) {
  Result<std::unique_ptr<api::Engine>> client = api::Engine::Connect(
      socket_, {.layout = kLayout, .timeout_ms = 2000, .reconnect_interval_ms = 20});
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  EXPECT_EQ((*client)->block_bytes(), kLayout.BlockBytes());
  const std::vector<uint32_t> tokens = TestTokens(2, 2 * kLayout.block_tokens);
  Result<api::Namespace> ns = (*client)->MakeNamespace("t");
  ASSERT_TRUE(ns.ok()) << ns.status().ToString();
  // No service: a miss, and a store that does not happen.
  Result<api::LookupResult> hit = (*client)->Lookup(*ns, tokens);
  ASSERT_TRUE(hit.ok());
  EXPECT_EQ(hit->matched_tokens, 0u);
  EXPECT_FALSE(StoreChunks(**client, *ns, tokens, 2, 4).ok());

  StartService();
  // The client reconnects by itself (every 20 ms): within a bounded time a store goes through.
  Status stored = Status::Unavailable("not tried");
  for (int i = 0; i < 250 && !stored.ok(); ++i) {
    stored = StoreChunks(**client, *ns, tokens, 2, 4);
    if (!stored.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(stored.ok()) << stored.ToString();
  hit = (*client)->Lookup(*ns, tokens);
  ASSERT_TRUE(hit.ok());
  EXPECT_EQ(hit->matched_tokens, 2u * kLayout.block_tokens);
  ExpectLoadsStoredBytes(**client, *ns, tokens, 2, 4);
}

TEST_F(PublicApiConnectTest, RefusesBadOptionsAndAMissingServiceWithoutLayout) {
  // Without a layout the service must answer.
  Result<std::unique_ptr<api::Engine>> client =
      api::Engine::Connect(socket_, {.timeout_ms = 500, .reconnect_interval_ms = 10});
  EXPECT_FALSE(client.ok());

  api::Layout bad = kLayout;
  bad.block_tokens = 17;
  client = api::Engine::Connect(socket_, {.layout = bad});
  ASSERT_TRUE(client.status().IsInvalidArgument()) << client.status().ToString();
  EXPECT_TRUE(MessageContains(client.status(), "block_tokens"));

  bad = kLayout;
  bad.dtype = static_cast<api::DType>(9);
  client = api::Engine::Connect(socket_, {.layout = bad});
  ASSERT_TRUE(client.status().IsInvalidArgument()) << client.status().ToString();
  EXPECT_TRUE(MessageContains(client.status(), "layout.dtype"));
}

}  // namespace
}  // namespace kvtier
