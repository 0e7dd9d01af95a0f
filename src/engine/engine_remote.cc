// The remote tier of EngineImpl: opening it, Lookup's batched Exists, Load's Get + decode,
// write-through and write-back Puts, Flush, and its statistics (docs/remote_tier.md, "Engine
// integration").
//
// Rule of this file: the remote tier never fails an engine call. A Get that does not answer or
// does not verify is a miss (the layer fails closed), an Exists that does not answer is a miss,
// and a Put that fails leaves the block cached locally; the failure is counted in EngineStats and
// logged once per failure streak (not per block). Every call is bounded by the store's timeouts
// and circuit breaker, and is made without the engine mutex.
#include <algorithm>

#include "core/assert.h"
#include "engine/engine_impl.h"

namespace kvtier {

Status RemoteTierOptions::Validate() const {
  if (redis.has_value() == (store != nullptr)) {
    return Status::InvalidArgument("exactly one of redis and store must be set");
  }
  if (write_policy != WritePolicy::kWriteThrough && write_policy != WritePolicy::kWriteBack) {
    return Status::InvalidArgument("write_policy: unknown value");
  }
  if (admission != SsdAdmission::kAlways && admission != SsdAdmission::kAfterRequests) {
    return Status::InvalidArgument("admission: unknown value");
  }
  if (admission == SsdAdmission::kAfterRequests && admission_slots == 0) {
    return Status::InvalidArgument("admission_slots: must be > 0");
  }
  return Status::Ok();
}

Status EngineImpl::OpenRemote() {
  if (!options_.remote.has_value()) return Status::Ok();
  const RemoteTierOptions& r = *options_.remote;
  if (r.store != nullptr) {
    remote_ = r.store;
  } else {
    RedisStoreOptions o = *r.redis;
    o.layout_digest = layout_digest_;
    if (o.clock == nullptr) o.clock = clock_;
    if (o.logger == nullptr) o.logger = logger_;
    KV_ASSIGN_OR_RETURN(std::unique_ptr<RedisStore> store, RedisStore::Open(std::move(o)));
    owned_remote_ = std::move(store);
    remote_ = owned_remote_.get();
  }
  if (r.admission == SsdAdmission::kAfterRequests) {
    remote_admission_ =
        std::make_unique<ssd::AdmissionFilter>(r.admission_requests, r.admission_slots);
  }
  if (r.write_budget_bytes_per_s != 0) {
    remote_budget_ = std::make_unique<ssd::WriteBudget>(
        r.write_budget_bytes_per_s, r.write_budget_burst_bytes, clock_->NowMicros());
  }
  return Status::Ok();
}

void EngineImpl::NoteRemoteOutcome(std::string_view what, const Status& first_error) {
  if (first_error.ok()) {
    if (remote_failing_.exchange(false)) {
      LogTo(logger_, LogLevel::kInfo, "engine: remote tier answers again");
    }
    return;
  }
  if (!remote_failing_.exchange(true)) {
    LogTo(logger_, LogLevel::kWarn,
          "engine: remote " + std::string(what) +
              " failed (serving from local tiers, blocks stay cached locally): " +
              first_error.ToString());
  }
}

// --- Lookup ------------------------------------------------------------------------------------

void EngineImpl::LookupRemote(std::span<const BlockKey> keys, std::span<TierKind> kinds) {
  KV_CHECK(keys.size() == kinds.size());
  std::vector<RemoteExists> asks;
  std::vector<size_t> which;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (kinds[i] != TierKind::kNone) continue;
    asks.push_back(RemoteExists{.key = keys[i]});
    which.push_back(i);
  }
  if (asks.empty()) return;
  KV_CHECK(asks.size() <= kRemoteLookupKeysMax);
  Status first = remote_->Exists(asks);
  uint64_t errors = 0;
  for (size_t a = 0; a < asks.size(); ++a) {
    if (!asks[a].status.ok()) {
      ++errors;
      if (first.ok()) first = asks[a].status;
      continue;
    }
    if (asks[a].exists) {
      kinds[which[a]] = TierKind::kRemote;
    } else if (remote_admission_ != nullptr) {
      remote_admission_->Record(asks[a].key);  // A miss is a request, as for the SSD filter.
    }
  }
  NoteRemoteOutcome("lookup", first);
  if (errors != 0) {
    MutexLock lock(&mu_);
    stats_.remote_lookup_errors += errors;
  }
}

// --- Reads -------------------------------------------------------------------------------------

