#include "runtime/cached_prefill.h"

#include <chrono>
#include <memory>
#include <string>

namespace kvtier::runtime {
namespace {

uint64_t NowUs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// A KvBlockSource over the sequence's blocks that, for the chunks being loaded, waits for the
// Load's completion of a layer before handing out any block of that layer.
class LayerGatedKv final : public KvBlockSource {
 public:
  LayerGatedKv(InMemoryKvBlocks& inner, LoadHandle* load, uint32_t loaded_chunks, uint32_t layers)
      : inner_(inner), load_(load), loaded_chunks_(loaded_chunks), waited_(layers, false) {}

  const KvLayout& Layout() const override { return inner_.Layout(); }
  uint32_t CapacityTokens() const override { return inner_.CapacityTokens(); }
  Result<std::span<const uint16_t>> Block(uint32_t layer, uint32_t chunk_index) override {
    KV_RETURN_IF_ERROR(Gate(layer, chunk_index));
    return inner_.Block(layer, chunk_index);
  }
  Result<std::span<uint16_t>> MutableBlock(uint32_t layer, uint32_t chunk_index) override {
    KV_RETURN_IF_ERROR(Gate(layer, chunk_index));
    return inner_.MutableBlock(layer, chunk_index);
  }
  // Time spent in the gate waiting for layers' completions.
  uint64_t wait_us() const { return wait_us_; }

 private:
  Status Gate(uint32_t layer, uint32_t chunk_index) {
    if (load_ == nullptr || chunk_index >= loaded_chunks_ || layer >= waited_.size() ||
        waited_[layer]) {
      return Status::Ok();
    }
    waited_[layer] = true;
    const uint64_t t0 = NowUs();
    Status s = load_->WaitLayer(layer);
    wait_us_ += NowUs() - t0;
    return s.WithContext("cached KV of layer " + std::to_string(layer));
  }

  InMemoryKvBlocks& inner_;
  LoadHandle* load_;
  uint32_t loaded_chunks_;
  std::vector<bool> waited_;
  uint64_t wait_us_ = 0;
};

// Starts loading the first `chunks` chunks into `kv`; the handle completes per layer.
Result<std::unique_ptr<LoadHandle>> StartLoad(Engine& engine, const Namespace& ns,
                                              std::span<const uint32_t> prompt, size_t chunks,
                                              InMemoryKvBlocks& kv) {
  const uint32_t layers = kv.Layout().layers;
  std::vector<std::span<std::byte>> dst;
  dst.reserve(chunks * layers);
  for (uint32_t c = 0; c < chunks; ++c) {
    for (uint32_t l = 0; l < layers; ++l) {
      KV_ASSIGN_OR_RETURN(std::span<uint16_t> block, kv.MutableBlock(l, c));
      dst.push_back(std::as_writable_bytes(block));
    }
  }
  return engine.Load(ns, prompt, dst);
}

}  // namespace

Result<CachedPrefillStats> CachedPrefill(Model& model, Engine& engine, const Namespace& ns,
                                         std::span<const uint32_t> prompt, InMemoryKvBlocks& kv,
                                         const CachedPrefillOptions& options,
                                         std::vector<float>* logits) {
  if (prompt.empty()) return Status::InvalidArgument("CachedPrefill: empty prompt");
  const KvLayout& layout = kv.Layout();
  if (LayoutDigest(layout) != LayoutDigest(engine.options().layout)) {
    return Status::InvalidArgument("CachedPrefill: the KV blocks' layout " + layout.ToString() +
                                   " differs from the engine's " +
                                   engine.options().layout.ToString());
  }
  CachedPrefillStats stats;
  stats.prompt_tokens = prompt.size();
  uint64_t t0 = NowUs();
  KV_ASSIGN_OR_RETURN(LookupResult hit, engine.Lookup(ns, prompt));
  stats.lookup_us = NowUs() - t0;
  const size_t chunks = hit.matched_tokens / layout.block_tokens;
  stats.chunk_tiers = hit.chunk_tiers;

  t0 = NowUs();
  Status computed = Status::NotFound("nothing cached");
  if (chunks > 0) {
    // At least the last token is computed: its logits are the output. Recomputing it rewrites
    // the same K/V at its position, which the gate orders after the load of its layer.
    const size_t start =
        hit.matched_tokens < prompt.size() ? hit.matched_tokens : prompt.size() - 1;
    Result<std::unique_ptr<LoadHandle>> load = StartLoad(engine, ns, prompt, chunks, kv);
    if (load.ok()) {
      LayerGatedKv gated(kv, load->get(), static_cast<uint32_t>(chunks), layout.layers);
      computed = model.Forward(prompt.subspan(start), static_cast<uint32_t>(start), gated,
                               options.forward, logits);
      const uint64_t w0 = NowUs();
      const Status all = (*load)->Wait();
      stats.load_wait_us = gated.wait_us() + (NowUs() - w0);
      if (computed.ok() && !all.ok()) computed = all;
      if (computed.ok()) {
        stats.cached_tokens = chunks * layout.block_tokens;
        stats.computed_tokens = prompt.size() - start;
      }
    } else {
      computed = load.status();
    }
    // A cancelled forward pass (ForwardOptions::cancelled) ends the prefill; it is no cache
    // problem to recompute around.
    if (computed.IsAborted()) return computed;
    stats.fell_back = !computed.ok();
  }
  if (!computed.ok()) {
    // Nothing usable was cached (or a load failed): compute the whole prompt.
    kv.Clear();
    stats.cached_tokens = 0;
    KV_RETURN_IF_ERROR(model.Forward(prompt, 0, kv, options.forward, logits));
    stats.computed_tokens = prompt.size();
  }
  stats.compute_us = NowUs() - t0;

  if (options.store_new_chunks) {
    t0 = NowUs();
    // The prompt's KV and logits are right whatever the cache did with them: a store that failed
    // (the SSD full or failing, every slot pinned) is the caller's to report (store_status), not
    // a failed prefill.
    Result<size_t> stored = StoreKvChunks(engine, ns, prompt, kv, options.store);
    if (stored.ok()) {
      stats.stored_chunks = *stored;
    } else {
      stats.store_status = stored.status();
    }
    stats.store_us = NowUs() - t0;
  }
  return stats;
}

Result<size_t> StoreKvChunks(Engine& engine, const Namespace& ns, std::span<const uint32_t> tokens,
                             InMemoryKvBlocks& kv, const StoreOptions& options) {
  const KvLayout& layout = kv.Layout();
  const size_t chunks = tokens.size() / layout.block_tokens;
  if (chunks == 0) return size_t{0};
  std::vector<std::span<const std::byte>> src;
  src.reserve(chunks * layout.layers);
  for (uint32_t c = 0; c < chunks; ++c) {
    for (uint32_t l = 0; l < layout.layers; ++l) {
      KV_ASSIGN_OR_RETURN(std::span<const uint16_t> block, kv.Block(l, c));
      src.push_back(std::as_bytes(block));
    }
  }
  KV_ASSIGN_OR_RETURN(std::unique_ptr<StoreHandle> store,
                      engine.Store(ns, tokens.first(chunks * layout.block_tokens), src, options));
  KV_RETURN_IF_ERROR(store->Wait());
  return store->chunks_stored();
}

}  // namespace kvtier::runtime
