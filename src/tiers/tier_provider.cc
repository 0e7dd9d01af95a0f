#include "tiers/tier_provider.h"

#include <string>

#include "tiers/remote_store.h"

namespace kvtier {

Result<std::unique_ptr<Tier>> TierProvider::OpenTier(const std::any&,
                                                     const TierOpenContext&) const {
  return Status::NotSupported(std::string(name()) + ": a store of the remote tier, not a tier");
}

Result<std::unique_ptr<RemoteStore>> TierProvider::OpenStore(const std::any&,
                                                             const TierOpenContext&,
                                                             uint32_t) const {
  return Status::NotSupported(std::string(name()) + ": a tier of its own, not a remote store");
}

std::optional<RemoteKeyring>* TierProvider::StoreKeyring(std::any&) const { return nullptr; }

}  // namespace kvtier
