#include "policies/offload_depth.h"

#include <algorithm>

namespace kvtier {

Status PrefetchDepthOptions::Validate() const {
  if (depth_max > kPrefetchDepthMax) {
    return Status::InvalidArgument("PrefetchDepthOptions.depth_max exceeds kPrefetchDepthMax");
  }
  if (depth_min > depth_max) {
    return Status::InvalidArgument("PrefetchDepthOptions.depth_min exceeds depth_max");
  }
  if (depth_initial < depth_min || depth_initial > depth_max) {
    return Status::InvalidArgument("PrefetchDepthOptions.depth_initial outside [min, max]");
  }
  if (grow_after_stalls == 0) {
    return Status::InvalidArgument("PrefetchDepthOptions.grow_after_stalls must be >= 1");
  }
  if (shrink_after_pressure == 0) {
    return Status::InvalidArgument("PrefetchDepthOptions.shrink_after_pressure must be >= 1");
  }
  return Status::Ok();
}

PrefetchDepthController::PrefetchDepthController(const PrefetchDepthOptions& options)
    : options_(options), depth_(options.depth_initial) {}

uint32_t PrefetchDepthController::Observe(uint64_t stall_us, bool memory_pressure) {
  // Pressure wins over stalls: a deeper pipeline cannot help when the budget is already full.
  if (memory_pressure) {
    stall_run_ = 0;
    if (++pressure_run_ >= options_.shrink_after_pressure && depth_ > options_.depth_min) {
      --depth_;
      ++shrinks_;
      pressure_run_ = 0;
    }
    return depth_;
  }
  pressure_run_ = 0;
  if (stall_us > options_.stall_threshold_us) {
    if (++stall_run_ >= options_.grow_after_stalls && depth_ < options_.depth_max) {
      ++depth_;
      ++grows_;
      stall_run_ = 0;
    }
  } else {
    stall_run_ = 0;
  }
  return depth_;
}

}  // namespace kvtier
