// Load: copies cached blocks into the caller's buffers with one completion per layer.
//
// The plan is made under the engine mutex: each block's source is its fastest readable memory
// copy (pinned until the handle completes, so it cannot be evicted mid-copy), else the first
// local tier below memory that contains it, else the first best-effort tier (read without asking
// first: a miss costs one read). Work is issued layer-major, so the pool and the copy threads
// finish layer 0 first:
//   - memory sources: DeviceTier::Copy (device slot -> dst kDeviceToDevice, host/CXL slot -> dst
//     kHostToDevice); without a device tier, a memcpy task on the worker pool;
//   - sources below memory, per tier: worker tasks of at most kLoadStagingBatchMax blocks lease
//     staging buffers and issue the read (Tier::ReadBatch) without waiting for it; when the tier
//     answered, a completion thread checks the tier's verdict, decodes into dst, optionally
//     promotes to host and completes the layer's task (LoadFromTier, engine_lower.cc).
// A block that cannot be served makes its layer NotFound (fail closed: recompute it).
#include <cstring>

#include "core/assert.h"
#include "engine/engine_impl.h"

namespace kvtier {

class LoadHandleImpl final : public LoadHandle {
 public:
  LoadHandleImpl(EngineImpl* engine, uint32_t layers, size_t chunks)
      : engine_(engine), chunks_(chunks), layers_(layers) {
    engine_->HandleOpened();
  }
  ~LoadHandleImpl() override {
    Wait().IgnoreError();
    engine_->HandleClosed();
  }

  Status WaitLayer(uint32_t layer) override KV_EXCLUDES(mu_);
  bool LayerReady(uint32_t layer) override KV_EXCLUDES(mu_);
  Status Wait() override KV_EXCLUDES(mu_);
  size_t chunks() const override { return chunks_; }

  // Set up before the handle is returned (single-threaded then).
  std::vector<std::vector<CopyEvent>> events;  // Per layer.
  std::vector<BlockKey> pinned;                // Released once every layer completed.

  void AddTasks(uint32_t layer, uint32_t n) KV_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    layers_[layer].tasks_pending += n;
  }
  void TaskDone(uint32_t layer, const Status& s) KV_EXCLUDES(mu_);

 private:
  struct Layer {
    uint32_t tasks_pending = 0;
    Status status;
    bool failure_counted = false;
  };

  EngineImpl* const engine_;
  const size_t chunks_;
  Mutex mu_;
  CondVar done_;
  std::vector<Layer> layers_ KV_GUARDED_BY(mu_);
  bool released_ KV_GUARDED_BY(mu_) = false;
};

void LoadHandleImpl::TaskDone(uint32_t layer, const Status& s) {
  MutexLock lock(&mu_);
  Layer& l = layers_[layer];
  if (!s.ok() && l.status.ok()) l.status = s;
  KV_CHECK(l.tasks_pending > 0);
  --l.tasks_pending;
  if (l.tasks_pending == 0) done_.SignalAll();
}

Status LoadHandleImpl::WaitLayer(uint32_t layer) {
  if (layer >= events.size()) return Status::InvalidArgument("layer out of range");
  Status event_status;
  for (const CopyEvent& e : events[layer]) {
    const Status s = e.Wait();
    if (!s.ok() && event_status.ok()) event_status = s;
  }
  bool count_failure = false;
  Status result;
  {
    MutexLock lock(&mu_);
    Layer& l = layers_[layer];
    while (l.tasks_pending != 0) done_.Wait(&mu_);
    if (!event_status.ok() && l.status.ok()) {
      l.status = Status::NotFound("copy failed: " + event_status.ToString());
    }
    if (!l.status.ok() && !l.failure_counted) {
      l.failure_counted = true;
      count_failure = true;
    }
    result = l.status;
  }
  if (count_failure) engine_->CountLoadFailure();
  return result;
}

