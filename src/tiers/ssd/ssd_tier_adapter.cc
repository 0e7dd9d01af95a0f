// SsdTierAdapter (tiers/ssd_tier_adapter.h): Tier batches translated to SsdTier batches.
#include "tiers/ssd/ssd_tier_adapter.h"

#include <string>
#include <utility>
#include <vector>

#include "core/assert.h"
#include "tiers/ssd_record.h"

namespace kvtier {

SsdTierAdapter::SsdTierAdapter(std::unique_ptr<SsdTier> ssd, const Hash256& layout_digest)
    : ssd_(std::move(ssd)), layout_digest_(layout_digest) {
  KV_CHECK(ssd_ != nullptr);
}

TierCapabilities SsdTierAdapter::capabilities() const {
  return TierCapabilities{
      .persistent = true, .shared = false, .local_contains = true, .write_back = true};
}

uint64_t SsdTierAdapter::ReadBufferBytes(uint64_t payload_bytes) const {
  return RecordBufferBytes(payload_bytes, ssd_->options().keyring.has_value());
}

uint64_t SsdTierAdapter::RecordBufferBytes(uint64_t payload_bytes, bool sealed) {
  // A sealed record carries its seal beside the payload (docs/ssd_format.md §3).
  return ssd::RecordBytesForPayload(payload_bytes +
                                    (sealed ? ssd::kSealedRecordOverheadBytes : 0));
}

// The record header comes first; a sealed record is opened in place (docs/ssd_format.md).
uint64_t SsdTierAdapter::PayloadOffset() const { return ssd::kRecordPayloadOffset; }

namespace {

// The whole-batch refusal of a batch larger than SsdTier takes.
template <typename Item>
bool RefuseOversized(std::span<Item> items, const Tier::Callback& done) {
  if (items.size() <= kSsdBatchEntriesMax) return false;
  const Status s = Status::InvalidArgument("ssd: batch of " + std::to_string(items.size()) +
                                           " items, at most " +
                                           std::to_string(kSsdBatchEntriesMax));
  for (Item& item : items) item.status = s;
  done(s);
  return true;
}

}  // namespace

void SsdTierAdapter::ReadBatch(std::span<TierRead> reads, Callback done) {
  if (RefuseOversized(reads, done)) return;
  // The SsdTier's items live until its callback, which copies their outcome back.
  auto ssd_reads = std::make_shared<std::vector<SsdBlockRead>>(reads.size());
  for (size_t i = 0; i < reads.size(); ++i) {
    (*ssd_reads)[i].key = reads[i].key;
    (*ssd_reads)[i].layout_digest = layout_digest_;
    (*ssd_reads)[i].buffer = reads[i].buffer;
  }
  ssd_->ReadBatch(*ssd_reads, [reads, ssd_reads, done = std::move(done)](Status s) {
    for (size_t i = 0; i < reads.size(); ++i) {
      const SsdBlockRead& r = (*ssd_reads)[i];
      reads[i].status = s.ok() ? r.status : s;
      reads[i].payload = r.payload;
      reads[i].codec_id = r.codec_id;
      reads[i].raw_bytes = r.raw_bytes;
      reads[i].corrupt = r.failed_verification;
    }
    done(std::move(s));
  });
}

void SsdTierAdapter::WriteBatch(std::span<TierWrite> writes, Callback done) {
  if (RefuseOversized(writes, done)) return;
  auto ssd_writes = std::make_shared<std::vector<SsdBlockWrite>>(writes.size());
  for (size_t i = 0; i < writes.size(); ++i) {
    (*ssd_writes)[i] = SsdBlockWrite{.key = writes[i].key,
                                     .layout_digest = layout_digest_,
                                     .codec_id = writes[i].codec_id,
                                     .raw_bytes = writes[i].raw_bytes,
                                     .payload = writes[i].payload,
                                     .ttl_us = writes[i].ttl_us,
                                     .record = writes[i].record};
  }
  ssd_->WriteBatch(*ssd_writes, [writes, ssd_writes, done = std::move(done)](Status s) {
    for (size_t i = 0; i < writes.size(); ++i) {
      writes[i].status = (*ssd_writes)[i].status;
      writes[i].skipped = (*ssd_writes)[i].skipped;
    }
    done(std::move(s));
  });
}

Status SsdTierAdapter::Contains(std::span<TierContains> items) {
  for (TierContains& item : items) {
    const std::optional<SsdBlockInfo> info = ssd_->Lookup(item.key);
    item.present = info.has_value();
    item.expiry_wall_us = info.has_value() ? info->expiry_wall_us : 0;
    item.status = Status::Ok();
  }
  return Status::Ok();
}

Status SsdTierAdapter::Erase(std::span<const BlockKey> keys) { return ssd_->Erase(keys); }

Status SsdTierAdapter::Flush() { return ssd_->Flush(); }

TierStoreStats SsdTierAdapter::Stats() {
  const SsdTierStats s = ssd_->Stats();
  return TierStoreStats{.blocks_known = true,
                        .blocks = s.blocks,
                        .capacity_bytes = ssd_->options().capacity_bytes,
                        .used_bytes = s.live_bytes,
                        .dropped = s.dropped_blocks,
                        .reads = s.reads,
                        .read_hits = s.read_hits,
                        .read_misses = s.read_misses,
                        .corrupt = s.corrupt_records,
                        .writes = s.writes,
                        .write_bytes = s.write_bytes,
                        .staged_write_bytes = s.staged_write_bytes,
                        .write_errors = s.failed_writes,
                        .not_admitted = s.not_admitted,
                        .over_budget = s.over_budget};
}

}  // namespace kvtier
