// Moves one request's KV between an inference engine's paged cache in host memory and the
// Engine, in C++ from end to end: PagedLoad loads the request's cached chunks into staging blocks
// and scatters each layer into the engine's pages as soon as that layer has arrived; PagedSave
// gathers the pages layer by layer into staging blocks and stores them. The inference engine's
// connector (bindings/python/kvtier/vllm.py) only hands over page numbers.
//
//   PagedKvCache   the engine's layers (paged_kv.h), checked against the Engine's KvLayout once
//   PagedLoad      Engine::Load into staging; WaitLayer(l) waits for layer l, then scatters it
//   PagedSave      GatherLayer(l) for each layer, then Commit -> Engine::Store (asynchronous)
//
// Chunks and pages: kvtier chunk c (block_tokens tokens) lives in the pages
// pages[c * ppb, (c + 1) * ppb), ppb = ceil(block_tokens / page_tokens).
//
// Thread safety: a PagedKvCache is immutable and shared (its staging pool has its own lock). A PagedLoad or PagedSave is used by one
// thread at a time. Ownership: the caller keeps the engine's pages alive while a load or save
// touches them (until the load's last WaitLayer, or the save's last GatherLayer); the staging
// blocks belong to the load or save, and a save's staging lives until its store completed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/kv_layout.h"
#include "core/mutex.h"
#include "engine/engine.h"
#include "engine/paged_kv.h"

namespace kvtier {

class PagedKvCache {
 public:
  // InvalidArgument when the layer count, kv_heads, head_dim or element size differ from
  // `layout`'s, or the layers do not share one geometry.
  // `source` (may be null): the engine's zero-copy staging (Engine::staging_source), used for
  // loads and saves when it has room, the cache's own pool otherwise.
  static Result<std::shared_ptr<const PagedKvCache>> Create(
      std::vector<PagedLayer> layers, const KvLayout& layout,
      std::shared_ptr<StagingSource> source = nullptr);
  const std::shared_ptr<StagingSource>& staging_source() const { return source_; }
  const KvLayout& layout() const { return layout_; }
  const PagedLayer& layer(uint32_t i) const { return layers_[i]; }
  uint32_t page_tokens() const { return layers_[0].geometry.page_tokens; }
  uint32_t pages_per_chunk() const {
    return (layout_.block_tokens + page_tokens() - 1) / page_tokens();
  }
  // InvalidArgument unless `pages` covers `chunks` chunks.
  Status CheckPages(std::span<const int32_t> pages, size_t chunks) const;

  // Staging buffers of loads and saves are reused: a fresh 100 MB buffer costs tens of
  // milliseconds of page faults on first touch, as much as the copy it stages. At most
  // kStagingKept buffers (and kStagingKeptBytes) wait here between uses.
  Result<AlignedBuffer> AcquireStaging(size_t bytes) const KV_EXCLUDES(staging_mu_);
  void ReleaseStaging(AlignedBuffer buffer) const KV_EXCLUDES(staging_mu_);
  // Allocates a staging buffer of `bytes`, touches every page, and leaves it in the pool, so the
  // first load after a start does not pay the page faults (tens of ms for 100 MB). At most
  // kStagingKeptBytes.
  Status WarmStaging(size_t bytes) const KV_EXCLUDES(staging_mu_);
  static constexpr size_t kStagingKept = 4;
  static constexpr size_t kStagingKeptBytes = size_t{1} << 30;

