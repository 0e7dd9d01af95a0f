#include "engine/paged_transfer.h"

#include <cstring>
#include <string>
#include <utility>

namespace kvtier {
namespace {

// Staging for `chunks` chunks of every layer (from the cache's StagingSource when it has room,
// else the cache's pool), as spans indexed [chunk * layers + layer].
Status AllocateBlocks(const PagedKvCache& cache, size_t chunks, AlignedBuffer* staging,
                      std::span<std::byte>* lent, std::vector<std::span<std::byte>>* blocks) {
  const KvLayout& layout = cache.layout();
  const uint64_t block_bytes = layout.BlockBytes();
  const size_t count = chunks * layout.layers;
  if (count == 0) return Status::InvalidArgument("no chunks to move");
  std::span<std::byte> area;
  if (cache.staging_source() != nullptr) {
    Result<std::span<std::byte>> r = cache.staging_source()->Acquire(count * block_bytes);
    if (r.ok()) area = *lent = *r;
  }
  if (area.empty()) {
    KV_ASSIGN_OR_RETURN(*staging, cache.AcquireStaging(count * block_bytes));
    area = staging->capacity_span();
  }
  blocks->clear();
  blocks->reserve(count);
  for (size_t i = 0; i < count; ++i) {
    blocks->push_back(area.subspan(i * block_bytes, block_bytes));
  }
  return Status::Ok();
}

void ReleaseBlocks(const PagedKvCache& cache, AlignedBuffer* staging,
                   std::span<std::byte>* lent) {
  if (!lent->empty()) {
    cache.staging_source()->Release(*lent);
    *lent = {};
  } else {
    cache.ReleaseStaging(std::move(*staging));
  }
}

}  // namespace

Result<std::shared_ptr<const PagedKvCache>> PagedKvCache::Create(
    std::vector<PagedLayer> layers, const KvLayout& layout,
    std::shared_ptr<StagingSource> source) {
  if (layers.size() != layout.layers) {
    return Status::InvalidArgument("the paged cache has " + std::to_string(layers.size()) +
                                   " attention layers but the kvtier layout has " +
                                   std::to_string(layout.layers));
  }
  const PagedGeometry& g0 = layers[0].geometry;
  for (size_t i = 0; i < layers.size(); ++i) {
    const PagedGeometry& g = layers[i].geometry;
    const std::string name = "paged layer " + std::to_string(i);
    if (g.kv_heads != layout.kv_heads || g.head_dim != layout.head_dim) {
      return Status::InvalidArgument(name + " has " + std::to_string(g.kv_heads) + " kv heads of " +
                                     std::to_string(g.head_dim) + " but the kvtier layout has " +
                                     std::to_string(layout.kv_heads) + " of " +
                                     std::to_string(layout.head_dim));
    }
    if ((g.kind == PagedLayoutKind::kLatent) != (layout.kind == LayoutKind::kLatent)) {
      return Status::InvalidArgument(name + " is " + PagedLayoutName(g.kind) +
                                     " pages but the kvtier layout's kind is " +
                                     std::string(LayoutKindName(layout.kind)));
    }
    if (g.elem_bytes != DTypeSizeBytes(layout.dtype)) {
      return Status::InvalidArgument(name + " has " + std::to_string(g.elem_bytes) +
                                     "-byte elements but the kvtier layout's dtype is " +
                                     std::string(DTypeName(layout.dtype)));
    }
    if (g.kind != g0.kind || g.page_tokens != g0.page_tokens) {
      return Status::InvalidArgument(name + " differs in layout or page size from layer 0");
    }
  }
  return std::shared_ptr<const PagedKvCache>(
      new PagedKvCache(std::move(layers), layout, std::move(source)));
}

Result<AlignedBuffer> PagedKvCache::AcquireStaging(size_t bytes) const {
  {
    MutexLock lock(&staging_mu_);
    // The smallest kept buffer that is large enough.
    size_t best = staging_.size();
    for (size_t i = 0; i < staging_.size(); ++i) {
      if (staging_[i].capacity() >= bytes &&
          (best == staging_.size() || staging_[i].capacity() < staging_[best].capacity())) {
        best = i;
      }
    }
    if (best != staging_.size()) {
      AlignedBuffer b = std::move(staging_[best]);
      staging_.erase(staging_.begin() + static_cast<std::ptrdiff_t>(best));
      return b;
    }
  }
  return AlignedBuffer::Allocate(bytes);
}

void PagedKvCache::ReleaseStaging(AlignedBuffer buffer) const {
  if (buffer.capacity() == 0) return;
  MutexLock lock(&staging_mu_);
  size_t kept = buffer.capacity();
  for (const AlignedBuffer& b : staging_) kept += b.capacity();
  if (staging_.size() < kStagingKept && kept <= kStagingKeptBytes) {
    staging_.push_back(std::move(buffer));
  }  // Otherwise freed here.
}

Status PagedKvCache::WarmStaging(size_t bytes) const {
  if (bytes == 0) return Status::Ok();
  if (bytes > kStagingKeptBytes) {
    return Status::InvalidArgument("warm staging of " + std::to_string(bytes) +
                                   " bytes is above the pool's " +
                                   std::to_string(kStagingKeptBytes));
  }
  if (source_ != nullptr) {  // The shared region's pages stay in once touched.
    Result<std::span<std::byte>> lent = source_->Acquire(bytes);
    if (lent.ok()) {
      std::memset(lent->data(), 0, lent->size());
      source_->Release(*lent);
      return Status::Ok();
    }
  }
  KV_ASSIGN_OR_RETURN(AlignedBuffer buffer, AlignedBuffer::Allocate(bytes));
  std::memset(buffer.data(), 0, buffer.capacity());  // Fault every page in now.
  ReleaseStaging(std::move(buffer));
  return Status::Ok();
}

Status PagedKvCache::CheckPages(std::span<const int32_t> pages, size_t chunks) const {
  if (pages.size() < chunks * pages_per_chunk()) {
    return Status::InvalidArgument(std::to_string(chunks) + " chunks need " +
                                   std::to_string(chunks * pages_per_chunk()) + " pages; got " +
                                   std::to_string(pages.size()));
  }
  for (size_t i = 0; i < chunks * pages_per_chunk(); ++i) {
    if (pages[i] < 0 || static_cast<uint64_t>(pages[i]) >= layers_[0].pages) {
      return Status::InvalidArgument("page " + std::to_string(pages[i]) + " (entry " +
                                     std::to_string(i) + ") is out of range: the cache has " +
                                     std::to_string(layers_[0].pages) + " pages");
    }
  }
  return Status::Ok();
}

Result<std::unique_ptr<PagedLoad>> PagedLoad::Start(Engine& engine,
                                                    std::shared_ptr<const PagedKvCache> cache,
                                                    const Namespace& ns,
                                                    std::span<const uint32_t> tokens,
                                                    std::vector<int32_t> pages, size_t first_chunk,
                                                    size_t chunks) {
  if (first_chunk >= chunks) {
    return Status::InvalidArgument("nothing to load: first chunk " + std::to_string(first_chunk) +
                                   " of " + std::to_string(chunks));
  }
  KV_RETURN_IF_ERROR(cache->CheckPages(pages, chunks));
  std::unique_ptr<PagedLoad> load(new PagedLoad());
  load->first_chunk_ = first_chunk;
  load->chunks_ = chunks;
  KV_RETURN_IF_ERROR(AllocateBlocks(*cache, chunks, &load->staging_, &load->lent_, &load->blocks_));
  Result<std::unique_ptr<LoadHandle>> handle = engine.Load(ns, tokens, load->blocks_);
  if (!handle.ok()) return handle.status();
  load->handle_ = std::move(*handle);
  load->cache_ = std::move(cache);
  load->pages_ = std::move(pages);
  load->done_.assign(load->cache_->layout().layers, 0);
  load->status_.assign(load->cache_->layout().layers, Status::Ok());
  return load;
}

PagedLoad::~PagedLoad() {
  handle_.reset();  // Waits for the engine's copies into the staging.
  if (cache_) ReleaseBlocks(*cache_, &staging_, &lent_);
}

Status PagedLoad::WaitLayer(uint32_t layer) {
  if (layer >= done_.size()) {
    return Status::InvalidArgument("layer " + std::to_string(layer) + " is out of range (layers " +
                                   std::to_string(done_.size()) + ")");
  }
  if (done_[layer] != 0) return status_[layer];
  Status s = handle_->WaitLayer(layer);
  if (s.ok()) {
    const uint32_t layers = cache_->layout().layers;
    const uint32_t ppb = cache_->pages_per_chunk();
    std::vector<std::span<const std::byte>> src;
    src.reserve(chunks_ - first_chunk_);
    for (size_t c = first_chunk_; c < chunks_; ++c) src.push_back(blocks_[c * layers + layer]);
    const std::span<const int32_t> table =
        std::span<const int32_t>(pages_).subspan(first_chunk_ * ppb, (chunks_ - first_chunk_) * ppb);
    s = ScatterPages(cache_->layer(layer), cache_->layout().block_tokens, table, src);
    if (s.ok()) bytes_scattered_ += src.size() * cache_->layout().BlockBytes();
  }
  done_[layer] = s.ok() ? 1 : 2;
  status_[layer] = s;
  return s;
}

Status PagedLoad::Wait() {
  Status first = Status::Ok();
  for (uint32_t l = 0; l < done_.size(); ++l) {
    Status s = WaitLayer(l);
    if (first.ok() && !s.ok()) first = s;
  }
  return first;
}

Result<std::unique_ptr<PagedSave>> PagedSave::Create(std::shared_ptr<const PagedKvCache> cache,
                                                     std::vector<int32_t> pages, size_t chunks,
                                                     size_t first_chunk) {
  if (first_chunk >= chunks) {
    return Status::InvalidArgument("nothing to save: first chunk " + std::to_string(first_chunk) +
                                   " of " + std::to_string(chunks));
  }
  KV_RETURN_IF_ERROR(cache->CheckPages(pages, chunks));
  std::unique_ptr<PagedSave> save(new PagedSave());
  save->chunks_ = chunks;
  save->first_chunk_ = first_chunk;
  KV_RETURN_IF_ERROR(AllocateBlocks(*cache, chunks - first_chunk, &save->staging_,
                                    &save->lent_, &save->blocks_));
  save->gathered_.assign(cache->layout().layers, 0);
  save->cache_ = std::move(cache);
  save->pages_ = std::move(pages);
  return save;
}

PagedSave::~PagedSave() {
  handle_.reset();  // Waits for the store, which reads the staging.
  if (cache_) ReleaseBlocks(*cache_, &staging_, &lent_);
}

Status PagedSave::GatherLayer(uint32_t layer) {
  if (layer >= gathered_.size()) {
    return Status::InvalidArgument("layer " + std::to_string(layer) + " is out of range (layers " +
                                   std::to_string(gathered_.size()) + ")");
  }
  if (handle_) return Status::Aborted("the save was committed");
  if (gathered_[layer] != 0) return Status::Ok();
  const uint32_t layers = cache_->layout().layers;
  const size_t n = chunks_ - first_chunk_;
  std::vector<std::span<std::byte>> dst;
  dst.reserve(n);
  for (size_t c = 0; c < n; ++c) dst.push_back(blocks_[c * layers + layer]);
  const uint32_t ppb = cache_->pages_per_chunk();
  const std::span<const int32_t> table =
      std::span<const int32_t>(pages_).subspan(first_chunk_ * ppb, n * ppb);
  KV_RETURN_IF_ERROR(GatherPages(cache_->layer(layer), cache_->layout().block_tokens, table, dst));
  gathered_[layer] = 1;
  bytes_gathered_ += n * cache_->layout().BlockBytes();
  return Status::Ok();
}

Status PagedSave::Commit(Engine& engine, const Namespace& ns, std::span<const uint32_t> tokens,
                         const StoreOptions& options) {
  if (handle_) return Status::Aborted("the save was committed");
  for (uint32_t l = 0; l < gathered_.size(); ++l) KV_RETURN_IF_ERROR(GatherLayer(l));
  std::vector<std::span<const std::byte>> src(blocks_.begin(), blocks_.end());
  StoreOptions from = options;
  from.first_chunk = first_chunk_;
  Result<std::unique_ptr<StoreHandle>> handle = engine.Store(ns, tokens, src, from);
  if (!handle.ok()) return handle.status();
  handle_ = std::move(*handle);
  return Status::Ok();
}

bool PagedSave::Done() { return result_.has_value() || (handle_ && handle_->Done()); }

Status PagedSave::Wait() {
  if (!handle_) return Status::Aborted("the save was not committed");
  if (!result_) result_ = handle_->Wait();
  return *result_;
}

size_t PagedSave::chunks_stored() { return handle_ && result_ ? handle_->chunks_stored() : 0; }

}  // namespace kvtier
