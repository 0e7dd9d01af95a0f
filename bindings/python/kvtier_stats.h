// The Python classes of the engine's counters (EngineStats, TierStats) and kvtier._stats_fields(),
// derived from the stats table (engine/stats_table.h).
//
// Thread safety: called once, while the module is imported.
#pragma once

#include <pybind11/pybind11.h>

namespace kvtier::python {

// Registers TierStats, EngineStats and _stats_fields() on `m` (after the Tier enum).
void BindStats(pybind11::module_& m);

}  // namespace kvtier::python
