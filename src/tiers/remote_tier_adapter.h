// RemoteTierAdapter: a RemoteStore (tiers/remote_store.h: Redis, Redis Cluster, or the fake
// store of the tests) as a Tier (tiers/tier.h), named "remote".
//
// Shared between processes and persistent beyond this process; Contains is one batched Exists
// call that may fail per key (Unavailable, TimedOut). The store's client is synchronous, so every
// callback runs on the calling thread before the call returns. The tier's admission filter and
// write budget live here (the store has none): a write the filter does not admit is skipped with
// Aborted, one over the budget with Busy, and a key Contains finds absent counts as a request
// for the filter, as a miss does for the SSD tier's. A value that fails verification is a miss
// with `corrupt` set.
//
// Thread safety: safe for concurrent calls. Ownership: the store is owned or borrowed (it must
// then outlive the adapter); the clock is borrowed.
#pragma once

#include <atomic>
#include <memory>

#include "env/env.h"
#include "tiers/remote_store.h"
#include "policies/ssd_policy.h"
#include "tiers/tier.h"

namespace kvtier {

struct RemoteTierPolicy {
  // A write is admitted once its key was requested (written or missed) this many times; 0 or 1
  // admits everything without counting.
  uint32_t admission_requests = 0;
  uint32_t admission_slots = 1u << 16;    // Counters of the admission sketch.
  uint64_t write_budget_bytes_per_s = 0;  // 0 = unlimited.
  uint64_t write_budget_burst_bytes = 0;  // 0 = one second of budget.
  Clock* clock = nullptr;                 // The write budget's; required with a budget.
};

class RemoteTierAdapter final : public Tier {
 public:
  // Borrows `store`.
  RemoteTierAdapter(RemoteStore* store, const RemoteTierPolicy& policy);
  // Owns `store`.
  RemoteTierAdapter(std::unique_ptr<RemoteStore> store, const RemoteTierPolicy& policy);

  RemoteStore* store() { return store_; }

  // Tier.
  std::string_view name() const override { return "remote"; }
  TierCapabilities capabilities() const override;
  size_t batch_max() const override { return kRemoteBatchMax; }
  uint64_t ReadBufferBytes(uint64_t payload_bytes) const override { return payload_bytes; }
  void ReadBatch(std::span<TierRead> reads, Callback done) override;
  void WriteBatch(std::span<TierWrite> writes, Callback done) override;
  Status Contains(std::span<TierContains> items) override;
  Status Erase(std::span<const BlockKey> keys) override;
  // Nothing to do: a put is complete when the store acknowledged it.
  Status Flush() override { return Status::Ok(); }
  TierStoreStats Stats() override;

 private:
  std::unique_ptr<RemoteStore> owned_;
  RemoteStore* const store_;
  Clock* const clock_;  // The write budget's; null without one.
  std::unique_ptr<ssd::AdmissionFilter> admission_;  // Null: admit everything.
  std::unique_ptr<ssd::WriteBudget> budget_;         // Null: unlimited.
  std::atomic<uint64_t> not_admitted_{0};
  std::atomic<uint64_t> over_budget_{0};
};

}  // namespace kvtier
