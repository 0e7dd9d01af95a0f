// RemoteTierAdapter: a RemoteStore (tiers/remote_store.h: Redis, Redis Cluster, or the fake store
// of the tests) as a Tier (tiers/tier.h), named "remote".
//
// Shared between processes and persistent beyond this process; Contains is one batched Exists call
// that may fail per key (Unavailable, TimedOut). The store's client is synchronous, so the adapter
// gives ReadBatch and WriteBatch to a small pool of I/O threads of its own
// (RemoteTierPolicy::io_threads readers and as many writers): the call queues the batch and
// returns, the store is called and the callback runs on an I/O thread, and the issuing thread (an
// engine worker) never waits for the network. Reads and writes have threads of their own, so a read
// never queues behind writes; the writers run at a lower CPU priority
// (RemoteTierPolicy::write_nice): sealing and sending a put gives way to the process's other
// threads (a load, the inference engine's own compute) when both want a CPU. A call blocks only
// while its own kind's queue is full (back-pressure). Contains and Erase stay synchronous: they
// call the store on the calling thread (Lookup needs Contains's answer before it returns; Erase is
// rare). The tier's admission filter and write budget live here (the store has none): a write the
// filter does not admit is skipped with Aborted, one over the budget with Busy, and a key Contains
// finds absent counts as a request for the filter, as a miss does for the SSD tier's. A value that
// fails verification is a miss with `corrupt` set.
//
// Shutdown: Close (and the destructor, for an adapter not closed) stops the I/O threads. A batch
// an I/O thread is running completes as usual; every batch still queued completes too, without
// calling the store, each item Unavailable ("remote tier closed"); a batch given after Close
// completes the same way on the calling thread. No callback is lost or run twice.
//
// Thread safety: safe for concurrent calls; callbacks run on the adapter's I/O threads (or on the
// calling thread after Close) and must not call back into the adapter. Ownership: the store is
// owned or borrowed (it must then outlive the adapter); the clock is borrowed.
#pragma once

#include <atomic>
#include <functional>
#include <memory>

#include "core/limits.h"
#include "core/mutex.h"
#include "core/thread_pool.h"
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
  // Threads that call the store for ReadBatch, and as many again for WriteBatch;
  // [1, kRemoteIoThreadsMax]. Each holds one connection of the store busy at a time.
  uint32_t io_threads = kRemoteIoThreadsDefault;
  // Added to the writer threads' nice value (core/thread_priority.h); [0, kNiceMax].
  int write_nice = 0;
  bool write_idle = false;  // The writer threads also run under SCHED_IDLE.
};

class RemoteTierAdapter final : public Tier {
 public:
  // Borrows `store`.
  RemoteTierAdapter(RemoteStore* store, const RemoteTierPolicy& policy);
  // Owns `store`.
  RemoteTierAdapter(std::unique_ptr<RemoteStore> store, const RemoteTierPolicy& policy);
  // Closes (see "Shutdown" above), then releases an owned store.
  ~RemoteTierAdapter() override;

  RemoteStore* store() { return store_; }

  // Tier.
  std::string_view name() const override { return "remote"; }
  TierCapabilities capabilities() const override;
  size_t batch_max() const override { return kRemoteBatchMax; }
  uint64_t ReadBufferBytes(uint64_t payload_bytes) const override { return payload_bytes; }
  uint64_t PayloadOffset() const override { return 0; }
  void ReadBatch(std::span<TierRead> reads, Callback done) override;
  void WriteBatch(std::span<TierWrite> writes, Callback done) override;
  Status Contains(std::span<TierContains> items) override;
  Status Erase(std::span<const BlockKey> keys) override;
  // Nothing to do: a put is complete when the store acknowledged it.
  Status Flush() override { return Status::Ok(); }
  TierStoreStats Stats() override;
  // Stops the I/O threads: queued batches complete Unavailable, later ones on the calling thread.
  Status Close() override;

 private:
  enum class Lane : uint8_t { kRead, kWrite };
  // Queues `run` on an I/O thread of `lane`; when the adapter is closed (or closes before the
  // batch starts) `refuse` runs instead. Exactly one of them runs, once.
  void Submit(Lane lane, std::function<void()> run, std::function<void()> refuse);
  // Submits `items` to be run by `run` (RunReads, RunWrites), or refused item by item.
  template <typename Item>
  void SubmitBatch(Lane lane, std::span<Item> items, Callback done,
                   void (RemoteTierAdapter::*run)(std::span<Item>, const Callback&));
  void RunReads(std::span<TierRead> reads, const Callback& done);
  void RunWrites(std::span<TierWrite> writes, const Callback& done);

  std::unique_ptr<RemoteStore> owned_;
  RemoteStore* const store_;
  Clock* const clock_;  // The write budget's; null without one.
  std::unique_ptr<ssd::AdmissionFilter> admission_;  // Null: admit everything.
  std::unique_ptr<ssd::WriteBudget> budget_;         // Null: unlimited.
  std::atomic<uint64_t> not_admitted_{0};
  std::atomic<uint64_t> over_budget_{0};
  std::atomic<bool> closed_{false};  // Set by Close: queued batches are refused.
  // One lane's I/O threads, null once closed, under a mutex of its own: a call that waits for
  // room in the writers' full queue holds only the writers' mutex, never a read's way.
  struct IoThreads {
    Mutex mu;
    std::unique_ptr<ThreadPool> pool KV_GUARDED_BY(mu);
  };
  // Readers and writers, indexed by Lane. Declared last: destroyed (joined) first.
  IoThreads io_[2];
};

}  // namespace kvtier
