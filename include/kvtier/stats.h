// EngineStats: the engine's counters (Engine::Stats), as public value types. Counters count from
// Open; fields marked "gauge" are the value now. docs/stats.md lists every field (the engine's
// stats table; a build check keeps these structs equal to it).
//
// Thread safety: value types; Engine::Stats returns a snapshot.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvtier::api {

// Where a block is; the values are those of the C API's kvtier_tier_t.
enum class TierKind : uint8_t {
  kNone = 0,  // Not cached.
  kDevice = 1,
  kHost = 2,
  kCxl = 3,
  kSsd = 4,
  kRemote = 5,
};
std::string_view TierKindName(TierKind kind);  // "none", "device", "host", "cxl", "ssd", "remote".

enum class BreakerState : uint8_t { kClosed = 0, kOpen = 1, kHalfOpen = 2 };

struct TierStats {
  TierKind kind = TierKind::kNone;  // The tier's place in the stack.
  // Its name: a memory tier's kind ("device", "host", "cxl"); below memory, the name its tier
  // registered: "ssd", and the remote tier's store, "redis" or "fs".
  std::string name;
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;  // Gauge.
  uint64_t blocks = 0;      // Gauge.
  uint64_t hits = 0;        // Blocks served from this tier.
  uint64_t evictions = 0;   // Blocks removed to make room.
  uint64_t writebacks = 0;  // Dirty blocks written to the tier below (remote: blocks put).
  uint64_t promotions = 0;  // Blocks copied up into this tier.
  uint64_t write_failures = 0;  // Blocks not written because of an error (not refusals).
  // Write-back tiers with an age limit (0 elsewhere): every Store that completed before the
  // horizon (steady clock, microseconds) has its blocks on the tier, except those counted in
  // write_failures, refused, expired or removed; the lag is how far it trails the Stats() call.
  uint64_t writeback_horizon_us = 0;
  uint64_t writeback_lag_us = 0;
  // Tiers below memory that count them (the SSD tier): bytes of the records written to the tier
  // (headers and padding included), and of those the bytes the tier copied into buffers of its
  // own before the disk (0 when every record went from the engine's encode buffer).
  uint64_t write_bytes = 0;
  uint64_t staged_write_bytes = 0;
};

// The remote store's own counters (docs/stats.md, scope "remote store"; a build check keeps this
// struct equal to the table).
struct RemoteStats {
  uint64_t gets = 0, hits = 0, misses = 0;
  uint64_t corrupt = 0;        // Values that failed their checks (misses).
  uint64_t mismatched = 0;     // Well-formed values for another key or layout (misses).
  uint64_t auth_failures = 0;  // Sealed values that failed authentication (misses).
  uint64_t puts = 0;
  uint64_t errors = 0, timeouts = 0, reconnects = 0, breaker_trips = 0;
  uint32_t breakers_open = 0;                          // Gauge: nodes whose breaker is not closed.
  BreakerState breaker_state = BreakerState::kClosed;  // Gauge: the worst over all nodes.
  uint64_t redirects_moved = 0, redirects_ask = 0, redirects_refused = 0;
  uint64_t topology_refreshes = 0;
  // Endpoints named by CLUSTER SLOTS, MOVED or ASK on a host that is neither a seed's nor in
  // cluster_allowed_hosts: refused, never connected to.
  uint64_t endpoints_refused = 0;
};

struct EngineStats {
  uint64_t lookups = 0, lookup_hit_tokens = 0, lookup_tokens = 0;
  uint64_t loads = 0, load_blocks = 0, load_failures = 0;
  uint64_t stores = 0, store_blocks = 0, busy_rejections = 0;
  uint64_t prefetches = 0, prefetch_blocks = 0;
  uint64_t corrupt_blocks = 0;   // Blocks refused by verification (served as misses).
  std::vector<TierStats> tiers;  // Fastest first; the remote tier last.
  // Remote tier: failed puts, puts refused by admission or over the write budget, lookups whose
  // remote check failed (served as misses).
  uint64_t remote_put_errors = 0, remote_not_admitted = 0, remote_over_budget = 0;
  uint64_t remote_lookup_errors = 0;
  std::optional<RemoteStats> remote;  // With a remote tier.
  uint64_t background_writebacks = 0;  // Dirty blocks the cleaner wrote to the SSD.
  // Bytes copied out of memory slots into staging buffers before an SSD or remote write (device
  // slots only; host and CXL slots are encoded where they are).
  uint64_t staged_copy_bytes = 0;
  uint64_t ratio_samples = 0, ratio_cv_events = 0;  // The SSD codec's compression-ratio monitor.
  // Access prediction (EngineOptions::prediction; docs/engine.md, "Access prediction").
  uint64_t prediction_accesses = 0, prediction_scored = 0, prediction_hits = 0;
  double prediction_accuracy = 0;  // prediction_hits / prediction_scored (0 before any).
  uint64_t prediction_promoted_blocks = 0, prediction_useful_blocks = 0;
  uint64_t hints = 0, hint_promoted_blocks = 0, hint_useful_blocks = 0;
  uint64_t prediction_dropped_blocks = 0;
  uint64_t prediction_sessions = 0;       // Gauge.
  uint64_t prediction_tasks_pending = 0;  // Gauge.
};

}  // namespace kvtier::api
