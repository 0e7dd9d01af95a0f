// StandardLowerTiers: the tiers below memory that EngineOptions names (EngineOptions::tiers, the
// remote tier's store), opened by name through the tier registry (tiers/tier_registry.h), and
// Engine::Open with them (lower_tier_factory.h). It includes no tier's code: its library,
// kvtier_engine, links the registry privately and sees none of the tier folders, so such an include
// fails to compile.
#include "engine/lower_tier_factory.h"

#include <any>
#include <string>
#include <string_view>
#include <utility>

#include "core/assert.h"
#include "tiers/remote_tier_adapter.h"
#include "tiers/tier_registry.h"

namespace kvtier {

namespace {

TierOpenContext OpenContext(const LowerTierContext& context, Env* env) {
  return {.env = env,
          .clock = context.clock,
          .logger = context.logger,
          .layout_digest = context.layout_digest};
}

// The provider of an entry of EngineOptions::tiers (`kind` kTier) or of
// RemoteTierOptions::stores (kRemoteStore): InvalidArgument naming the entry when no provider of
// that kind is registered by its name.
Result<const TierProvider*> ProviderOf(std::string_view name, TierProviderKind kind) {
  const TierProvider* p = FindTierProvider(name);
  const std::string where = kind == TierProviderKind::kTier ? "tiers" : "remote.stores";
  if (p == nullptr) {
    return Status::InvalidArgument(where + ": no tier below memory is registered as '" +
                                   std::string(name) + "'");
  }
  if (p->kind() != kind) {
    return Status::InvalidArgument(where + ": '" + std::string(name) +
                                   (kind == TierProviderKind::kTier
                                        ? "' is a store of the remote tier (remote.stores)"
                                        : "' is a tier of its own (EngineOptions::tiers)"));
  }
  return p;
}

class StandardFactory final : public LowerTierFactory {
 public:
  Status Validate(const EngineOptions& options) const override {
    for (const TierOptionsSet::Entry& e : options.tiers.entries()) {
      KV_ASSIGN_OR_RETURN(const TierProvider* p, ProviderOf(e.name, TierProviderKind::kTier));
      const Status s = p->Validate(e.options);
      if (!s.ok()) return Status::InvalidArgument(e.name + ": " + s.message());
    }
    if (options.remote.has_value()) {
      for (const TierOptionsSet::Entry& e : options.remote->stores.entries()) {
        KV_RETURN_IF_ERROR(ProviderOf(e.name, TierProviderKind::kRemoteStore).status());
      }
    }
    return Status::Ok();
  }

  // The tiers of their own in the registry's order, then the remote tier.
  Result<OpenedLowerTiers> Open(const EngineOptions& options,
                                const LowerTierContext& context) const override {
    OpenedLowerTiers out;
    for (const TierProvider* p : TierProviders()) {
      const std::any* given = options.tiers.FindAny(p->name());
      if (given == nullptr || p->kind() != TierProviderKind::kTier) continue;
      Env* env = context.env;
      if (env == nullptr) {
        if (out.owned_env == nullptr) {
          out.owned_env = NewPosixEnv({.logger = context.logger, .clock = context.clock});
        }
        env = out.owned_env.get();
      }
      KV_ASSIGN_OR_RETURN(std::unique_ptr<Tier> tier,
                          p->OpenTier(*given, OpenContext(context, env)));
      // A tier of its own is the engine's persistent tier: TierKind::kSsd, its place in the
      // stack; its registered name is its TierStats::name.
      out.tiers.push_back(OpenedLowerTier{.tier = std::move(tier),
                                          .kind = TierKind::kSsd,
                                          .name = std::string(p->name()),
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
            r.admission == AdmissionMode::kAfterRequests ? r.admission_requests : 0,
        .admission_slots = r.admission_slots,
        .write_budget_bytes_per_s = r.write_budget_bytes_per_s,
        .write_budget_burst_bytes = r.write_budget_burst_bytes,
        .clock = context.clock,
        .io_threads = r.io_threads,
        .write_nice = context.background_nice,
        .write_idle = context.background_idle};
    std::unique_ptr<RemoteTierAdapter> adapter;
    std::string name = "remote";  // A borrowed store has no registered name.
    if (r.store != nullptr) {
      adapter = std::make_unique<RemoteTierAdapter>(r.store, policy);
    } else {
      KV_CHECK(r.stores.size() == 1);  // RemoteTierOptions::Validate.
      const TierOptionsSet::Entry& e = r.stores.entries().front();
      KV_ASSIGN_OR_RETURN(const TierProvider* p,
                          ProviderOf(e.name, TierProviderKind::kRemoteStore));
      KV_ASSIGN_OR_RETURN(
          std::unique_ptr<RemoteStore> store,
          p->OpenStore(e.options, OpenContext(context, context.env), r.connections));
      adapter = std::make_unique<RemoteTierAdapter>(std::move(store), policy);
      name = e.name;
    }
    RemoteStore* store = adapter->store();
    return OpenedLowerTier{.tier = std::move(adapter),
                           .kind = TierKind::kRemote,
                           .name = std::move(name),
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
