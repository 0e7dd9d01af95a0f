// Copies of the stats table's rows (stats_table.h) into the public mirrors that spell the fields
// the same way (the C API's kvtier_engine_stats_t and kvtier_remote_stats_t, the C++ API's
// api::EngineStats and api::RemoteStats), expanded from the table so that a row missing from a
// mirror fails to compile.
//
// Thread safety: pure functions.
#pragma once

#include <type_traits>

#include "engine/stats_table.h"

namespace kvtier {

// Every engine row (KVTIER_ENGINE_STATS) of `in` into the field of the same name of `*out`.
template <typename Out>
void CopyEngineStatRows(const EngineStats& in, Out* out) {
#define KVTIER_STATS_COPY(name, type, kind, unit, scope, help) out->name = in.name;
  KVTIER_ENGINE_STATS(KVTIER_STATS_COPY)
#undef KVTIER_STATS_COPY
}

// Every per-tier row (KVTIER_TIER_STATS) of `in` into the field of the same name of `*out`.
template <typename Out>
void CopyTierStatRows(const TierStats& in, Out* out) {
#define KVTIER_STATS_COPY(name, type, kind, unit, scope, help) out->name = in.name;
  KVTIER_TIER_STATS(KVTIER_STATS_COPY)
#undef KVTIER_STATS_COPY
}

// Whether a mirror's field of type Field holds a row of type Row: the same type, or for an enum
// row (breaker_state) an enum of the mirror's own (its values are checked where it is declared).
template <typename Field, typename Row>
inline constexpr bool kMirrorsRow =
    std::is_same_v<Field, Row> || (std::is_enum_v<Row> && std::is_enum_v<Field>);

// `in` into a mirror's field: itself, or an enum row cast to the mirror's enum.
template <typename Field, typename Row>
void CopyStatValue(Row in, Field* out) {
  static_assert(kMirrorsRow<Field, Row>);
  *out = static_cast<Field>(in);
}

// Every remote store row (KVTIER_REMOTE_STORE_STATS) of `in` into the field of the same name of
// `*out`.
template <typename Out>
void CopyRemoteStoreStatRows(const RemoteStoreStats& in, Out* out) {
#define KVTIER_STATS_COPY(name, type, kind, unit, scope, help) CopyStatValue(in.name, &out->name);
  KVTIER_REMOTE_STORE_STATS(KVTIER_STATS_COPY)
#undef KVTIER_STATS_COPY
}

// A static_assert that the struct `Out` has a member `name` of the row's `type` (kMirrorsRow).
#define KVTIER_STATS_CHECK_MIRROR_ROW(Out, name, type)                                    \
  static_assert(::kvtier::kMirrorsRow<decltype(Out::name), type>,                         \
                #Out "::" #name " is missing or not of the row's type");

}  // namespace kvtier
