// Store: takes the full chunks of a sequence into the cache, asynchronously.
//
// Under the engine mutex the absent blocks are reserved (index entries in state kWriting, so a
// concurrent Store of the same key skips them and Lookup/Load do not see them) and given slots in
// the entry tier (device when present, else host; a lower memory tier when that one is full of
// pinned or in-flight blocks), evicting as needed. If no slot can be had the whole call is undone
// and returns Busy: nothing waits for space that may never come.
//
// The bytes are then copied (DeviceTier::Copy kHostToDevice, or a memcpy on the worker pool into
// host/CXL slots). A worker publishes the blocks (kReady) only after the copy completed, then
// encodes the blocks and issues their writes to each write-through tier below memory without
// waiting for them; the handle completes when every tier answered (on the completion thread of
// the last answer). Every published block starts dirty for each tier it must reach
// (LowerTier::DirtyOnStore: every local tier, and a best-effort tier with write-back); a
// successful write clears the tier's bit, so a block a local tier refused is written back again
// on eviction.
#include <cstring>

#include "core/assert.h"
#include "engine/engine_impl.h"

namespace kvtier {

class StoreHandleImpl final : public StoreHandle {
 public:
  StoreHandleImpl(EngineImpl* engine, size_t chunks) : engine_(engine), chunks_(chunks) {
    engine_->HandleOpened();
  }
  ~StoreHandleImpl() override {
    Wait().IgnoreError();
    engine_->HandleClosed();
  }
  Status Wait() override KV_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    while (!done_) cv_.Wait(&mu_);
    return status_;
  }
  bool Done() override KV_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return done_;
  }
  size_t chunks_stored() const override { return chunks_; }

  void Complete(const Status& s) KV_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    status_ = s;
    done_ = true;
    cv_.SignalAll();
  }

 private:
  EngineImpl* const engine_;
  const size_t chunks_;
  Mutex mu_;
  CondVar cv_;
  bool done_ KV_GUARDED_BY(mu_) = false;
  Status status_ KV_GUARDED_BY(mu_);
};

namespace {

Status ValidateStoreArgs(const KvLayout& layout, size_t full_chunks,
                         std::span<const std::span<const std::byte>> src) {
  if (src.size() % layout.layers != 0) {
    return Status::InvalidArgument(
        "src: " + std::to_string(src.size()) +
        " spans is not a multiple of layers=" + std::to_string(layout.layers));
  }
  if (src.size() / layout.layers > full_chunks) {
    return Status::InvalidArgument("src: " + std::to_string(src.size() / layout.layers) +
                                   " chunks but tokens hold only " + std::to_string(full_chunks) +
                                   " full chunks");
  }
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i].size() != layout.BlockBytes()) {
      return Status::InvalidArgument(
          "src[" + std::to_string(i) + "]: " + std::to_string(src[i].size()) +
          " bytes, want BlockBytes=" + std::to_string(layout.BlockBytes()));
    }
  }
  return Status::Ok();
}

}  // namespace

std::vector<StoreItem> EngineImpl::ReserveBlocks(std::span<const BlockKey> keys,
                                                 std::span<const std::span<const std::byte>> src,
                                                 const StoreOptions& options) {
  const uint64_t now = NowWallUs();
  const uint64_t ttl_ms = options.ttl_ms != 0 ? options.ttl_ms : options_.default_ttl_ms;
  std::vector<StoreItem> items;
  for (size_t i = 0; i < keys.size(); ++i) {
    const BlockKey& key = keys[i];
    if (const BlockEntry* e = table_.Find(key); e != nullptr) {
      bool replaceable = e->Expired(now) && e->pins() == 0 && !e->flushing();
      for (size_t t = 0; t < kMemTiers && replaceable; ++t) {
        const CopyState c = e->copy(MemTierAt(t));
        replaceable = c == CopyState::kNone || c == CopyState::kReady;
      }
      if (!replaceable) continue;  // Present (or being written by another Store): skip it.
      table_.Pin(key);             // Keeps Drop from erasing the entry under this loop.
      for (size_t t = 0; t < kMemTiers; ++t) {
        if (e->copy(MemTierAt(t)) != CopyState::kNone) {
          FreeSlot(MemTierAt(t), table_.Drop(key, MemTierAt(t)));
        }
      }
      table_.Unpin(key);  // Empty and unpinned now: erased.
    } else if (size_t below = 0; FindBelow(key, &below, nullptr)) {
      continue;  // In a local tier below memory already; a Load promotes it.
    }
    const size_t chunk = i / options_.layout.layers;
    BlockPriority priority = options.priority;
    if (chunk < options_.sink_chunks && priority < BlockPriority::kHigh) {
      priority = BlockPriority::kHigh;
    }
    // The store's own reservation (a pin): never erased or evicted while it runs.
    table_.Claim(key, priority, ttl_ms == 0 ? 0 : now + ttl_ms * 1000);
    items.push_back(StoreItem{.key = key, .src = src[i]});
  }
  return items;
}

