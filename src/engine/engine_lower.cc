// The tiers below memory of EngineImpl (tiers/tier.h): opening the list from the options, the
// lookups, reads, writes, write-through, Flush and statistics that walk it
// (docs/architecture.md, "The tier list").
//
// The list is ordered, fastest first: the SSD tier, then the remote tier, as configured. Every
// algorithm here is written against the Tier interface and LowerTier's policy fields; none names
// a tier. Rule for best-effort tiers (a tier over the network, docs/remote_tier.md): they never
// fail an engine call. A read that does not answer or does not verify is a miss (the layer fails
// closed), a Contains that does not answer is a miss, and a write that fails leaves the block
// cached locally; the failure is counted in EngineStats and logged once per failure streak (not
// per block). Every call is made without the engine mutex, except a local tier's Contains.
#include <algorithm>

#include "core/assert.h"
#include "engine/engine_impl.h"

namespace kvtier {

Status RemoteTierOptions::Validate() const {
  if (stores.size() + size_t{store != nullptr} != 1) {
    return Status::InvalidArgument(
        "exactly one store must be set (remote_endpoints and fs_dir name two remote tiers; give "
        "one): one entry in stores, or a borrowed store");
  }
  if (write_policy != WritePolicy::kWriteThrough && write_policy != WritePolicy::kWriteBack) {
    return Status::InvalidArgument("write_policy: unknown value");
  }
  if (admission != AdmissionMode::kAlways && admission != AdmissionMode::kAfterRequests) {
    return Status::InvalidArgument("admission: unknown value");
  }
  if (admission == AdmissionMode::kAfterRequests && admission_slots == 0) {
    return Status::InvalidArgument("admission_slots: must be > 0");
  }
  if (io_threads == 0 || io_threads > kRemoteIoThreadsMax) {
    return Status::InvalidArgument("io_threads: must be from 1 to " +
                                   std::to_string(kRemoteIoThreadsMax));
  }
  if (connections == 0 || connections > kRemoteConnectionsMax) {
    return Status::InvalidArgument("connections: must be from 1 to " +
                                   std::to_string(kRemoteConnectionsMax) + ", got " +
                                   std::to_string(connections));
  }
  return Status::Ok();
}

// --- Open --------------------------------------------------------------------------------------

namespace {

// `age_ms_max`: EngineOptions::writeback_age_ms_max, for a local write-back tier (0: it is
// written through instead).
LowerTier MakeLowerTier(OpenedLowerTier opened, uint32_t age_ms_max) {
  LowerTier t;
  const TierCapabilities caps = opened.tier->capabilities();
  t.tier = std::move(opened.tier);
  t.kind = opened.kind;
  t.name = opened.name.empty() ? std::string(TierKindName(opened.kind))
                               : opened.name.substr(0, kTierNameMax);
  t.write_policy = caps.write_back ? opened.write_policy : WritePolicy::kWriteThrough;
  t.promote_on_load = opened.promote_on_load;
  t.best_effort = !caps.local_contains;
  if (!t.best_effort && t.write_policy == WritePolicy::kWriteBack) {
    if (age_ms_max == 0) {
      t.write_policy = WritePolicy::kWriteThrough;
    } else {
      t.age_us_max = uint64_t{age_ms_max} * 1000;
    }
  }
  t.cleaned = !t.best_effort && t.write_policy == WritePolicy::kWriteBack &&
              (opened.dirty_fraction < 1 || t.age_us_max != 0);
  t.failing = std::make_unique<std::atomic<bool>>(false);
  return t;
}

}  // namespace

Status EngineImpl::OpenLowerTiers() {
  // The tiers are constructed by the factory handed to Open (lower_tier_factory.h); without one,
  // Create has refused options that ask for any.
  if (lower_factory_ == nullptr) return Status::Ok();
  KV_ASSIGN_OR_RETURN(OpenedLowerTiers opened,
                      lower_factory_->Open(options_, {.env = env_,
                                                      .clock = clock_,
                                                      .logger = logger_,
                                                      .layout_digest = layout_digest_,
                                                      .background_nice = options_.background_nice,
                                                      .background_idle =
                                                          options_.background_priority ==
                                                          BackgroundPriority::kIdle}));
  if (opened.owned_env != nullptr) {
    owned_env_ = std::move(opened.owned_env);
    env_ = owned_env_.get();
  }
  for (OpenedLowerTier& t : opened.tiers) {
    if (t.remote_store != nullptr) remote_store_ = t.remote_store;
    tiers_.push_back(MakeLowerTier(std::move(t), options_.writeback_age_ms_max));
  }
  KV_CHECK(tiers_.size() <= kLowerTiersMax);
  if (tiers_.empty()) return Status::Ok();
  // Keys do not include the codec: a block written by an engine opened with another codec
  // (identity, then int8) must still fit a read buffer, so size for the largest any codec makes.
  KV_ASSIGN_OR_RETURN(size_t encoded_max, codecs::MaxEncodedSizeAnyCodec(geometry_));
  size_t buffer = block_bytes_;
  for (const LowerTier& t : tiers_) {
    buffer = std::max<size_t>(buffer, t.tier->ReadBufferBytes(encoded_max));
  }
  KV_ASSIGN_OR_RETURN(staging_, StagingPool::Create(options_.staging_buffers, buffer));
  return Status::Ok();
}

bool EngineImpl::FindBelow(const BlockKey& key, size_t* below, uint64_t* expiry_wall_us) {
  for (size_t i = 0; i < tiers_.size(); ++i) {
    if (tiers_[i].best_effort) continue;
    TierContains c{.key = key};
    if (!tiers_[i].tier->Contains(std::span(&c, 1)).ok() || !c.status.ok() || !c.present) {
      continue;
    }
    *below = i;
    if (expiry_wall_us != nullptr) *expiry_wall_us = c.expiry_wall_us;
    return true;
  }
  return false;
}

size_t EngineImpl::FirstBestEffort() const {
  for (size_t i = 0; i < tiers_.size(); ++i) {
    if (tiers_[i].best_effort) return i;
  }
  return kFromMemory;
}

void EngineImpl::NoteTierOutcome(size_t below, std::string_view what, const Status& first_error) {
  const LowerTier& t = tiers_[below];
  const std::string name(t.tier->name());
  if (first_error.ok()) {
    if (t.failing->exchange(false)) {
      LogTo(logger_, LogLevel::kInfo, "engine: " + name + " tier answers again");
    }
    return;
  }
  if (!t.failing->exchange(true)) {
    LogTo(logger_, LogLevel::kWarn,
          "engine: " + name + " " + std::string(what) +
              " failed (serving from local tiers, blocks stay cached locally): " +
              first_error.ToString());
  }
}

// --- Lookup ------------------------------------------------------------------------------------

void EngineImpl::LookupBelow(size_t below, std::span<const BlockKey> keys,
                             std::span<TierKind> kinds) {
  KV_CHECK(keys.size() == kinds.size());
  std::vector<TierContains> asks;
  std::vector<size_t> which;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (kinds[i] != TierKind::kNone) continue;
    asks.push_back(TierContains{.key = keys[i]});
    which.push_back(i);
  }
  if (asks.empty()) return;
  KV_CHECK(asks.size() <= kRemoteLookupKeysMax * kRemoteLookupBatchesMax);
  // In chunk order, a batch at a time: once a block is missing (or unanswered), the prefix ends
  // there and later batches could not extend it.
  Status first;
  uint64_t errors = 0;
  for (size_t from = 0; from < asks.size();) {
    const size_t n = std::min(kRemoteLookupKeysMax, asks.size() - from);
    const std::span<TierContains> batch = std::span(asks).subspan(from, n);
    const Status s = tiers_[below].tier->Contains(batch);
    if (first.ok()) first = s;
    bool all_found = s.ok();
    for (size_t a = from; a < from + n; ++a) {
      if (!asks[a].status.ok()) {
        ++errors;
        if (first.ok()) first = asks[a].status;
        all_found = false;
        continue;
      }
      if (asks[a].present) {
        kinds[which[a]] = tiers_[below].kind;
      } else {
        all_found = false;
      }
    }
    if (!all_found) break;
    from += n;
  }
  NoteTierOutcome(below, "lookup", first);
  if (errors != 0) {
    MutexLock lock(&mu_);
    counters_[LowerCounters(below)].lookup_errors += errors;
  }
}