void EngineImpl::ReadFromRemote(std::span<SsdReadItem> items) {
  KV_CHECK(items.size() <= kLoadStagingBatchMax);
  if (items.empty()) return;
  StagingLease lease = staging_->Acquire(static_cast<uint32_t>(items.size()));
  std::vector<RemoteGet> gets(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    gets[i].key = items[i].key;
    gets[i].dst = lease.buffer(i);
  }
  Status call = remote_->Get(gets);
  Status unanswered;
  Result<CodecLease> ctx = contexts_->Acquire();
  for (size_t i = 0; i < items.size(); ++i) {
    SsdReadItem& item = items[i];
    const RemoteGet& g = gets[i];
    Status s = call.ok() ? g.status : call;
    const bool answered = s.ok() || s.IsNotFound() || s.IsCorruption();
    if (!answered && unanswered.ok()) unanswered = s;
    if (s.ok() && g.raw_bytes != block_bytes_) s = Status::Corruption("raw size differs");
    if (s.ok() && !ctx.ok()) s = ctx.status();
    if (s.ok()) {
      s = codecs::DecodeBlock(lease.buffer(i).first(g.payload_bytes), geometry_, item.dst,
                              ctx->get());
    }
    if (s.ok()) {
      item.status = Status::Ok();
      continue;
    }
    // The store refused the value (it counts it too) or it did not decode: a miss either way.
    item.corrupt = s.IsCorruption();
    item.status =
        Status::NotFound("block " + item.key.ToString() + " unavailable remotely: " + s.ToString());
  }
  NoteRemoteOutcome("read", unanswered);
}

Status EngineImpl::LoadFromRemote(std::span<const LoadItem> batch) {
  std::vector<SsdReadItem> reads(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    reads[i].key = batch[i].key;
    reads[i].dst = batch[i].dst;
  }
  ReadFromRemote(reads);
  Status first;
  uint64_t corrupt = 0;
  uint64_t hits = 0;
  for (const SsdReadItem& r : reads) {
    if (r.corrupt) ++corrupt;
    if (r.status.ok()) ++hits;
    if (!r.status.ok() && first.ok()) first = r.status;
  }
  {
    MutexLock lock(&mu_);
    stats_.corrupt_blocks += corrupt;
    counters_[kRemoteCounters].hits += hits;
  }
  if (options_.remote->promote_on_load) {
    for (const SsdReadItem& r : reads) {
      if (r.status.ok()) PromoteCopy(r.key, r.dst, TierKind::kRemote);
    }
  }
  return first;
}

// --- Writes ------------------------------------------------------------------------------------

void EngineImpl::WriteToRemote(std::span<SsdWriteItem> items,
                               std::span<const std::span<std::byte>> encode_buffers) {
  Result<CodecLease> ctx = contexts_->Acquire();
  const uint64_t now = NowWallUs();
  const bool given = !encode_buffers.empty();
  KV_CHECK(!given || encode_buffers.size() >= items.size());
  uint64_t written = 0, errors = 0, not_admitted = 0, over_budget = 0;
  Status first;
  for (size_t base = 0; base < items.size(); base += kLoadStagingBatchMax) {
    const size_t n = std::min<size_t>(kLoadStagingBatchMax, items.size() - base);
    std::optional<StagingLease> own;
    if (!given) own.emplace(staging_->Acquire(static_cast<uint32_t>(n)));
    std::vector<RemotePut> puts;
    std::vector<size_t> which;
    for (size_t i = 0; i < n; ++i) {
      SsdWriteItem& item = items[base + i];
      const uint64_t expiry = item.expiry_wall_us;
      item.status = Status::Ok();
      if (expiry != 0 && expiry <= now) continue;  // Expired: nothing worth keeping.
      if (remote_admission_ != nullptr && !remote_admission_->RecordAndAdmit(item.key)) {
        item.status = Status::Aborted("not admitted to the remote tier");
        ++not_admitted;
        continue;
      }
      const std::span<std::byte> out = given ? encode_buffers[base + i] : own->buffer(i);
      Result<size_t> bytes =
          ctx.ok() ? codecs::EncodeBlock(options_.ssd_codec, geometry_, item.raw, out, ctx->get())
                   : Result<size_t>(ctx.status());
      if (!bytes.ok()) {
        item.status = bytes.status();
        ++errors;
        continue;
      }
      if (remote_budget_ != nullptr && !remote_budget_->TryTake(*bytes, clock_->NowMicros())) {
        item.status = Status::Busy("over the remote write budget");
        ++over_budget;
        continue;
      }
      // TTL in whole milliseconds, rounded up so that a block never outlives its expiry by less.
      const uint64_t ttl_ms = expiry == 0 ? 0 : (expiry - now + 999) / 1000;
      puts.push_back(RemotePut{.key = item.key,
                               .codec_id = static_cast<uint8_t>(options_.ssd_codec.codec),
                               .raw_bytes = static_cast<uint32_t>(block_bytes_),
                               .payload = out.first(*bytes),
                               .ttl_ms = ttl_ms});
      which.push_back(base + i);
    }
    if (puts.empty()) continue;
    const Status call = remote_->Put(puts);
    for (size_t p = 0; p < puts.size(); ++p) {
      const Status s = call.ok() ? puts[p].status : call;
      items[which[p]].status = s;
      if (s.ok()) {
        ++written;
      } else {
        ++errors;
        if (first.ok()) first = s;
      }
    }
  }
  NoteRemoteOutcome("write", first);
  MutexLock lock(&mu_);
  counters_[kRemoteCounters].writebacks += written;
  stats_.remote_put_errors += errors;
  stats_.remote_not_admitted += not_admitted;
  stats_.remote_over_budget += over_budget;
}

