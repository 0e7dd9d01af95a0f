// LowerTierFactory: what constructs the tiers below memory (tiers/tier.h) from EngineOptions.
//
// The engine core (kvtier_engine_core: the index, the memory tiers, the algorithms that walk the
// tier list) knows the tiers below memory only through the Tier interface; it never constructs
// one. A factory, handed to Engine::Open, checks the options of those tiers and opens them in
// order, fastest first. StandardLowerTiers() (lower_tier_factory.cc, in kvtier_engine) opens the
// SSD tier and the remote tier by name through the tier registry (tiers/tier_registry.h), and so
// links kvtier_tier_ssd (liburing), kvtier_tier_redis (hiredis) and kvtier_tier_fs, without
// seeing their headers. An engine opened without a factory has memory tiers only and refuses
// options that ask for a tier below memory (NoLowerTiers), naming the library to link.
//
// Adding a tier below memory: its folder src/tiers/<name> with its provider, one line in the
// registry, its options in EngineOptions, and its branch in StandardLowerTiers()
// (docs/architecture.md, "Adding a tier below memory").
//
// Thread safety: a factory is stateless; its calls may run concurrently (one per Engine::Open).
#pragma once

#include <memory>
#include <vector>

#include "core/block_key.h"
#include "engine/engine.h"
#include "tiers/tier.h"

namespace kvtier {

// What Open decides about each tier it opens (the engine's LowerTier is built from it and the
// tier's capabilities).
struct OpenedLowerTier {
  std::unique_ptr<Tier> tier;
  TierKind kind = TierKind::kNone;  // In Lookup results and statistics.
  // Its provider's registered name ("ssd", "redis", "fs"; "remote" for a borrowed store), for
  // TierStats::name; the kind's name when empty.
  std::string name;
  WritePolicy write_policy = WritePolicy::kWriteBack;
  bool promote_on_load = false;  // A Load's hit is also copied into a host slot.
  // The engine's writeback_dirty_fraction for a tier the cleaner may write down; 1 for none.
  double dirty_fraction = 1.0;
  // The remote tier's store, for EngineStats::remote (borrowed from `tier`; null otherwise).
  RemoteStore* remote_store = nullptr;
};

// What the engine hands the factory at Open. `env` is options.env, or null when the caller gave
// none: a factory that needs files then creates its own Env and returns it in OpenedLowerTiers.
struct LowerTierContext {
  Env* env = nullptr;
  Clock* clock = nullptr;    // Never null.
  Logger* logger = nullptr;  // May be null (silent).
  Hash256 layout_digest{};
  int background_nice = 0;  // EngineOptions::background_nice: for threads that only write.
  bool background_idle = false;  // EngineOptions::background_priority is kIdle.
};

struct OpenedLowerTiers {
  // An Env the tiers borrow; the engine keeps it alive. Declared first so that it is destroyed
  // last: a tier opened before a later one failed closes on it.
  std::unique_ptr<Env> owned_env;
  std::vector<OpenedLowerTier> tiers;  // Fastest first.
};

class LowerTierFactory {
 public:
  virtual ~LowerTierFactory() = default;
  // Checks the options of the tiers below memory (EngineOptions::ssd, ::remote): InvalidArgument
  // naming the field. EngineOptions::Validate has checked the rest.
  virtual Status Validate(const EngineOptions& options) const = 0;
  // Opens the tiers the options ask for, in order. On error, the ones already opened are closed.
  virtual Result<OpenedLowerTiers> Open(const EngineOptions& options,
                                        const LowerTierContext& context) const = 0;
};

// The SSD tier, then the remote tier, as the options say (kvtier_engine: lower_tier_factory.cc).
const LowerTierFactory& StandardLowerTiers();

// What an engine opened without a factory answers: NotSupported naming the first option that asks
// for a tier below memory (ssd, remote) and the library that provides it; OK when none does.
Status NoLowerTiers(const EngineOptions& options);

}  // namespace kvtier