// --- Reads -------------------------------------------------------------------------------------

// Where the waiting form (WriteToTier) runs its continuation: on the waiting thread itself,
// which has nothing else to do, instead of a completion thread (one thread switch less per
// batch for the cleaner and Flush). The tier's callback posts the continuation; the
// waiter runs it, and the continuation's last step (Finish, from the call's `then`) ends the wait.
// A continuation the issue itself completes (every batch answered before it returned) runs
// inline and only Finish is seen.
class EngineImpl::ContinueHere {
 public:
  Post post() {
    return [this](std::function<void()> task) {
      MutexLock lock(&mu_);
      task_ = std::move(task);
      cv_.SignalAll();
    };
  }
  void Finish() {
    MutexLock lock(&mu_);
    done_ = true;
  }
  void Run() {
    for (;;) {
      std::function<void()> task;
      {
        MutexLock lock(&mu_);
        while (!done_ && !task_) cv_.Wait(&mu_);
        if (done_) return;
        task = std::move(task_);
        task_ = nullptr;
      }
      task();  // Its `then` calls Finish.
    }
  }

 private:
  Mutex mu_;
  CondVar cv_;
  std::function<void()> task_ KV_GUARDED_BY(mu_);
  bool done_ KV_GUARDED_BY(mu_) = false;
};

