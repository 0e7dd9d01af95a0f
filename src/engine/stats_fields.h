// Copies of EngineStats' counters into the public mirrors that spell the fields the same way (the
// C API's kvtier_engine_stats_t, the C++ API's api::EngineStats), written once for both.
//
// Thread safety: pure functions.
#pragma once

#include "engine/engine.h"

namespace kvtier {

// The access-prediction counters (EngineStats' prediction_* and hint_* fields).
template <typename Out>
void CopyPredictionStats(const EngineStats& in, Out* out) {
  out->prediction_accesses = in.prediction_accesses;
  out->prediction_scored = in.prediction_scored;
  out->prediction_hits = in.prediction_hits;
  out->prediction_accuracy = in.prediction_accuracy;
  out->prediction_promoted_blocks = in.prediction_promoted_blocks;
  out->prediction_useful_blocks = in.prediction_useful_blocks;
  out->hints = in.hints;
  out->hint_promoted_blocks = in.hint_promoted_blocks;
  out->hint_useful_blocks = in.hint_useful_blocks;
  out->prediction_dropped_blocks = in.prediction_dropped_blocks;
  out->prediction_sessions = in.prediction_sessions;
  out->prediction_tasks_pending = in.prediction_tasks_pending;
}

}  // namespace kvtier
