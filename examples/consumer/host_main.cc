// kvtier from C++ with the host-only library (kvtier::kvtier_host, libkvtier_host.so): an engine
// over host memory alone stores one chunk and loads it back; an SSD tier is refused with
// NotSupported, since this library links neither the SSD nor the remote tier, and so are keys.
// Usage: kvtier_consumer_host
#include <kvtier/engine.h>

#include <cstdio>
#include <span>
#include <vector>

namespace {

int Report(const kvtier::Status& status, const char* step) {
  std::fprintf(stderr, "kvtier_consumer_host: %s: %s\n", step, status.ToString().c_str());
  return 1;
}

}  // namespace

int main() {
  kvtier::api::EngineOptions options{
      .layout = {.layers = 1,
                 .kv_heads = 2,
                 .head_dim = 32,
                 .dtype = kvtier::api::DType::kF16,
                 .block_tokens = 16},
      .host = {.capacity_bytes = 1 << 20}};
  auto opened = kvtier::api::Engine::Open(options);
  if (!opened.ok()) return Report(opened.status(), "open");
  kvtier::api::Engine& engine = **opened;
  auto ns = engine.MakeNamespace("host-only");
  if (!ns.ok()) return Report(ns.status(), "namespace");

  const std::vector<uint32_t> tokens(16, 3);  // One full chunk: one block (one layer).
  std::vector<std::byte> block(engine.block_bytes());
  for (size_t i = 0; i < block.size(); ++i) block[i] = static_cast<std::byte>(i * 31 + 5);
  const std::span<const std::byte> src[] = {block};
  auto store = engine.Store(*ns, tokens, src);
  if (!store.ok()) return Report(store.status(), "store");
  if (kvtier::Status s = store->Wait(); !s.ok()) return Report(s, "store wait");

  std::vector<std::byte> back(engine.block_bytes());
  const std::span<std::byte> dst[] = {back};
  auto load = engine.Load(*ns, tokens, dst);
  if (!load.ok()) return Report(load.status(), "load");
  if (kvtier::Status s = load->WaitLayer(0); !s.ok()) return Report(s, "load wait");
  if (back != block) return Report(kvtier::Status::Corruption("bytes differ"), "load");

  options.ssd = kvtier::api::SsdTierOptions{.dirs = {"unused"}};
  auto with_ssd = kvtier::api::Engine::Open(options);
  if (with_ssd.ok() || !with_ssd.status().IsNotSupported()) {
    return Report(with_ssd.status(), "an SSD tier should be NotSupported here");
  }
  // Keys seal only the SSD and remote tiers: refused too, before any key is read.
  options.ssd->keys.text = "not read";
  auto sealed = kvtier::api::Engine::Open(options);
  if (sealed.ok() || !sealed.status().IsNotSupported()) {
    return Report(sealed.status(), "SSD keys should be NotSupported here");
  }
  std::printf("host-only engine: stored and loaded %zu chunk; SSD refused: %s; keys refused: %s\n",
              load->chunks(), with_ssd.status().ToString().c_str(),
              sealed.status().ToString().c_str());
  return 0;
}
