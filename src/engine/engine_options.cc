// EngineOptions::Validate, PredictionOptions::Validate, NoLowerTiers, TierKindName and
// DeviceBackendName.
#include <algorithm>
#include <bit>
#include <string>

#include "core/limits.h"
#include "core/thread_priority.h"
#include "engine/engine.h"
#include "engine/lower_tier_factory.h"
#include "engine/staging.h"
#include "env/thread_cpus.h"
#include "policies/access_predictor.h"

namespace kvtier {

std::string_view TierKindName(TierKind kind) {
  switch (kind) {
    case TierKind::kNone:
      return "none";
    case TierKind::kDevice:
      return "device";
    case TierKind::kHost:
      return "host";
    case TierKind::kCxl:
      return "cxl";
    case TierKind::kSsd:
      return "ssd";
    case TierKind::kRemote:
      return "remote";
  }
  return "invalid";
}

bool IsTierName(std::string_view name) {
  if (name.empty() || name.size() > kTierNameMax) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

std::string_view DeviceBackendName(DeviceBackend backend) {
  switch (backend) {
    case DeviceBackend::kAuto:
      return "auto";
    case DeviceBackend::kCpu:
      return "cpu";
    case DeviceBackend::kCuda:
      return "cuda";
  }
  return "invalid";
}

namespace {

Status WithField(const Status& s, std::string_view field) {
  return s.ok() ? s : Status::InvalidArgument(std::string(field) + ": " + s.message());
}

// The memory tiers' byte budgets must hold at least one block.
Status CheckCapacity(std::string_view field, uint64_t capacity_bytes, uint64_t block_bytes) {
  if (capacity_bytes < block_bytes) {
    return Status::InvalidArgument(std::string(field) + "=" + std::to_string(capacity_bytes) +
                                   " holds no block of " + std::to_string(block_bytes) +
                                   " bytes (layout.BlockBytes())");
  }
  return Status::Ok();
}

// InvalidArgument unless `value` of `field` is in [1, max].
Status CheckRange(std::string_view field, uint32_t value, uint32_t max) {
  if (value == 0 || value > max) {
    return Status::InvalidArgument(std::string(field) + "=" + std::to_string(value) +
                                   ": must be in [1, " + std::to_string(max) + "]");
  }
  return Status::Ok();
}

}  // namespace

Status PredictionOptions::Validate() const {
  KV_RETURN_IF_ERROR(CheckRange("window", window, kPredictorWindowMax));
  KV_RETURN_IF_ERROR(CheckRange("successors_max", successors_max, kPredictorSuccessorsMax));
  KV_RETURN_IF_ERROR(CheckRange("sessions_max", sessions_max, kPredictorItemsMax));
  KV_RETURN_IF_ERROR(
      CheckRange("session_chunks_max", session_chunks_max, kPredictionSessionChunksMax));
  KV_RETURN_IF_ERROR(CheckRange("predict_k", predict_k, kPredictorPredictMax));
  KV_RETURN_IF_ERROR(CheckRange("blocks_max", blocks_max, kPredictionBlocksMax));
  return Status::Ok();
}

Status EngineOptions::Validate() const {
  KV_RETURN_IF_ERROR(WithField(layout.Validate(), "layout"));
  KV_RETURN_IF_ERROR(ResolveThreadCpus(thread_cpus).status());
  if (background_nice < 0 || background_nice > kNiceMax) {
    return Status::InvalidArgument("background_nice: must be from 0 to " +
                                   std::to_string(kNiceMax) + ", got " +
                                   std::to_string(background_nice));
  }
  if (model.name.size() > kModelNameBytesMax) {
    return Status::InvalidArgument("model.name: longer than " + std::to_string(kModelNameBytesMax) +
                                   " bytes");
  }
  const uint64_t block_bytes = layout.BlockBytes();
  if (device.capacity_bytes != 0) {
    KV_RETURN_IF_ERROR(CheckCapacity("device.capacity_bytes", device.capacity_bytes, block_bytes));
    if (device.copy_threads == 0)
      return Status::InvalidArgument("device.copy_threads: must be > 0");
  }
  KV_RETURN_IF_ERROR(CheckCapacity("host.capacity_bytes", host.capacity_bytes, block_bytes));
  if (DeviceBackendName(device_backend) == "invalid") {
    return Status::InvalidArgument("device_backend: unknown value " +
                                   std::to_string(static_cast<int>(device_backend)));
  }
  if (cuda_device < 0) {
    return Status::InvalidArgument("cuda_device=" + std::to_string(cuda_device) + ": must be >= 0");
  }
  if (cxl.has_value()) {
    KV_RETURN_IF_ERROR(CheckCapacity("cxl.capacity_bytes", cxl->capacity_bytes, block_bytes));
  }
  KV_RETURN_IF_ERROR(WithField(ssd_codec.WithDefaults().Validate(), "ssd_codec"));
  if (layout.kind == LayoutKind::kLatent && !codecs::LatentCodecOk(ssd_codec.WithDefaults())) {
    return Status::InvalidArgument("ssd_codec: " + codecs::CodecName(ssd_codec.codec) +
                                   " splits or rotates K and V; a latent layout takes identity, "
                                   "shuffle-zstd, int8 or int4");
  }
  if (ssd_codec.rotated() && !std::has_single_bit(layout.head_dim)) {
    return Status::InvalidArgument("ssd_codec: " + codecs::CodecName(ssd_codec.codec) +
                                   " rotates each head (Hadamard) and needs a power-of-two "
                                   "layout.head_dim, not " + std::to_string(layout.head_dim));
  }
  if (remote.has_value()) KV_RETURN_IF_ERROR(WithField(remote->Validate(), "remote"));
  if (write_policy != WritePolicy::kWriteThrough && write_policy != WritePolicy::kWriteBack) {
    return Status::InvalidArgument("write_policy: unknown value");
  }
  if (worker_threads == 0 || worker_threads > kThreadPoolThreadsMax) {
    return Status::InvalidArgument("worker_threads=" + std::to_string(worker_threads) +
                                   ": must be in [1, " + std::to_string(kThreadPoolThreadsMax) +
                                   "]");
  }
  if (staging_buffers < kLoadStagingBatchMax || staging_buffers > 4096) {
    return Status::InvalidArgument("staging_buffers=" + std::to_string(staging_buffers) +
                                   ": must be in [" + std::to_string(kLoadStagingBatchMax) +
                                   ", 4096]");
  }
  if (!(writeback_dirty_fraction > 0 && writeback_dirty_fraction <= 1)) {
    return Status::InvalidArgument(
        "writeback_dirty_fraction=" + std::to_string(writeback_dirty_fraction) +
        ": must be in (0, 1]");
  }
  if (writeback_age_ms_max > kWritebackAgeMsMax) {
    return Status::InvalidArgument("writeback_age_ms_max=" + std::to_string(writeback_age_ms_max) +
                                   ": at most " + std::to_string(kWritebackAgeMsMax) + " ms");
  }
  KV_RETURN_IF_ERROR(WithField(prediction.Validate(), "prediction"));
  if (default_ttl_ms > kTtlMsMax) {
    return Status::InvalidArgument("default_ttl_ms=" + std::to_string(default_ttl_ms) +
                                   ": at most " + std::to_string(kTtlMsMax) + " ms");
  }
  return Status::Ok();
}

Status NoLowerTiers(const EngineOptions& options) {
  if (!options.tiers.empty()) {
    const std::string name = options.tiers.entries().front().name;
    return Status::NotSupported(
        name + ": this engine was opened without tiers below memory and has no " + name +
        " tier (open it with Engine::Open(options) from kvtier_engine, which links the tiers)");
  }
  if (options.remote.has_value()) {
    return Status::NotSupported(
        "remote: this engine was opened without tiers below memory and has no remote tier (open "
        "it with Engine::Open(options) from kvtier_engine, which links kvtier_tier_remote)");
  }
  return Status::Ok();
}

}  // namespace kvtier