// One read batch in flight: everything its continuation needs, owned by the tier's callback
// (and then by the completion task) until the continuation has run.
struct TierReadBatch {
  std::vector<TierReadItem> items;
  std::vector<TierRead> reads;  // Borrowed by the tier until its callback has run.
  std::optional<StagingLease> lease;
  EngineImpl::ReadDone then;
  Status io;  // The whole call's status, from the tier's callback.
};

void EngineImpl::ReadFromTierAsync(size_t below, std::vector<TierReadItem> items,
                                   ReadDone then) {
  // One lease of every buffer at once (StagingPool: a holder never waits for another buffer).
  KV_CHECK(items.size() <= staging_->count());
  if (items.empty()) {
    then(items);
    return;
  }
  auto batch = std::make_shared<TierReadBatch>();
  batch->items = std::move(items);
  batch->then = std::move(then);
  const size_t n = batch->items.size();
  batch->lease.emplace(staging_->Acquire(static_cast<uint32_t>(n)));
  batch->reads.resize(n);
  for (size_t i = 0; i < n; ++i) {
    batch->reads[i].key = batch->items[i].key;
    batch->reads[i].buffer = batch->lease->buffer(i);
  }
  BeginIo();
  // The callback runs on the tier's I/O thread (the SSD tier's, the remote tier's pool). It only
  // hands the batch over to a completion thread: an I/O thread must not decode, erase or wait.
  tiers_[below].tier->ReadBatch(batch->reads, [this, below, batch](Status io) {
    batch->io = std::move(io);
    PostCompletion({}, [this, below, batch] { CompleteRead(below, *batch); });
  });
}

