// TierProvider: how a tier below memory is opened by its registered name ("ssd", "redis", "fs"),
// so that what opens the engine's tiers (engine/lower_tier_factory.cc) never includes a tier's
// code: it hands the provider the tier's options, held in a std::any of the tier's own options
// type (tiers/<name>/<name>_options.h), and gets back a Tier or a RemoteStore.
//
// Two kinds, as the engine composes them: a tier of its own (the SSD tier: OpenTier gives the
// Tier), and a store of the remote tier (Redis, a shared directory: OpenStore gives the
// RemoteStore, which the remote tier's adapter wraps with its policy and I/O threads,
// tiers/remote_tier_adapter.h). The providers are listed in tiers/tier_registry.cc; adding a tier
// is its folder and one line there (docs/architecture.md, "Adding a tier").
//
// Thread safety: a provider is stateless; its calls may run concurrently.
#pragma once

#include <any>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/block_key.h"
#include "core/logger.h"
#include "core/option_spec.h"
#include "kvtier/result.h"
#include "tiers/tier.h"

namespace kvtier {

class Clock;          // env/env.h
class Env;            // env/env.h
class RemoteKeyring;  // tiers/remote_crypto.h
class RemoteStore;    // tiers/remote_store.h

// What opening a tier needs besides its options.
struct TierOpenContext {
  Env* env = nullptr;        // Never null for OpenTier; the stores open their own files.
  Clock* clock = nullptr;    // Never null.
  Logger* logger = nullptr;  // May be null (silent).
  Hash256 layout_digest{};   // Written into every record; records with another are misses.
};

enum class TierProviderKind : uint8_t {
  kTier = 0,         // OpenTier.
  kRemoteStore = 1,  // OpenStore.
};

class TierProvider {
 public:
  virtual ~TierProvider() = default;
  virtual std::string_view name() const = 0;
  virtual TierProviderKind kind() const = 0;
  // The provider's rows of the options table (engine/options_table.h merges them into its own):
  // its switch and settings, each with `tier` = name() and a set_tier that writes into the
  // provider's options type.
  virtual std::span<const OptionSpec> OptionRows() const = 0;
  // InvalidArgument naming the first bad field of `options` (the provider's options type), or
  // of a std::any that holds another type.
  virtual Status Validate(const std::any& options) const = 0;
  // kTier only.
  virtual Result<std::unique_ptr<Tier>> OpenTier(const std::any& options,
                                                 const TierOpenContext& context) const;
  // kRemoteStore only. A store that keeps connections to a server opens `read_lanes` of them
  // side by side for the reads and one more for the puts (tiers/remote_lanes.h), so a get never
  // waits for a put; a store without connections (a directory) ignores it. At least 1.
  virtual Result<std::unique_ptr<RemoteStore>> OpenStore(const std::any& options,
                                                         const TierOpenContext& context,
                                                         uint32_t read_lanes) const;
  // kRemoteStore only: the keyring field of `options` (the provider's options type), which every
  // store of the remote tier has, for the surfaces that read key material (remote_key_file);
  // nullptr for options of another type, and from a provider of a tier of its own.
  virtual std::optional<RemoteKeyring>* StoreKeyring(std::any& options) const;
};

// The options a provider was handed, as its own type; InvalidArgument naming the provider when
// the std::any holds another.
template <class Options>
Result<const Options*> ProviderOptions(std::string_view provider, const std::any& options) {
  const Options* o = std::any_cast<Options>(&options);
  if (o == nullptr) {
    return Status::InvalidArgument(std::string(provider) + ": options of another tier's type");
  }
  return o;
}

}  // namespace kvtier
