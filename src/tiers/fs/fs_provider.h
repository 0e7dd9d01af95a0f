// The fs tier's TierProvider ("fs"): FsStoreOptions (fs_options.h) in, the store on a shared
// directory out (fs_store.h). Registered in tiers/tier_registry.cc.
#pragma once

#include <span>

#include "core/option_spec.h"
#include "tiers/tier_provider.h"

namespace kvtier {

const TierProvider& FsStoreProvider();
// Its rows of the options table (fs_option_rows.cc), as OptionRows() gives them.
std::span<const OptionSpec> FsOptionRows();

}  // namespace kvtier
