// kvtier from C++ through the installed package's C++ API (kvtier/engine.h): open an engine with
// an SSD tier, store two chunks, look them up and load them back layer by layer, then reopen the
// engine and find them on the SSD.
// Usage: kvtier_consumer_api <ssd directory>
#include <kvtier/engine.h>

#include <cstdio>
#include <span>
#include <string>
#include <vector>

namespace {

int Fail(const kvtier::Status& status, const char* what) {
  std::fprintf(stderr, "%s: %s\n", what, status.ToString().c_str());
  return 1;
}

kvtier::api::EngineOptions Options(const std::string& dir) {
  return {.layout = {.layers = 2,
                     .kv_heads = 1,
                     .head_dim = 64,
                     .dtype = kvtier::api::DType::kF16,
                     .block_tokens = 32},
          .host = {.capacity_bytes = 1 << 20},
          .ssd = kvtier::api::SsdTierOptions{
              .dirs = {dir}, .capacity_bytes = 16 << 20, .segment_bytes = 1 << 20}};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <ssd directory>\n", argv[0]);
    return 2;
  }
  const std::vector<uint32_t> tokens(2 * 32 + 5, 7);  // Two full chunks and a tail.
  std::vector<std::vector<std::byte>> src;             // [chunk * layers + layer]
  {
    auto engine = kvtier::api::Engine::Open(Options(argv[1]));
    if (!engine.ok()) return Fail(engine.status(), "open");
    kvtier::api::Engine& e = **engine;
    auto ns = e.MakeNamespace("tenant-a");
    if (!ns.ok()) return Fail(ns.status(), "namespace");

    for (int block = 0; block < 4; ++block) {
      src.emplace_back(e.block_bytes(), static_cast<std::byte>(block + 1));
    }
    std::vector<std::span<const std::byte>> src_spans(src.begin(), src.end());
    auto store = e.Store(*ns, tokens, src_spans);
    if (!store.ok()) return Fail(store.status(), "store");
    if (kvtier::Status s = store->Wait(); !s.ok()) return Fail(s, "store wait");

    auto hit = e.Lookup(*ns, tokens);
    if (!hit.ok()) return Fail(hit.status(), "lookup");
    if (hit->matched_tokens != 64) return Fail(kvtier::Status::NotFound("not cached"), "lookup");

    std::vector<std::vector<std::byte>> dst(4, std::vector<std::byte>(e.block_bytes()));
    std::vector<std::span<std::byte>> dst_spans(dst.begin(), dst.end());
    auto load = e.Load(*ns, tokens, dst_spans);
    if (!load.ok()) return Fail(load.status(), "load");
    for (uint32_t layer = 0; layer < e.layout().layers; ++layer) {
      if (kvtier::Status s = load->WaitLayer(layer); !s.ok()) return Fail(s, "load layer");
      // Attention for `layer` could run here while later layers still arrive.
    }
    if (dst != src) return Fail(kvtier::Status::Corruption("bytes differ"), "load");
    if (kvtier::Status s = e.Flush(); !s.ok()) return Fail(s, "flush");
    std::printf("stored and loaded %zu chunks; %llu blocks stored\n", load->chunks(),
                static_cast<unsigned long long>(e.Stats().store_blocks));
  }

  // A new engine on the same directory serves the chunks from the SSD.
  auto engine = kvtier::api::Engine::Open(Options(argv[1]));
  if (!engine.ok()) return Fail(engine.status(), "reopen");
  auto ns = (*engine)->MakeNamespace("tenant-a");
  if (!ns.ok()) return Fail(ns.status(), "namespace");
  auto hit = (*engine)->Lookup(*ns, tokens);
  if (!hit.ok()) return Fail(hit.status(), "lookup after reopen");
  if (hit->matched_tokens != 64 || hit->chunk_tiers.front() != kvtier::api::TierKind::kSsd) {
    return Fail(kvtier::Status::NotFound("not on the SSD after reopen"), "lookup");
  }
  std::printf("after reopen: %zu tokens cached, first chunk in %s\n", hit->matched_tokens,
              std::string(kvtier::api::TierKindName(hit->chunk_tiers.front())).c_str());
  return 0;
}
