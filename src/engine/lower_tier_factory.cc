// StandardLowerTiers: the SSD tier and the remote tier (on Redis or a shared directory), opened
// from EngineOptions through the tier registry (tiers/tier_registry.h), and Engine::Open with
// them (lower_tier_factory.h). It includes no tier's code: its library, kvtier_engine, links the
// registry privately and sees none of the tier folders, so such an include fails to compile.
#include "engine/lower_tier_factory.h"

#include <any>
#include <string_view>
#include <utility>

#include "core/assert.h"
#include "tiers/remote_tier_adapter.h"
#include "tiers/tier_registry.h"

namespace kvtier {

namespace {

// The registered provider `name`: every one the options can name is in the registry of this
// build (tiers/tier_registry.cc).
const TierProvider& Provider(std::string_view name) {
  const TierProvider* p = FindTierProvider(name);
  KV_CHECK(p != nullptr);
  return *p;
}

TierOpenContext OpenContext(const LowerTierContext& context, Env* env) {
  return {.env = env,
          .clock = context.clock,
          .logger = context.logger,
          .layout_digest = context.layout_digest};
}

class StandardFactory final : public LowerTierFactory {
 public:
  Status Validate(const EngineOptions& options) const override {
    if (options.ssd.has_value()) {
      const Status s = Provider("ssd").Validate(std::any(*options.ssd));
      if (!s.ok()) return Status::InvalidArgument("ssd: " + s.message());
    }
    return Status::Ok();
  }

  Result<OpenedLowerTiers> Open(const EngineOptions& options,
                                const LowerTierContext& context) const override {
    OpenedLowerTiers out;
    if (options.ssd.has_value()) {
      Env* env = context.env;
      if (env == nullptr) {
        out.owned_env = NewPosixEnv({.logger = context.logger, .clock = context.clock});
        env = out.owned_env.get();
      }
      KV_ASSIGN_OR_RETURN(
          std::unique_ptr<Tier> ssd,
          Provider("ssd").OpenTier(std::any(*options.ssd), OpenContext(context, env)));
      out.tiers.push_back(OpenedLowerTier{
          .tier = std::move(ssd),
          .kind = TierKind::kSsd,
          .write_policy = options.write_policy,
          .promote_on_load = options.promote_on_load,
          .dirty_fraction = options.writeback_dirty_fraction});
    }
    if (options.remote.has_value()) {
      KV_ASSIGN_OR_RETURN(OpenedLowerTier remote, OpenRemote(*options.remote, context));
      out.tiers.push_back(std::move(remote));
    }
    return out;
  }

 private:
  static Result<OpenedLowerTier> OpenRemote(const RemoteTierOptions& r,
                                            const LowerTierContext& context) {
    const RemoteTierPolicy policy{
        .admission_requests =
            r.admission == SsdAdmission::kAfterRequests ? r.admission_requests : 0,
        .admission_slots = r.admission_slots,
        .write_budget_bytes_per_s = r.write_budget_bytes_per_s,
        .write_budget_burst_bytes = r.write_budget_burst_bytes,
        .clock = context.clock,
        .io_threads = r.io_threads,
        .write_nice = context.background_nice,
        .write_idle = context.background_idle};
    std::unique_ptr<RemoteTierAdapter> adapter;
    if (r.store != nullptr) {
      adapter = std::make_unique<RemoteTierAdapter>(r.store, policy);
    } else {
      const bool fs = r.fs.has_value();
      KV_ASSIGN_OR_RETURN(std::unique_ptr<RemoteStore> store,
                          Provider(fs ? "fs" : "redis")
                              .OpenStore(fs ? std::any(*r.fs) : std::any(*r.redis),
                                         OpenContext(context, context.env), r.connections));
      adapter = std::make_unique<RemoteTierAdapter>(std::move(store), policy);
    }
    RemoteStore* store = adapter->store();
    return OpenedLowerTier{.tier = std::move(adapter),
                           .kind = TierKind::kRemote,
                           .write_policy = r.write_policy,
                           .promote_on_load = r.promote_on_load,
                           .dirty_fraction = 1.0,
                           .remote_store = store};
  }
};

}  // namespace

const LowerTierFactory& StandardLowerTiers() {
  static const StandardFactory factory;
  return factory;
}

Result<std::unique_ptr<Engine>> Engine::Open(const EngineOptions& options) {
  return Open(options, &StandardLowerTiers());
}

}  // namespace kvtier
