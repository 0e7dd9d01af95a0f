// RemoteStoreLanes: one RemoteStore made of several stores of the same server ("lanes"), each with
// its own connections, so that calls run side by side. Each call runs on a lane no other call is
// using, waiting while every lane it may use is busy. Lanes come in two groups: puts and deletes
// take a write lane, gets and lookups (Exists) a read lane; without write lanes every call takes
// any lane.
//
// Why: RedisStore serializes the network part of its calls (one blocking connection per node), so
// with one store a load's gets would queue behind the puts of the stores before it, and behind a
// writer thread that runs at a lower CPU priority than the reads (remote_tier_adapter.h). The
// engine gives its puts a lane of their own; more read lanes let gets overlap on the network
// (whether that pays depends on the machine: measure with `kvtier bench remote --connections`).
//
// Lanes are alike: they name the same server(s) with the same options, so a value one lane put
// is what another gets. Stats() adds the lanes' counters; breakers_open is the largest over the
// lanes and breaker_state the worst (each lane keeps its own circuit breaker per node, so a dead
// node is found once per lane that is used).
//
// Thread safety: safe for concurrent calls (it is the point). Ownership: owns the lanes.
#pragma once

#include <memory>
#include <vector>

#include "core/mutex.h"
#include "tiers/remote_store.h"

namespace kvtier {

class RemoteStoreLanes final : public RemoteStore {
 public:
  // At least one read lane; none may be null. Without write lanes, puts and deletes take read
  // lanes too.
  explicit RemoteStoreLanes(std::vector<std::unique_ptr<RemoteStore>> read_lanes,
                            std::vector<std::unique_ptr<RemoteStore>> write_lanes = {});

  size_t lanes() const { return lanes_.size(); }

  Status Put(std::span<RemotePut> entries) override KV_EXCLUDES(mu_);
  Status Get(std::span<RemoteGet> entries) override KV_EXCLUDES(mu_);
  Status Exists(std::span<RemoteExists> entries) override KV_EXCLUDES(mu_);
  Status Delete(std::span<RemoteDelete> entries) override KV_EXCLUDES(mu_);
  RemoteStoreStats Stats() const override;

 private:
  enum Group : size_t { kRead = 0, kWrite = 1 };
  class Lease;  // A lane taken for one call, given back when the call returns.

  std::vector<std::unique_ptr<RemoteStore>> lanes_;  // Read lanes, then write lanes.
  Mutex mu_;
  CondVar freed_;  // Signalled when a lane is given back.
  // Per group, the free lanes, the last given back on top (its connection is the most likely to
  // be warm, and calls one at a time always use the same lane).
  std::vector<size_t> free_[2] KV_GUARDED_BY(mu_);
  const Group writes_ = kRead;  // The group puts and deletes take.
};

}  // namespace kvtier
