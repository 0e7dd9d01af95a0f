#include "tiers/redis/redis_provider.h"

#include <utility>
#include <vector>

#include "tiers/redis/redis_options.h"
#include "tiers/redis/redis_store.h"
#include "tiers/remote_lanes.h"

namespace kvtier {

namespace {

class Provider final : public TierProvider {
 public:
  std::string_view name() const override { return kRedisStoreName; }
  TierProviderKind kind() const override { return TierProviderKind::kRemoteStore; }
  std::span<const OptionSpec> OptionRows() const override { return RedisOptionRows(); }

  Status Validate(const std::any& options) const override {
    return ProviderOptions<RedisStoreOptions>(name(), options).status();
  }

  std::optional<RemoteKeyring>* StoreKeyring(std::any& options) const override {
    RedisStoreOptions* o = std::any_cast<RedisStoreOptions>(&options);
    return o == nullptr ? nullptr : &o->keyring;
  }

  Result<std::unique_ptr<RemoteStore>> OpenStore(const std::any& options,
                                                 const TierOpenContext& context,
                                                 uint32_t read_lanes) const override {
    KV_ASSIGN_OR_RETURN(const RedisStoreOptions* given,
                        ProviderOptions<RedisStoreOptions>(name(), options));
    RedisStoreOptions o = *given;
    o.layout_digest = context.layout_digest;
    if (o.clock == nullptr) o.clock = context.clock;
    if (o.logger == nullptr) o.logger = context.logger;
    // Lanes of the same server, each store with its own connections: `read_lanes` for the
    // reads, and one for the puts, so a get never waits for a put.
    if (read_lanes == 0) read_lanes = 1;
    std::vector<std::unique_ptr<RemoteStore>> reads, writes;
    for (uint32_t i = 0; i <= read_lanes; ++i) {
      KV_ASSIGN_OR_RETURN(std::unique_ptr<RedisStore> lane, RedisStore::Open(o));
      (i < read_lanes ? reads : writes).push_back(std::move(lane));
    }
    return std::unique_ptr<RemoteStore>(
        std::make_unique<RemoteStoreLanes>(std::move(reads), std::move(writes)));
  }
};

}  // namespace

const TierProvider& RedisStoreProvider() {
  static const Provider provider;
  return provider;
}

}  // namespace kvtier
