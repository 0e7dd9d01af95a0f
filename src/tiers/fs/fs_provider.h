// The fs tier's TierProvider ("fs"): FsStoreOptions (fs_options.h) in, the store on a shared
// directory out (fs_store.h). Registered in tiers/tier_registry.cc.
#pragma once

#include "tiers/tier_provider.h"

namespace kvtier {

const TierProvider& FsStoreProvider();

}  // namespace kvtier
