// HostTier: DRAM (or CXL) slabs over a SlotPool. See memory_tier.h for the contract and
// docs/memory_tiers.md for the choices.
#include <string>
#include <utility>

#include "tiers/memory_tier.h"
#include "tiers/slot_pool.h"

namespace kvtier {
namespace {

using tiers_internal::SlotPool;
using tiers_internal::SlotPoolOptions;

class HostTierImpl final : public HostTier {
 public:
  HostTierImpl(std::string name, std::unique_ptr<SlotPool> pool)
      : name_(std::move(name)), pool_(std::move(pool)) {}

  Result<uint32_t> Allocate() override { return pool_->Allocate(); }
  void Free(uint32_t slot) override { pool_->Free(slot); }
  std::byte* SlotData(uint32_t slot) override { return pool_->SlotData(slot); }
  uint32_t slot_bytes() const override { return pool_->slot_bytes(); }
  uint32_t slots() const override { return pool_->slots(); }
  MemoryTierStats Stats() const override { return pool_->Stats(); }
  const std::string& name() const override { return name_; }

 private:
  const std::string name_;
  const std::unique_ptr<SlotPool> pool_;
};

}  // namespace

Status HostTierOptions::Validate() const {
  const std::string who = "host tier '" + name + "'";
  if (name.empty()) return Status::InvalidArgument("host tier: name is empty");
  if (slot_bytes == 0 || slot_bytes > kBlockBytesMax) {
    return Status::InvalidArgument(who + ": slot_bytes " + std::to_string(slot_bytes) +
                                   " not in [1, " + std::to_string(kBlockBytesMax) + "]");
  }
  if (capacity_bytes < slot_bytes) {
    return Status::InvalidArgument(who + ": capacity_bytes " + std::to_string(capacity_bytes) +
                                   " holds no slot of slot_bytes " + std::to_string(slot_bytes));
  }
  if (capacity_bytes / slot_bytes > kMemoryTierSlotsMax) {
    return Status::InvalidArgument(
        who + ": capacity_bytes / slot_bytes = " + std::to_string(capacity_bytes / slot_bytes) +
        " slots exceeds kMemoryTierSlotsMax " + std::to_string(kMemoryTierSlotsMax));
  }
  if (numa_node < -1) {
    return Status::InvalidArgument(who + ": numa_node " + std::to_string(numa_node) +
                                   " must be -1 (unbound) or a node number");
  }
  return Status::Ok();
}

Result<std::unique_ptr<HostTier>> HostTier::Open(const HostTierOptions& options) {
  KV_RETURN_IF_ERROR(options.Validate());
  const auto slots = static_cast<uint32_t>(options.capacity_bytes / options.slot_bytes);
  KV_ASSIGN_OR_RETURN(std::unique_ptr<SlotPool> pool,
                      SlotPool::Open({.name = "host tier '" + options.name + "'",
                                      .slots = slots,
                                      .slot_bytes = options.slot_bytes,
                                      .numa_node = options.numa_node,
                                      .huge_pages = options.huge_pages,
                                      .lock = options.lock,
                                      .prefault = options.prefault,
                                      .logger = options.logger}));
  const MemoryTierStats stats = pool->Stats();
  LogTo(options.logger, LogLevel::kInfo,
        "host tier '" + options.name + "' open: " + std::to_string(stats.slots_total) +
            " slots of " + std::to_string(stats.slot_bytes) + " bytes (" +
            std::to_string(stats.mapped_bytes) + " bytes mapped), numa_node " +
            std::to_string(stats.numa_node) + ", huge_pages " + (stats.huge_pages ? "yes" : "no") +
            ", locked " + (stats.locked ? "yes" : "no"));
  return std::unique_ptr<HostTier>(new HostTierImpl(options.name, std::move(pool)));
}

}  // namespace kvtier