bool LoadHandleImpl::LayerReady(uint32_t layer) {
  if (layer >= events.size()) return false;
  for (const CopyEvent& e : events[layer]) {
    if (!e.Ready()) return false;
  }
  MutexLock lock(&mu_);
  return layers_[layer].tasks_pending == 0;
}

Status LoadHandleImpl::Wait() {
  Status first;
  for (uint32_t l = 0; l < events.size(); ++l) {
    const Status s = WaitLayer(l);
    if (!s.ok() && first.ok()) first = s;
  }
  bool release = false;
  {
    MutexLock lock(&mu_);
    release = !released_;
    released_ = true;
  }
  if (release && !pinned.empty()) engine_->Unpin(pinned);
  return first;
}

namespace {

Status ValidateLoadArgs(const KvLayout& layout, size_t full_chunks,
                        std::span<const std::span<std::byte>> dst) {
  if (dst.size() % layout.layers != 0) {
    return Status::InvalidArgument(
        "dst: " + std::to_string(dst.size()) +
        " spans is not a multiple of layers=" + std::to_string(layout.layers));
  }
  if (dst.size() / layout.layers > full_chunks) {
    return Status::InvalidArgument("dst: " + std::to_string(dst.size() / layout.layers) +
                                   " chunks but tokens hold only " + std::to_string(full_chunks) +
                                   " full chunks");
  }
  for (size_t i = 0; i < dst.size(); ++i) {
    if (dst[i].size() != layout.BlockBytes()) {
      return Status::InvalidArgument(
          "dst[" + std::to_string(i) + "]: " + std::to_string(dst[i].size()) +
          " bytes, want BlockBytes=" + std::to_string(layout.BlockBytes()));
    }
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<LoadHandle>> EngineImpl::Load(const Namespace& ns,
                                                     std::span<const uint32_t> tokens,
                                                     std::span<const std::span<std::byte>> dst) {
  const uint32_t layers = options_.layout.layers;
  KV_ASSIGN_OR_RETURN(std::vector<Hash256> chunks,
                      ChunkHashes(ns.digest, tokens, options_.layout.block_tokens));
  KV_RETURN_IF_ERROR(ValidateLoadArgs(options_.layout, chunks.size(), dst));
  const size_t chunk_count = dst.size() / layers;
  auto handle = std::make_unique<LoadHandleImpl>(this, layers, chunk_count);
  handle->events.resize(layers);
  // Layer-major plan: items[layer] lists that layer's blocks; missing[layer] counts misses.
  std::vector<std::vector<LoadItem>> items(layers);
  std::vector<uint32_t> missing(layers, 0);
  const size_t network = FirstBestEffort();
  {
    MutexLock lock(&mu_);
    ++stats_.loads;
    const uint64_t now = NowWallUs();
    for (uint32_t l = 0; l < layers; ++l) {
      for (size_t c = 0; c < chunk_count; ++c) {
        LoadItem item{.key = {.chunk_hash = chunks[c], .layer = l}, .dst = dst[c * layers + l]};
        std::optional<MemTier> t = ReadableTier(item.key, now);
        if (t.has_value()) {
          table_.Pin(item.key);
          table_.Touch(item.key, *t);
          item.tier = *t;
          item.slot = table_.Find(item.key)->slot(*t);
          handle->pinned.push_back(item.key);
          ++counters_[TierIndex(*t)].hits;
          CountUsefulPromotion(item.key);
        } else if (FindBelow(item.key, &item.below, nullptr)) {
          ++counters_[LowerCounters(item.below)].hits;
        } else if (network != kFromMemory) {
          item.below = network;  // Counted as a hit when the read succeeds.
        } else {
          ++missing[l];
          continue;
        }
        ++stats_.load_blocks;
        items[l].push_back(item);
      }
    }
  }
  for (uint32_t l = 0; l < layers; ++l) {
    if (missing[l] != 0) {
      // Nothing to copy for the absent blocks: the layer fails closed.
      handle->AddTasks(l, 1);
      handle->TaskDone(l, Status::NotFound(std::to_string(missing[l]) + " block(s) of layer " +
                                           std::to_string(l) + " are not cached"));
    }
    IssueLayer(handle.get(), l, items[l]);
  }
  return std::unique_ptr<LoadHandle>(std::move(handle));
}

void EngineImpl::IssueLayer(LoadHandleImpl* handle, uint32_t layer, std::vector<LoadItem>& items) {
  std::vector<CopyRegion> from_device;
  std::vector<CopyRegion> from_host;
  std::vector<std::vector<LoadItem>> from_below(tiers_.size());
  for (const LoadItem& item : items) {
    if (item.below != kFromMemory) {
      from_below[item.below].push_back(item);
      continue;
    }
    const CopyRegion r{
        .dst = item.dst.data(), .src = SlotData(item.tier, item.slot), .bytes = block_bytes_};
    (item.tier == MemTier::kDevice ? from_device : from_host).push_back(r);
  }
  if (device_ != nullptr) {
    if (!from_device.empty()) {
      handle->events[layer].push_back(device_->Copy(CopyKind::kDeviceToDevice, from_device));
    }
    if (!from_host.empty()) {
      handle->events[layer].push_back(device_->Copy(CopyKind::kHostToDevice, from_host));
    }
  } else if (!from_host.empty()) {
    handle->AddTasks(layer, 1);
    RunOnPool([handle, layer, regions = std::move(from_host)] {
      for (const CopyRegion& r : regions) std::memcpy(r.dst, r.src, r.bytes);
      handle->TaskDone(layer, Status::Ok());
    });
  }
  for (size_t below = 0; below < from_below.size(); ++below) {
    const std::vector<LoadItem>& all = from_below[below];
    for (size_t base = 0; base < all.size(); base += kLoadStagingBatchMax) {
      const size_t n = std::min<size_t>(kLoadStagingBatchMax, all.size() - base);
      const std::span<const LoadItem> part = std::span(all).subspan(base, n);
      std::vector<LoadItem> batch(part.begin(), part.end());
      handle->AddTasks(layer, 1);
      // The worker only leases staging buffers and issues the read; the layer's task completes
      // on the completion thread that decodes the batch.
      RunOnPool([this, handle, layer, below, batch = std::move(batch)] {
        LoadFromTier(below, batch, [handle, layer](Status s) { handle->TaskDone(layer, s); });
      });
    }
  }
}

void EngineImpl::PromoteCopy(const BlockKey& key, std::span<const std::byte> raw, size_t below) {
  uint32_t slot = 0;
  {
    MutexLock lock(&mu_);
    if (table_.Find(key) != nullptr) return;  // In memory already, or on its way there.
    Result<uint32_t> s = AllocateClean(MemTier::kHost);
    if (!s.ok()) return;  // Promotion is optional: never force a write-back for it.
    slot = *s;
    table_.Reserve(key, MemTier::kHost, slot);
    // A local tier tells the block's expiry; a best-effort tier's is not asked (the tier enforces
    // its TTL): the host copy then has none.
    uint64_t expiry = 0;
    if (!tiers_[below].best_effort) {
      TierContains c{.key = key};
      if (tiers_[below].tier->Contains(std::span(&c, 1)).ok() && c.present) {
        expiry = c.expiry_wall_us;
        table_.SetExpiry(key, expiry);
      }
    }
    clocks_[TierIndex(MemTier::kHost)]->Assign(slot, key, expiry != 0);
  }
  std::memcpy(host_->SlotData(slot), raw.data(), block_bytes_);
  MutexLock lock(&mu_);
  table_.Publish(key, MemTier::kHost);
  ++counters_[TierIndex(MemTier::kHost)].promotions;
}

void EngineImpl::RunOnPool(std::function<void()> task) {
  // Submit blocks while the queue is full (back-pressure on the caller). After shutdown began the
  // task runs inline so its handle still completes.
  auto shared = std::make_shared<std::function<void()>>(std::move(task));
  if (!pool_->Submit([shared] { (*shared)(); }).ok()) (*shared)();
}

}  // namespace kvtier
