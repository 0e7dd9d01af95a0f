// The engine's stats table: one row per counter of EngineStats, of TierStats and of the remote
// store's RemoteStoreStats (EngineStats::remote), from which every surface is derived or checked (docs/stats.md, docs/architecture.md "The stats table").
//
// A row gives the counter's name (the field of EngineStats / TierStats, and the same name in C,
// in the public C++ stats, in Python and in the service's JSON), its C++ type, its kind, its unit,
// where it applies and a one-line help text. The rows are X-macro lists, so that each surface
// expands them into code and a row that does not reach a surface fails to compile there:
//
//   - derived: the public C++ copy (public_api.cc), the C copy (c_api.cc), the Python attributes
//     and kvtier._stats_fields() (bindings/python), the Prometheus text (engine_metrics.cc), the
//     service's JSON that `kvtier ctl stats` prints (serve/server.cc) and docs/stats.md;
//   - checked: the C structs kvtier_engine_stats_t / kvtier_tier_stats_t / kvtier_remote_stats_t
//     (a stable ABI, written by hand) hold a field of each row's name and type and no field
//     outside the table (c_api.cc: offsets generated from the rows must tile the struct); the
//     public C++ structs, EngineStats and RemoteStoreStats have a member per row and no other
//     counter (a count of their members); the service's wire format carries every row (serve's
//     stats_wire_test; the remote store's rows are encoded from the table).
//
// The remote store's rows (scope "remote store") are the fields of EngineStats::remote, present with
// a remote tier: `remote` of the public C++ stats and of Python's stats, the struct `remote` (with
// `has_remote`) of kvtier_engine_stats_t, the "remote" object of the JSON (null without one), the
// Prometheus families kvtier_remote_<name>. breaker_state is the one enum row: a gauge of
// BreakerState's value (0 closed, 1 open, 2 half-open); every surface shows it as that number (C as
// kvtier_breaker_state_t, the public C++ stats as api::BreakerState).
//
// Adding a counter: add the field to EngineStats (or TierStats, or RemoteStoreStats) and one row
// below; the compiler
// then names every surface that must take it (append it to the C struct, add it to
// include/kvtier/stats.h), and docs/stats.md is regenerated as its header says.
//
// Thread safety: the table is immutable; the visitors are pure functions of the stats given.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "engine/engine.h"

