// PinnedHostTier: the host tier of the CUDA build. It is the HostTier of the tiers layer (the same
// mmap'd, NUMA-bound, huge-page, pre-faulted slabs) with the whole mapping page-locked and
// registered with CUDA through cudaHostRegister, so copies between its slots and device memory
// run asynchronously at full PCIe speed instead of being staged by the driver.
//
// UVA: only when asked (PinnedHostTierOptions::mapping = kMapped) is the mapping also mapped into
// the device's address space; DeviceSlotData() then gives the address a kernel may read or write
// directly (zero-copy over PCIe). Otherwise DeviceSlotData() is nullptr and data moves only by
// explicit copies.
//
// Memory rule: pinning takes physical memory away from the OS for the tier's lifetime; capacity
// is checked like any HostTier (HostTierOptions::Validate) and the registration fails with
// NoSpace rather than oversubscribing. mlock is not used: registration pins the pages itself.
//
// Thread safety: as HostTier. Ownership: the tier owns the slabs and the registration; the
// destructor unregisters before the slabs are unmapped. SlotData()/DeviceSlotData() pointers are
// valid until the tier is destroyed.
#pragma once

#include <memory>

#include "cuda/cuda_buffer.h"
#include "tiers/memory_tier.h"

namespace kvtier::cuda {

struct PinnedHostTierOptions {
  HostTierOptions host;  // `lock` is ignored: registration pins the pages.
  PinnedMapping mapping = PinnedMapping::kNone;
  int32_t device = 0;  // The device whose context registers the memory (and maps it).
};

class PinnedHostTier final : public HostTier {
 public:
  ~PinnedHostTier() override;

  Result<uint32_t> Allocate() override;
  void Free(uint32_t slot) override;
  std::byte* SlotData(uint32_t slot) override;
  uint32_t slot_bytes() const override;
  uint32_t slots() const override;
  MemoryTierStats Stats() const override;  // locked is true: the slabs are pinned.
  const std::string& name() const override;

  // Device address of a slot (UVA); nullptr unless opened with PinnedMapping::kMapped.
  std::byte* DeviceSlotData(uint32_t slot);

  struct Impl;

 private:
  friend Result<std::unique_ptr<PinnedHostTier>> OpenPinnedHostTier(
      const PinnedHostTierOptions& options);
  explicit PinnedHostTier(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Opens the slabs as HostTier::Open does, then registers them with CUDA. Errors: those of
// HostTier::Open, Unavailable without a usable GPU, NoSpace when the pages cannot be pinned.
Result<std::unique_ptr<PinnedHostTier>> OpenPinnedHostTier(const PinnedHostTierOptions& options);

}  // namespace kvtier::cuda
