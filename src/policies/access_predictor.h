// AccessPredictor: a sliding-window + Markov predictor of what will be accessed next, for chunks
// of a sequence or for whole sessions (docs/engine.md; a multi-turn
// chat comes back, an agent's steps repeat). The engine asks it which blocks to promote ahead of
// the request.
//
// Model: items are opaque 64-bit ids (a chunk hash prefix, a session id). Every observed access
// adds a transition from each of the last `window` accesses to it, weighted 1 / distance, so an
// order-1 chain dominates and a step skipped now and then still predicts. Predict() scores the
// successors of the items in the window the same way and returns the best. Callers may also give
// hints (the next requests in their queue): hinted ids come first, in order, until observed; a
// hint not observed within hint_accesses_max accesses is dropped (a cancelled request must not
// lead every prediction forever), and observing a hinted id drops the hints queued before it.
// Accuracy is measured online: an access counts as a hit when it was among the last prediction
// made (of `predict_k` ids); Stats() exposes hits, misses and their ratio as a metric.
//
// Bounds: at most items_max tracked items (the least recently seen is forgotten), successors_max
// successors per item (the weakest is replaced), kPredictorHintsMax hints.
//
// Thread safety: none; its owner serializes calls (the engine holds its prediction mutex).
// Ownership: plain value type.
#pragma once

#include <cstdint>
#include <deque>
#include <list>
#include <unordered_map>
#include <vector>

#include "kvtier/status.h"

namespace kvtier {

inline constexpr uint32_t kPredictorWindowMax = 16;
inline constexpr uint32_t kPredictorSuccessorsMax = 64;
inline constexpr uint32_t kPredictorItemsMax = 1u << 20;
inline constexpr uint32_t kPredictorHintsMax = 256;
inline constexpr uint32_t kPredictorPredictMax = 64;

struct AccessPredictorOptions {
  uint32_t window = 2;              // Recent accesses that vote for the next one.
  uint32_t successors_max = 8;      // Successors remembered per item.
  uint32_t items_max = 65536;       // Items tracked.
  uint32_t predict_k = 1;           // Ids per prediction used to score accuracy.
  uint32_t hint_accesses_max = 64;  // Accesses a hint waits to be observed before it is dropped.

  // InvalidArgument naming the first bad field.
  Status Validate() const;
};

struct AccessPredictorStats {
  uint64_t observed = 0;
  uint64_t predicted = 0;  // Accesses that had a prediction before them.
  uint64_t hits = 0;       // ... and were in it.
  double accuracy() const {
    return predicted == 0 ? 0.0 : static_cast<double>(hits) / static_cast<double>(predicted);
  }
};

class AccessPredictor {
 public:
  explicit AccessPredictor(const AccessPredictorOptions& options);

  // One access, in order. Scores the previous prediction, then learns.
  void Observe(uint64_t id);
  // Up to k (<= kPredictorPredictMax) ids most likely next, best first, hints first.
  std::vector<uint64_t> Predict(uint32_t k) const;
  // Caller hints: ids known to come soon, in order. Beyond kPredictorHintsMax the oldest drop.
  void Hint(uint64_t id);

  const AccessPredictorStats& stats() const { return stats_; }
  size_t items() const { return table_.size(); }
  size_t hints() const { return hints_.size(); }
  // The prediction made by the latest Observe() (what the next access is scored against).
  const std::vector<uint64_t>& last_prediction() const { return last_prediction_; }

 private:
  struct Successor {
    uint64_t id = 0;
    float weight = 0.0f;
  };
  struct Item {
    std::vector<Successor> next;
    std::list<uint64_t>::iterator lru;
  };
  void Learn(uint64_t from, uint64_t to, float weight);
  Item& Touch(uint64_t id);

  AccessPredictorOptions options_;
  AccessPredictorStats stats_;
  std::unordered_map<uint64_t, Item> table_;
  std::list<uint64_t> lru_;  // Front = most recently seen.
  std::deque<uint64_t> window_;
  struct HintEntry {
    uint64_t id = 0;
    uint64_t observed_at = 0;  // stats_.observed when the hint was given.
  };
  std::deque<HintEntry> hints_;
  std::vector<uint64_t> last_prediction_;
};

}  // namespace kvtier