namespace kvtier {

enum class StatKind : uint8_t {
  kCounter,    // Counts from Open; only grows.
  kGauge,      // The value now.
  kRatio,      // A share in [0, 1] computed from other rows.
  kTimestamp,  // A point on the engine clock's monotonic time (meaningless outside the process).
};
std::string_view StatKindName(StatKind kind);  // "counter", "gauge", "ratio", "timestamp".

enum class StatScope : uint8_t {
  kEngine,           // One value for the engine.
  kRemote,           // One value, meaningful with a remote tier only.
  kTier,             // One value per tier (EngineStats::tiers).
  kAgeLimitedTier,   // Per tier, meaningful for write-back tiers with an age limit only.
  kRemoteStore,      // The remote store's own (EngineStats::remote), with a remote tier only.
};
// "engine", "remote", "tier", "age-limited tier", "remote store".
std::string_view StatScopeName(StatScope scope);

// X(name, type, kind, unit, scope, help): the counters of EngineStats, in its order.
#define KVTIER_ENGINE_STATS(X)                                                                    \
  X(lookups, uint64_t, kCounter, "calls", kEngine, "Lookups.")                                    \
  X(lookup_hit_tokens, uint64_t, kCounter, "tokens", kEngine, "Tokens lookups found cached.")     \
  X(lookup_tokens, uint64_t, kCounter, "tokens", kEngine, "Tokens asked for by lookups.")         \
  X(loads, uint64_t, kCounter, "calls", kEngine, "Loads.")                                        \
  X(load_blocks, uint64_t, kCounter, "blocks", kEngine, "Blocks loaded.")                         \
  X(load_failures, uint64_t, kCounter, "layers", kEngine,                                         \
    "Layers of loads that failed (recomputed by the caller).")                                    \
  X(stores, uint64_t, kCounter, "calls", kEngine, "Stores.")                                      \
  X(store_blocks, uint64_t, kCounter, "blocks", kEngine, "Blocks newly stored.")                  \
  X(busy_rejections, uint64_t, kCounter, "calls", kEngine,                                        \
    "Stores refused because every memory slot was busy.")                                         \
  X(prefetches, uint64_t, kCounter, "calls", kEngine, "Prefetch calls.")                          \
  X(prefetch_blocks, uint64_t, kCounter, "blocks", kEngine, "Blocks promoted by prefetch.")       \
  X(corrupt_blocks, uint64_t, kCounter, "blocks", kEngine,                                        \
    "Blocks refused by verification (served as misses).")                                         \
  X(remote_put_errors, uint64_t, kCounter, "blocks", kRemote, "Remote puts that failed.")         \
  X(remote_not_admitted, uint64_t, kCounter, "blocks", kRemote,                                   \
    "Remote puts refused by the admission filter.")                                               \
  X(remote_over_budget, uint64_t, kCounter, "blocks", kRemote,                                    \
    "Remote puts refused for going over the write budget.")                                       \
  X(remote_lookup_errors, uint64_t, kCounter, "calls", kRemote,                                   \
    "Remote lookups that failed (misses).")                                                       \
  X(background_writebacks, uint64_t, kCounter, "blocks", kEngine,                                 \
    "Dirty blocks the cleaner wrote to the SSD.")                                                 \
  X(staged_copy_bytes, uint64_t, kCounter, "bytes", kEngine,                                      \
    "Bytes copied out of memory slots into staging buffers before an SSD or remote write.")       \
  X(ratio_samples, uint64_t, kCounter, "blocks", kEngine,                                         \
    "Blocks the SSD codec's ratio monitor sampled.")                                              \
  X(ratio_cv_events, uint64_t, kCounter, "events", kEngine,                                       \
    "Compression-ratio variation events the SSD codec's ratio monitor raised.")                   \
  X(prediction_accesses, uint64_t, kCounter, "accesses", kEngine,                                 \
    "Lookups observed as accesses of a session.")                                                 \
  X(prediction_scored, uint64_t, kCounter, "accesses", kEngine,                                   \
    "Accesses that had a prediction made before them.")                                           \
  X(prediction_hits, uint64_t, kCounter, "accesses", kEngine,                                     \
    "Scored accesses whose session was in the prediction.")                                       \
  X(prediction_accuracy, double, kRatio, "", kEngine,                                             \
    "Share of scored accesses the predictor foresaw.")                                            \
  X(prediction_promoted_blocks, uint64_t, kCounter, "blocks", kEngine,                            \
    "Blocks promoted for predicted sessions.")                                                    \
  X(prediction_useful_blocks, uint64_t, kCounter, "blocks", kEngine,                              \
    "Promoted blocks that a later load served from memory.")                                      \
  X(hints, uint64_t, kCounter, "calls", kEngine, "Hint calls.")                                   \
  X(hint_promoted_blocks, uint64_t, kCounter, "blocks", kEngine, "Blocks promoted for hints.")    \
  X(hint_useful_blocks, uint64_t, kCounter, "blocks", kEngine,                                    \
    "Blocks promoted for hints that a later load served from memory.")                            \
  X(prediction_dropped_blocks, uint64_t, kCounter, "blocks", kEngine,                             \
    "Promotions given up: the queue was full, no clean host slot, or an unreadable block.")      \
  X(prediction_sessions, uint64_t, kGauge, "sessions", kEngine,                                   \
    "Sessions the access predictor remembers.")                                                   \
  X(prediction_tasks_pending, uint64_t, kGauge, "tasks", kEngine,                                 \
    "Promotion tasks queued or running.")

// X(name, type, kind, unit, scope, help): the counters of TierStats (its `kind` is the tier's
// name, not a counter), in its order.
#define KVTIER_TIER_STATS(X)                                                                      \
  X(capacity_bytes, uint64_t, kGauge, "bytes", kTier, "The tier's capacity in bytes.")            \
  X(used_bytes, uint64_t, kGauge, "bytes", kTier, "Bytes used in the tier.")                      \
  X(blocks, uint64_t, kGauge, "blocks", kTier, "Blocks held by the tier.")                        \
  X(hits, uint64_t, kCounter, "blocks", kTier, "Blocks served from the tier.")                    \
  X(evictions, uint64_t, kCounter, "blocks", kTier, "Blocks removed from the tier to make room.") \
  X(writebacks, uint64_t, kCounter, "blocks", kTier,                                              \
    "Dirty blocks written from the tier to the one below.")                                       \
  X(promotions, uint64_t, kCounter, "blocks", kTier, "Blocks copied up into the tier.")           \
  X(write_failures, uint64_t, kCounter, "blocks", kTier,                                          \
    "Blocks that were to be written into the tier and failed (I/O error, no space).")             \
  X(writeback_horizon_us, uint64_t, kTimestamp, "us", kAgeLimitedTier,                            \
    "Every Store that completed before this time has its blocks on the tier.")                    \
  X(writeback_lag_us, uint64_t, kGauge, "us", kAgeLimitedTier,                                    \
    "How far the tier's write-back horizon trails now: a Store older than this is on the "        \
    "tier (write-back tiers with an age limit only).")                                            \
  X(write_bytes, uint64_t, kCounter, "bytes", kTier,                                              \
    "Bytes of the records written to the tier, headers and padding included (tiers below "        \
    "memory that count them).")                                                                   \
  X(staged_write_bytes, uint64_t, kCounter, "bytes", kTier,                                       \
    "Of write_bytes, the bytes the tier copied into buffers of its own before the disk (0: "     \
    "every record went from the engine's encode buffer).")

// X(name, type, kind, unit, scope, help): the counters of RemoteStoreStats (the remote store's own,
// EngineStats::remote), in its order.
#define KVTIER_REMOTE_STORE_STATS(X)                                                              \
  X(gets, uint64_t, kCounter, "keys", kRemoteStore, "Keys asked of the remote store.")            \
  X(hits, uint64_t, kCounter, "keys", kRemoteStore, "Remote gets that found a usable value.")     \
  X(misses, uint64_t, kCounter, "keys", kRemoteStore,                                             \
    "Remote gets that found none (corrupt, mismatched and refused values included).")             \
  X(corrupt, uint64_t, kCounter, "keys", kRemoteStore,                                            \
    "Remote values that failed their CRC, size or format checks (misses).")                       \
  X(mismatched, uint64_t, kCounter, "keys", kRemoteStore,                                         \
    "Well-formed remote values for another key or layout digest (misses).")                       \
  X(auth_failures, uint64_t, kCounter, "keys", kRemoteStore,                                      \
    "Remote values refused by authentication (forged, moved, damaged) or naming an unknown key "  \
    "id (misses).")                                                                               \
  X(puts, uint64_t, kCounter, "keys", kRemoteStore, "Values put into the remote store.")          \
  X(errors, uint64_t, kCounter, "entries", kRemoteStore,                                          \
    "Remote entries that failed without an answer (unavailable or another error).")              \
  X(timeouts, uint64_t, kCounter, "entries", kRemoteStore, "Remote entries that timed out.")      \
  X(reconnects, uint64_t, kCounter, "connections", kRemoteStore,                                  \
    "Connections to remote nodes made again.")                                                    \
  X(breaker_trips, uint64_t, kCounter, "events", kRemoteStore,                                    \
    "Times a remote node's circuit breaker opened.")                                              \
  X(breakers_open, uint32_t, kGauge, "nodes", kRemoteStore,                                       \
    "Remote nodes whose circuit breaker is not closed.")                                          \
  X(breaker_state, BreakerState, kGauge, "state", kRemoteStore,                                   \
    "The worst circuit-breaker state over all remote nodes: 0 closed, 1 open, 2 half-open.")      \
  X(redirects_moved, uint64_t, kCounter, "redirects", kRemoteStore,                               \
    "MOVED redirects followed.")                                                                  \
  X(redirects_ask, uint64_t, kCounter, "redirects", kRemoteStore, "ASK redirects followed.")       \
  X(redirects_refused, uint64_t, kCounter, "redirects", kRemoteStore,                             \
    "MOVED/ASK redirects refused (a foreign host, or outside the cluster's slot map).")            \
  X(endpoints_refused, uint64_t, kCounter, "endpoints", kRemoteStore,                             \
    "Cluster endpoints refused: a host that is neither a seed's nor allowed.")                    \
  X(topology_refreshes, uint64_t, kCounter, "events", kRemoteStore,                               \
    "Times the cluster's slot map was read again.")

struct StatSpec {
  std::string_view name;  // The field's name on every surface.
  std::string_view type;  // "uint64_t", "double"; remote store rows also "uint32_t", "BreakerState".
  StatKind kind;
  std::string_view unit;  // "blocks", "bytes", "us", ... ("" for a ratio).
  StatScope scope;
  std::string_view help;  // One line.
};

// Every row: the engine's, the per-tier ones, then the remote store's.
std::span<const StatSpec> StatsTable();

// Calls f(spec, value) for each engine row, with the field's own type (uint64_t or double).
template <typename F>
void ForEachEngineStat(const EngineStats& stats, F&& f);
// Calls f(spec, value) for each per-tier row of `tier`.
template <typename F>
void ForEachTierStat(const TierStats& tier, F&& f);
// Calls f(spec, value) for each remote store row of `remote` (breaker_state as BreakerState).
template <typename F>
void ForEachRemoteStoreStat(const RemoteStoreStats& remote, F&& f);

// The number of members of the aggregate T (each member initialized by one initializer).
// Used to prove that a struct holds no member outside the table.
namespace stats_internal {
struct AnyMember {
  template <typename T>
  operator T() const;  // Declared only: used in unevaluated contexts.
};
template <typename T, typename... A>
consteval size_t MemberCount() {
  if constexpr (requires { T{A{}..., AnyMember{}}; }) {
    return MemberCount<T, A..., AnyMember>();
  } else {
    return sizeof...(A);
  }
}
#define KVTIER_STATS_COUNT_ROW(name, type, kind, unit, scope, help) +1
inline constexpr size_t kEngineRows = 0 KVTIER_ENGINE_STATS(KVTIER_STATS_COUNT_ROW);
inline constexpr size_t kTierRows = 0 KVTIER_TIER_STATS(KVTIER_STATS_COUNT_ROW);
inline constexpr size_t kRemoteStoreRows = 0 KVTIER_REMOTE_STORE_STATS(KVTIER_STATS_COUNT_ROW);
#undef KVTIER_STATS_COUNT_ROW
}  // namespace stats_internal
using stats_internal::MemberCount;

// EngineStats holds the rows plus `tiers` and `remote`; TierStats the rows plus `kind` and `name`.
// A counter added to either without a row fails here.
static_assert(MemberCount<EngineStats>() == stats_internal::kEngineRows + 2,
              "every EngineStats counter needs a row in KVTIER_ENGINE_STATS");
static_assert(MemberCount<TierStats>() == stats_internal::kTierRows + 2,
              "every TierStats counter needs a row in KVTIER_TIER_STATS");
static_assert(MemberCount<RemoteStoreStats>() == stats_internal::kRemoteStoreRows,
              "every RemoteStoreStats counter needs a row in KVTIER_REMOTE_STORE_STATS");
#define KVTIER_STATS_CHECK_TYPE(Struct, name, type)                                    \
  static_assert(std::is_same_v<decltype(Struct::name), type>, #Struct "::" #name " is " \
                                                                     "not the row's type");
#define KVTIER_STATS_CHECK_ENGINE(name, type, kind, unit, scope, help) \
  KVTIER_STATS_CHECK_TYPE(EngineStats, name, type)
#define KVTIER_STATS_CHECK_TIER(name, type, kind, unit, scope, help) \
  KVTIER_STATS_CHECK_TYPE(TierStats, name, type)
#define KVTIER_STATS_CHECK_REMOTE_STORE(name, type, kind, unit, scope, help) \
  KVTIER_STATS_CHECK_TYPE(RemoteStoreStats, name, type)
KVTIER_ENGINE_STATS(KVTIER_STATS_CHECK_ENGINE)
KVTIER_TIER_STATS(KVTIER_STATS_CHECK_TIER)
KVTIER_REMOTE_STORE_STATS(KVTIER_STATS_CHECK_REMOTE_STORE)
#undef KVTIER_STATS_CHECK_ENGINE
#undef KVTIER_STATS_CHECK_TIER
#undef KVTIER_STATS_CHECK_REMOTE_STORE

// The row of `name`, spelled as in the table.
#define KVTIER_STATS_SPEC(name, type, kind, unit, scope, help) \
  StatSpec{#name, #type, StatKind::kind, unit, StatScope::scope, help}

template <typename F>
void ForEachEngineStat(const EngineStats& stats, F&& f) {
#define KVTIER_STATS_VISIT(name, type, kind, unit, scope, help) \
  f(KVTIER_STATS_SPEC(name, type, kind, unit, scope, help), stats.name);
  KVTIER_ENGINE_STATS(KVTIER_STATS_VISIT)
#undef KVTIER_STATS_VISIT
}

template <typename F>
void ForEachTierStat(const TierStats& tier, F&& f) {
#define KVTIER_STATS_VISIT(name, type, kind, unit, scope, help) \
  f(KVTIER_STATS_SPEC(name, type, kind, unit, scope, help), tier.name);
  KVTIER_TIER_STATS(KVTIER_STATS_VISIT)
#undef KVTIER_STATS_VISIT
}

template <typename F>
void ForEachRemoteStoreStat(const RemoteStoreStats& remote, F&& f) {
#define KVTIER_STATS_VISIT(name, type, kind, unit, scope, help) \
  f(KVTIER_STATS_SPEC(name, type, kind, unit, scope, help), remote.name);
  KVTIER_REMOTE_STORE_STATS(KVTIER_STATS_VISIT)
#undef KVTIER_STATS_VISIT
}

// The stats as one JSON object: the engine rows by name, then "tiers": [{"kind": "host", the
// per-tier rows}, ...], then "remote": {the remote store rows} or null without a remote tier (the
// service's `ctl stats` reply; keys are the rows' names; breaker_state as its number).
std::string StatsJson(const EngineStats& stats);

// docs/stats.md: the table as Markdown (a generated file; stats_table_test compares).
std::string StatsMarkdown();

}  // namespace kvtier