void EngineImpl::CompleteRead(size_t below, TierReadBatch& batch) {
  const LowerTier& tier = tiers_[below];
  const Status& io = batch.io;
  std::span<TierReadItem> items = batch.items;
  std::vector<TierRead>& reads = batch.reads;
  {
    Result<CodecLease> ctx = contexts_->Acquire();
    // Blocks a local tier holds but this engine cannot use: erased, so that Lookup stops
    // reporting them and the next Store rewrites them (Store skips keys a local tier contains). A
    // shared tier's records are left to their writers.
    std::vector<BlockKey> unusable;
    Status unanswered;
    for (size_t i = 0; i < items.size(); ++i) {
      TierReadItem& item = items[i];
      Status s = io.ok() ? reads[i].status : io;
      if (!s.ok() && !s.IsNotFound() && !s.IsCorruption() && unanswered.ok()) unanswered = s;
      bool undecodable = false;
      if (s.ok() && reads[i].raw_bytes != block_bytes_) s = Status::Corruption("raw size differs");
      if (s.ok() && !ctx.ok()) s = ctx.status();
      if (s.ok()) {
        s = codecs::DecodeBlock(reads[i].payload, geometry_, item.dst, ctx->get());
        undecodable = !s.ok();
      }
      if (s.ok()) {
        item.status = Status::Ok();
        continue;
      }
      // A record that failed verification (the tier dropped it) or did not decode: a miss,
      // never wrong bytes, and counted as corrupt. A block reclaimed or expired since Lookup is a
      // plain miss; a read the tier refused (InvalidArgument: a record larger than the buffer) is
      // unusable.
      item.corrupt = reads[i].corrupt || undecodable || s.IsCorruption();
      if (!tier.best_effort && io.ok() &&
          (undecodable || s.IsCorruption() || s.IsInvalidArgument())) {
        unusable.push_back(item.key);
      }
      item.status = Status::NotFound("block " + item.key.ToString() + " unavailable from the " +
                                     std::string(tier.tier->name()) + " tier: " + s.ToString());
    }
    if (tier.best_effort) NoteTierOutcome(below, "read", unanswered);
    if (!unusable.empty()) {
      const Status erased = tier.tier->Erase(unusable);
      if (!erased.ok()) {
        LogTo(logger_, LogLevel::kWarn,
              "engine: erasing unreadable " + std::string(tier.tier->name()) +
                  " blocks: " + erased.ToString());
      }
    }
  }
  batch.lease.reset();  // The records are decoded: the buffers serve the next batch.
  batch.then(items);
  EndIo();  // Last: the engine may be destroyed once the count reaches 0.
}

void EngineImpl::PostCompletion(const Post& post, std::function<void()> task) {
  if (post) {
    post(std::move(task));
    return;
  }
  auto shared = std::make_shared<std::function<void()>>(std::move(task));
  // Submit fails only once the pool shuts down, and it outlives every batch (DrainIo).
  if (!completions_->Submit([shared] { (*shared)(); }).ok()) (*shared)();
}

void EngineImpl::BeginIo() {
  MutexLock lock(&io_mu_);
  ++io_in_flight_;
}

void EngineImpl::EndIo() {
  MutexLock lock(&io_mu_);
  KV_CHECK(io_in_flight_ > 0);
  if (--io_in_flight_ == 0) io_drained_.SignalAll();
}

void EngineImpl::DrainIo() {
  MutexLock lock(&io_mu_);
  while (io_in_flight_ != 0) io_drained_.Wait(&io_mu_);
}

void EngineImpl::LoadFromTier(size_t below, std::span<const LoadItem> batch,
                              std::function<void(Status)> done) {
  std::vector<TierReadItem> reads(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    reads[i].key = batch[i].key;
    reads[i].dst = batch[i].dst;
  }
  ReadFromTierAsync(below, std::move(reads),
                    [this, below, done = std::move(done)](std::span<TierReadItem> out) {
                      done(FinishLoadBatch(below, out));
                    });
}

Status EngineImpl::FinishLoadBatch(size_t below, std::span<const TierReadItem> reads) {
  Status first;
  uint64_t corrupt = 0;
  uint64_t hits = 0;
  for (const TierReadItem& r : reads) {
    if (r.corrupt) ++corrupt;
    if (r.status.ok()) ++hits;
    if (!r.status.ok() && first.ok()) first = r.status;
  }
  const LowerTier& tier = tiers_[below];
  {
    MutexLock lock(&mu_);
    stats_.corrupt_blocks += corrupt;
    // A local tier's hits were counted by Load's plan (its Contains said yes); a best-effort
    // tier, read without asking first, counts the blocks it served.
    if (tier.best_effort) counters_[LowerCounters(below)].hits += hits;
  }
  if (tier.promote_on_load) {
    for (const TierReadItem& r : reads) {
      if (r.status.ok()) PromoteCopy(r.key, r.dst, below);
    }
  }
  return first;
}

