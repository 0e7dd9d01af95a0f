// The one promoter (docs/engine.md, "Promotion"): every copy of a block from a tier below memory
// into a host slot, for Pin, Prefetch, hints and prediction, goes through Promote. Load's hits
// are copied on the way (PromoteCopy, engine_load.cc) and are not promotions of their own.
//
//   Promote (caller's thread or worker): under mu_, a host slot reserved (kFilling) for each key
//     that no memory tier has or is about to have, in the way the caller asks (kEvict for Pin:
//     any victim, a dirty one left to the cleaner; kCleanOnly ahead of need: only a free or clean
//     slot that holds no block promoted ahead of need); then every batch of the reads issued at
//     once (ReadFromTierAsync: the caller never decodes or waits for the I/O).
//   FinishPromote (completion thread, per batch): publishes what arrived (marked PromotedBy when
//     ahead of need, so Load can count useful blocks), gives the other slots back, counts; after
//     the call's last batch, hands the outcome to the caller's `done`.
//
// Pin waits for its promotion (PromoteAndWait) and then pins; the others never wait.
#include <algorithm>
#include <atomic>

#include "core/assert.h"
#include "core/mutex.h"
#include "engine/engine_impl.h"

namespace kvtier {

// One Promote call in flight, until its last batch answered.
struct EngineImpl::PromoteCall {
  PromotedBy by = PromotedBy::kNone;
  PromoteDone done;
  std::atomic<size_t> batches_left{0};
  PromoteOutcome outcome;  // Written under the engine's mu_ (reservations, then each batch).
};

namespace {

// The block is in memory, or will be without this promotion (a Store's or another promotion's
// copy on its way).
bool InMemoryOrComing(const BlockEntry* e) {
  return e != nullptr && (e->AnyReadable() || e->state() == BlockState::kWriting ||
                          e->copy(MemTier::kHost) != CopyState::kNone);
}

}  // namespace

std::vector<TierReadItem> EngineImpl::ReserveForPromotion(std::span<const BlockKey> keys,
                                                          size_t below, PromoteSlots slots,
                                                          PromoteOutcome* outcome) {
  const size_t host = TierIndex(MemTier::kHost);
  std::vector<TierReadItem> items;
  MutexLock lock(&mu_);
  for (size_t i = 0; i < keys.size(); ++i) {
    const BlockKey& key = keys[i];
    if (InMemoryOrComing(table_.Find(key))) continue;
    // A local tier is asked (cheap): the block may be gone since the caller found it, and it
    // tells the expiry. A best-effort tier is not (the read finds out).
    TierContains info{.key = key};
    if (!tiers_[below].best_effort &&
        (!tiers_[below].tier->Contains(std::span(&info, 1)).ok() || !info.present)) {
      if (slots == PromoteSlots::kEvict) {
        outcome->first = Status::NotFound("in no local tier below memory: " + key.ToString());
        outcome->not_promoted.assign(keys.begin() + static_cast<std::ptrdiff_t>(i), keys.end());
        break;
      }
      ++outcome->dropped;  // Reclaimed or erased since the plan.
      continue;
    }
    Result<uint32_t> slot =
        slots == PromoteSlots::kEvict
            ? AllocateSlot(MemTier::kHost, VictimFilter::kAny, EvictWrites::kToCleaner)
            : AllocateClean(MemTier::kHost, VictimFilter::kCleanNotAhead);
    if (!slot.ok()) {
      // kEvict: Busy when no slot can be had; ahead of need: every host slot is dirty, pinned,
      // in flight or promoted ahead of need.
      outcome->dropped += keys.size() - i;
      if (slots == PromoteSlots::kEvict) {
        outcome->first = slot.status();
        outcome->not_promoted.assign(keys.begin() + static_cast<std::ptrdiff_t>(i), keys.end());
      }
      break;
    }
    // AllocateSlot may have dropped the lock: another promotion or a Store may have taken the
    // key meanwhile, and theirs wins (a reserved entry's slots belong to its writer).
    if (InMemoryOrComing(table_.Find(key))) {
      host_->Free(*slot);
      continue;
    }
    const BlockEntry* e = table_.Reserve(key, MemTier::kHost, *slot);
    // A best-effort tier's expiry is not known here (it enforces its TTL): none in memory.
    if (info.present) table_.SetExpiry(key, info.expiry_wall_us);
    clocks_[host]->Assign(*slot, key, e->expiry_wall_us() != 0);
    items.push_back({.key = key, .dst = {host_->SlotData(*slot), block_bytes_}});
  }
  return items;
}

void EngineImpl::Promote(std::span<const BlockKey> keys, size_t below, PromoteSlots slots,
                         PromotedBy by, PromoteDone done) {
  auto call = std::make_shared<PromoteCall>();
  call->by = by;
  call->done = std::move(done);
  // Counted pending until the last batch's continuation has published its blocks (a promotion
  // is pending until its blocks are in memory or given up); the issuing thread does not wait.
  promotion_tasks_pending_.fetch_add(1);
  std::vector<TierReadItem> items = ReserveForPromotion(keys, below, slots, &call->outcome);
  if (items.empty()) {
    call->batches_left = 1;
    FinishPromote(*call, {});
    return;
  }
  // Batches of half the staging pool (at most the tier's batch_max), all issued at once: two are
  // in flight while the next waits for buffers, so the disk is never idle between them. Measured
  // (docs/benchmarks.md, "Engine host tier and trace"): Pin after a restart took 1.19-1.25x a
  // Load of the same blocks in batches of the whole pool, 0.98-1.00x in halves, level with
  // quarters.
  const size_t step =
      std::min<size_t>(std::max<size_t>(staging_->count() / 2, 1), tiers_[below].tier->batch_max());
  call->batches_left = (items.size() + step - 1) / step;
  for (size_t base = 0; base < items.size(); base += step) {
    const auto first = items.begin() + static_cast<std::ptrdiff_t>(base);
    const auto last = first + static_cast<std::ptrdiff_t>(std::min(step, items.size() - base));
    ReadFromTierAsync(below, std::vector<TierReadItem>(first, last),
                      [this, call](std::span<TierReadItem> read) { FinishPromote(*call, read); });
  }
}

void EngineImpl::FinishPromote(PromoteCall& call, std::span<const TierReadItem> items) {
  const size_t host = TierIndex(MemTier::kHost);
  PromoteOutcome& outcome = call.outcome;
  {
    MutexLock lock(&mu_);
    for (const TierReadItem& item : items) {
      // A filling copy is never evicted: its entry is still there (the table checks).
      if (item.corrupt) ++stats_.corrupt_blocks;
      if (!item.status.ok()) {
        FreeSlot(MemTier::kHost, table_.Abort(item.key, MemTier::kHost));
        ++outcome.dropped;
        outcome.not_promoted.push_back(item.key);
        if (outcome.first.ok()) outcome.first = item.status;
        continue;
      }
      ++counters_[host].promotions;
      if (call.by == PromotedBy::kNone) {
        table_.Publish(item.key, MemTier::kHost);
        continue;
      }
      // Other promotions ahead of need leave it alone until a Load used it (kCleanNotAhead); a
      // second chance (its reference bit) protects it a little from the rest.
      table_.PublishPromoted(item.key, MemTier::kHost, call.by);
      switch (call.by) {
        case PromotedBy::kPrediction:
          ++stats_.prediction_promoted_blocks;
          break;
        case PromotedBy::kHint:
          ++stats_.hint_promoted_blocks;
          break;
        default:
          ++stats_.prefetch_blocks;
          break;
      }
    }
    if (call.batches_left.fetch_sub(1) != 1) return;  // Not the call's last batch.
    CountDropped(call.by, outcome.dropped);
  }
  promotion_tasks_pending_.fetch_sub(1);
  if (call.done) call.done(std::move(outcome));
}

void EngineImpl::CountDropped(PromotedBy by, uint64_t blocks) {
  if (by == PromotedBy::kPrediction || by == PromotedBy::kHint) {
    stats_.prediction_dropped_blocks += blocks;
  }
}

EngineImpl::PromoteOutcome EngineImpl::PromoteAndWait(
    std::span<const std::vector<BlockKey>> from) {
  Mutex mu;
  CondVar cv;
  size_t left = 0;
  PromoteOutcome all;
  for (const std::vector<BlockKey>& keys : from) left += keys.empty() ? 0u : 1u;
  for (size_t below = 0; below < from.size(); ++below) {
    if (from[below].empty()) continue;
    Promote(from[below], below, PromoteSlots::kEvict, PromotedBy::kNone,
            [&](PromoteOutcome outcome) {
              MutexLock lock(&mu);
              if (all.first.ok()) all.first = std::move(outcome.first);
              all.dropped += outcome.dropped;
              all.not_promoted.insert(all.not_promoted.end(), outcome.not_promoted.begin(),
                                      outcome.not_promoted.end());
              if (--left == 0) cv.SignalAll();
            });
  }
  MutexLock lock(&mu);
  while (left != 0) cv.Wait(&mu);
  return all;
}

Result<PinHandle> EngineImpl::Pin(const Namespace& ns, std::span<const uint32_t> tokens) {
  KV_ASSIGN_OR_RETURN(std::vector<Hash256> chunks,
                      ChunkHashes(ns.digest, tokens, options_.layout.block_tokens));
  const uint32_t layers = options_.layout.layers;
  // pinned[c * layers + l]: layer l of chunk c is pinned. Chunks from `usable` on are given up:
  // a layer in no tier, a failed promotion, or one that keeps leaving memory.
  std::vector<bool> pinned(chunks.size() * layers, false);
  size_t usable = chunks.size();
  // The layers in memory are pinned at once; the others of every usable chunk are promoted
  // together (PromoteAndWait), then pinned. A block that left memory between its promotion and
  // its pin is promoted once more.
  for (uint32_t pass = 0; pass < 3; ++pass) {
    std::vector<std::vector<BlockKey>> from(tiers_.size());
    bool missing = false;
    {
      MutexLock lock(&mu_);
      const uint64_t now = NowWallUs();
      for (size_t c = 0; c < usable; ++c) {
        for (uint32_t l = 0; l < layers; ++l) {
          const BlockKey key{.chunk_hash = chunks[c], .layer = l};
          if (pinned[c * layers + l]) continue;
          if (ReadableTier(key, now).has_value()) {
            table_.Pin(key);
            pinned[c * layers + l] = true;
            continue;
          }
          size_t below = 0;
          if (pass == 2 || !FindBelow(key, &below, nullptr)) {
            usable = c;  // Only the leading cached chunks are pinned.
            break;
          }
          from[below].push_back(key);
          missing = true;
        }
      }
    }
    if (!missing) break;
    const PromoteOutcome outcome = PromoteAndWait(from);
    for (const BlockKey& key : outcome.not_promoted) {
      const auto end = chunks.begin() + static_cast<std::ptrdiff_t>(usable);
      usable = static_cast<size_t>(std::find(chunks.begin(), end, key.chunk_hash) - chunks.begin());
    }
  }
  std::vector<BlockKey> given_up;
  for (size_t c = usable; c < chunks.size(); ++c) {
    for (uint32_t l = 0; l < layers; ++l) {
      if (pinned[c * layers + l]) given_up.push_back({.chunk_hash = chunks[c], .layer = l});
    }
  }
  Unpin(given_up);
  chunks.resize(usable);
  return PinHandle(unpinner_, std::move(chunks));
}

}  // namespace kvtier
