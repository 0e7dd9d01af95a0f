// The SSD tier's TierProvider ("ssd"): SsdTierOptions (ssd_options.h) in, the tier behind its
// Tier adapter (ssd_tier_adapter.h) out. Registered in tiers/tier_registry.cc.
#pragma once

#include "tiers/tier_provider.h"

namespace kvtier {

const TierProvider& SsdTierProvider();

}  // namespace kvtier
