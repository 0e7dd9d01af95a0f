#include "policies/access_predictor.h"

#include <algorithm>
#include <utility>

namespace kvtier {

Status AccessPredictorOptions::Validate() const {
  if (window == 0 || window > kPredictorWindowMax) {
    return Status::InvalidArgument("AccessPredictorOptions.window out of [1, 16]");
  }
  if (successors_max == 0 || successors_max > kPredictorSuccessorsMax) {
    return Status::InvalidArgument("AccessPredictorOptions.successors_max out of [1, 64]");
  }
  if (items_max == 0 || items_max > kPredictorItemsMax) {
    return Status::InvalidArgument("AccessPredictorOptions.items_max out of range");
  }
  if (predict_k == 0 || predict_k > kPredictorPredictMax) {
    return Status::InvalidArgument("AccessPredictorOptions.predict_k out of [1, 64]");
  }
  if (hint_accesses_max == 0) {
    return Status::InvalidArgument("AccessPredictorOptions.hint_accesses_max must be > 0");
  }
  return Status::Ok();
}

AccessPredictor::AccessPredictor(const AccessPredictorOptions& options) : options_(options) {}

AccessPredictor::Item& AccessPredictor::Touch(uint64_t id) {
  auto it = table_.find(id);
  if (it != table_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    return it->second;
  }
  if (table_.size() >= options_.items_max) {
    table_.erase(lru_.back());
    lru_.pop_back();
  }
  lru_.push_front(id);
  Item& item = table_[id];
  item.lru = lru_.begin();
  return item;
}

void AccessPredictor::Learn(uint64_t from, uint64_t to, float weight) {
  Item& item = Touch(from);
  for (Successor& s : item.next) {
    if (s.id == to) {
      s.weight += weight;
      return;
    }
  }
  if (item.next.size() < options_.successors_max) {
    item.next.push_back({to, weight});
    return;
  }
  auto weakest =
      std::min_element(item.next.begin(), item.next.end(),
                       [](const Successor& a, const Successor& b) { return a.weight < b.weight; });
  *weakest = {to, weight};
}

void AccessPredictor::Observe(uint64_t id) {
  ++stats_.observed;
  if (!last_prediction_.empty()) {
    ++stats_.predicted;
    if (std::find(last_prediction_.begin(), last_prediction_.end(), id) != last_prediction_.end()) {
      ++stats_.hits;
    }
  }
  // Hints are queued in time order: the stale ones are at the front.
  while (!hints_.empty() &&
         stats_.observed - hints_.front().observed_at > options_.hint_accesses_max) {
    hints_.pop_front();
  }
  auto hinted =
      std::find_if(hints_.begin(), hints_.end(), [id](const HintEntry& h) { return h.id == id; });
  if (hinted != hints_.end()) hints_.erase(hints_.begin(), hinted + 1);
  // window_ front is the latest access: distance 1.
  for (size_t d = 0; d < window_.size(); ++d) {
    Learn(window_[d], id, 1.0f / static_cast<float>(d + 1));
  }
  Touch(id);
  window_.push_front(id);
  if (window_.size() > options_.window) window_.pop_back();
  last_prediction_ = Predict(options_.predict_k);
}

std::vector<uint64_t> AccessPredictor::Predict(uint32_t k) const {
  k = std::min(k, kPredictorPredictMax);
  std::vector<uint64_t> out;
  for (const HintEntry& h : hints_) {
    if (out.size() >= k) return out;
    if (std::find(out.begin(), out.end(), h.id) == out.end()) out.push_back(h.id);
  }
  std::vector<std::pair<float, uint64_t>> scored;
  for (size_t d = 0; d < window_.size(); ++d) {
    auto it = table_.find(window_[d]);
    if (it == table_.end()) continue;
    for (const Successor& s : it->second.next) {
      const float w = s.weight / static_cast<float>(d + 1);
      auto same = std::find_if(scored.begin(), scored.end(),
                               [&](const auto& p) { return p.second == s.id; });
      if (same == scored.end()) {
        scored.emplace_back(w, s.id);
      } else {
        same->first += w;
      }
    }
  }
  std::sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  for (const auto& [w, id] : scored) {
    if (out.size() >= k) break;
    if (std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
  }
  return out;
}

void AccessPredictor::Hint(uint64_t id) {
  hints_.push_back({.id = id, .observed_at = stats_.observed});
  if (hints_.size() > kPredictorHintsMax) hints_.pop_front();
}

}  // namespace kvtier
