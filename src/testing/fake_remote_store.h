// FakeRemoteStore: a RemoteStore (tiers/remote_store.h) in process memory with injectable
// faults, so that the engine's remote tier (Lookup's batched Exists, Load's Get, write-through
// and write-back Puts, the circuit breaker, a corrupt value read as a miss) is tested where no
// Redis runs, deterministically.
//
// It behaves as RedisStore does where a caller can tell:
// - a value is stored as RedisStore stores a plaintext one (EncodeRemoteValue: the SSD record
//   header, then the payload) and checked on Get with VerifyRemoteValue against
//   options.layout_digest, so a damaged value is never returned: it is a Corruption miss counted
//   in Stats().corrupt (a well-formed value of another key or layout digest: mismatched);
// - a Put's TTL expires on the injected clock's wall time; an expired value is absent;
// - a batch over kRemoteBatchMax or a payload over kRemoteValueBytesMax is InvalidArgument with
//   no entry touched; other failures are per entry, and gets = hits + misses;
// - the values together hold at most capacity_bytes; a Put past it fails with NoSpace, as
//   Redis's OOM answer does;
// - one circuit breaker (tiers/circuit_breaker.h) stands in front of the whole store: calls that
//   fail with Unavailable or TimedOut count against it, and while it is open a call fails at once
//   with Unavailable, without reaching the store or sleeping. Stats() reports its state.
//
// Faults (ArmFault), counted over matching calls from when each was armed, as FaultInjectionEnv
// counts operations:
// - kUnavailable: every entry of the call fails with Unavailable, as when the node is down;
// - kSlow: the call first sleeps `delay_us` on the clock. When delay_us reaches
//   options.timeout_us it sleeps timeout_us instead and every entry fails with TimedOut, as a
//   command timeout does (a ManualClock makes this instant);
// - kCorrupt (Get only): the matching call's values are read with one bit flipped, so each
//   fails verification and is a Corruption miss; the stored values stay intact.
// CorruptStoredValue damages one stored value for good, as a SETRANGE on the server would, and
// Clear forgets everything, as a restart of a server without persistence.
//
// Thread safety: all methods may be called concurrently; one mutex guards the values, the faults
// and the breaker, and a slow call sleeps without holding it. Ownership: entries are borrowed for
// the duration of a call (RemoteStore's rule); the Clock and Logger in the options are borrowed
// and must outlive the store.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/limits.h"
#include "core/mutex.h"
#include "testing/armed_faults.h"
#include "tiers/circuit_breaker.h"
#include "tiers/remote_store.h"

namespace kvtier {

enum class RemoteOp : uint8_t { kPut = 0, kGet = 1, kExists = 2, kDelete = 3, kAny = 4 };

enum class RemoteFaultKind : uint8_t {
  kUnavailable = 0,  // Entries fail with Unavailable.
  kSlow = 1,         // The call sleeps first; at the timeout its entries fail with TimedOut.
  kCorrupt = 2,      // Get only: values are read with one bit flipped (Corruption misses).
};

struct RemoteFaultSpec {
  RemoteFaultKind kind = RemoteFaultKind::kUnavailable;
  RemoteOp op = RemoteOp::kAny;  // kCorrupt applies to kGet (and kAny means kGet) only.
  uint64_t nth = 1;              // 1 means the next matching call.
  FaultRepeat repeat = FaultRepeat::kOnce;
  uint64_t delay_us = 0;  // kSlow: how long each affected call takes.
};

struct FakeRemoteStoreOptions {
  // Values are encoded and verified under it. Any fixed digest works for one layout;
  // LayoutDigest(layout) (core/kv_layout.h) writes what RedisStore would.
  Hash256 layout_digest{};
  uint64_t capacity_bytes = 256 * kMiB;  // Encoded values (header + payload) held at most.
  // A kSlow call that takes this long or longer times out (RedisStoreOptions::command_timeout_ms).
  uint64_t timeout_us = 500'000;
  CircuitBreakerOptions breaker = {};
  Clock* clock = nullptr;    // Borrowed; nullptr means SystemClock(). TTLs, kSlow and the breaker.
  Logger* logger = nullptr;  // Borrowed; the breaker's state changes. May be nullptr.
};

class FakeRemoteStore final : public RemoteStore {
 public:
  explicit FakeRemoteStore(const FakeRemoteStoreOptions& options = {});

