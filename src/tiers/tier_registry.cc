#include "tiers/tier_registry.h"

#include <array>

#include "tiers/fs/fs_provider.h"
#include "tiers/redis/redis_provider.h"
#include "tiers/ssd/ssd_provider.h"

namespace kvtier {

std::span<const TierProvider* const> TierProviders() {
  // One line per tier below memory.
  static const std::array<const TierProvider*, 3> providers = {
      &SsdTierProvider(),
      &RedisStoreProvider(),
      &FsStoreProvider(),
  };
  return providers;
}

const TierProvider* FindTierProvider(std::string_view name) {
  for (const TierProvider* p : TierProviders()) {
    if (p->name() == name) return p;
  }
  return nullptr;
}

std::optional<RemoteKeyring>* RemoteStoreKeyring(TierOptionsSet& stores) {
  if (stores.size() != 1) return nullptr;
  TierOptionsSet::Entry& entry = stores.entries().front();
  const TierProvider* p = FindTierProvider(entry.name);
  return p == nullptr ? nullptr : p->StoreKeyring(entry.options);
}

}  // namespace kvtier
