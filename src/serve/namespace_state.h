// Tenant generations of the node service (`kvtier ctl clear --namespace`, docs/serve.md).
//
// The engine keeps no index by namespace: a block's key is a hash over its namespace digest and
// its tokens, so one tenant's blocks cannot be listed, let alone deleted one by one. Clearing a
// tenant therefore moves the tenant to a new namespace: every tenant id (scoped by uid,
// "uid:<uid>/<tenant>") has a generation, 0 until the tenant is first cleared, and the service
// derives the tenant's namespace from the id and its generation (SaltFor). After a clear, every
// block the tenant stored before is unreachable (a miss in every tier: its key was made from the
// old namespace) and is never hit again, so the tiers evict it as the coldest data; TTLs expire it.
//
// The generations persist in a state file (one per service, in its first cache directory by
// default) so that a clear holds across restarts; the SSD and Redis tiers keep the old blocks
// across restarts too. Format, text, at most kStateFileBytesMax bytes:
//   kvtier-serve-namespaces 1
//   <generation> <hex of the scoped tenant id>      (one line per tenant cleared at least once)
// Written through an O_EXCL|O_NOFOLLOW temporary that is synced, then renamed over the file
// (ReplaceRegularFile); read with O_NOFOLLOW, only when it is a regular file. A file that does not
// parse is an error naming the file and the line: a service never runs with its clears forgotten.
//
// The default file is ssd::kServeStateName in the service's first cache directory.
//
// Thread safety: every method may be called from any thread. Ownership: a value held by the
// server.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/mutex.h"
#include "kvtier/result.h"
#include "tiers/ssd_format.h"

namespace kvtier::serve {

inline constexpr size_t kStateFileBytesMax = size_t{16} << 20;
inline constexpr size_t kClearedTenantsMax = 65536;

class NamespaceGenerations {
 public:
  // `path` empty: generations live in memory only (a clear lasts until the service restarts).
  // Reads the file when it exists; NotFound is not an error (no tenant was cleared yet).
  Status Open(const std::string& path);

  // The salt the engine's namespace is made from: `scoped` itself for generation 0 (so a
  // service that never cleared a tenant keeps the namespaces it always had), else `scoped`,
  // a 0x1f separator and "gen:<generation>".
  std::string SaltFor(const std::string& scoped);

  // Moves `scoped` to its next generation and persists it. Returns the new generation; on a
  // write error nothing changes (the tenant keeps its namespace) and the error names the file.
  Result<uint64_t> Bump(const std::string& scoped);

  bool persistent() const { return !path_.empty(); }
  const std::string& path() const { return path_; }

 private:
  std::string Serialize() const KV_REQUIRES(mu_);

  std::string path_;
  Mutex mu_;
  std::map<std::string, uint64_t> generations_ KV_GUARDED_BY(mu_);
};

}  // namespace kvtier::serve
