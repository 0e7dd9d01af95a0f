// Test stats for the stats table's tests (stats_table_test, serve's stats_wire_test).
//
// Thread safety: pure functions.
#pragma once

#include <initializer_list>
#include <string>
#include <type_traits>

#include "engine/stats_table.h"

namespace kvtier {

// A row's test value `v` as the row's type; the enum row (breaker_state) gets kHalfOpen, its one
// value that is neither the default nor every other row's.
template <typename T>
T DistinctValue(uint64_t v) {
  if constexpr (std::is_enum_v<T>) {
    return static_cast<T>(2);
  } else {
    return static_cast<T>(v);
  }
}

// Remote store stats whose rows hold distinct values: first, first + 1, ... in table order.
inline RemoteStoreStats DistinctRemoteStats(uint64_t first = 5000) {
  RemoteStoreStats r;
  uint64_t next = first;
#define KVTIER_TEST_SET(name, type, kind, unit, scope, help) r.name = DistinctValue<type>(next++);
  KVTIER_REMOTE_STORE_STATS(KVTIER_TEST_SET)
#undef KVTIER_TEST_SET
  return r;
}

// Stats whose rows hold distinct values: first, first + 1, ... in table order (the engine rows,
// then the per-tier rows of each tier of `tiers`, in that order).
inline EngineStats DistinctStats(std::initializer_list<TierKind> tiers, uint64_t first = 1000) {
  EngineStats s;
  uint64_t next = first;
#define KVTIER_TEST_SET(name, type, kind, unit, scope, help) s.name = static_cast<type>(next++);
  KVTIER_ENGINE_STATS(KVTIER_TEST_SET)
  for (TierKind tier_kind : tiers) {
    TierStats& t = s.tiers.emplace_back();
    t.kind = tier_kind;
    // The remote tier's name is its store's (here Redis'), a memory tier's its kind's.
    t.name = tier_kind == TierKind::kRemote ? "redis" : std::string(TierKindName(tier_kind));
#define KVTIER_TEST_SET_TIER(name, type, kind, unit, scope, help) t.name = next++;
    KVTIER_TIER_STATS(KVTIER_TEST_SET_TIER)
#undef KVTIER_TEST_SET_TIER
  }
#undef KVTIER_TEST_SET
  return s;
}

}  // namespace kvtier
