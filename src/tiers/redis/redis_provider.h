// The Redis store's TierProvider ("redis"): RedisStoreOptions (redis_options.h) in, the store on
// one server or cluster out, as lanes of connections (tiers/remote_lanes.h). Registered in
// tiers/tier_registry.cc.
#pragma once

#include <span>

#include "core/option_spec.h"
#include "tiers/tier_provider.h"

namespace kvtier {

const TierProvider& RedisStoreProvider();
// Its rows of the options table (redis_option_rows.cc), as OptionRows() gives them.
std::span<const OptionSpec> RedisOptionRows();

}  // namespace kvtier
