// Load: copies cached blocks into the caller's buffers with one completion per layer.
//
// The plan is made under the engine mutex: each block's source is its fastest readable memory
// copy (pinned until the handle completes, so it cannot be evicted mid-copy) or the SSD. Work is
// issued layer-major, so the pool and the copy threads finish layer 0 first:
//   - memory sources: DeviceTier::Copy (device slot -> dst kDeviceToDevice, host/CXL slot -> dst
//     kHostToDevice); without a device tier, a memcpy task on the worker pool;
//   - SSD sources: worker tasks of at most kLoadStagingBatchMax blocks read into staging
//     buffers, the SSD tier verifies, the codec decodes into dst; optionally promoted to host;
//   - blocks in no local tier, with a remote tier: worker tasks of the same size Get them (the
//     store verifies), decode into dst and optionally promote to host (engine_remote.cc).
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
  {
    MutexLock lock(&mu_);
    ++stats_.loads;
    const uint64_t now = NowWallUs();
    for (uint32_t l = 0; l < layers; ++l) {
      for (size_t c = 0; c < chunk_count; ++c) {
        LoadItem item{.key = {.chunk_hash = chunks[c], .layer = l}, .dst = dst[c * layers + l]};
        std::optional<MemTier> t = ReadableTier(item.key, now);
        if (t.has_value()) {
          BlockEntry* e = index_.Find(item.key);
          ++e->pins;
          e->referenced[TierIndex(*t)] = true;
          item.tier = *t;
          item.slot = e->slot[TierIndex(*t)];
          handle->pinned.push_back(item.key);
          ++counters_[TierIndex(*t)].hits;
          CountUsefulPromotion(e);
        } else if (ssd_ != nullptr && ssd_->Contains(item.key)) {
          item.from_ssd = true;
          ++counters_[kMemTiers].hits;
        } else if (remote_ != nullptr) {
          item.from_remote = true;  // Counted as a hit when the Get succeeds.
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
  std::vector<LoadItem> from_ssd;
  std::vector<LoadItem> from_remote;
  for (const LoadItem& item : items) {
    if (item.from_ssd || item.from_remote) {
      (item.from_ssd ? from_ssd : from_remote).push_back(item);
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
  for (size_t base = 0; base < from_ssd.size(); base += kLoadStagingBatchMax) {
    const size_t n = std::min<size_t>(kLoadStagingBatchMax, from_ssd.size() - base);
    const std::span<const LoadItem> part = std::span(from_ssd).subspan(base, n);
    std::vector<LoadItem> batch(part.begin(), part.end());
    handle->AddTasks(layer, 1);
    RunOnPool([this, handle, layer, batch = std::move(batch)] {
      handle->TaskDone(layer, LoadFromSsd(batch));
    });
  }
  for (size_t base = 0; base < from_remote.size(); base += kLoadStagingBatchMax) {
    const size_t n = std::min<size_t>(kLoadStagingBatchMax, from_remote.size() - base);
    const std::span<const LoadItem> part = std::span(from_remote).subspan(base, n);
    std::vector<LoadItem> batch(part.begin(), part.end());
    handle->AddTasks(layer, 1);
    RunOnPool([this, handle, layer, batch = std::move(batch)] {
      handle->TaskDone(layer, LoadFromRemote(batch));
    });
  }
}

Status EngineImpl::LoadFromSsd(std::span<const LoadItem> batch) {
  std::vector<SsdReadItem> reads(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    reads[i].key = batch[i].key;
    reads[i].dst = batch[i].dst;
  }
  ReadFromSsd(reads);
  Status first;
  uint64_t corrupt = 0;
  for (const SsdReadItem& r : reads) {
    if (r.corrupt) ++corrupt;
    if (!r.status.ok() && first.ok()) first = r.status;
  }
  if (corrupt != 0) {
    MutexLock lock(&mu_);
    stats_.corrupt_blocks += corrupt;
  }
  if (options_.promote_on_load) {
    for (const SsdReadItem& r : reads) {
      if (r.status.ok()) PromoteCopy(r.key, r.dst);
    }
  }
  return first;
}

void EngineImpl::PromoteCopy(const BlockKey& key, std::span<const std::byte> raw, TierKind source) {
  uint32_t slot = 0;
  {
    MutexLock lock(&mu_);
    BlockEntry* e = index_.Find(key);
    if (e != nullptr) return;  // In memory already, or on its way there.
    Result<uint32_t> s = AllocateClean(MemTier::kHost);
    if (!s.ok()) return;  // Promotion is optional: never force a write-back for it.
    slot = *s;
    e = index_.Insert(key);
    e->slot[TierIndex(MemTier::kHost)] = slot;
    e->copy[TierIndex(MemTier::kHost)] = CopyState::kFilling;
    // A remote copy's expiry is not known here (Redis enforces its TTL): the host copy has none.
    if (source == TierKind::kSsd) {
      e->on_ssd = true;
      if (std::optional<SsdBlockInfo> info = ssd_->Lookup(key)) {
        e->expiry_wall_us = info->expiry_wall_us;
      }
    }
    clocks_[TierIndex(MemTier::kHost)]->Assign(slot, key, e->expiry_wall_us != 0);
  }
  std::memcpy(host_->SlotData(slot), raw.data(), block_bytes_);
  MutexLock lock(&mu_);
  BlockEntry* e = index_.Find(key);
  e->copy[TierIndex(MemTier::kHost)] = CopyState::kReady;
  e->state = BlockState::kReady;
  ++counters_[TierIndex(MemTier::kHost)].promotions;
}

void EngineImpl::RunOnPool(std::function<void()> task) {
  // Submit blocks while the queue is full (back-pressure on the caller). After shutdown began the
  // task runs inline so its handle still completes.
  auto shared = std::make_shared<std::function<void()>>(std::move(task));
  if (!pool_->Submit([shared] { (*shared)(); }).ok()) (*shared)();
}

}  // namespace kvtier