  FakeRemoteStore(const FakeRemoteStore&) = delete;
  FakeRemoteStore& operator=(const FakeRemoteStore&) = delete;

  // Arms a fault and returns its id. InvalidArgument for nth == 0, kCorrupt on an op other than
  // kGet or kAny, or more than 64 armed faults at once.
  Result<FaultId> ArmFault(const RemoteFaultSpec& spec) KV_EXCLUDES(mu_);
  void DisarmFault(FaultId id) KV_EXCLUDES(mu_);  // Unknown ids are ignored.
  void DisarmAllFaults() KV_EXCLUDES(mu_);
  // Calls the fault has affected; 0 for an unknown (or disarmed) id.
  uint64_t FiredCount(FaultId id) const KV_EXCLUDES(mu_);

  // Flips bit 0 of byte `byte_index` (modulo the value's size) of the stored value of `key`.
  // NotFound when there is none.
  Status CorruptStoredValue(const BlockKey& key, uint64_t byte_index) KV_EXCLUDES(mu_);
  // Whether a live value of `key` is stored (no fault, breaker or count is involved).
  bool Contains(const BlockKey& key) KV_EXCLUDES(mu_);
  size_t value_count() const KV_EXCLUDES(mu_);
  void Clear() KV_EXCLUDES(mu_);

  // RemoteStore.
  Status Put(std::span<RemotePut> entries) override KV_EXCLUDES(mu_);
  Status Get(std::span<RemoteGet> entries) override KV_EXCLUDES(mu_);
  Status Exists(std::span<RemoteExists> entries) override KV_EXCLUDES(mu_);
  Status Delete(std::span<RemoteDelete> entries) override KV_EXCLUDES(mu_);
  RemoteStoreStats Stats() const override KV_EXCLUDES(mu_);

 private:
  struct Value {
    std::vector<std::byte> bytes;  // EncodeRemoteValue's output.
    uint64_t expiry_wall_us = 0;   // 0: none.
  };
  // What the armed faults make of one call.
  struct CallFaults {
    bool unavailable = false;
    bool corrupt = false;
    uint64_t delay_us = 0;
  };

  // Passes the breaker, applies kUnavailable and kSlow (sleeping outside the mutex) and records
  // the outcome with the breaker. Ok when the store answers; otherwise the status of every entry,
  // already counted for `entries` entries. *corrupt: whether a kCorrupt fault fired.
  Status Reach(RemoteOp op, size_t entries, bool* corrupt) KV_EXCLUDES(mu_);
  CallFaults DecideLocked(RemoteOp op) KV_REQUIRES(mu_);
  // The live value of `key`, or nullptr; an expired one is dropped.
  const Value* FindLocked(const BlockKey& key) KV_REQUIRES(mu_);
  void EraseLocked(const BlockKey& key) KV_REQUIRES(mu_);
  Status PutLocked(const RemotePut& p) KV_REQUIRES(mu_);
  void GetLocked(RemoteGet& g, bool corrupt) KV_REQUIRES(mu_);

  const FakeRemoteStoreOptions options_;
  Clock* const clock_;
  mutable Mutex mu_;
  std::unordered_map<BlockKey, Value> values_ KV_GUARDED_BY(mu_);
  uint64_t used_bytes_ KV_GUARDED_BY(mu_) = 0;  // Sum of values_' sizes; <= capacity_bytes.
  ArmedFaults<RemoteFaultSpec> faults_ KV_GUARDED_BY(mu_);
  CircuitBreaker breaker_ KV_GUARDED_BY(mu_);
  RemoteStoreStats stats_ KV_GUARDED_BY(mu_);
};

}  // namespace kvtier
