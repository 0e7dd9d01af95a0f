// Access prediction: sessions, the sliding-window + Markov predictor, Hint, and the promotion of
// blocks ahead of need that prediction, hints and Prefetch share (docs/engine.md, "Access
// prediction").
//
// The path of one access, and who pays for it:
//   Lookup (caller's thread) -> ObserveAccess: pred_mu_ only; remembers the session's chunks,
//     observes the access, copies the predicted sessions' chunk lists; one TrySubmit.
//   PlanPromotion (worker): under mu_, the blocks of those chunks that no memory tier holds,
//     while each session's prefix stays cached, up to the budget; TrySubmit per batch of 8.
//   Promote (worker; engine_promote.cc, the promoter Pin uses too): free or clean host slots,
//     one batched read from a tier below memory into them; marked PromotedBy so Load can count
//     useful blocks.
// Nothing here blocks a caller, forces a write-back or evicts a pinned or dirty block; a full
// worker queue, a host tier without clean slots or a block gone since the plan drops the rest.
#include <algorithm>

#include "core/assert.h"
#include "engine/engine_impl.h"

namespace kvtier {

namespace {

// splitmix64's finalizer: spreads explicit session ids (often small integers) over 64 bits.
uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

uint64_t First8(const Hash256& h) {
  uint64_t v = 0;
  for (size_t i = 0; i < 8; ++i) v |= uint64_t{h[i]} << (8 * i);
  return v;
}

// The first min(chunks.size(), max) of `chunks` equal `remembered`.
bool SameRequest(const std::vector<Hash256>& remembered, std::span<const Hash256> chunks,
                 size_t max) {
  const size_t n = std::min(chunks.size(), max);
  return remembered.size() == n && std::equal(remembered.begin(), remembered.end(), chunks.begin());
}

}  // namespace

uint64_t EngineImpl::SessionKey(const Namespace& ns, std::span<const Hash256> chunks,
                                uint64_t session_id) {
  KV_DCHECK(!chunks.empty());
  // chunk_hash[0] already covers the namespace digest and the first chunk's tokens.
  if (session_id == 0) return First8(chunks[0]);
  return Mix64(First8(ns.digest) ^ Mix64(session_id));
}

void EngineImpl::ObserveAccess(const Namespace& ns, std::span<const Hash256> chunks,
                               uint64_t session_id) {
  const uint64_t session = SessionKey(ns, chunks, session_id);
  std::vector<std::vector<Hash256>> next;
  {
    MutexLock lock(&pred_mu_);
    KV_DCHECK(predictor_.has_value());
    // A scheduler that asks again for a waiting request is not a new access.
    const std::vector<Hash256>* remembered = sessions_->Find(session);
    if (last_session_ == session && remembered != nullptr &&
        SameRequest(*remembered, chunks, options_.prediction.session_chunks_max)) {
      return;
    }
    sessions_->Record(session, chunks);
    last_session_ = session;
    predictor_->Observe(session);
    // Scored against what the engine acted on, so a workload of one session (nothing to promote
    // ahead) does not read as perfectly predicted.
    if (!predicted_.empty()) {
      ++prediction_scored_;
      if (std::find(predicted_.begin(), predicted_.end(), session) != predicted_.end()) {
        ++prediction_hits_;
      }
    }
    // The best predict_k sessions other than this one: its own Load follows this Lookup.
    const uint32_t k = options_.prediction.predict_k;
    predicted_.clear();
    for (const uint64_t id : predictor_->Predict(k + 1)) {
      if (id == session || predicted_.size() >= k) continue;
      predicted_.push_back(id);
      const std::vector<Hash256>* c = sessions_->Find(id);
      if (c != nullptr && !c->empty()) next.push_back(*c);
    }
  }
  if (!next.empty()) SubmitPromotion(std::move(next), PromotedBy::kPrediction);
}

Status EngineImpl::Hint(const Namespace& ns, std::span<const uint32_t> tokens,
                        uint64_t session_id) {
  KV_ASSIGN_OR_RETURN(std::vector<Hash256> chunks,
                      ChunkHashes(ns.digest, tokens, options_.layout.block_tokens));
  {
    MutexLock lock(&mu_);
    ++stats_.hints;
  }
  if (chunks.empty()) return Status::Ok();
  if (options_.prediction.enabled) {
    const uint64_t session = SessionKey(ns, chunks, session_id);
    MutexLock lock(&pred_mu_);
    sessions_->Record(session, chunks);
    predictor_->Hint(session);
    // The hinted request of the session seen last is a new access when it comes.
    if (last_session_ == session) last_session_.reset();
  }
  std::vector<std::vector<Hash256>> sessions;
  sessions.push_back(std::move(chunks));
  SubmitPromotion(std::move(sessions), PromotedBy::kHint);
  return Status::Ok();
}

size_t EngineImpl::PromotionBudget(PromotedBy by) const {
  // A caller's Prefetch asks for its own prefix now: whatever clean slots the host tier has.
  if (by == PromotedBy::kPrefetch) return host_->slots();
  // Half the host tier at most: promotions for the next requests must not flush out the blocks
  // of the requests being served.
  const size_t half_host = std::max<size_t>(1, host_->slots() / 2);
  return std::min<size_t>(options_.prediction.blocks_max, half_host);
}

bool EngineImpl::TrySubmitPromotion(std::function<void()> task) {
  promotion_tasks_pending_.fetch_add(1);
  const Status s = pool_->TrySubmit([this, task = std::move(task)] {
    task();
    promotion_tasks_pending_.fetch_sub(1);
  });
  if (!s.ok()) promotion_tasks_pending_.fetch_sub(1);
  return s.ok();
}

void EngineImpl::SubmitPromotion(std::vector<std::vector<Hash256>> sessions, PromotedBy by) {
  if (tiers_.empty()) return;  // Every copy is in memory already.
  // A plan the queue refuses is dropped whole (its blocks are not known yet, so not counted).
  TrySubmitPromotion([this, sessions = std::move(sessions), by] { PlanPromotion(sessions, by); });
}

void EngineImpl::PlanPromotion(std::span<const std::vector<Hash256>> sessions, PromotedBy by) {
  const size_t budget = PromotionBudget(by);
  const uint32_t layers = options_.layout.layers;
  // Per tier below memory: local tiers that contain a block, else the first best-effort tier.
  std::vector<std::vector<BlockKey>> from(tiers_.size());
  const size_t network = FirstBestEffort();
  size_t planned = 0;
  {
    MutexLock lock(&mu_);
    const uint64_t now = NowWallUs();
    for (const std::vector<Hash256>& chunks : sessions) {
      for (const Hash256& chunk : chunks) {
        std::vector<BlockKey> chunk_keys;
        std::vector<size_t> chunk_from;
        bool cached = true;
        for (uint32_t l = 0; l < layers && cached; ++l) {
          const BlockKey key{.chunk_hash = chunk, .layer = l};
          if (ReadableTier(key, now).has_value()) continue;
          size_t below = 0;
          if (FindBelow(key, &below, nullptr)) {
            chunk_keys.push_back(key);
            chunk_from.push_back(below);
          } else if (network != kFromMemory) {
            // Not asked first: a miss costs one read, off any caller.
            chunk_keys.push_back(key);
            chunk_from.push_back(network);
          } else {
            cached = false;
          }
        }
        // Whole chunks only: the session's usable prefix ends at a chunk that is not cached, and
        // a chunk that does not fit the budget would be loaded from below anyway.
        if (!cached || planned + chunk_keys.size() > budget) break;
        for (size_t k = 0; k < chunk_keys.size(); ++k) from[chunk_from[k]].push_back(chunk_keys[k]);
        planned += chunk_keys.size();
      }
    }
  }
  uint64_t dropped = 0;
  auto submit = [&](const std::vector<BlockKey>& keys, size_t below) {
    for (size_t base = 0; base < keys.size(); base += kLoadStagingBatchMax) {
      const size_t n = std::min<size_t>(kLoadStagingBatchMax, keys.size() - base);
      std::vector<BlockKey> batch(keys.begin() + static_cast<std::ptrdiff_t>(base),
                                  keys.begin() + static_cast<std::ptrdiff_t>(base + n));
      if (!TrySubmitPromotion(
              [this, batch = std::move(batch), below, by] {
                Promote(batch, below, PromoteSlots::kCleanOnly, by, {});
              })) {
        dropped += keys.size() - base;
        return;
      }
    }
  };
  for (size_t below = 0; below < from.size(); ++below) submit(from[below], below);
  if (dropped != 0) {
    MutexLock lock(&mu_);
    CountDropped(by, dropped);
  }
}

void EngineImpl::CountUsefulPromotion(const BlockKey& key) {
  const PromotedBy by = table_.Find(key)->promoted_by();
  if (by == PromotedBy::kNone) return;
  if (by == PromotedBy::kPrediction) ++stats_.prediction_useful_blocks;
  if (by == PromotedBy::kHint) ++stats_.hint_useful_blocks;
  table_.ClearPromotedBy(key);
}

void EngineImpl::AppendPredictionStats(EngineStats* out) {
  out->prediction_tasks_pending = promotion_tasks_pending_.load();
  MutexLock lock(&pred_mu_);
  if (!predictor_.has_value()) return;
  out->prediction_accesses = predictor_->stats().observed;
  out->prediction_scored = prediction_scored_;
  out->prediction_hits = prediction_hits_;
  out->prediction_accuracy = prediction_scored_ == 0 ? 0.0
                                                     : static_cast<double>(prediction_hits_) /
                                                           static_cast<double>(prediction_scored_);
  out->prediction_sessions = sessions_->size();
}

}  // namespace kvtier
