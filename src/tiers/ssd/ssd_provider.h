// The SSD tier's TierProvider ("ssd"): SsdTierOptions (ssd_options.h) in, the tier behind its
// Tier adapter (ssd_tier_adapter.h) out. Registered in tiers/tier_registry.cc.
#pragma once

#include <span>

#include "core/option_spec.h"
#include "tiers/tier_provider.h"

namespace kvtier {

const TierProvider& SsdTierProvider();
// Its rows of the options table (ssd_option_rows.cc), as OptionRows() gives them.
std::span<const OptionSpec> SsdOptionRows();

}  // namespace kvtier