Status EngineImpl::AllocateForStore(std::span<StoreItem> items) {
  const size_t first_tier = HasTier(MemTier::kDevice) ? 0 : 1;
  for (StoreItem& item : items) {
    Status last = Status::Busy("no memory tier");
    for (size_t t = first_tier; t < kMemTiers && item.slot == kNoSlot; ++t) {
      if (!HasTier(MemTierAt(t))) continue;
      Result<uint32_t> slot =
          AllocateSlot(MemTierAt(t), VictimFilter::kAny, EvictWrites::kToCleaner);
      if (!slot.ok()) {
        last = slot.status();
        continue;
      }
      const BlockEntry* e = table_.Reserve(item.key, MemTierAt(t), *slot);
      clocks_[t]->Assign(*slot, item.key, e->expiry_wall_us() != 0);
      item.tier = MemTierAt(t);
      item.slot = *slot;
    }
    if (item.slot == kNoSlot) {
      // Evictions left to the cleaner: ask for as many free slots as this store needs (its
      // slots taken so far are released by AbortStore), bounded by the tier.
      const uint32_t needed = static_cast<uint32_t>(items.size());
      for (size_t t = 0; t < kMemTiers; ++t) {
        if (evict_wanted_[t] == 0) continue;
        evict_wanted_[t] = std::min(std::max(evict_wanted_[t], needed), clocks_[t]->slots());
      }
      return last;
    }
  }
  return Status::Ok();
}

void EngineImpl::AbortStore(std::span<const StoreItem> items) {
  for (const StoreItem& item : items) {
    if (item.slot != kNoSlot) FreeSlot(item.tier, table_.Abort(item.key, item.tier));
    table_.Unpin(item.key);
  }
}

Result<std::unique_ptr<StoreHandle>> EngineImpl::Store(
    const Namespace& ns, std::span<const uint32_t> tokens,
    std::span<const std::span<const std::byte>> src, const StoreOptions& options) {
  const uint32_t layers = options_.layout.layers;
  KV_ASSIGN_OR_RETURN(std::vector<Hash256> chunks,
                      ChunkHashes(ns.digest, tokens, options_.layout.block_tokens));
  if (options.first_chunk > chunks.size()) {
    return Status::InvalidArgument("first_chunk " + std::to_string(options.first_chunk) +
                                   " is beyond the " + std::to_string(chunks.size()) +
                                   " full chunks of tokens");
  }
  KV_RETURN_IF_ERROR(ValidateStoreArgs(options_.layout, chunks.size() - options.first_chunk, src));
  if (options.ttl_ms > kTtlMsMax) {
    return Status::InvalidArgument("ttl_ms=" + std::to_string(options.ttl_ms) + ": at most " +
                                   std::to_string(kTtlMsMax) + " ms");
  }
  const std::vector<BlockKey> keys =
      KeysOf(std::span<const Hash256>(chunks).subspan(options.first_chunk), src.size() / layers);
  std::vector<StoreItem> items;
  {
    MutexLock lock(&mu_);
    ++stats_.stores;
    items = ReserveBlocks(keys, src, options);
    const Status s = AllocateForStore(items);
    if (!s.ok()) {
      AbortStore(items);
      ++stats_.busy_rejections;
      return s;
    }
    stats_.store_blocks += items.size();
  }
  size_t chunks_stored = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i == 0 || items[i].key.chunk_hash != items[i - 1].key.chunk_hash) ++chunks_stored;
  }
  auto handle = std::make_unique<StoreHandleImpl>(this, chunks_stored);
  if (items.empty()) {
    handle->Complete(Status::Ok());
    return std::unique_ptr<StoreHandle>(std::move(handle));
  }
  std::vector<CopyRegion> to_device;
  for (const StoreItem& item : items) {
    if (item.tier != MemTier::kDevice) continue;
    to_device.push_back(CopyRegion{
        .dst = device_->SlotData(item.slot), .src = item.src.data(), .bytes = block_bytes_});
  }
  CopyEvent event;
  if (!to_device.empty()) event = device_->Copy(CopyKind::kHostToDevice, to_device);
  StoreHandleImpl* h = handle.get();
  RunOnPool([this, h, items = std::move(items), event]() mutable {
    FinishStore(h, std::move(items), event);
  });
  return std::unique_ptr<StoreHandle>(std::move(handle));
}

