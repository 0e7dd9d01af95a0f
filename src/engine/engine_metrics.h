// The engine's counters in the Prometheus text exposition format (version 0.0.4), for a scrape
// endpoint or a file a node exporter's textfile collector reads: every row of the stats table
// (stats_table.h, docs/stats.md) with its help text, the remote store's rows among them.
//
// Thread safety: a pure function of the stats it is given.
#pragma once

#include <string>
#include <string_view>

#include "engine/engine.h"

namespace kvtier {

// Every metric is prefixed "kvtier_"; per-tier series carry a tier="host|ssd|remote|..." label.
// Counters end in _total; gauges (bytes used, capacity, blocks, accuracy, breaker) do not; times
// in microseconds are shown in seconds (_us becomes _seconds); timestamps are left out.
// The remote store's rows are kvtier_remote_<name>; kvtier_remote_corrupt_total counts the
// mismatched values too (as before they had a family of their own) and its HELP says so with
// this sentence after the row's help.
std::string MetricsText(const EngineStats& stats);
inline constexpr std::string_view kRemoteCorruptAlsoMismatched = " Counts mismatched values too.";

}  // namespace kvtier
