#include "tiers/fs/fs_provider.h"

#include <utility>

#include "tiers/fs/fs_options.h"
#include "tiers/fs/fs_store.h"

namespace kvtier {

namespace {

class Provider final : public TierProvider {
 public:
  std::string_view name() const override { return kFsStoreName; }
  TierProviderKind kind() const override { return TierProviderKind::kRemoteStore; }
  std::span<const OptionSpec> OptionRows() const override { return FsOptionRows(); }

  Status Validate(const std::any& options) const override {
    KV_ASSIGN_OR_RETURN(const FsStoreOptions* o, ProviderOptions<FsStoreOptions>(name(), options));
    return o->Validate();
  }

  std::optional<RemoteKeyring>* StoreKeyring(std::any& options) const override {
    FsStoreOptions* o = std::any_cast<FsStoreOptions>(&options);
    return o == nullptr ? nullptr : &o->keyring;
  }

  Result<std::unique_ptr<RemoteStore>> OpenStore(const std::any& options,
                                                 const TierOpenContext& context,
                                                 uint32_t) const override {
    KV_ASSIGN_OR_RETURN(const FsStoreOptions* given,
                        ProviderOptions<FsStoreOptions>(name(), options));
    FsStoreOptions o = *given;
    o.layout_digest = context.layout_digest;
    if (o.clock == nullptr) o.clock = context.clock;
    if (o.logger == nullptr) o.logger = context.logger;
    KV_ASSIGN_OR_RETURN(std::unique_ptr<FsStore> fs, FsStore::Open(std::move(o)));
    return std::unique_ptr<RemoteStore>(std::move(fs));
  }
};

}  // namespace

const TierProvider& FsStoreProvider() {
  static const Provider provider;
  return provider;
}

}  // namespace kvtier
