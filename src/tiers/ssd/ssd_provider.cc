#include "tiers/ssd/ssd_provider.h"

#include <utility>

#include "tiers/ssd/ssd_options.h"
#include "tiers/ssd/ssd_tier.h"
#include "tiers/ssd/ssd_tier_adapter.h"

namespace kvtier {

namespace {

class Provider final : public TierProvider {
 public:
  std::string_view name() const override { return kSsdTierName; }
  TierProviderKind kind() const override { return TierProviderKind::kTier; }
  std::span<const OptionSpec> OptionRows() const override { return SsdOptionRows(); }

  Status Validate(const std::any& options) const override {
    KV_ASSIGN_OR_RETURN(const SsdTierOptions* o, ProviderOptions<SsdTierOptions>(name(), options));
    return o->Validate();
  }

  Result<std::unique_ptr<Tier>> OpenTier(const std::any& options,
                                         const TierOpenContext& context) const override {
    KV_ASSIGN_OR_RETURN(const SsdTierOptions* o, ProviderOptions<SsdTierOptions>(name(), options));
    if (context.env == nullptr) return Status::InvalidArgument("ssd: no Env to open it with");
    KV_ASSIGN_OR_RETURN(std::unique_ptr<SsdTier> ssd, SsdTier::Open(*o, context.env));
    return std::unique_ptr<Tier>(
        std::make_unique<SsdTierAdapter>(std::move(ssd), context.layout_digest));
  }
};

}  // namespace

const TierProvider& SsdTierProvider() {
  static const Provider provider;
  return provider;
}

}  // namespace kvtier
