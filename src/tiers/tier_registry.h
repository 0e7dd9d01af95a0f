// The registry of the tiers below memory: every TierProvider this build has, by name
// (tier_registry.cc lists them; kvtier_tier_registry links them all).
//
// Thread safety: the registry is immutable.
#pragma once

#include <span>
#include <string_view>

#include "tiers/tier_options.h"
#include "tiers/tier_provider.h"

namespace kvtier {

// Every registered provider, in the order the engine stacks them (fastest first).
std::span<const TierProvider* const> TierProviders();

// The provider registered as `name`; nullptr when none is.
const TierProvider* FindTierProvider(std::string_view name);

// The keyring field of the store `stores` holds (RemoteTierOptions::stores, one entry), through
// its provider's StoreKeyring; nullptr when there is none or its provider is not registered.
std::optional<RemoteKeyring>* RemoteStoreKeyring(TierOptionsSet& stores);

}  // namespace kvtier