// --- Writes ------------------------------------------------------------------------------------

// One WriteToTierAsync call: its items and the outcome its batches add up to. A batch is at most
// kLoadStagingBatchMax items encoded into one lease (the caller's buffers or its own).
struct TierWriteCall {
  std::vector<TierWriteItem> items;
  EngineImpl::WriteDone then;
  Mutex mu;
  uint32_t pending KV_GUARDED_BY(mu) = 1;  // Batches in flight, plus the issue itself.
  Status first KV_GUARDED_BY(mu);  // The first whole-batch error.
  // The lease of the batch that answered last, released when the call completes (so that a
  // queued completion always holds a staging buffer); the others are released as they answer.
  std::vector<StagingLease> leases KV_GUARDED_BY(mu);
};

struct TierWriteBatch {
  std::vector<TierWrite> writes;  // Borrowed by the tier until its callback has run.
  std::vector<size_t> which;      // The item of each write.
  std::optional<StagingLease> own;  // The encode buffers, unless the caller gave them.
};

void EngineImpl::WriteToTierAsync(size_t below, std::vector<TierWriteItem> items,
                                  std::span<const std::span<std::byte>> encode_buffers,
                                  WriteDone then, Post post) {
  const LowerTier& tier = tiers_[below];
  const bool given = !encode_buffers.empty();
  KV_CHECK(!given || encode_buffers.size() >= items.size());
  auto call = std::make_shared<TierWriteCall>();
  call->items = std::move(items);
  call->then = std::move(then);
  BeginIo();
  Result<CodecLease> ctx = contexts_->Acquire();
  const uint64_t now = NowWallUs();
  std::vector<TierWriteItem>& all = call->items;
  for (size_t base = 0; base < all.size(); base += kLoadStagingBatchMax) {
    const size_t n = std::min<size_t>(kLoadStagingBatchMax, all.size() - base);
    auto batch = std::make_shared<TierWriteBatch>();
    if (!given) batch->own.emplace(staging_->Acquire(static_cast<uint32_t>(n)));
    for (size_t i = 0; i < n; ++i) {
      TierWriteItem& item = all[base + i];
      const uint64_t expiry = item.expiry_wall_us;
      item.status = Status::Ok();
      item.skipped = false;
      if (expiry != 0 && expiry <= now) continue;  // Expired: nothing worth keeping.
      if (item.raw.size() != block_bytes_) {
        item.status = Status::IoError("no bytes to write for " + item.key.ToString());
        continue;
      }
      // Encoded at the tier's payload offset, so that a tier that writes whole records can lay
      // its record out around it and write it from this buffer (TierWrite::record).
      const std::span<std::byte> buffer =
          given ? encode_buffers[base + i] : batch->own->buffer(i);
      const std::span<std::byte> out = buffer.subspan(tier.tier->PayloadOffset());
      Result<size_t> bytes =
          ctx.ok() ? codecs::EncodeBlock(options_.ssd_codec, geometry_, item.raw, out, ctx->get())
                   : Result<size_t>(ctx.status());
      if (!bytes.ok()) {
        item.status = bytes.status();
        continue;
      }
      // One sample per block: its local tier's write (a block also put remotely is not counted
      // twice).
      if (!tier.best_effort) {
        ratio_->Record(options_.ssd_codec.codec, item.key.layer, block_bytes_, *bytes);
      }
      batch->writes.push_back(TierWrite{.key = item.key,
                                        .codec_id = static_cast<uint8_t>(options_.ssd_codec.codec),
                                        .raw_bytes = static_cast<uint32_t>(block_bytes_),
                                        .payload = out.first(*bytes),
                                        .ttl_us = expiry == 0 ? 0 : expiry - now,
                                        .record = buffer});
      batch->which.push_back(base + i);
    }
    if (batch->writes.empty()) continue;  // Its lease, unused, goes back now.
    {
      MutexLock lock(&call->mu);
      ++call->pending;
    }
    // The callback runs on the tier's I/O thread (after Close: on this thread, before WriteBatch
    // returns): it copies the outcomes and, for the call's last batch, hands the rest to a
    // completion thread (or to the thread waiting in WriteToTier).
    tier.tier->WriteBatch(batch->writes, [this, below, call, batch, post](Status s) {
      WriteBatchAnswered(below, call, *batch, post, s);
    });
  }
  bool last = false;
  {
    MutexLock lock(&call->mu);
    last = --call->pending == 0;
  }
  // Every batch answered already (or there was none): the issuing thread completes the call.
  if (last) CompleteWrite(below, *call);
}

