// The stats table (stats_table.h): its rows as data, the JSON the service replies with, and
// docs/stats.md.
#include "engine/stats_table.h"

#include <array>
#include <charconv>

namespace kvtier {
namespace {

constexpr auto kRows = std::to_array<StatSpec>({
#define KVTIER_STATS_ROW(name, type, kind, unit, scope, help) \
  KVTIER_STATS_SPEC(name, type, kind, unit, scope, help),
    KVTIER_ENGINE_STATS(KVTIER_STATS_ROW) KVTIER_TIER_STATS(KVTIER_STATS_ROW)
        KVTIER_REMOTE_STORE_STATS(KVTIER_STATS_ROW)
#undef KVTIER_STATS_ROW
});

std::string Number(uint64_t v) { return std::to_string(v); }
std::string Number(uint32_t v) { return std::to_string(v); }
std::string Number(BreakerState v) { return std::to_string(static_cast<unsigned>(v)); }

std::string Number(double v) {
  char text[32];
  const std::to_chars_result r = std::to_chars(text, text + sizeof(text), v);
  return std::string(text, r.ptr);
}

// `"name": value` pairs of the rows `visit` reaches, comma-separated.
template <typename Visit>
std::string Members(Visit visit) {
  std::string out;
  visit([&out](const StatSpec& spec, auto value) {
    out += (out.empty() ? "\"" : ", \"") + std::string(spec.name) + "\": " + Number(value);
  });
  return out;
}

}  // namespace

std::string_view StatKindName(StatKind kind) {
  switch (kind) {
    case StatKind::kCounter:
      return "counter";
    case StatKind::kGauge:
      return "gauge";
    case StatKind::kRatio:
      return "ratio";
    case StatKind::kTimestamp:
      return "timestamp";
  }
  return "?";
}

std::string_view StatScopeName(StatScope scope) {
  switch (scope) {
    case StatScope::kEngine:
      return "engine";
    case StatScope::kRemote:
      return "remote";
    case StatScope::kTier:
      return "tier";
    case StatScope::kAgeLimitedTier:
      return "age-limited tier";
    case StatScope::kRemoteStore:
      return "remote store";
  }
  return "?";
}

std::span<const StatSpec> StatsTable() { return kRows; }

std::string StatsJson(const EngineStats& stats) {
  std::string out =
      "{" + Members([&](auto f) { ForEachEngineStat(stats, f); }) + ", \"tiers\": [";
  for (size_t i = 0; i < stats.tiers.size(); ++i) {
    const TierStats& t = stats.tiers[i];
    // A name is a registered name, [a-z0-9_-] (IsTierName): nothing in it needs escaping.
    const std::string name = IsTierName(t.name) ? t.name : std::string(TierKindName(t.kind));
    out += std::string(i == 0 ? "" : ", ") + "{\"kind\": \"" + std::string(TierKindName(t.kind)) +
           "\", \"name\": \"" + name + "\", " + Members([&](auto f) { ForEachTierStat(t, f); }) +
           "}";
  }
  out += "], \"remote\": ";
  if (!stats.remote.has_value()) return out + "null}";
  return out + "{" + Members([&](auto f) { ForEachRemoteStoreStat(*stats.remote, f); }) + "}}";
}

std::string StatsMarkdown() {
  std::string out =
      "# Engine statistics\n\n"
      "<!-- Generated from src/engine/stats_table.h by StatsMarkdown(); stats_table_test fails\n"
      "     when this file differs. Regenerate: build/src/engine/stats_table_test\n"
      "     --gtest_filter='*Docs*' with KVTIER_WRITE_STATS_MD=docs/stats.md. -->\n\n"
      "Every counter of the engine (`Engine::Stats()`), from the one table all surfaces are\n"
      "derived from or checked against (docs/architecture.md, \"The stats table\"). The name is\n"
      "the field of `kvtier::api::EngineStats` (include/kvtier/stats.h), of the C struct\n"
      "`kvtier_engine_stats_t`, the attribute of Python's `engine.stats()` (listed by\n"
      "`kvtier._stats_fields()`) and the key of the `engine` object that `kvtier ctl stats`\n"
      "prints. Per-tier rows are fields of each entry of `tiers` (in C, of `tiers[i]` or the\n"
      "array `tier_<name>[i]`), beside the tier's `kind` (its place in the stack: device, host,\n"
      "cxl, ssd, remote) and `name` (in C `tier_names[i]`): a memory tier's kind, and below\n"
      "memory the name its tier registered, `ssd`, and the remote tier's store, `redis` or `fs`.\n"
      "The Prometheus text (`/metrics`, `--metrics-file`, `kvtier_metrics_text`) names each\n"
      "`kvtier_<name>`, per-tier ones `kvtier_tier_<name>` with the labels `tier` (the kind)\n"
      "and `name`; counters end in `_total`, times in microseconds are shown in\n"
      "seconds (`_us` becomes `_seconds`), timestamps are not exported, and remote rows\n"
      "appear with a remote tier only.\n\n"
      "The remote store's rows (scope `remote store`) are the fields of `remote`, present with a\n"
      "remote tier: `EngineStats::remote` in C++, `stats.remote` in Python (None without one),\n"
      "the struct `remote` of `kvtier_engine_stats_t` (valid when `has_remote` is 1), the\n"
      "`remote` object of the JSON (null without one). In Prometheus they are\n"
      "`kvtier_remote_<name>`; `kvtier_remote_corrupt_total` counts `corrupt` and `mismatched`\n"
      "together, as it did before `mismatched` was exported on its own.\n"
      "`breaker_state` is a number: 0 closed, 1 open, 2 half-open.\n\n"
      "## Adding a counter\n\n"
      "1. Add the field to `EngineStats` (or `TierStats`) in src/engine/engine.h and one row to\n"
      "   `KVTIER_ENGINE_STATS` (or `KVTIER_TIER_STATS`) in src/engine/stats_table.h: name,\n"
      "   type, kind, unit, scope, help. A remote store counter: the field to\n"
      "   `RemoteStoreStats` (src/tiers/remote_store.h) and a row to `KVTIER_REMOTE_STORE_STATS`;\n"
      "   the build then also asks for it in `kvtier::api::RemoteStats`, in C's\n"
      "   `kvtier_remote_stats_t` (appended) and on the service's wire (appended).\n"
      "2. Python, Prometheus, the service's JSON and the copies into the public structs follow\n"
      "   from the row. The build then fails until the field is added to\n"
      "   `kvtier::api::EngineStats` (include/kvtier/stats.h) and appended to\n"
      "   `kvtier_engine_stats_t` (include/kvtier/c_api.h: at the end, the struct is versioned\n"
      "   by its size; a per-tier row as an array `tier_<name>[KVTIER_STATS_TIERS_MAX]`, named\n"
      "   in c_api.cc's `KVTIER_C_TIER_ARRAY_ROWS`).\n"
      "3. Regenerate this file as its header says; stats_table_test fails until it matches.\n\n"
      "## The table\n\n"
      "| name | type | kind | unit | scope | description |\n"
      "|---|---|---|---|---|---|\n";
  for (const StatSpec& s : kRows) {
    out += "| `" + std::string(s.name) + "` | " + std::string(s.type) + " | " +
           std::string(StatKindName(s.kind)) + " | " + std::string(s.unit) + " | " +
           std::string(StatScopeName(s.scope)) + " | " + std::string(s.help) + " |\n";
  }
  return out;
}

}  // namespace kvtier
