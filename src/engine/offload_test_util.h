// Test-only helpers for offloaded sequences (included by *_test.cc files): a set of small tiers
// (CPU device tier, host tier, SSD tier in a temporary directory) and SlowCopyDeviceTier, a
// DeviceTier decorator that makes every host -> device copy finish late and poisons its
// destination first, so a reader that does not wait for the copy's event sees garbage.
//
// Thread safety: as the wrapped tiers. Ownership: OffloadTestTiers owns everything it opens.
#pragma once

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/assert.h"
#include "core/kv_layout.h"
#include "engine/offload_sequence.h"
#include "env/env.h"
#include "testing/fault_injection_env.h"
#include "testing/test_util.h"
#include "tiers/memory_tier.h"
#include "tiers/ssd/ssd_options.h"
#include "tiers/ssd/ssd_tier.h"
#include "tiers/ssd/ssd_tier_adapter.h"

namespace kvtier::offload_test {

class SlowCopyDeviceTier final : public DeviceTier {
 public:
  // Every host -> device Copy first copies `delay_bytes` of scratch on the same stream, so the
  // real copy completes only after it.
  SlowCopyDeviceTier(std::unique_ptr<DeviceTier> base, size_t delay_bytes)
      : base_(std::move(base)) {
    Result<AlignedBuffer> a = AlignedBuffer::Allocate(delay_bytes);
    Result<AlignedBuffer> b = AlignedBuffer::Allocate(delay_bytes);
    KV_CHECK_OK(a.status());
    KV_CHECK_OK(b.status());
    src_ = std::move(a).value();
    dst_ = std::move(b).value();
  }
  Result<uint32_t> Allocate() override { return base_->Allocate(); }
  void Free(uint32_t slot) override { base_->Free(slot); }
  std::byte* SlotData(uint32_t slot) override { return base_->SlotData(slot); }
  CopyEvent Copy(CopyKind kind, std::span<const CopyRegion> regions) override {
    if (kind != CopyKind::kHostToDevice) return base_->Copy(kind, regions);
    regions_.clear();
    for (size_t chunk = 0; chunk < src_.size(); chunk += kChunkBytes) {
      regions_.push_back({dst_.data() + chunk, src_.data() + chunk, kChunkBytes});
    }
    for (const CopyRegion& r : regions) {
      std::memset(r.dst, 0xA5, r.bytes);  // Poison: only the copy makes the bytes right.
      regions_.push_back(r);
    }
    ++slow_copies_;
    return base_->Copy(kind, regions_);
  }
  uint32_t slot_bytes() const override { return base_->slot_bytes(); }
  uint32_t slots() const override { return base_->slots(); }
  MemoryTierStats Stats() const override { return base_->Stats(); }
  uint64_t slow_copies() const { return slow_copies_; }

 private:
  static constexpr size_t kChunkBytes = 1 << 20;
  std::unique_ptr<DeviceTier> base_;
  AlignedBuffer src_, dst_;
  std::vector<CopyRegion> regions_;
  uint64_t slow_copies_ = 0;
};

// The small FP16 layout of the offloaded-sequence tests: 2 KV heads x 16, blocks of 16 tokens
// (2 KiB per block).
inline KvLayout SmallTestLayout(uint32_t layers) {
  KvLayout l;
  l.layers = layers;
  l.kv_heads = 2;
  l.head_dim = 16;
  l.dtype = DType::kF16;
  l.block_tokens = 16;
  return l;
}

struct OffloadTestTiers {
  std::unique_ptr<ScopedTempDir> dir;
  std::unique_ptr<Env> env;
  std::unique_ptr<FaultInjectionEnv> faults;  // Under the SSD tier when asked for.
  std::unique_ptr<DeviceTier> device;
  std::unique_ptr<HostTier> host;
  std::unique_ptr<SsdTierAdapter> ssd;  // The SSD tier as the sequence sees it (tiers/tier.h).
};

// OffloadedSequence::HostSlotBytes with the SSD tier OpenTestTiers opens (no keyring), for
// sizing host slots before that tier is open.
inline uint32_t SsdHostSlotBytes(
    const KvLayout& layout, const std::optional<codecs::PrecisionLadderOptions>& ladder = {}) {
  return static_cast<uint32_t>(
      SsdTierAdapter::RecordBufferBytes(OffloadedSequence::PayloadBytesMax(layout, ladder), false));
}

// Device tier of `device_slots` slots of layout.BlockBytes() (slow copies when delay_bytes > 0),
// host tier of `host_slots`, and an SSD tier unless with_ssd is false (as a Tier: its adapter,
// opened with LayoutDigest(layout)).
// `host_slot_bytes_override` (non-zero) sizes host slots, e.g. OffloadedSequence::HostSlotBytes
// with a ladder.
// `fault_env`: the SSD tier runs on a FaultInjectionEnv (tiers.faults) over the posix env.
inline OffloadTestTiers OpenTestTiers(const KvLayout& layout, uint32_t device_slots,
                                      uint32_t host_slots, bool with_ssd, size_t delay_bytes = 0,
                                      uint32_t host_slot_bytes_override = 0,
                                      bool fault_env = false) {
  OffloadTestTiers t;
  const auto slot_bytes = static_cast<uint32_t>(layout.BlockBytes());
  Result<std::unique_ptr<DeviceTier>> device = DeviceTier::OpenCpu(
      {.capacity_bytes = uint64_t{slot_bytes} * device_slots, .slot_bytes = slot_bytes});
  KV_CHECK_OK(device.status());
  t.device = std::move(device).value();
  if (delay_bytes > 0) {
    t.device = std::make_unique<SlowCopyDeviceTier>(std::move(t.device), delay_bytes);
  }
  // With an SSD a host slot holds a whole SSD record (OffloadedSequence::HostSlotBytes).
  const uint32_t host_slot_bytes =
      host_slot_bytes_override != 0
          ? host_slot_bytes_override
          : (with_ssd ? SsdHostSlotBytes(layout) : slot_bytes);
  Result<std::unique_ptr<HostTier>> host =
      HostTier::Open({.capacity_bytes = uint64_t{host_slot_bytes} * host_slots,
                      .slot_bytes = host_slot_bytes,
                      .huge_pages = HugePages::kOff,
                      .lock = MemoryLock::kOff});
  KV_CHECK_OK(host.status());
  t.host = std::move(host).value();
  if (with_ssd) {
    Result<ScopedTempDir> dir = ScopedTempDir::Create();
    KV_CHECK_OK(dir.status());
    t.dir = std::make_unique<ScopedTempDir>(std::move(dir).value());
    t.env = NewPosixEnv();
    if (fault_env) t.faults = std::make_unique<FaultInjectionEnv>(t.env.get());
    SsdTierOptions o;
    o.dirs = {t.dir->Join("ssd")};
    o.segment_bytes = 4 * kMiB;
    o.capacity_bytes = 256 * kMiB;
    o.sync = SsdSyncMode::kNone;
    o.staging_buffer_bytes = 256 * kKiB;
    o.staging_buffers = 8;
    Result<std::unique_ptr<SsdTier>> ssd =
        SsdTier::Open(o, fault_env ? static_cast<Env*>(t.faults.get()) : t.env.get());
    KV_CHECK_OK(ssd.status());
    t.ssd = std::make_unique<SsdTierAdapter>(std::move(ssd).value(), LayoutDigest(layout));
  }
  return t;
}

}  // namespace kvtier::offload_test
