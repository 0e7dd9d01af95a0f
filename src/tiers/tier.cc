// The synchronous conveniences of Tier (tiers/tier.h).
#include "tiers/tier.h"

namespace kvtier {

Status Tier::ReadBatchSync(std::span<TierRead> reads) {
  return WaitForCallback([&](Callback done) { ReadBatch(reads, std::move(done)); });
}

Status Tier::WriteBatchSync(std::span<TierWrite> writes) {
  return WaitForCallback([&](Callback done) { WriteBatch(writes, std::move(done)); });
}

}  // namespace kvtier
