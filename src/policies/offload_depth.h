// PrefetchDepthController: how many layers ahead the offloaded-sequence pipeline prefetches
// (docs/offload.md, "adaptive depth").
//
// Why: a deep pipeline hides slow reads but holds more blocks in the device budget; a shallow one
// saves memory but makes compute wait. The controller follows the rule of thumb "compute waits:
// go deeper; memory is short: go shallower". It sees one observation per layer computed: how long
// compute stalled waiting for that layer's data, and whether prefetch had to stop for lack of
// budget. It grows after `grow_after_stalls` consecutive stalls above `stall_threshold_us` and
// shrinks after `shrink_after_pressure` consecutive pressured layers, within [depth_min,
// depth_max]. A fixed depth is depth_min == depth_max.
//
// Thread safety: none; the pipeline's single caller thread owns it. Ownership: plain value.
#pragma once

#include <cstdint>

#include "kvtier/status.h"

namespace kvtier {

// Bound of the pipeline depth in layers (a model has at most a few hundred layers).
inline constexpr uint32_t kPrefetchDepthMax = 16;

struct PrefetchDepthOptions {
  uint32_t depth_min = 1;
  uint32_t depth_max = 4;
  uint32_t depth_initial = 1;
  uint64_t stall_threshold_us = 50;    // A layer that waited longer than this counts as a stall.
  uint32_t grow_after_stalls = 2;      // Consecutive stalled layers before depth + 1.
  uint32_t shrink_after_pressure = 2;  // Consecutive pressured layers before depth - 1.

  // InvalidArgument naming the first bad field.
  Status Validate() const;
};

class PrefetchDepthController {
 public:
  explicit PrefetchDepthController(const PrefetchDepthOptions& options);

  // One layer computed: it waited `stall_us` for its data; `memory_pressure` says prefetch was cut
  // short because the device budget had no evictable block. Returns the new depth.
  uint32_t Observe(uint64_t stall_us, bool memory_pressure);
  uint32_t depth() const { return depth_; }
  uint32_t grows() const { return grows_; }
  uint32_t shrinks() const { return shrinks_; }

 private:
  PrefetchDepthOptions options_;
  uint32_t depth_;
  uint32_t stall_run_ = 0;
  uint32_t pressure_run_ = 0;
  uint32_t grows_ = 0;
  uint32_t shrinks_ = 0;
};

}  // namespace kvtier
