// The SSD tier's options (SsdTierOptions), apart from the tier itself: what the engine's options
// hold and the options table sets, without the log, its I/O threads or liburing behind them.
// The tier (ssd_tier.h) checks them at Open.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/limits.h"
#include "env/env.h"
#include "kvtier/status.h"
#include "policies/ssd_policy.h"
#include "tiers/remote_crypto.h"
#include "tiers/ssd_format.h"
#include "tiers/tier_options.h"

namespace kvtier {

// What a completed batch promises about durability (docs/ssd_format.md §6).
enum class SsdSyncMode : uint8_t {
  kNone = 0,      // Pure cache: no fdatasync except at checkpoints and Close.
  kPerBatch = 1,  // A batch completes after fdatasync of every segment it wrote.
  kPeriodic = 2,  // fdatasync of written segments every sync_interval_ms.
};

using SsdAdmission = AdmissionMode;

inline constexpr uint32_t kSsdBatchEntriesMax = 1024;
inline constexpr uint32_t kSsdDirsMax = 64;
inline constexpr uint32_t kSsdQueueJobsMax = 4096;

// The SSD tier's registered name (tiers/tier_registry.h): EngineOptions::tiers holds its
// SsdTierOptions under it.
inline constexpr std::string_view kSsdTierName = "ssd";

struct SsdTierOptions {
  std::vector<std::string> dirs;       // At least one; order is part of the cache.
  uint64_t capacity_bytes = 4 * kGiB;  // Segments on disk, all directories together.
  uint64_t segment_bytes = ssd::kSegmentBytesDefault;  // Multiple of 4 KiB, 1 MiB..1 GiB.
  SsdSyncMode sync = SsdSyncMode::kPerBatch;
  uint32_t sync_interval_ms = 100;      // kPeriodic only.
  uint32_t checkpoint_interval_ms = 0;  // 0: checkpoint only at Close and after I/O errors.
  uint32_t io_depth = kIoDepthDefault;  // Per directory.
  IoBackend io_backend = IoBackend::kAuto;
  DirectIo direct_io = DirectIo::kPreferred;
  uint32_t queue_jobs_max = 64;  // Queued jobs per directory before callers block.
  // Writes are encoded into a pool of pre-faulted staging buffers per directory, made at open
  // (no allocation or page fault per write); a writer waits while its directory's are all in
  // flight. Each buffer is one write request, so it should be >= 256 KiB (smaller O_DIRECT
  // requests measured slower).
  // Memory: directories x buffers x bytes, touched at open (32 MiB per directory by default).
  uint64_t staging_buffer_bytes = kMiB;  // Multiple of 4 KiB, 4 KiB..64 MiB.
  uint32_t staging_buffers = 0;          // Per directory; 0 = min(io_depth, 64). At most 4096.
  // A writer waiting for reclaim gives up (Busy) when reclaim freed no segment for this long
  // (the Env's clock; docs/ssd_format.md §7, "Waiting for reclaim").
  uint32_t write_stall_ms_max = 10'000;
  SsdAdmission admission = SsdAdmission::kAlways;
  uint32_t admission_requests = 2;
  uint32_t admission_slots = 1u << 16;    // Counters of the admission sketch (1 byte each).
  uint64_t write_budget_bytes_per_s = 0;  // 0 = unlimited.
  uint64_t write_budget_burst_bytes = 0;  // 0 = one second of budget.
  // Records sealed at rest with AES-256-GCM under these keys (tiers/remote_crypto.h;
  // docs/ssd_format.md §3, "Sealed records"): for NVMe shared by tenants of one host. With keys,
  // a record that is not sealed, or that fails authentication, is a miss, and the cache's
  // MANIFEST is marked sealed; a sealed cache is refused without them (§8). The seal covers the
  // block's identity and its expiry. 32 bytes per record.
  std::optional<RemoteKeyring> keyring;
  // Permission bits of the files the tier creates (segments, checkpoint, MANIFEST, LOCK):
  // private to the owner by default; 0640 or 0660 share the cache with the file's group.
  // Directories the tier creates get the matching 0700, 0750 or 0770 (before the umask;
  // existing directories keep theirs). docs/ssd_format.md §1.
  uint32_t file_mode = 0600;

  // InvalidArgument naming the first bad field.
  Status Validate() const;
  // The permission bits of directories the tier creates, derived from file_mode.
  uint32_t dir_mode() const;
};

// The SSD tier's options among `tiers` (EngineOptions::tiers); nullptr when they hold none.
inline SsdTierOptions* FindSsdOptions(TierOptionsSet& tiers) {
  return tiers.Find<SsdTierOptions>(kSsdTierName);
}
inline const SsdTierOptions* FindSsdOptions(const TierOptionsSet& tiers) {
  return tiers.Find<SsdTierOptions>(kSsdTierName);
}

}  // namespace kvtier
