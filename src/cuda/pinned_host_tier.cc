#include "cuda/pinned_host_tier.h"

#include <string>
#include <utility>

#include "core/assert.h"
#include "cuda/cuda_status.h"
#include "tiers/slot_pool.h"

namespace kvtier::cuda {

using tiers_internal::SlotPool;

struct PinnedHostTier::Impl {
  std::string name;
  std::unique_ptr<SlotPool> pool;
  bool registered = false;
  std::byte* device_base = nullptr;  // Mapped only.

  ~Impl() {
    if (registered) static_cast<void>(cudaHostUnregister(pool->base()));
  }
};

Result<std::unique_ptr<PinnedHostTier>> OpenPinnedHostTier(const PinnedHostTierOptions& options) {
  KV_RETURN_IF_ERROR(options.host.Validate());
  KV_RETURN_IF_ERROR(CudaDeviceCount().status());
  KV_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));
  auto impl = std::make_unique<PinnedHostTier::Impl>();
  impl->name = options.host.name;
  const auto slots = static_cast<uint32_t>(options.host.capacity_bytes / options.host.slot_bytes);
  KV_ASSIGN_OR_RETURN(impl->pool,
                      SlotPool::Open({.name = "pinned host tier '" + options.host.name + "'",
                                      .slots = slots,
                                      .slot_bytes = options.host.slot_bytes,
                                      .numa_node = options.host.numa_node,
                                      .huge_pages = options.host.huge_pages,
                                      .lock = MemoryLock::kOff,
                                      .prefault = options.host.prefault,
                                      .logger = options.host.logger}));
  const bool mapped = options.mapping == PinnedMapping::kMapped;
  const unsigned flags = mapped ? cudaHostRegisterMapped : cudaHostRegisterDefault;
  KV_CUDA_RETURN_IF_ERROR(cudaHostRegister(impl->pool->base(), impl->pool->mapped_bytes(), flags));
  impl->registered = true;
  if (mapped) {
    void* device = nullptr;
    KV_CUDA_RETURN_IF_ERROR(cudaHostGetDevicePointer(&device, impl->pool->base(), 0));
    impl->device_base = static_cast<std::byte*>(device);
  }
  LogTo(options.host.logger, LogLevel::kInfo,
        "pinned host tier '" + options.host.name + "' open: " + std::to_string(slots) +
            " slots of " + std::to_string(options.host.slot_bytes) + " bytes (" +
            std::to_string(impl->pool->mapped_bytes()) + " bytes pinned), mapped into device " +
            (mapped ? std::to_string(options.device) : std::string("no")));
  return std::unique_ptr<PinnedHostTier>(new PinnedHostTier(std::move(impl)));
}

PinnedHostTier::PinnedHostTier(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PinnedHostTier::~PinnedHostTier() = default;

Result<uint32_t> PinnedHostTier::Allocate() { return impl_->pool->Allocate(); }
void PinnedHostTier::Free(uint32_t slot) { impl_->pool->Free(slot); }
std::byte* PinnedHostTier::SlotData(uint32_t slot) { return impl_->pool->SlotData(slot); }
uint32_t PinnedHostTier::slot_bytes() const { return impl_->pool->slot_bytes(); }
uint32_t PinnedHostTier::slots() const { return impl_->pool->slots(); }
const std::string& PinnedHostTier::name() const { return impl_->name; }

MemoryTierStats PinnedHostTier::Stats() const {
  MemoryTierStats stats = impl_->pool->Stats();
  stats.locked = true;
  return stats;
}

std::byte* PinnedHostTier::DeviceSlotData(uint32_t slot) {
  if (impl_->device_base == nullptr) return nullptr;
  KV_CHECK(slot < impl_->pool->slots());
  return impl_->device_base + size_t{slot} * impl_->pool->slot_stride_bytes();
}

}  // namespace kvtier::cuda
