// The shared state behind a CopyEvent, and the operations the copy threads use on it. Internal to
// the tiers layer.
//
// Thread safety: every field is guarded by `mu`; any thread may call these functions.
// Ownership: held through std::shared_ptr by CopyEvent handles, queued copies and the event pool.
#pragma once

#include <cstdint>

#include "core/mutex.h"
#include "tiers/memory_tier.h"

namespace kvtier {

struct CopyEvent::State {
  Mutex mu;
  CondVar cv;
  uint32_t pending KV_GUARDED_BY(mu) = 0;  // Regions not yet copied.
  bool done KV_GUARDED_BY(mu) = true;
  Status status KV_GUARDED_BY(mu);  // The first error of any region; OK otherwise.
};

namespace tiers_internal {

// Re-arms `state` for `pending` regions (done at once when 0). The caller must be its only holder.
void ResetEvent(CopyEvent::State& state, uint32_t pending);
// Records one finished region; the last one completes the event and wakes its waiters.
void CompleteRegion(CopyEvent::State& state, const Status& status);

}  // namespace tiers_internal
}  // namespace kvtier