 private:
  PagedKvCache(std::vector<PagedLayer> layers, const KvLayout& layout,
               std::shared_ptr<StagingSource> source)
      : layers_(std::move(layers)), layout_(layout), source_(std::move(source)) {}
  std::vector<PagedLayer> layers_;
  KvLayout layout_;
  std::shared_ptr<StagingSource> source_;
  mutable Mutex staging_mu_;
  mutable std::vector<AlignedBuffer> staging_ KV_GUARDED_BY(staging_mu_);
};

class PagedLoad {
 public:
  // Loads chunks [0, chunks) of `tokens` and will scatter chunks [first_chunk, chunks) into
  // `pages` (the request's pages from its first chunk on; those below first_chunk are the
  // engine's own and are not written). Engine::Load's errors (a chunk not cached) come back here.
  static Result<std::unique_ptr<PagedLoad>> Start(Engine& engine,
                                                  std::shared_ptr<const PagedKvCache> cache,
                                                  const Namespace& ns,
                                                  std::span<const uint32_t> tokens,
                                                  std::vector<int32_t> pages, size_t first_chunk,
                                                  size_t chunks);
  ~PagedLoad();  // Waits for the engine's copies into staging.
  PagedLoad(const PagedLoad&) = delete;
  PagedLoad& operator=(const PagedLoad&) = delete;

  // Waits until `layer` has arrived and is in the pages (OK), or returns why it is not (NotFound
  // after a failed verification: the pages of that layer were not written; recompute them). The
  // first call scatters; later calls return the same result.
  Status WaitLayer(uint32_t layer);
  // WaitLayer for every layer; the first error.
  Status Wait();
  size_t chunks() const { return chunks_; }
  size_t first_chunk() const { return first_chunk_; }
  uint64_t bytes_scattered() const { return bytes_scattered_; }

 private:
  PagedLoad() = default;
  std::shared_ptr<const PagedKvCache> cache_;
  std::vector<int32_t> pages_;
  size_t first_chunk_ = 0;
  size_t chunks_ = 0;
  AlignedBuffer staging_;
  std::span<std::byte> lent_;  // Staging from the cache's StagingSource instead of staging_.
  std::vector<std::span<std::byte>> blocks_;  // [chunk * layers + layer] into the staging.
  std::unique_ptr<LoadHandle> handle_;
  std::vector<uint8_t> done_;   // Per layer: 0 pending, 1 scattered, 2 failed.
  std::vector<Status> status_;  // Per layer, once done.
  uint64_t bytes_scattered_ = 0;
};

class PagedSave {
 public:
  // Staging for chunks [first_chunk, chunks) of every layer, gathered from `pages` (the request's
  // pages from its first chunk on). Chunks below first_chunk are the ones the caller knows are
  // cached (it just loaded them): they are neither copied nor stored again.
  static Result<std::unique_ptr<PagedSave>> Create(std::shared_ptr<const PagedKvCache> cache,
                                                   std::vector<int32_t> pages, size_t chunks,
                                                   size_t first_chunk = 0);
  ~PagedSave();  // Waits for the store (it reads the staging blocks).
  PagedSave(const PagedSave&) = delete;
  PagedSave& operator=(const PagedSave&) = delete;

  // Copies `layer` of every chunk out of the pages (once; later calls do nothing).
  Status GatherLayer(uint32_t layer);
  // Gathers the layers not gathered yet, then stores the chunks (Engine::Store, asynchronous).
  // The pages are free for the inference engine once Commit returned.
  Status Commit(Engine& engine, const Namespace& ns, std::span<const uint32_t> tokens,
                const StoreOptions& options = {});
  // After Commit: whether the store completed, and its result (Wait blocks).
  bool Done();
  Status Wait();
  size_t chunks() const { return chunks_; }
  size_t first_chunk() const { return first_chunk_; }
  size_t chunks_stored();  // After Wait: full chunks newly stored (cached ones skipped).
  uint64_t bytes_gathered() const { return bytes_gathered_; }

 private:
  PagedSave() = default;
  std::shared_ptr<const PagedKvCache> cache_;
  std::vector<int32_t> pages_;
  size_t chunks_ = 0;
  size_t first_chunk_ = 0;
  AlignedBuffer staging_;
  std::span<std::byte> lent_;
  std::vector<std::span<std::byte>> blocks_;
  std::vector<uint8_t> gathered_;
  std::unique_ptr<StoreHandle> handle_;
  std::optional<Status> result_;
  uint64_t bytes_gathered_ = 0;
};

}  // namespace kvtier