void EngineImpl::FinishStore(StoreHandleImpl* handle, std::vector<StoreItem> items,
                             CopyEvent event) {
  const Status copied = event.Wait();
  if (copied.ok()) {
    for (const StoreItem& item : items) {
      if (item.tier == MemTier::kDevice) continue;
      std::memcpy(SlotData(item.tier, item.slot), item.src.data(), block_bytes_);
    }
  }
  {
    MutexLock lock(&mu_);
    const uint64_t now_us = clock_->NowMicros();  // The write-back age limit counts from here.
    for (const StoreItem& item : items) {
      table_.Unpin(item.key);  // Its filling copy keeps the entry.
      if (!copied.ok()) {
        FreeSlot(item.tier, table_.Abort(item.key, item.tier));
        continue;
      }
      table_.Publish(item.key, item.tier);
      for (size_t below = 0; below < tiers_.size(); ++below) {
        if (tiers_[below].DirtyOnStore()) {
          table_.MarkDirty(item.key, below);
          LowerTier& t = tiers_[below];
          // Every Store that completed before now is on the tier (nothing was dirty for it).
          if (t.all_clean) t.horizon_us = std::max(t.horizon_us, now_us);
          t.all_clean = false;
        } else {
          table_.MarkClean(item.key, below);
        }
      }
      table_.SetDirtySince(item.key, now_us);
    }
  }
  if (!copied.ok()) {
    handle->Complete(copied);
    return;
  }
  // Write-through: issued to every write-through tier without waiting; the last to answer
  // completes the handle (on a completion thread, or here when every tier answered before its
  // call returned) with the first error of a local tier in list order (a best-effort tier's
  // failures are counted and logged, never returned).
  std::vector<size_t> through;
  for (size_t below = 0; below < tiers_.size(); ++below) {
    if (tiers_[below].write_policy == WritePolicy::kWriteThrough) through.push_back(below);
  }
  if (through.empty()) {
    KickCleaner();
    handle->Complete(Status::Ok());
    return;
  }
  struct Pending {
    Mutex mu;
    size_t left KV_GUARDED_BY(mu) = 0;
    std::vector<Status> local KV_GUARDED_BY(mu);  // Per tier: the error of a local tier.
  };
  auto pending = std::make_shared<Pending>();
  {
    MutexLock lock(&pending->mu);
    pending->left = through.size();
    pending->local.resize(tiers_.size());
  }
  for (const size_t below : through) {
    WriteThrough(below, items, [this, handle, pending, below](Status s) {
      Status io;
      {
        MutexLock lock(&pending->mu);
        if (!tiers_[below].best_effort) pending->local[below] = std::move(s);
        if (--pending->left != 0) return;
        for (const Status& t : pending->local) {
          if (!t.ok() && io.ok()) io = t;
        }
      }
      KickCleaner();
      handle->Complete(io);
    });
  }
}

}  // namespace kvtier
