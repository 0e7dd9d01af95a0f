// The fs tier's options (FsStoreOptions), apart from the store: what the engine's options hold
// and the options table sets. FsStore::Open checks them (Validate).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/block_key.h"
#include "core/logger.h"
#include "env/env.h"
#include "kvtier/status.h"
#include "tiers/aes_gcm.h"
#include "tiers/remote_crypto.h"
#include "tiers/tier_options.h"

namespace kvtier {

// The fs store's registered name (tiers/tier_registry.h): RemoteTierOptions::stores holds its
// FsStoreOptions under it.
inline constexpr std::string_view kFsStoreName = "fs";

struct FsStoreOptions {
  std::string dir;  // Created (0700, or 0770 with group_shared) when missing.
  // Bytes the directory may hold, summed over every node that shares it; 0: no bound.
  uint64_t bytes_max = 0;
  uint64_t max_age_s = 0;  // Values older than this are removed; 0: no bound.
  uint32_t sweep_interval_ms = 10'000;
  bool fsync = true;          // Sync each value before it is published.
  bool group_shared = false;  // Files 0660 and a group-writable directory allowed.
  std::string key_prefix = "kvt";  // Letters, digits, '_' and '-'.
  // As RedisStoreOptions: a keyring seals values and hashes names; insecure_plaintext is the
  // explicit opt-out. Exactly one of them.
  std::optional<RemoteKeyring> keyring;
  bool insecure_plaintext = false;
  std::optional<GcmImpl> aes_gcm;
  Hash256 layout_digest{};
  Clock* clock = nullptr;  // nullptr: SystemClock(). Its wall time drives the TTLs.
  Logger* logger = nullptr;

  Status Validate() const;
};

// The fs store's options among `stores` (RemoteTierOptions::stores); nullptr when none.
inline FsStoreOptions* FindFsOptions(TierOptionsSet& stores) {
  return stores.Find<FsStoreOptions>(kFsStoreName);
}
inline const FsStoreOptions* FindFsOptions(const TierOptionsSet& stores) {
  return stores.Find<FsStoreOptions>(kFsStoreName);
}

}  // namespace kvtier
