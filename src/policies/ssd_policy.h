// Write-side policies of the SSD tier that protect the drive's endurance:
// - AdmissionFilter: admits a block only after it was requested (stored or looked up) at least
//   N times, counted in a small fixed-size counting sketch with periodic halving (aging), so a
//   block seen once never costs a write (cf. KVBM's frequency >= 2 filter, dynamo #10062).
// - WriteBudget: a token bucket in bytes per second on the caller's monotonic clock (the Env
//   clock's NowMicros, passed in with each call); writes beyond it are skipped (this is a cache:
//   skipping is always allowed).
// Used by the SSD tier and by the engine's remote tier.
//
// Thread safety: both classes are internally synchronized. Ownership: neither borrows anything.
#pragma once

#include <cstdint>
#include <vector>

#include "core/block_key.h"
#include "core/mutex.h"

namespace kvtier {

// Which writes a tier below memory takes (the SSD tier's admission, the remote tier's).
enum class AdmissionMode : uint8_t {
  kAlways = 0,         // Every write is admitted.
  kAfterRequests = 1,  // Admitted once requested admission_requests times (writes + misses).
};

}  // namespace kvtier

namespace kvtier::ssd {

class AdmissionFilter {
 public:
  // threshold 0 or 1 admits everything. `slots` counters (rounded up to a power of two, at
  // least 64) of one byte each.
  AdmissionFilter(uint32_t threshold, uint32_t slots);

  // Counts one request for `key` (a lookup miss or a store attempt).
  void Record(const BlockKey& key) KV_EXCLUDES(mu_);
  // Counts one store attempt and says whether the block is admitted: its estimated count,
  // including this attempt, reached the threshold.
  bool RecordAndAdmit(const BlockKey& key) KV_EXCLUDES(mu_);

 private:
  uint32_t EstimateLocked(const BlockKey& key) const KV_REQUIRES(mu_);
  void IncrementLocked(const BlockKey& key) KV_REQUIRES(mu_);

  static constexpr int kHashes = 2;
  const uint32_t threshold_;
  const uint64_t mask_;
  Mutex mu_;
  std::vector<uint8_t> counters_ KV_GUARDED_BY(mu_);
  uint64_t increments_ KV_GUARDED_BY(mu_) = 0;
};

class WriteBudget {
 public:
  // bytes_per_s == 0 means unlimited. burst_bytes == 0 means one second of budget. The bucket
  // starts full at `now_micros` (monotonic microseconds, the clock every TryTake call uses).
  WriteBudget(uint64_t bytes_per_s, uint64_t burst_bytes, uint64_t now_micros);

  // Takes `bytes` tokens if they are available at `now_micros`; false (nothing taken) otherwise.
  // A time earlier than one already seen adds no tokens.
  bool TryTake(uint64_t bytes, uint64_t now_micros) KV_EXCLUDES(mu_);

 private:
  const uint64_t bytes_per_s_;
  const uint64_t burst_bytes_;
  Mutex mu_;
  uint64_t tokens_ KV_GUARDED_BY(mu_);
  uint64_t last_micros_ KV_GUARDED_BY(mu_);
};

}  // namespace kvtier::ssd