void EngineImpl::WriteThroughRemote(std::span<const StoreItem> items) {
  if (!RemoteWriteThrough() || items.empty()) return;
  std::vector<SsdWriteItem> writes;
  writes.reserve(items.size());
  {
    MutexLock lock(&mu_);
    for (const StoreItem& item : items) {
      const BlockEntry* e = index_.Find(item.key);
      writes.push_back(SsdWriteItem{.key = item.key,
                                    .raw = item.src,
                                    .expiry_wall_us = e != nullptr ? e->expiry_wall_us : 0});
    }
  }
  // The sources are still borrowed (the handle has not completed): encode straight from them.
  WriteToRemote(writes);
}

// --- Flush -------------------------------------------------------------------------------------

bool EngineImpl::FlushRemoteBatch(std::span<const BlockKey> keys) {
  std::vector<std::pair<BlockKey, MemTier>> todo;
  std::vector<SsdWriteItem> items;
  const size_t n = keys.size();
  // Raw copies in the first half, encoded values in the second: one lease, never nested.
  StagingLease lease = staging_->Acquire(static_cast<uint32_t>(2 * n));
  ClaimAndCopyOut(keys, &BlockEntry::remote_dirty, lease, &todo, &items);
  WriteToRemote(items, lease.buffers().subspan(n, n));
  bool ok = true;
  MutexLock lock(&mu_);
  for (size_t i = 0; i < todo.size(); ++i) {
    BlockEntry* e = index_.Find(todo[i].first);
    e->flushing = false;
    --e->pins;
    if (items[i].status.ok()) e->remote_dirty = false;
    if (!items[i].status.ok() && !items[i].status.IsAborted() && !items[i].status.IsBusy()) {
      ok = false;
    }
  }
  return ok;
}

void EngineImpl::FlushRemote() {
  if (!RemoteWriteBack()) return;
  std::vector<BlockKey> dirty;
  {
    MutexLock lock(&mu_);
    index_.ForEach([&](const BlockKey& key, const BlockEntry& e) {
      if (e.remote_dirty) dirty.push_back(key);
    });
  }
  bool failed = false;
  const size_t batch = std::min<size_t>(kLoadStagingBatchMax / 2, staging_->count() / 2);
  for (size_t base = 0; base < dirty.size(); base += batch) {
    const size_t n = std::min(batch, dirty.size() - base);
    if (!FlushRemoteBatch(std::span(dirty).subspan(base, n))) failed = true;
  }
  // Never an error of Flush: the blocks stay cached (and remote-dirty) locally; the failed puts
  // are counted and logged by WriteToRemote.
  if (failed) {
    LogTo(logger_, LogLevel::kWarn, "engine: flush: some blocks could not be put remotely");
  }
}

// --- Stats -------------------------------------------------------------------------------------

void EngineImpl::AppendRemoteStats(const std::optional<RemoteStoreStats>& store, EngineStats* out) {
  if (remote_ == nullptr) return;
  out->tiers.push_back(TierStats{.kind = TierKind::kRemote,
                                 .hits = counters_[kRemoteCounters].hits,
                                 .writebacks = counters_[kRemoteCounters].writebacks,
                                 .write_failures = stats_.remote_put_errors});
  out->remote = store;
}

}  // namespace kvtier
