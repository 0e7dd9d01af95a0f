// StandardLowerTiers: the SSD tier and the remote tier (on Redis or a shared directory), opened
// from EngineOptions, and Engine::Open with them (lower_tier_factory.h). The only file of the engine that names a tier
// below memory; it is in kvtier_engine, not in kvtier_engine_core.
#include "engine/lower_tier_factory.h"

#include <string>
#include <utility>
#include <vector>

#include "tiers/fs/fs_store.h"
#include "tiers/redis_store.h"
#include "tiers/remote_lanes.h"
#include "tiers/remote_tier_adapter.h"
#include "tiers/ssd_tier.h"
#include "tiers/ssd_tier_adapter.h"

namespace kvtier {

namespace {

class StandardFactory final : public LowerTierFactory {
 public:
  Status Validate(const EngineOptions& options) const override {
    if (options.ssd.has_value()) {
      const Status s = options.ssd->Validate();
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
      KV_ASSIGN_OR_RETURN(std::unique_ptr<SsdTier> ssd, SsdTier::Open(*options.ssd, env));
      out.tiers.push_back(OpenedLowerTier{
          .tier = std::make_unique<SsdTierAdapter>(std::move(ssd), context.layout_digest),
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
    } else if (r.fs.has_value()) {
      FsStoreOptions o = *r.fs;
      o.layout_digest = context.layout_digest;
      if (o.clock == nullptr) o.clock = context.clock;
      if (o.logger == nullptr) o.logger = context.logger;
      KV_ASSIGN_OR_RETURN(std::unique_ptr<FsStore> fs, FsStore::Open(std::move(o)));
      adapter = std::make_unique<RemoteTierAdapter>(std::move(fs), policy);
    } else {
      RedisStoreOptions o = *r.redis;
      o.layout_digest = context.layout_digest;
      if (o.clock == nullptr) o.clock = context.clock;
      if (o.logger == nullptr) o.logger = context.logger;
      // Lanes of the same server, each store with its own connections (tiers/remote_lanes.h):
      // `connections` for the reads, and one for the puts, so a get never waits for a put.
      std::vector<std::unique_ptr<RemoteStore>> reads, writes;
      for (uint32_t i = 0; i <= r.connections; ++i) {
        KV_ASSIGN_OR_RETURN(std::unique_ptr<RedisStore> lane, RedisStore::Open(o));
        (i < r.connections ? reads : writes).push_back(std::move(lane));
      }
      adapter = std::make_unique<RemoteTierAdapter>(
          std::make_unique<RemoteStoreLanes>(std::move(reads), std::move(writes)), policy);
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
