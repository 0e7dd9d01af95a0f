#include "tiers/remote_lanes.h"

#include <algorithm>

#include "core/assert.h"

namespace kvtier {

class RemoteStoreLanes::Lease {
 public:
  Lease(RemoteStoreLanes* owner, Group group) KV_EXCLUDES(owner->mu_)
      : owner_(owner), group_(group) {
    MutexLock lock(&owner_->mu_);
    std::vector<size_t>& free = owner_->free_[group_];
    while (free.empty()) owner_->freed_.Wait(&owner_->mu_);
    lane_ = free.back();
    free.pop_back();
  }
  ~Lease() {
    {
      MutexLock lock(&owner_->mu_);
      owner_->free_[group_].push_back(lane_);
    }
    owner_->freed_.SignalAll();  // Waiters of both groups share the condition.
  }
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;

  RemoteStore* operator->() const { return owner_->lanes_[lane_].get(); }

 private:
  RemoteStoreLanes* const owner_;
  const Group group_;
  size_t lane_ = 0;
};

RemoteStoreLanes::RemoteStoreLanes(std::vector<std::unique_ptr<RemoteStore>> read_lanes,
                                   std::vector<std::unique_ptr<RemoteStore>> write_lanes)
    : writes_(write_lanes.empty() ? kRead : kWrite) {
  KV_CHECK(!read_lanes.empty());
  const size_t reads = read_lanes.size();
  lanes_ = std::move(read_lanes);
  for (auto& lane : write_lanes) lanes_.push_back(std::move(lane));
  MutexLock lock(&mu_);
  for (size_t i = lanes_.size(); i-- > 0;) {
    KV_CHECK(lanes_[i] != nullptr);
    // The first lane of each group on top.
    free_[i < reads ? kRead : kWrite].push_back(i);
  }
}

Status RemoteStoreLanes::Put(std::span<RemotePut> entries) {
  return Lease(this, writes_)->Put(entries);
}

Status RemoteStoreLanes::Get(std::span<RemoteGet> entries) {
  return Lease(this, kRead)->Get(entries);
}

Status RemoteStoreLanes::Exists(std::span<RemoteExists> entries) {
  return Lease(this, kRead)->Exists(entries);
}

Status RemoteStoreLanes::Delete(std::span<RemoteDelete> entries) {
  return Lease(this, writes_)->Delete(entries);
}

RemoteStoreStats RemoteStoreLanes::Stats() const {
  RemoteStoreStats out;
  for (const auto& lane : lanes_) {
    const RemoteStoreStats s = lane->Stats();
    out.gets += s.gets;
    out.hits += s.hits;
    out.misses += s.misses;
    out.corrupt += s.corrupt;
    out.mismatched += s.mismatched;
    out.auth_failures += s.auth_failures;
    out.puts += s.puts;
    out.errors += s.errors;
    out.timeouts += s.timeouts;
    out.reconnects += s.reconnects;
    out.breaker_trips += s.breaker_trips;
    out.breakers_open = std::max(out.breakers_open, s.breakers_open);
    // kOpen is the worst, then kHalfOpen (still refusing most calls), then kClosed.
    auto rank = [](BreakerState b) {
      return b == BreakerState::kOpen ? 2 : b == BreakerState::kHalfOpen ? 1 : 0;
    };
    if (rank(s.breaker_state) > rank(out.breaker_state)) out.breaker_state = s.breaker_state;
    out.redirects_moved += s.redirects_moved;
    out.redirects_ask += s.redirects_ask;
    out.redirects_refused += s.redirects_refused;
    out.endpoints_refused += s.endpoints_refused;
    out.topology_refreshes += s.topology_refreshes;
  }
  return out;
}

}  // namespace kvtier