void EngineImpl::WriteBatchAnswered(size_t below, const std::shared_ptr<TierWriteCall>& call,
                                    TierWriteBatch& batch, const Post& post, const Status& s) {
  for (size_t w = 0; w < batch.writes.size(); ++w) {
    TierWriteItem& item = call->items[batch.which[w]];
    item.status = batch.writes[w].status;
    item.skipped = batch.writes[w].skipped;
  }
  bool last = false;
  {
    MutexLock lock(&call->mu);
    if (!s.ok() && call->first.ok()) call->first = s;
    last = --call->pending == 0;
    if (last && batch.own.has_value()) call->leases.push_back(std::move(*batch.own));
  }
  // The tier is done with the payloads: the buffers serve the next batch (this call's issuer may
  // be waiting for them).
  batch.own.reset();
  if (!last) return;
  PostCompletion(post, [this, below, call] { CompleteWrite(below, *call); });
}

void EngineImpl::CompleteWrite(size_t below, TierWriteCall& call) {
  const LowerTier& tier = tiers_[below];
  Status first;
  {
    MutexLock lock(&call.mu);
    first = call.first;
    call.leases.clear();
  }
  uint64_t written = 0, not_admitted = 0, over_budget = 0, failed = 0;
  for (const TierWriteItem& item : call.items) {
    if (item.status.ok()) ++written;
    if (item.skipped && item.status.IsAborted()) ++not_admitted;
    if (item.skipped && item.status.IsBusy()) ++over_budget;
    // Every item that is not on the tier and was not deliberately skipped is an error, whatever
    // the batch said (an encode failure, a copy that produced no bytes).
    if (item.status.ok() || item.skipped) continue;
    ++failed;
    if (first.ok()) first = item.status;
  }
  if (tier.best_effort) NoteTierOutcome(below, "write", first);
  {
    MutexLock lock(&mu_);
    TierCounters& c = counters_[LowerCounters(below)];
    c.write_failures += failed;
    c.written += written;
    c.not_admitted += not_admitted;
    c.over_budget += over_budget;
  }
  call.then(first, call.items);
  EndIo();  // Last: the engine may be destroyed once the count reaches 0.
}

Status EngineImpl::WriteToTier(size_t below, std::span<TierWriteItem> items,
                               std::span<const std::span<std::byte>> encode_buffers) {
  ContinueHere here;
  Status result;
  WriteToTierAsync(
      below, std::vector<TierWriteItem>(items.begin(), items.end()), encode_buffers,
      [&result, items, &here](Status s, std::span<const TierWriteItem> out) {
        std::copy(out.begin(), out.end(), items.begin());
        result = std::move(s);
        here.Finish();
      },
      here.post());
  here.Run();
  return result;
}

void EngineImpl::WriteThrough(size_t below, std::span<const StoreItem> items,
                              std::function<void(Status)> done) {
  std::vector<TierWriteItem> writes;
  writes.reserve(items.size());
  {
    MutexLock lock(&mu_);
    for (const StoreItem& item : items) {
      const BlockEntry* e = table_.Find(item.key);
      writes.push_back(TierWriteItem{.key = item.key,
                                     .raw = item.src,
                                     .expiry_wall_us = e != nullptr ? e->expiry_wall_us() : 0});
    }
  }
  // The sources are still borrowed (the handle has not completed): encode straight from them.
  WriteToTierAsync(below, std::move(writes), {},
                   [this, below, done = std::move(done)](Status io,
                                                         std::span<const TierWriteItem> out) {
                     {
                       MutexLock lock(&mu_);
                       for (const TierWriteItem& w : out) {
                         if (w.status.ok() && table_.Find(w.key) != nullptr) {
                           table_.MarkClean(w.key, below);
                         }
                       }
                     }
                     done(io);
                   });
}

