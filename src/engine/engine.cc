// Engine::Open, namespaces, Lookup, Prefetch, Pin, Flush and Stats. Load and Store live in
// engine_load.cc and engine_store.cc, slot management in engine_tiers.cc.
#include <pthread.h>

#include <algorithm>

#include "core/assert.h"
#include "core/limits.h"
#include "core/thread_priority.h"
#include "engine/engine_impl.h"
#include "env/thread_cpus.h"

namespace kvtier {

// --- PinHandle ---------------------------------------------------------------------------------

PinHandle::PinHandle(std::shared_ptr<Unpinner> owner, std::vector<Hash256> keys)
    : owner_(std::move(owner)), keys_(std::move(keys)) {}

PinHandle::PinHandle(PinHandle&& o) noexcept
    : owner_(std::move(o.owner_)), keys_(std::move(o.keys_)) {
  o.keys_.clear();
}

PinHandle& PinHandle::operator=(PinHandle&& o) noexcept {
  if (this != &o) {
    Release();
    owner_ = std::move(o.owner_);
    keys_ = std::move(o.keys_);
    o.keys_.clear();
  }
  return *this;
}

PinHandle::~PinHandle() { Release(); }

void PinHandle::Release() {
  if (owner_ != nullptr && !keys_.empty()) owner_->Unpin(keys_);
  owner_.reset();
  keys_.clear();
}

void EngineUnpinner::Unpin(std::span<const Hash256> chunks) {
  MutexLock lock(&mu_);
  if (engine_ != nullptr) engine_->UnpinChunks(chunks);
}

void EngineUnpinner::Detach() {
  MutexLock lock(&mu_);
  engine_ = nullptr;
}

// --- Open and close ----------------------------------------------------------------------------

// Engine::Open(options), with the standard tiers below memory, is in lower_tier_factory.cc.
Result<std::unique_ptr<Engine>> Engine::Open(const EngineOptions& options,
                                             const LowerTierFactory* lower) {
  KV_ASSIGN_OR_RETURN(std::unique_ptr<EngineImpl> engine, EngineImpl::Create(options, lower));
  return std::unique_ptr<Engine>(std::move(engine));
}

EngineImpl::EngineImpl(const EngineOptions& options) : options_(options) {
  options_.ssd_codec = options.ssd_codec.WithDefaults();  // Level 0: the codec's default.
}

Result<std::unique_ptr<EngineImpl>> EngineImpl::Create(const EngineOptions& options,
                                                       const LowerTierFactory* lower) {
  KV_RETURN_IF_ERROR(options.Validate());
  KV_RETURN_IF_ERROR(lower != nullptr ? lower->Validate(options) : NoLowerTiers(options));
  // Every thread started below (workers, tier I/O, the cleaner) inherits these CPUs; the caller
  // gets its own back on return.
  KV_ASSIGN_OR_RETURN(const std::vector<int> cpus, ResolveThreadCpus(options.thread_cpus));
  KV_ASSIGN_OR_RETURN(ScopedThreadCpus on_cpus, ScopedThreadCpus::Enter(cpus));
  if (!cpus.empty()) {
    LogTo(options.logger, LogLevel::kInfo,
          "engine: threads run on CPUs " + FormatCpuList(cpus) +
              " (thread_cpus=" + options.thread_cpus + ")");
  }
  std::unique_ptr<EngineImpl> e(new EngineImpl(options));
  e->lower_factory_ = lower;
  // Without an Env the memory tiers need only a clock; a factory whose tiers need files creates
  // its own Env (OpenLowerTiers keeps it).
  e->env_ = options.env;
  e->clock_ = e->env_ != nullptr ? e->env_->clock() : SystemClock();
  e->logger_ = options.logger;
  e->layout_digest_ = LayoutDigest(options.layout);
  e->block_bytes_ = options.layout.BlockBytes();
  e->geometry_ = {.tokens = options.layout.block_tokens,
                  .kv_heads = options.layout.kv_heads,
                  .head_dim = options.layout.head_dim,
                  .dtype = options.layout.dtype,
                  .kind = options.layout.kind};
  Logger* logger = e->logger_;
  KV_ASSIGN_OR_RETURN(
      e->ratio_, codecs::RatioMonitor::Create({.on_event = [logger](const codecs::RatioEvent& ev) {
        LogTo(logger, LogLevel::kWarn,
              "engine: compression ratio of codec " + codecs::CodecName(ev.codec) + " on layer " +
                  std::to_string(ev.layer) + " varies: mean " + std::to_string(ev.ratio_mean) +
                  ", CV " + std::to_string(ev.ratio_cv) + " over " + std::to_string(ev.samples) +
                  " samples");
      }}));
  KV_RETURN_IF_ERROR(e->OpenTiers());
  KV_ASSIGN_OR_RETURN(e->pool_, ThreadPool::Create({.threads = options.worker_threads,
                                                    .queue_tasks_max = 4096,
                                                    .name = "kvtier-engine"}));
  if (!e->tiers_.empty()) {
    // One queued task per staging buffer at most (each read in flight holds one): a tier's I/O
    // thread never waits to hand a completion over.
    const uint32_t queue = std::min<uint32_t>(e->staging_->count() + 1, kThreadPoolQueueMax);
    KV_ASSIGN_OR_RETURN(e->completions_, ThreadPool::Create({.threads = options.worker_threads,
                                                             .queue_tasks_max = queue,
                                                             .name = "kvtier-compl"}));
  }
  e->unpinner_ = std::make_shared<EngineUnpinner>(e.get());
  if (options.prediction.enabled) {
    const PredictionOptions& p = options.prediction;
    MutexLock lock(&e->pred_mu_);
    e->predictor_.emplace(AccessPredictorOptions{.window = p.window,
                                                 .successors_max = p.successors_max,
                                                 .items_max = p.sessions_max,
                                                 .predict_k = p.predict_k});
    e->sessions_.emplace(p.sessions_max, p.session_chunks_max);
  }
  // Evictions that need a write-back run on the cleaner, never on a caller's thread, so it runs
  // whenever a block can be dirty for a tier below memory.
  if (!e->tiers_.empty()) {
    e->cleaner_ = std::thread([raw = e.get()] { raw->CleanerLoop(); });
  }
  e->opened_ = true;
  return e;
}

Status EngineImpl::OpenTiers() {
  const uint32_t slot_bytes = static_cast<uint32_t>(block_bytes_);
  KV_ASSIGN_OR_RETURN(codec_, codecs::MakeCodec(options_.ssd_codec));
  contexts_ = std::make_unique<CodecContextPool>(geometry_);
  // The tiers below memory first: what refuses an open there (an SSD directory another process
  // holds, an untrusted directory, a bad key file) fails in milliseconds, before the memory tiers
  // fault in their pages (seconds per GiB of host_bytes). They need nothing of the memory tiers.
  KV_RETURN_IF_ERROR(OpenLowerTiers());
  KV_RETURN_IF_ERROR(OpenMemoryTiers());
  if (device_ != nullptr) clocks_[TierIndex(MemTier::kDevice)].emplace(device_->slots());
  clocks_[TierIndex(MemTier::kHost)].emplace(host_->slots());
  if (options_.cxl.has_value()) {
    HostTierOptions c = *options_.cxl;
    c.slot_bytes = slot_bytes;
    if (c.logger == nullptr) c.logger = logger_;
    KV_ASSIGN_OR_RETURN(cxl_, HostTier::Open(c));
    clocks_[TierIndex(MemTier::kCxl)].emplace(cxl_->slots());
  }
  return Status::Ok();
}

EngineImpl::~EngineImpl() {
  // Handles point into the engine: destroying it first is a programmer error.
  KV_CHECK(live_handles_.load() == 0);
  // The cleaner first: it uses the tiers, the staging pool and the codec contexts.
  if (cleaner_.joinable()) {
    {
      MutexLock lock(&mu_);
      cleaner_stop_ = true;
    }
    cleaner_cv_.SignalAll();
    cleaner_.join();
  }
  if (pool_ != nullptr) pool_->WaitIdle();
  // Reads issued by the workers (promotions ahead of need) may still be in flight: their
  // continuations use the tiers, the staging pool and the index.
  DrainIo();
  // An engine whose Open failed half-way (a tier refused its options) holds no blocks, and may
  // lack what Flush uses (the staging pool, the thread pool).
  if (opened_ && !tiers_.empty()) {
    // A clean shutdown keeps write-back blocks: they reach the tiers below memory first.
    const Status s = Flush();
    if (!s.ok()) LogTo(logger_, LogLevel::kError, "engine: flush at close: " + s.ToString());
  }
  pool_.reset();
  DrainIo();
  completions_.reset();
  if (unpinner_ != nullptr) unpinner_->Detach();
  for (LowerTier& t : tiers_) {
    const Status s = t.tier->Close();
    if (!s.ok()) {
      LogTo(logger_, LogLevel::kError,
            "engine: " + std::string(t.tier->name()) + " close: " + s.ToString());
    }
  }
}

// --- Keys and lookups --------------------------------------------------------------------------

Result<Namespace> EngineImpl::MakeNamespace(std::string_view salt,
                                            std::span<const std::string> extra_keys) {
  KV_ASSIGN_OR_RETURN(Hash256 digest,
                      NamespaceDigest(options_.model, options_.layout, salt, extra_keys));
  // The salt is what keeps tenants of a shared remote tier apart (docs/security.md): say once
  // that the empty one shares everything with every other engine that also uses it.
  const bool shared = std::any_of(tiers_.begin(), tiers_.end(),
                                  [](const LowerTier& t) { return t.tier->capabilities().shared; });
  if (shared && salt.empty() && !empty_salt_warned_.exchange(true)) {
    LogTo(logger_, LogLevel::kWarn,
          "engine: a namespace with the empty salt on a shared remote tier: its blocks are "
          "shared with every engine of the same model that also uses the empty salt; give each "
          "tenant a secret, high-entropy salt (derive_tenant_salt)");
  }
  return Namespace{.digest = digest};
}

std::vector<BlockKey> EngineImpl::KeysOf(std::span<const Hash256> chunks,
                                         size_t chunk_count) const {
  std::vector<BlockKey> keys;
  keys.reserve(chunk_count * options_.layout.layers);
  for (size_t c = 0; c < chunk_count; ++c) {
    for (uint32_t l = 0; l < options_.layout.layers; ++l) {
      keys.push_back(BlockKey{.chunk_hash = chunks[c], .layer = l});
    }
  }
  return keys;
}

Result<LookupResult> EngineImpl::Lookup(const Namespace& ns, std::span<const uint32_t> tokens,
                                        const LookupOptions& options) {
  KV_ASSIGN_OR_RETURN(std::vector<Hash256> chunks,
                      ChunkHashes(ns.digest, tokens, options_.layout.block_tokens));
  const uint32_t layers = options_.layout.layers;
  // The tier of every block of the candidate chunks, kNone when no local tier has it. Without a
  // best-effort tier the candidates end before the first chunk with a missing block; with one
  // they go on while the missing blocks fit the Contains batches a Lookup may send.
  const size_t network = FirstBestEffort();
  std::vector<BlockKey> keys;
  std::vector<TierKind> kinds;
  size_t missing = 0;
  {
    MutexLock lock(&mu_);
    const uint64_t now = NowWallUs();
    for (const Hash256& chunk : chunks) {
      const size_t start = kinds.size();
      size_t chunk_missing = 0;
      for (uint32_t l = 0; l < layers; ++l) {
        const BlockKey key{.chunk_hash = chunk, .layer = l};
        std::optional<MemTier> t = ReadableTier(key, now);
        TierKind kind = TierKind::kNone;
        size_t below = 0;
        if (t.has_value()) {
          kind = ToTierKind(*t);
        } else if (FindBelow(key, &below, nullptr)) {
          kind = tiers_[below].kind;
        }
        if (kind == TierKind::kNone) ++chunk_missing;
        keys.push_back(key);
        kinds.push_back(kind);
      }
      if (chunk_missing != 0 &&
          (network == kFromMemory ||
           missing + chunk_missing > kRemoteLookupKeysMax * kRemoteLookupBatchesMax)) {
        keys.resize(start);
        kinds.resize(start);
        break;
      }
      missing += chunk_missing;
    }
  }
  // Round trips of at most kRemoteLookupKeysMax keys each, without the engine mutex.
  if (missing != 0) LookupBelow(network, keys, kinds);
  LookupResult result;
  for (size_t c = 0; (c + 1) * layers <= kinds.size(); ++c) {
    const auto chunk_kinds = std::span(kinds).subspan(c * layers, layers);
    if (std::find(chunk_kinds.begin(), chunk_kinds.end(), TierKind::kNone) != chunk_kinds.end()) {
      break;
    }
    result.chunk_tiers.push_back(*std::max_element(chunk_kinds.begin(), chunk_kinds.end()));
  }
  result.matched_tokens = result.chunk_tiers.size() * options_.layout.block_tokens;
  {
    MutexLock lock(&mu_);
    ++stats_.lookups;
    stats_.lookup_tokens += tokens.size();
    stats_.lookup_hit_tokens += result.matched_tokens;
  }
  // After the result is final: promotions it triggers are for other sessions' requests.
  if (options_.prediction.enabled && !chunks.empty()) {
    ObserveAccess(ns, chunks, options.session_id);
  }
  return result;
}

// --- Prefetch and pins -------------------------------------------------------------------------

Status EngineImpl::Prefetch(const Namespace& ns, std::span<const uint32_t> tokens) {
  KV_ASSIGN_OR_RETURN(std::vector<Hash256> chunks,
                      ChunkHashes(ns.digest, tokens, options_.layout.block_tokens));
  {
    MutexLock lock(&mu_);
    ++stats_.prefetches;
  }
  if (chunks.empty()) return Status::Ok();
  // The same background path as hints (engine_predict.cc): batched reads of the cached prefix
  // from the tiers below memory into free or clean host slots; a full queue drops the rest
  // rather than blocking the caller.
  std::vector<std::vector<Hash256>> sessions;
  sessions.push_back(std::move(chunks));
  SubmitPromotion(std::move(sessions), PromotedBy::kPrefetch);
  return Status::Ok();
}

void EngineImpl::Unpin(std::span<const BlockKey> keys) {
  MutexLock lock(&mu_);
  for (const BlockKey& key : keys) {
    table_.Unpin(key);  // A pinned entry is never erased: the table checks it is there.
  }
}

void EngineImpl::UnpinChunks(std::span<const Hash256> chunks) {
  Unpin(KeysOf(chunks, chunks.size()));
}

void EngineImpl::CountLoadFailure() {
  MutexLock lock(&mu_);
  ++stats_.load_failures;
}

// --- Flush and stats ---------------------------------------------------------------------------

// Marks the blocks among `keys` that are dirty for tier `below` as flushing, pins them, and copies
// each one's fastest memory copy into lease.buffer(i). A failed copy leaves items[i].raw empty.
void EngineImpl::ClaimAndCopyOut(std::span<const BlockKey> keys, size_t below, StagingLease& lease,
                                 std::vector<std::pair<BlockKey, MemTier>>* todo,
                                 std::vector<TierWriteItem>* items) {
  {
    MutexLock lock(&mu_);
    for (const BlockKey& key : keys) {
      const BlockEntry* e = table_.Find(key);
      MemTier t;
      if (e == nullptr || !e->DirtyFor(below) || e->flushing() || !e->FastestReadable(&t)) {
        continue;
      }
      table_.BeginFlush(key);
      todo->emplace_back(key, t);
      items->push_back({.key = key, .expiry_wall_us = e->expiry_wall_us()});
    }
  }
  for (size_t i = 0; i < todo->size(); ++i) {
    // Pinned, so the slot stays put while it is encoded (host, CXL) or copied out (device).
    const uint32_t slot = [&] {
      MutexLock lock(&mu_);
      return table_.Find((*todo)[i].first)->slot((*todo)[i].second);
    }();
    Status copied;
    (*items)[i].raw = RawForWrite((*todo)[i].second, slot, lease.buffer(i), &copied);
  }
}

// Writes the blocks among `keys` dirty for the local tier `below` to it; the first error of a
// block that did not get there (WriteToTier's).
Status EngineImpl::FlushBatch(size_t below, std::span<const BlockKey> keys, bool background,
                              std::vector<BlockKey>* claimed) {
  std::vector<std::pair<BlockKey, MemTier>> todo;
  std::vector<TierWriteItem> items;
  // Raw copies of device slots in the first half, encoded records in the second: one lease,
  // never nested.
  const size_t n = keys.size();
  StagingLease lease = staging_->Acquire(static_cast<uint32_t>(2 * n));
  ClaimAndCopyOut(keys, below, lease, &todo, &items);
  const Status io = WriteToTier(below, items, lease.buffers().subspan(n, n));
  MutexLock lock(&mu_);
  flushed_cv_.SignalAll();  // A Flush may be waiting for these blocks.
  const uint64_t now_us = clock_->NowMicros();
  for (size_t i = 0; i < todo.size(); ++i) {
    if (claimed != nullptr) claimed->push_back(todo[i].first);
    table_.EndFlush(todo[i].first, below, /*written=*/items[i].status.ok());
    if (items[i].status.ok()) {
      if (background) {
        ++counters_[TierIndex(todo[i].second)].writebacks;
        ++stats_.background_writebacks;
      }
    } else if (background && items[i].skipped) {
      // Refused by the tier's admission filter or write budget: the age limit tries it again
      // one age later, not at every round of the cleaner.
      table_.SetDirtySince(todo[i].first, now_us);
    }
  }
  return io;
}

// Sorts the blocks of `pending` that are still dirty: those no one is writing (`mine`, unless
// this Flush already tried them: a failed write leaves them dirty and its error is reported
// once) and those another thread is writing now (`theirs`: claimed by the cleaner or another
// Flush, or being evicted with write-back).
void EngineImpl::SortFlushPending(size_t below, std::span<const BlockKey> pending,
                                  const std::unordered_set<BlockKey>& tried,
                                  std::vector<BlockKey>* mine, std::vector<BlockKey>* theirs) {
  MutexLock lock(&mu_);
  for (const BlockKey& key : pending) {
    const BlockEntry* e = table_.Find(key);
    MemTier t;
    if (e == nullptr || !e->DirtyFor(below) || tried.count(key) != 0) continue;
    (e->flushing() || !e->FastestReadable(&t) ? theirs : mine)->push_back(key);
  }
}

Status EngineImpl::Flush() {
  // Each tier in list order; the first error of a local tier.
  Status first;
  for (size_t below = 0; below < tiers_.size(); ++below) {
    const Status s = FlushTier(below);
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

Status EngineImpl::FlushLocalTier(size_t below) {
  std::vector<BlockKey> pending;
  uint64_t dropped_before = 0;
  {
    MutexLock lock(&mu_);
    dropped_before = dirty_dropped_;
    table_.ForEach([&](const BlockKey& key, const BlockEntry& e) {
      if (e.DirtyFor(below)) pending.push_back(key);
    });
  }
  // Only the blocks dirty now. Each is written once by this Flush (a block the tier refuses stays
  // dirty without looping forever); one another thread is writing is waited for, so that OK
  // means every one of them is on the tier. The first error is returned after every block was
  // tried: one bad block does not keep the others in memory only.
  constexpr int kWaitRoundsMax = 2000;  // 10 ms each: a writer stuck for 20 s is an error.
  Status first;
  std::unordered_set<BlockKey> tried;
  const size_t batch = std::min<size_t>(kLoadStagingBatchMax / 2, staging_->count() / 2);
  for (int round = 0; !pending.empty(); ++round) {
    std::vector<BlockKey> mine, theirs;
    SortFlushPending(below, pending, tried, &mine, &theirs);
    for (size_t base = 0; base < mine.size(); base += batch) {
      const size_t n = std::min(batch, mine.size() - base);
      std::vector<BlockKey> claimed;
      const Status s = FlushBatch(below, std::span(mine).subspan(base, n), false, &claimed);
      if (!s.ok() && first.ok()) first = s;
      tried.insert(claimed.begin(), claimed.end());
      // Claimed meanwhile by another writer: waited for in the next round.
      for (size_t i = base; i < base + n; ++i) {
        if (tried.count(mine[i]) == 0) theirs.push_back(mine[i]);
      }
    }
    if (theirs.empty()) break;
    if (round == kWaitRoundsMax) {
      if (first.ok()) first = Status::Busy("blocks still being written by another thread");
      break;
    }
    {
      MutexLock lock(&mu_);
      flushed_cv_.WaitFor(&mu_, std::chrono::milliseconds(10));
    }
    pending = std::move(theirs);
  }
  {
    // An eviction whose write-back failed dropped a dirty block (logged there): not durable.
    MutexLock lock(&mu_);
    if (first.ok() && dirty_dropped_ != dropped_before) {
      first = Status::IoError(std::to_string(dirty_dropped_ - dropped_before) +
                              " dirty block(s) were dropped from memory after a failed write-back");
    }
  }
  const Status synced = tiers_[below].tier->Flush();
  if (first.ok()) first = synced;
  if (first.ok()) return first;
  return first.WithContext("flush: dirty blocks not written to the " +
                           std::string(tiers_[below].tier->name()) + " tier");
}

void EngineImpl::KickCleaner() {
  if (!cleaner_.joinable()) return;
  {
    MutexLock lock(&mu_);
    cleaner_kick_ = true;
  }
  cleaner_cv_.Signal();
}

std::vector<BlockKey> EngineImpl::PickDirty(size_t below, double fraction, size_t max,
                                            uint64_t* dirty_min_us) {
  std::array<size_t, kMemTiers> dirty{};
  // (dirty since, key): the oldest are written first. Why: under a steady stream of Stores the
  // watermark pass runs round after round, and a pick in table order could pass over an old
  // block until long after its age limit (docs/reliability.md, "Write-back age limit").
  std::array<std::vector<std::pair<uint64_t, BlockKey>>, kMemTiers> candidates;
  const uint64_t now = NowWallUs();
  table_.ForEach([&](const BlockKey& key, const BlockEntry& e) {
    MemTier t;
    if (!e.DirtyFor(below)) return;
    if (!e.Expired(now)) *dirty_min_us = std::min(*dirty_min_us, e.dirty_since_us());
    if (!e.FastestReadable(&t)) return;
    const size_t i = TierIndex(t);
    ++dirty[i];
    if (e.flushing() || e.pins() != 0 || e.state() != BlockState::kReady || e.Expired(now)) {
      return;
    }
    candidates[i].emplace_back(e.dirty_since_us(), key);
  });
  for (size_t i = 0; i < kMemTiers; ++i) {
    if (!HasTier(MemTierAt(i)) || clocks_[i]->slots() < kCleanerTierSlotsMin) continue;
    if (static_cast<double>(dirty[i]) <= fraction * clocks_[i]->slots()) continue;
    std::vector<std::pair<uint64_t, BlockKey>>& c = candidates[i];
    const size_t n = std::min(max, c.size());
    std::partial_sort(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(n), c.end(),
                      [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<BlockKey> out;
    for (size_t k = 0; k < n; ++k) out.push_back(c[k].second);
    return out;
  }
  return {};
}

void EngineImpl::EvictForCallers() {
  for (size_t i = 0; i < kMemTiers && !cleaner_stop_; ++i) {
    // evict_wanted_ is the number of free slots the callers need. Bounded: others may take the
    // slots freed meanwhile, so at most that many plus one round of evictions.
    const uint32_t wanted = evict_wanted_[i];
    for (uint32_t n = 0; n < 2 * wanted && !cleaner_stop_; ++n) {
      if (clocks_[i]->slots() - clocks_[i]->used() >= evict_wanted_[i]) break;
      // Drops and retakes mu_ around the write-back; a victim refused or failed is dropped, as
      // an eviction always did. Busy (everything pinned or in flight): the callers try again.
      if (!EvictOne(MemTierAt(i), VictimFilter::kAny, EvictWrites::kHere).ok()) break;
    }
    evict_wanted_[i] = 0;
  }
}

void EngineImpl::CleanerLoop() {
  // Why a thread of its own and not pool tasks: FlushBatch waits for staging buffers and SSD I/O,
  // and workers never wait (engine.md, Locking). Its batches are small, so it pins few blocks.
  // It sleeps until a Store kicks it, or, while blocks wait for their write-back age limit,
  // until the next one falls due. It only writes blocks down, so it runs at background_nice.
  pthread_setname_np(pthread_self(), "kvtier-cleaner");
  if (const Result<int> nice = LowerThisThreadPriority(options_.background_nice); !nice.ok()) {
    LogTo(logger_, LogLevel::kWarn,
          "engine: the cleaner keeps its priority: " + nice.status().ToString());
  }
  if (options_.background_priority == BackgroundPriority::kIdle) {
    if (const Status idle = UseIdleScheduling(); !idle.ok()) {
      LogTo(logger_, LogLevel::kWarn, "engine: the cleaner keeps its policy: " + idle.ToString());
    }
  }
  uint64_t wait_us = 0;
  mu_.Lock();
  while (!cleaner_stop_) {
    if (!cleaner_kick_) {
      if (wait_us == 0) {
        cleaner_cv_.Wait(&mu_);
        continue;
      }
      cleaner_cv_.WaitFor(&mu_, std::chrono::microseconds(wait_us));
      if (cleaner_stop_) break;
    }
    cleaner_kick_ = false;
    EvictForCallers();
    wait_us = 0;
    for (size_t below = 0; below < tiers_.size() && !cleaner_stop_; ++below) {
      if (!tiers_[below].cleaned) continue;
      CleanOverWatermark(below);
      if (tiers_[below].age_us_max == 0 || cleaner_stop_) continue;
      const uint64_t next = CleanAged(below);
      if (next != 0) wait_us = wait_us == 0 ? next : std::min(wait_us, next);
    }
  }
  mu_.Unlock();
}

void EngineImpl::CleanOverWatermark(size_t below) {
  const size_t batch_max = kLoadStagingBatchMax / 2;
  const double high = options_.writeback_dirty_fraction;
  // Over the watermark: clean down to half of it (hysteresis), one batch per round. Bounded: a
  // round that writes nothing (refusals, I/O errors) leaves the rest to eviction.
  double fraction = high;
  while (!cleaner_stop_) {
    uint64_t dirty_min_us = UINT64_MAX;
    const std::vector<BlockKey> batch = PickDirty(below, fraction, batch_max, &dirty_min_us);
    // Under a steady stream of Stores this pass can go on for long, writing the oldest first:
    // the horizon follows it.
    if (tiers_[below].age_us_max != 0) NoteHorizon(below, dirty_min_us);
    if (batch.empty()) break;
    fraction = high / 2;
    const uint64_t before = stats_.background_writebacks;
    mu_.Unlock();
    // A failure is counted in the tier's write_failures and its blocks stay dirty: the next
    // eviction or Flush retries them and reports the error to its caller.
    FlushBatch(below, batch, /*background=*/true).IgnoreError();
    mu_.Lock();
    if (stats_.background_writebacks == before) break;
  }
}

uint64_t EngineImpl::CleanAged(size_t below) {
  const size_t batch_max = kLoadStagingBatchMax / 2;
  // Bounded: each scan takes at most kCleanerAgedScanMax keys; more are left to the next wake-up
  // (at once: PickAged then asks for the smallest wait).
  uint64_t wait_us = 0;
  uint64_t dirty_min_us = UINT64_MAX;
  const std::vector<BlockKey> due = PickAged(below, kCleanerAgedScanMax, &wait_us, &dirty_min_us);
  const uint64_t before = stats_.background_writebacks;
  for (size_t base = 0; base < due.size() && !cleaner_stop_; base += batch_max) {
    const size_t n = std::min(batch_max, due.size() - base);
    mu_.Unlock();
    // As in CleanOverWatermark: a failed block stays dirty and is tried again at a later round.
    FlushBatch(below, std::span(due).subspan(base, n), /*background=*/true).IgnoreError();
    mu_.Lock();
  }
  // The blocks just written are clean now unless their write failed or was refused: look again.
  NoteHorizon(below, due.empty() ? dirty_min_us : DirtySinceMin(below));
  if (!due.empty() && stats_.background_writebacks == before) {
    // Nothing written (a failing tier): try again after a full period, not in a busy loop.
    return uint64_t{kCleanerAgePollMsMax} * 1000;
  }
  return wait_us;
}

uint64_t EngineImpl::DirtySinceMin(size_t below) {
  const uint64_t now_wall = NowWallUs();
  uint64_t dirty_min = UINT64_MAX;
  table_.ForEach([&](const BlockKey&, const BlockEntry& e) {
    if (e.DirtyFor(below) && !e.Expired(now_wall)) {
      dirty_min = std::min(dirty_min, e.dirty_since_us());
    }
  });
  return dirty_min;
}

void EngineImpl::NoteHorizon(size_t below, uint64_t dirty_min_us) {
  // Sound because a Store reads the clock for dirty_since and marks its blocks dirty under mu_,
  // as this runs: a Store not dirty here completes after now, so the horizon never passes it.
  LowerTier& t = tiers_[below];
  t.horizon_us = std::max(t.horizon_us, std::min(clock_->NowMicros(), dirty_min_us));
  t.all_clean = dirty_min_us == UINT64_MAX;
}

std::vector<BlockKey> EngineImpl::PickAged(size_t below, size_t max, uint64_t* wait_us,
                                           uint64_t* dirty_min_us) {
  const uint64_t age_us = tiers_[below].age_us_max;
  // Blocks falling due within `slack` are written together, so that stores spread over time do
  // not wake the cleaner (and scan the table) once each: a block is written by its age limit,
  // and the cleaner sleeps at least `slack` between scans.
  const uint64_t poll_us = uint64_t{kCleanerAgePollMsMax} * 1000;
  const uint64_t slack_us = std::min(age_us / 4, poll_us);
  const uint64_t now = clock_->NowMicros();
  const uint64_t now_wall = NowWallUs();
  uint64_t due_min = UINT64_MAX;
  bool left_over = false;
  std::vector<BlockKey> out;
  table_.ForEach([&](const BlockKey& key, const BlockEntry& e) {
    MemTier t;
    if (!e.DirtyFor(below) || e.Expired(now_wall)) return;  // An expired block is never written.
    *dirty_min_us = std::min(*dirty_min_us, e.dirty_since_us());
    const uint64_t due = e.dirty_since_us() + age_us - slack_us;
    const bool writable = !e.flushing() && e.state() == BlockState::kReady && e.FastestReadable(&t);
    if (due <= now && writable) {
      if (out.size() < max) {
        out.push_back(key);
        return;
      }
      left_over = true;
    }
    // Not due yet, left over, or being written by another thread (a Flush, an eviction).
    due_min = std::min(due_min, due);
  });
  if (due_min == UINT64_MAX) {
    *wait_us = 0;
  } else if (left_over) {
    *wait_us = 1;  // Due now: the next scan at once.
  } else {
    *wait_us =
        std::clamp(due_min > now ? due_min - now : 0, std::max<uint64_t>(slack_us, 1000), poll_us);
  }
  return out;
}

EngineStats EngineImpl::Stats() {
  // Read before taking the engine mutex: a tier's (or a borrowed RemoteStore's) Stats() may take
  // its own locks.
  std::vector<TierStoreStats> stores;
  for (const LowerTier& t : tiers_) stores.push_back(t.tier->Stats());
  std::optional<RemoteStoreStats> remote;
  if (remote_store_ != nullptr) remote = remote_store_->Stats();
  const codecs::RatioMonitorStats ratio = ratio_->Stats();
  EngineStats out;
  {
    MutexLock lock(&mu_);
    out = stats_;
    out.ratio_samples = ratio.samples_total;
    out.ratio_cv_events = ratio.events_total;
    out.tiers.clear();
    for (size_t i = 0; i < kMemTiers; ++i) {
      if (!HasTier(MemTierAt(i))) continue;
      const SlotClock& c = *clocks_[i];
      TierStats t{.kind = ToTierKind(MemTierAt(i)),
                  .name = std::string(TierKindName(ToTierKind(MemTierAt(i)))),
                  .capacity_bytes = uint64_t{c.slots()} * block_bytes_,
                  .used_bytes = uint64_t{c.used()} * block_bytes_,
                  .blocks = c.used(),
                  .hits = counters_[i].hits,
                  .evictions = counters_[i].evictions,
                  .writebacks = counters_[i].writebacks,
                  .promotions = counters_[i].promotions};
      out.tiers.push_back(t);
    }
    AppendLowerStats(stores, &out);
    out.remote = remote;
  }
  AppendPredictionStats(&out);  // pred_mu_ is a leaf: never taken inside mu_.
  return out;
}

}  // namespace kvtier
