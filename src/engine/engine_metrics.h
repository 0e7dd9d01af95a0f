// The engine's counters in the Prometheus text exposition format (version 0.0.4), for a scrape
// endpoint or a file a node exporter's textfile collector reads: every row of the stats table
// (stats_table.h, docs/stats.md) with its help text, and the remote store's own counters and
// breaker state.
//
// Thread safety: a pure function of the stats it is given.
#pragma once

#include <string>

#include "engine/engine.h"

namespace kvtier {

// Every metric is prefixed "kvtier_"; per-tier series carry a tier="host|ssd|remote|..." label.
// Counters end in _total; gauges (bytes used, capacity, blocks, accuracy, breaker) do not; times
// in microseconds are shown in seconds (_us becomes _seconds); timestamps are left out.
std::string MetricsText(const EngineStats& stats);

}  // namespace kvtier
