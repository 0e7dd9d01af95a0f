// The device backend (EngineOptions::device_backend): which DeviceTier and HostTier the engine
// opens. The CUDA build (KVTIER_HAVE_CUDA, defined when the kvtier_cuda target exists: a legal
// downward dependency, src/cuda depends on tiers and codecs only) adds CudaDeviceTier and the
// pinned host tier; without it only the CPU tiers exist and kCuda is NotSupported.
#include <string>

#include "core/assert.h"
#include "engine/engine_impl.h"

#ifdef KVTIER_HAVE_CUDA
#include "cuda/cuda_device_tier.h"
#include "cuda/cuda_status.h"
#include "cuda/pinned_host_tier.h"
#endif

namespace kvtier {

namespace {

// OK when the CUDA backend can serve `device`; else NotSupported saying why.
Status CudaUsable([[maybe_unused]] int32_t device) {
#ifdef KVTIER_HAVE_CUDA
  Result<int> count = cuda::CudaDeviceCount();
  if (!count.ok()) return Status::NotSupported("no usable GPU (" + count.status().ToString() + ")");
  if (device >= *count) {
    return Status::NotSupported("cuda_device=" + std::to_string(device) + " but only " +
                                std::to_string(*count) + " GPU(s) are usable");
  }
  return Status::Ok();
#else
  return Status::NotSupported(
      "kvtier was built without the CUDA backend (KVTIER_WITH_CUDA=OFF or no nvcc found)");
#endif
}

}  // namespace

Status EngineImpl::OpenMemoryTiers() {
  const uint32_t slot_bytes = static_cast<uint32_t>(block_bytes_);
  // Why the backend was chosen, for the log line.
  std::string reason = "device_backend=" + std::string(DeviceBackendName(options_.device_backend));
  backend_ = DeviceBackend::kCpu;
  if (options_.device_backend != DeviceBackend::kCpu) {
    const Status usable = CudaUsable(options_.cuda_device);
    if (usable.ok()) {
      backend_ = DeviceBackend::kCuda;
    } else if (options_.device_backend == DeviceBackend::kCuda) {
      return Status::NotSupported("device_backend=cuda: " + usable.message());
    } else {
      reason += ": " + usable.message();
    }
  }
  DeviceTierOptions d = options_.device;
  d.slot_bytes = slot_bytes;
  if (d.logger == nullptr) d.logger = logger_;
  HostTierOptions h = options_.host;
  h.slot_bytes = slot_bytes;
  if (h.logger == nullptr) h.logger = logger_;
  if (backend_ == DeviceBackend::kCpu) {
    if (d.capacity_bytes > 0) {
      KV_ASSIGN_OR_RETURN(device_, DeviceTier::OpenCpu(d));
    }
    KV_ASSIGN_OR_RETURN(host_, HostTier::Open(h));
  } else {
#ifdef KVTIER_HAVE_CUDA
    if (d.capacity_bytes > 0) {
      KV_ASSIGN_OR_RETURN(device_,
                          cuda::CudaDeviceTier::Open({.tier = d, .device = options_.cuda_device}));
    }
    KV_ASSIGN_OR_RETURN(host_,
                        cuda::OpenPinnedHostTier({.host = h, .device = options_.cuda_device}));
#else
    KV_CHECK(false);  // CudaUsable() refuses kCuda in a build without CUDA.
#endif
  }
  const std::string tier =
      device_ == nullptr ? "none (device.capacity_bytes=0)"
      : backend_ == DeviceBackend::kCuda
          ? "cuda (GPU " + std::to_string(options_.cuda_device) + ", pinned host tier)"
          : "cpu (host memory, copy threads)";
  LogTo(logger_, LogLevel::kInfo,
        "engine: device tier " + tier + ", backend " + std::string(DeviceBackendName(backend_)) +
            " (" + reason + ")");
  return Status::Ok();
}

}  // namespace kvtier