// --- Flush -------------------------------------------------------------------------------------

bool EngineImpl::FlushBestEffortBatch(size_t below, std::span<const BlockKey> keys) {
  std::vector<std::pair<BlockKey, MemTier>> todo;
  std::vector<TierWriteItem> items;
  const size_t n = keys.size();
  // Raw copies in the first half, encoded values in the second: one lease, never nested.
  StagingLease lease = staging_->Acquire(static_cast<uint32_t>(2 * n));
  ClaimAndCopyOut(keys, below, lease, &todo, &items);
  WriteToTier(below, items, lease.buffers().subspan(n, n)).IgnoreError();  // Counted, logged.
  bool ok = true;
  MutexLock lock(&mu_);
  for (size_t i = 0; i < todo.size(); ++i) {
    table_.EndFlush(todo[i].first, below, /*written=*/items[i].status.ok());
    if (!items[i].status.ok() && !items[i].skipped) ok = false;
  }
  return ok;
}

void EngineImpl::FlushBestEffortTier(size_t below) {
  std::vector<BlockKey> dirty;
  {
    MutexLock lock(&mu_);
    table_.ForEach([&](const BlockKey& key, const BlockEntry& e) {
      if (e.DirtyFor(below)) dirty.push_back(key);
    });
  }
  bool failed = false;
  const size_t batch = std::min<size_t>(kLoadStagingBatchMax / 2, staging_->count() / 2);
  for (size_t base = 0; base < dirty.size(); base += batch) {
    const size_t n = std::min(batch, dirty.size() - base);
    if (!FlushBestEffortBatch(below, std::span(dirty).subspan(base, n))) failed = true;
  }
  // Never an error of Flush: the blocks stay cached (and dirty) locally; the failed writes are
  // counted and logged by WriteToTier.
  if (failed) {
    LogTo(logger_, LogLevel::kWarn,
          "engine: flush: some blocks could not be written to the " +
              std::string(tiers_[below].tier->name()) + " tier");
  }
}

Status EngineImpl::FlushTier(size_t below) {
  if (tiers_[below].best_effort) {
    FlushBestEffortTier(below);
    return Status::Ok();
  }
  return FlushLocalTier(below);
}

// --- Stats -------------------------------------------------------------------------------------

void EngineImpl::AppendLowerStats(std::span<const TierStoreStats> stores, EngineStats* out) {
  for (size_t i = 0; i < tiers_.size(); ++i) {
    const TierCounters& c = counters_[LowerCounters(i)];
    const TierStoreStats& s = stores[i];
    TierStats t{.kind = tiers_[i].kind,
                .name = tiers_[i].name,
                .capacity_bytes = s.capacity_bytes,
                .used_bytes = s.used_bytes,
                .blocks = s.blocks,
                .hits = c.hits,
                .evictions = s.dropped,
                .write_failures = c.write_failures,
                .write_bytes = s.write_bytes,
                .staged_write_bytes = s.staged_write_bytes};
    if (tiers_[i].age_us_max != 0) {
      const uint64_t now = clock_->NowMicros();
      t.writeback_horizon_us = tiers_[i].all_clean ? now : tiers_[i].horizon_us;
      t.writeback_lag_us = now - std::min(now, t.writeback_horizon_us);
    }
    // EngineStats keeps the remote tier's own fields (engine.h): its puts are its write-backs.
    if (tiers_[i].kind == TierKind::kRemote) {
      t.writebacks = c.written;
      out->remote_put_errors = c.write_failures;
      out->remote_not_admitted = c.not_admitted;
      out->remote_over_budget = c.over_budget;
      out->remote_lookup_errors = c.lookup_errors;
    }
    out->tiers.push_back(t);
  }
}

}  // namespace kvtier
