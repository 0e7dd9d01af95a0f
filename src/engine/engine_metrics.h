// The engine's counters in the Prometheus text exposition format (version 0.0.4), for a scrape
// endpoint or a file a node exporter's textfile collector reads: hits and blocks per tier, bytes
// used per tier, evictions, write-backs, failed writes, lookups and hit tokens, loads and stores,
// corrupt blocks, remote-tier errors and breaker state, prediction accuracy.
//
// Thread safety: a pure function of the stats it is given.
#pragma once

#include <string>

#include "engine/engine.h"

namespace kvtier {

// Every metric is prefixed "kvtier_"; per-tier series carry a tier="host|ssd|remote|..." label.
// Counters end in _total; gauges (bytes used, capacity, blocks, accuracy, breaker) do not.
std::string MetricsText(const EngineStats& stats);

}  // namespace kvtier
