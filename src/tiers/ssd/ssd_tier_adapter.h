// SsdTierAdapter: the SSD tier (tiers/ssd_tier.h) as a Tier (tiers/tier.h), named "ssd".
//
// Persistent, local (Contains is a lookup in the tier's in-memory index), and written back from
// memory. Its admission filter and write budget are the SsdTier's own: a refused write is
// skipped (Aborted or Busy). Records are checked against the layout digest given at
// construction; a record that fails verification is a miss with `corrupt` set. Reads need
// 4 KiB-aligned buffers of a whole record (ReadBufferBytes), as SsdTier::ReadBatch.
//
// Thread safety: as SsdTier (any thread; callbacks on an I/O thread). Ownership: owns the SsdTier.
#pragma once

#include <memory>

#include "core/sha256.h"
#include "tiers/ssd/ssd_tier.h"
#include "tiers/tier.h"

namespace kvtier {

class SsdTierAdapter final : public Tier {
 public:
  SsdTierAdapter(std::unique_ptr<SsdTier> ssd, const Hash256& layout_digest);

  SsdTier* ssd() { return ssd_.get(); }

  // Tier.
  std::string_view name() const override { return "ssd"; }
  TierCapabilities capabilities() const override;
  size_t batch_max() const override { return kSsdBatchEntriesMax; }
  uint64_t ReadBufferBytes(uint64_t payload_bytes) const override;
  uint64_t PayloadOffset() const override;
  // ReadBufferBytes of an SSD tier with or without a keyring, for a caller that sizes its buffers
  // before the tier is open.
  static uint64_t RecordBufferBytes(uint64_t payload_bytes, bool sealed);
  void ReadBatch(std::span<TierRead> reads, Callback done) override;
  void WriteBatch(std::span<TierWrite> writes, Callback done) override;
  Status Contains(std::span<TierContains> items) override;
  Status Erase(std::span<const BlockKey> keys) override;
  Status Flush() override;
  TierStoreStats Stats() override;
  Status Close() override { return ssd_->Close(); }

 private:
  std::unique_ptr<SsdTier> ssd_;
  const Hash256 layout_digest_;
};

}  // namespace kvtier
