// JSON pieces that more than one reporting command prints (run, chat and demo with --json), so
// their keys stay the same everywhere (README.md documents them).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "runtime/cached_prefill.h"

namespace kvtier::cli {

// {"host": 3, "ssd": 2}: how many cached chunks came from each tier, in the order tiers first
// appear; {} when none.
inline nlohmann::ordered_json TierCountsJson(const std::vector<TierKind>& tiers) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const TierKind t : tiers) {
    const std::string name(TierKindName(t));
    j[name] = j.value(name, 0) + 1;
  }
  return j;
}

// What a prefill through the cache did: prompt_tokens, cached_tokens, computed_tokens,
// cached_chunks_per_tier, fell_back.
inline nlohmann::ordered_json PrefillJson(const runtime::CachedPrefillStats& s) {
  return {{"prompt_tokens", s.prompt_tokens},
          {"cached_tokens", s.cached_tokens},
          {"computed_tokens", s.computed_tokens},
          {"cached_chunks_per_tier", TierCountsJson(s.chunk_tiers)},
          {"fell_back", s.fell_back}};
}

// What each tier holds and did during the run: {"host": {"blocks", "used_bytes", "evictions",
// "writebacks", "write_failures", and "writeback_lag_us" for a write-back tier with an age
// limit}, "ssd": {...}, ...}, fastest tier first.
inline nlohmann::ordered_json TierActivityJson(const EngineStats& stats) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const TierStats& t : stats.tiers) {
    nlohmann::ordered_json& tier = j[std::string(TierKindName(t.kind))];
    tier = {{"blocks", t.blocks},
            {"used_bytes", t.used_bytes},
            {"evictions", t.evictions},
            {"writebacks", t.writebacks},
            {"write_failures", t.write_failures}};
    // Write-back tiers with an age limit: how far the write-back horizon trails the end of the run.
    if (t.writeback_horizon_us != 0) tier["writeback_lag_us"] = t.writeback_lag_us;
  }
  return j;
}

}  // namespace kvtier::cli
