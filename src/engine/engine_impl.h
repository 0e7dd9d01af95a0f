// EngineImpl: the Engine of engine.h (internal header; only src/engine includes it).
//
// The pieces: the memory tiers (device, host, optional CXL), an ordered list of tiers below
// memory (tiers/tier.h: the SSD tier, then the remote tier, as configured), a BlockTable (the one
// mutation point of the per-block metadata, block_table.h) with one SlotClock per memory tier, a
// worker pool (memory copies without a device tier, codec work, staging, issuing reads and writes
// below memory), a completion pool (the continuations of those reads and writes), a bounded
// staging pool for reads from below and codec contexts. Files:
//   engine.cc        Open, namespaces, Lookup, Pin, Prefetch, Flush, Stats
//   engine_device.cc the device backend: CPU or CUDA device tier, plain or pinned host tier
//   engine_tiers.cc  slot allocation, eviction with demotion and write-back
//   engine_lower.cc  the tier list below memory: opening it, Contains on lookup, reads and
//                    writes issued asynchronously with their continuations (ReadFromTierAsync,
//                    WriteToTierAsync, LoadFromTier, write-through), Flush, statistics
//   engine_load.cc   Load and its per-layer LoadHandle
//   engine_store.cc  Store and its StoreHandle
//   engine_predict.cc access prediction: sessions, the predictor, Hint, promotion ahead of need
//
// Locking: one mutex (mu_) guards the block table, the slot clocks and the statistics. It is never
// held across I/O, codec work or a wait for a copy; the tiers' own locks are taken inside it (lock
// order: engine mu_ -> tier mutexes), never the other way round. pred_mu_ guards the access
// predictor and the session table; it is a leaf (no other lock is taken while it is held), and so
// is io_mu_ (the count of batches in flight below memory).
//
// Thread safety: as engine.h. Ownership: the engine owns every tier, pool and thread. Load and
// Store handles point into the engine and must be destroyed first (checked at destruction).
#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <unordered_set>
#include <vector>

#include "codecs/codec.h"
#include "codecs/ratio_monitor.h"
#include "core/mutex.h"
#include "core/thread_pool.h"
#include "engine/block_table.h"
#include "engine/engine.h"
#include "engine/eviction.h"
#include "engine/lower_tier_factory.h"
#include "engine/session_table.h"
#include "engine/staging.h"
#include "policies/access_predictor.h"
#include "tiers/tier.h"

namespace kvtier {

class EngineUnpinner final : public PinHandle::Unpinner {
 public:
  explicit EngineUnpinner(EngineImpl* engine) : engine_(engine) {}
  void Unpin(std::span<const Hash256> chunks) override KV_EXCLUDES(mu_);
  // Called by the engine's destructor: later Unpin calls do nothing.
  void Detach() KV_EXCLUDES(mu_);

 private:
  Mutex mu_;
  EngineImpl* engine_ KV_GUARDED_BY(mu_);
};

// One block to write to a tier below memory: its key, host-addressable raw bytes and absolute
// expiry.
struct TierWriteItem {
  BlockKey key;
  std::span<const std::byte> raw;
  uint64_t expiry_wall_us = 0;
  Status status;  // Out: OK, Aborted (not admitted), Busy (budget), or the error.
  bool skipped = false;  // Out: refused by admission or budget (not an error; stays dirty).
};

// One block to read from a tier below memory and decode into `dst` (host-addressable,
// BlockBytes()).
struct TierReadItem {
  BlockKey key;
  std::span<std::byte> dst;
  Status status;         // Out: OK or NotFound (absent, refused by verification, undecodable).
  bool corrupt = false;  // Out: the tier held it but verification or decoding refused it.
};

// A LoadItem's source when it is a memory copy.
inline constexpr size_t kFromMemory = SIZE_MAX;
// Tiers below memory at most (BlockEntry::dirty() has one bit per tier).
inline constexpr size_t kLowerTiersMax = 8;
static_assert(kLowerTiersMax <= kDirtyBits);

// One tier of the list below memory and how the engine uses it. Everything the engine's
// algorithms need to know about a tier is here, decided once at Open from the options and the
// tier's capabilities.
struct LowerTier {
  std::unique_ptr<Tier> tier;
  TierKind kind = TierKind::kNone;  // In Lookup results and statistics.
  std::string name;                 // TierStats::name (OpenedLowerTier::name).
  // kWriteThrough: a Store writes its blocks before its handle completes. kWriteBack: blocks
  // reach the tier when their last memory copy is evicted, from the cleaner, and on Flush.
  WritePolicy write_policy = WritePolicy::kWriteBack;
  bool promote_on_load = false;  // A Load's hit is also copied into a free or clean host slot.
  // From !capabilities().local_contains: a tier over the network. Its failures never fail an
  // engine call (reads are misses, writes are counted and logged once per failure streak), and a
  // block is dirty for it only under write-back. A local tier's write errors are returned, and a
  // block stays dirty for it until written (a refused write-through is written back later).
  bool best_effort = false;
  // The cleaner writes the tier's dirty blocks down while a memory tier is over its watermark,
  // and those dirty for longer than age_us_max (a local write-back tier).
  bool cleaned = false;
  // A local write-back tier's age limit (EngineOptions::writeback_age_ms_max); 0: none.
  uint64_t age_us_max = 0;
  // With an age limit, under mu_ (TierStats::writeback_horizon_us): every Store that completed
  // before `horizon_us` has its blocks on the tier. `all_clean`: no block was dirty for the tier
  // at the cleaner's last scan, and none was marked dirty since (the horizon is then the present).
  uint64_t horizon_us = 0;
  bool all_clean = true;
  std::unique_ptr<std::atomic<bool>> failing;  // For one log line per failure streak.

  // Whether a block a Store publishes starts dirty for this tier.
  bool DirtyOnStore() const { return write_policy == WritePolicy::kWriteBack || !best_effort; }
};

// One block of a Load: where it comes from and where it goes.
struct LoadItem {
  BlockKey key;
  std::span<std::byte> dst;
  MemTier tier = MemTier::kHost;  // Memory source (when below == kFromMemory).
  uint32_t slot = kNoSlot;        // Pinned for the duration of the load.
  size_t below = kFromMemory;     // Else the index of the tier below memory it is read from.
};

// One block of a Store: its source and the slot it is copied into.
struct StoreItem {
  BlockKey key;
  std::span<const std::byte> src;
  MemTier tier = MemTier::kHost;
  uint32_t slot = kNoSlot;
};

class LoadHandleImpl;
class StoreHandleImpl;
struct TierReadBatch;  // One read in flight to a tier below memory (engine_lower.cc).
struct TierWriteCall;  // One write call in flight to a tier below memory (engine_lower.cc).
struct TierWriteBatch;  // One batch of a TierWriteCall (engine_lower.cc).

// Whether an eviction may write a dirty victim to the SSD or the remote tier on this thread.
enum class EvictWrites : uint8_t {
  kHere = 0,       // The cleaner: the thread does the write-back itself.
  kToCleaner = 1,  // A caller's thread: never; the cleaner evicts such victims.
};

struct TierCounters {
  uint64_t hits = 0, evictions = 0, writebacks = 0, promotions = 0;
  uint64_t write_failures = 0;  // Blocks that should have reached this tier and did not.
  // Tiers below memory: blocks written into the tier, writes its admission filter or write
  // budget refused, and keys whose Contains failed (served as misses).
  uint64_t written = 0, not_admitted = 0, over_budget = 0, lookup_errors = 0;
};
// The index of counters_ of the tier below memory at position `below`.
constexpr size_t LowerCounters(size_t below) { return kMemTiers + below; }

class EngineImpl final : public Engine {
 public:
  // `lower` constructs the tiers below memory (nullptr: none; options asking for one are refused).
  static Result<std::unique_ptr<EngineImpl>> Create(const EngineOptions& options,
                                                    const LowerTierFactory* lower);
  ~EngineImpl() override;

  Result<Namespace> MakeNamespace(std::string_view salt,
                                  std::span<const std::string> extra_keys) override;
  using Engine::Lookup;
  Result<LookupResult> Lookup(const Namespace& ns, std::span<const uint32_t> tokens,
                              const LookupOptions& options) override;
  Result<std::unique_ptr<LoadHandle>> Load(const Namespace& ns, std::span<const uint32_t> tokens,
                                           std::span<const std::span<std::byte>> dst) override;
  Result<std::unique_ptr<StoreHandle>> Store(const Namespace& ns, std::span<const uint32_t> tokens,
                                             std::span<const std::span<const std::byte>> src,
                                             const StoreOptions& options) override;
  Status Prefetch(const Namespace& ns, std::span<const uint32_t> tokens) override;
  Status Hint(const Namespace& ns, std::span<const uint32_t> tokens, uint64_t session_id) override;
  Result<PinHandle> Pin(const Namespace& ns, std::span<const uint32_t> tokens) override;
  Status Flush() override;
  EngineStats Stats() override;
  const EngineOptions& options() const override { return options_; }
  DeviceBackend device_backend() const override { return backend_; }

  // --- Internal, used by the handles and helpers of this directory. ---
  void Unpin(std::span<const BlockKey> keys) KV_EXCLUDES(mu_);
  void UnpinChunks(std::span<const Hash256> chunks) KV_EXCLUDES(mu_);
  void HandleOpened() { live_handles_.fetch_add(1); }
  void HandleClosed() { live_handles_.fetch_sub(1); }
  void CountLoadFailure() KV_EXCLUDES(mu_);
  // The tiers below memory (engine_lower.cc). `below` is a position in tiers_.
  // Reads and decodes blocks from tier `below` (at most the staging pool's buffers; a Load's and
  // a promotion task's at most kLoadStagingBatchMax) without waiting for the I/O: the calling
  // thread leases staging buffers, all at once (waiting only while too few are free), and issues
  // the batch; `then` runs with the items' outcomes on a completion thread
  // (completions_) once the tier answered, after the decode and the release of the buffers.
  // A record the tier or the codec refuses is a miss (corrupt); a local tier's unusable records
  // are erased so that Lookup stops reporting them and the next Store rewrites them.
  using ReadDone = std::function<void(std::span<TierReadItem>)>;
  // Where a continuation runs: empty for a completion thread; the waiting forms pass their own.
  using Post = std::function<void(std::function<void()>)>;
  void ReadFromTierAsync(size_t below, std::vector<TierReadItem> items, ReadDone then)
      KV_EXCLUDES(mu_);
  // Encodes and writes blocks to tier `below` in batches (expired ones skipped); blocks on I/O.
  // Returns the first error of any item that did not reach the tier (I/O, NoSpace, encoding, a
  // failed copy), counted in the tier's write_failures; admission and budget refusals are per
  // item (skipped), not errors. A best-effort tier's errors are also logged once per streak.
  // `encode_buffers`, when given, holds at least items.size() staging buffers to encode into
  // (callers that already hold staging buffers pass them so that they never wait for more while
  // holding some); else the helper leases its own, kLoadStagingBatchMax at a time.
  // WriteToTierAsync, waiting for `then`: for the cleaner (a thread of its own) and callers'
  // threads (Flush), never a worker of pool_. The continuation runs on the waiting thread.
  Status WriteToTier(size_t below, std::span<TierWriteItem> items,
                     std::span<const std::span<std::byte>> encode_buffers = {}) KV_EXCLUDES(mu_);
  // WriteToTier without waiting for the I/O: the calling thread encodes the items and issues
  // their batches (waiting only for staging buffers when it leases its own); `then` receives the
  // call's first error and the items' outcomes on a completion thread once the tier answered
  // every batch (or on the calling thread when it answered before the call returned).
  // `encode_buffers`, when given, must stay leased until `then` has run.
  using WriteDone = std::function<void(Status, std::span<const TierWriteItem>)>;
  void WriteToTierAsync(size_t below, std::vector<TierWriteItem> items,
                        std::span<const std::span<std::byte>> encode_buffers, WriteDone then,
                        Post post = {}) KV_EXCLUDES(mu_);
  // The one promoter (engine_promote.cc): copies `keys`, all from tier `below`, into host slots,
  // reserving one per key that no memory tier has or is about to have: kEvict (Pin) may take
  // any victim (a dirty one left to the cleaner), kCleanOnly (ahead of need: Prefetch, hints,
  // prediction) only a free or clean slot that holds no block promoted ahead of need. The reads
  // go in batches of half the staging pool, all issued at once, without waiting for the I/O;
  // `done` (may be empty) runs once every batch answered and the blocks are published (marked
  // `by` unless kNone), on a completion thread, or on the calling thread when nothing was read.
  // kEvict stops at the first key it cannot reserve (NotFound when a local tier no longer has
  // it, Busy when no slot can be had); kCleanOnly drops such keys.
  enum class PromoteSlots : uint8_t { kEvict, kCleanOnly };
  struct PromoteOutcome {
    Status first;  // The first problem; OK when every key is in memory or on its way.
    uint64_t dropped = 0;  // Keys given up.
    std::vector<BlockKey> not_promoted;  // kEvict: the keys not in memory because of `first`.
  };
  using PromoteDone = std::function<void(PromoteOutcome)>;
  void Promote(std::span<const BlockKey> keys, size_t below, PromoteSlots slots, PromotedBy by,
               PromoteDone done) KV_EXCLUDES(mu_);
  // Promote with kEvict from each tier (`from[below]`, the keys found there), all at once,
  // waiting for all: Pin's, on a caller's thread only.
  PromoteOutcome PromoteAndWait(std::span<const std::vector<BlockKey>> from) KV_EXCLUDES(mu_);

  ThreadPool* pool() { return pool_.get(); }
  DeviceTier* device() { return device_.get(); }
  const KvLayout& layout() const { return options_.layout; }
  uint64_t block_bytes() const { return block_bytes_; }

 private:
  friend class LoadHandleImpl;
  friend class StoreHandleImpl;

  explicit EngineImpl(const EngineOptions& options);
  Status OpenTiers();
  // The device (when device.capacity_bytes > 0) and host tiers of the resolved backend, with one
  // log line naming them (engine_device.cc).
  Status OpenMemoryTiers();
  // The tiers below memory, in order, from the options through lower_factory_ (engine_lower.cc),
  // and the staging pool their reads and writes use.
  Status OpenLowerTiers();
  // Whether the block in `e` is in a local tier below memory (checked under mu_, in list order);
  // *below receives the first such tier and *expiry_wall_us its expiry there (0: none).
  bool FindBelow(const BlockKey& key, size_t* below, uint64_t* expiry_wall_us) KV_REQUIRES(mu_);
  // The first best-effort tier (kFromMemory when there is none): Lookup asks it, with one batched
  // Contains, for the blocks no faster tier has; Load and promotion read from it without asking.
  size_t FirstBestEffort() const;
  // Lookup's step over a best-effort tier: marks with its kind the kNone entries of `kinds` (one
  // per key of `keys`) that tier `below` has, with one Contains call.
  void LookupBelow(size_t below, std::span<const BlockKey> keys, std::span<TierKind> kinds)
      KV_EXCLUDES(mu_);
  // Writes down the blocks among `keys` that are dirty for the best-effort tier `below`; false
  // when a write failed.
  bool FlushBestEffortBatch(size_t below, std::span<const BlockKey> keys) KV_EXCLUDES(mu_);
  // Writes down every block dirty for tier `below`. For a local tier, as Flush() says (every
  // block dirty now is on the tier when it returns OK, then the tier is flushed); a best-effort
  // tier's failures are counted and logged, never returned.
  Status FlushTier(size_t below) KV_EXCLUDES(mu_);
  Status FlushLocalTier(size_t below) KV_EXCLUDES(mu_);
  void FlushBestEffortTier(size_t below) KV_EXCLUDES(mu_);
  // Adds the TierStats of the tiers below memory (`stores`: their own counters, read without
  // mu_) and the remote tier's fields to *out.
  void AppendLowerStats(std::span<const TierStoreStats> stores, EngineStats* out)
      KV_REQUIRES(mu_);
  // Counts and logs the outcome of one call to a best-effort tier (one line per change of
  // health).
  void NoteTierOutcome(size_t below, std::string_view what, const Status& first_error);
  // ReadFromTierAsync's continuation, on a completion thread: verifies and decodes the records
  // into the items' destinations, erases a local tier's unusable records, releases the staging
  // buffers, runs the batch's `then` and ends its count in flight.
  void CompleteRead(size_t below, TierReadBatch& batch) KV_EXCLUDES(mu_, io_mu_);
  // Runs `task` where `post` says, or on a completion thread when `post` is empty.
  void PostCompletion(const Post& post, std::function<void()> task);
  class ContinueHere;  // The waiting forms' Post (engine_lower.cc).
  // The callback of one of WriteToTierAsync's batches, on the tier's I/O thread (after Close: on
  // the issuing thread, before WriteBatch returns): copies the outcomes into the call's items,
  // releases the batch's buffers and, for the call's last batch, posts CompleteWrite.
  void WriteBatchAnswered(size_t below, const std::shared_ptr<TierWriteCall>& call,
                          TierWriteBatch& batch, const Post& post, const Status& s)
      KV_EXCLUDES(mu_, io_mu_);
  // WriteToTierAsync's continuation, once every batch answered: counts the call in the tier's
  // counters, releases its staging buffers, runs its `then` and ends its count in flight.
  void CompleteWrite(size_t below, TierWriteCall& call) KV_EXCLUDES(mu_, io_mu_);
  // Batches issued to the tiers below memory whose continuation has not finished: counted from
  // the issue to the end of the continuation, so that the destructor can wait for all of them
  // before it closes the tiers (no continuation may run on a destroyed engine).
  void BeginIo() KV_EXCLUDES(io_mu_);
  void EndIo() KV_EXCLUDES(io_mu_);
  void DrainIo() KV_EXCLUDES(io_mu_);

  bool HasTier(MemTier t) const { return clocks_[TierIndex(t)].has_value(); }
  std::byte* SlotData(MemTier t, uint32_t slot);
  void FreeRaw(MemTier t, uint32_t slot);
  Result<uint32_t> AllocateRaw(MemTier t);
  uint64_t NowWallUs() const { return clock_->WallMicros(); }
  std::vector<BlockKey> KeysOf(std::span<const Hash256> chunks, size_t chunk_count) const;

  // Slot management (engine_tiers.cc). Every one may drop and retake mu_ (for copies and
  // write-backs) unless noted; entry pointers must be looked up again afterwards.
  // `writes`: kToCleaner on a caller's thread (Store, Pin): a victim that would need a write to a
  // tier below memory is left to the cleaner (a clean victim is taken instead, else Busy).
  Result<uint32_t> AllocateSlot(MemTier t, VictimFilter filter, EvictWrites writes)
      KV_REQUIRES(mu_);
  // Frees a slot by evicting one victim; Busy when there is none (or, with kToCleaner, when
  // every victim would need a write: the cleaner is asked to evict one).
  Status EvictOne(MemTier t, VictimFilter filter, EvictWrites writes) KV_REQUIRES(mu_);
  // Moves the copy of `key` in tier `t` down: demotion to a lower memory tier with a free or
  // clean slot, else (dirty only) a write to the tiers below. The copy is kEvicting on entry and
  // stays so.
  Status WriteDown(const BlockKey& key, MemTier t, uint32_t slot) KV_REQUIRES(mu_);
  // Whether `e` is dirty for a local tier below memory (one whose write errors count).
  bool DirtyForLocal(const BlockEntry& e) const;
  // WriteDown's first half: the demotion; *demoted false when no lower tier had room.
  Status Demote(const BlockKey& key, MemTier t, uint32_t slot, bool* demoted) KV_REQUIRES(mu_);
  // WriteDown's second half: the write to each tier below memory the block is dirty for. The
  // first error of a local tier's write (best-effort tiers never fail it).
  Status WriteBack(const BlockKey& key, MemTier t, uint32_t slot) KV_REQUIRES(mu_);
  // On the cleaner: the evictions callers asked for (evict_wanted_), with their write-backs.
  void EvictForCallers() KV_REQUIRES(mu_);
  // Allocates a slot in `t` without any write (free slot or a victim `filter` allows, which is
  // kCleanOnly or kCleanNotAhead); never drops mu_.
  Result<uint32_t> AllocateClean(MemTier t, VictimFilter filter = VictimFilter::kCleanOnly)
      KV_REQUIRES(mu_);
  // Frees `slot` of `t`, which a table transition that ended a copy (Abort, Drop,
  // EndEviction(kept = false)) returned, and counts the eviction. Never drops mu_.
  void FreeSlot(MemTier t, uint32_t slot) KV_REQUIRES(mu_);
  // Copies a memory slot's bytes to host memory `dst`; waits for the copy.
  Status CopySlotToHost(MemTier t, uint32_t slot, std::byte* dst);
  // The raw bytes of slot `slot` of `t` for a write below memory: the slot itself when it is
  // host memory (host, CXL), else a copy in `staging` (counted in staged_copy_bytes). The slot
  // must stay put (kEvicting or pinned) until the write is done. Empty when the copy failed.
  std::span<const std::byte> RawForWrite(MemTier t, uint32_t slot, std::span<std::byte> staging,
                                         Status* copied) KV_EXCLUDES(mu_);
  // The first half of FlushBatch and FlushBestEffortBatch: claims (flushing + pin) the blocks
  // among `keys` that are dirty for tier `below` and points their items at their raw bytes
  // (RawForWrite: the slot itself, or a copy of a device slot in the lease's buffers).
  void ClaimAndCopyOut(std::span<const BlockKey> keys, size_t below, StagingLease& lease,
                       std::vector<std::pair<BlockKey, MemTier>>* todo,
                       std::vector<TierWriteItem>* items) KV_EXCLUDES(mu_);
  // Looks up `key`: a readable memory copy (returns its tier) or nullopt. Expired = absent.
  std::optional<MemTier> ReadableTier(const BlockKey& key, uint64_t now_wall_us) KV_REQUIRES(mu_);
  // Writes the blocks among `keys` that are dirty for the local tier `below` to it: the first
  // error that kept a block from it (WriteToTier's); such blocks stay dirty.
  // `background`: the cleaner's batch (its write-backs are counted in the tier's writebacks and
  // background_writebacks); at most kLoadStagingBatchMax / 2 keys.
  // `claimed`, when given, receives the keys this call wrote or tried to write (the others were
  // clean or claimed by another writer).
  Status FlushBatch(size_t below, std::span<const BlockKey> keys, bool background = false,
                    std::vector<BlockKey>* claimed = nullptr) KV_EXCLUDES(mu_);
  void SortFlushPending(size_t below, std::span<const BlockKey> pending,
                        const std::unordered_set<BlockKey>& tried, std::vector<BlockKey>* mine,
                        std::vector<BlockKey>* theirs) KV_EXCLUDES(mu_);
  // The cleaner (engine.cc): one thread (with any tier below memory), woken by Stores, that
  // does the evictions callers left to it (write-back included) and writes dirty blocks down to
  // the `cleaned` tiers with FlushBatch while a memory tier is over its dirty watermark, and
  // those past the tier's age limit (waking by itself when the next one falls due). Never holds
  // mu_ across I/O.
  void CleanerLoop() KV_EXCLUDES(mu_);
  // Up to `max` ready, unpinned keys dirty for tier `below` whose fastest copy is in the first
  // memory tier with more such blocks than `fraction` of its slots, the longest dirty first;
  // empty when no tier is over. `*dirty_min_us`: as PickAged's.
  std::vector<BlockKey> PickDirty(size_t below, double fraction, size_t max,
                                  uint64_t* dirty_min_us) KV_REQUIRES(mu_);
  // The cleaner's rounds for tier `below`: while a memory tier is over the dirty watermark, and
  // then the blocks past the tier's age limit (when it has one). CleanAged returns how long the
  // cleaner may sleep before the next block falls due (0: no dirty block is waiting).
  void CleanOverWatermark(size_t below) KV_REQUIRES(mu_);
  uint64_t CleanAged(size_t below) KV_REQUIRES(mu_);
  // Up to `max` keys dirty for tier `below` that fall due by now (dirty since their age limit
  // less the cleaner's slack), with a readable memory copy no one else is writing; `*wait_us`:
  // how long until the next one falls due (0: none is waiting), within the cleaner's bounds;
  // `*dirty_min_us`: the earliest dirty_since of the unexpired blocks dirty for the tier, those
  // returned included (UINT64_MAX: none).
  std::vector<BlockKey> PickAged(size_t below, size_t max, uint64_t* wait_us,
                                 uint64_t* dirty_min_us) KV_REQUIRES(mu_);
  // The earliest dirty_since of the unexpired blocks dirty for tier `below` (UINT64_MAX: none).
  uint64_t DirtySinceMin(size_t below) KV_REQUIRES(mu_);
  // Moves tier `below`'s write-back horizon to min(now, dirty_min_us), never back: a block dirty
  // since dirty_min_us is not on the tier yet, and every block dirty before was written.
  void NoteHorizon(size_t below, uint64_t dirty_min_us) KV_REQUIRES(mu_);
  // Wakes the cleaner after a write-back Store published dirty blocks.
  void KickCleaner() KV_EXCLUDES(mu_);

  // Load (engine_load.cc).
  void IssueLayer(LoadHandleImpl* handle, uint32_t layer, std::vector<LoadItem>& items);
  // Reads a batch of a Load from tier `below` into the callers' buffers (ReadFromTierAsync);
  // `done` receives the first miss, on a completion thread.
  void LoadFromTier(size_t below, std::span<const LoadItem> batch,
                    std::function<void(Status)> done) KV_EXCLUDES(mu_);
  // LoadFromTier's continuation: counts the batch's corrupt blocks (and a best-effort tier's
  // hits), promotes its hits when the tier says so; the first miss.
  Status FinishLoadBatch(size_t below, std::span<const TierReadItem> reads) KV_EXCLUDES(mu_);
  // Copies a block just read from tier `below` into a free or clean host slot, when there is one.
  void PromoteCopy(const BlockKey& key, std::span<const std::byte> raw, size_t below)
      KV_EXCLUDES(mu_);
  // Runs `task` on the worker pool (inline once the pool is shutting down). Caller threads only:
  // a worker calling it could wait on its own full queue.
  void RunOnPool(std::function<void()> task);

  // Access prediction (engine_predict.cc). Promotions ahead of need run on the worker pool, are
  // submitted with TrySubmit (dropped when the queue is full, never blocking anyone) and take only
  // free or clean host slots, like Prefetch.
  // The predictor's id of a session: explicit ids are mixed with the namespace, derived ones are
  // the first chunk hash (which covers the namespace already). `chunks` is not empty.
  static uint64_t SessionKey(const Namespace& ns, std::span<const Hash256> chunks,
                             uint64_t session_id);
  // Lookup's prediction step: remembers the session's chunks, observes the access, and promotes
  // the predicted sessions' blocks (other than this session's) in the background.
  void ObserveAccess(const Namespace& ns, std::span<const Hash256> chunks, uint64_t session_id)
      KV_EXCLUDES(mu_, pred_mu_);
  // Blocks promoted at most for one access or hint: prediction.blocks_max, and half the host tier;
  // for a Prefetch the whole host tier (its clean slots bound it).
  size_t PromotionBudget(PromotedBy by) const;
  // Queues a worker task that promotes the cached prefixes of `sessions` (chunk lists, best first).
  void SubmitPromotion(std::vector<std::vector<Hash256>> sessions, PromotedBy by)
      KV_EXCLUDES(mu_, pred_mu_);
  // On a worker: picks the blocks of `sessions` that are in no memory tier, up to the budget and
  // only while each session's prefix is cached, and queues them in batches for Promote.
  void PlanPromotion(std::span<const std::vector<Hash256>> sessions, PromotedBy by)
      KV_EXCLUDES(mu_);
  // Promote's parts: the reservations (under mu_), and each batch's continuation: publishes its
  // blocks, counts, and after the call's last batch runs `done`.
  struct PromoteCall;
  std::vector<TierReadItem> ReserveForPromotion(std::span<const BlockKey> keys, size_t below,
                                                PromoteSlots slots, PromoteOutcome* outcome)
      KV_EXCLUDES(mu_);
  void FinishPromote(PromoteCall& call, std::span<const TierReadItem> items)
      KV_EXCLUDES(mu_);
  // Blocks a promotion by `by` gave up (prediction_dropped_blocks, for predictions and hints;
  // Prefetch and Pin have no such counter).
  void CountDropped(PromotedBy by, uint64_t blocks) KV_REQUIRES(mu_);
  // Load served `key` from memory: counts it useful when it was promoted ahead of need, once.
  void CountUsefulPromotion(const BlockKey& key) KV_REQUIRES(mu_);
  // TrySubmit that keeps prediction_tasks_pending; false when the queue is full.
  bool TrySubmitPromotion(std::function<void()> task);
  // Adds the predictor's counters and gauges to *out.
  void AppendPredictionStats(EngineStats* out) KV_EXCLUDES(pred_mu_);

  // Store (engine_store.cc).
  // Claims table entries for the absent blocks among `keys` (pinned while the store runs).
  std::vector<StoreItem> ReserveBlocks(std::span<const BlockKey> keys,
                                       std::span<const std::span<const std::byte>> src,
                                       const StoreOptions& options) KV_REQUIRES(mu_);
  // Reserves a slot for each item (its copy kFilling). May drop and retake mu_ (AllocateSlot):
  // the items' entries are Claimed (pinned, kWriting), which no one else touches meanwhile.
  Status AllocateForStore(std::span<StoreItem> items) KV_REQUIRES(mu_);
  void AbortStore(std::span<const StoreItem> items) KV_REQUIRES(mu_);
  // Runs on a worker: waits for the copies, publishes the blocks, writes through.
  void FinishStore(StoreHandleImpl* handle, std::vector<StoreItem> items, CopyEvent event);
  // Write-through to tier `below` of the blocks a Store just published, encoded from the
  // caller's buffers (borrowed until `done` ran): `done` receives the first error (WriteToTier's)
  // as WriteToTierAsync's `then` does; a written block is no longer dirty for it.
  void WriteThrough(size_t below, std::span<const StoreItem> items,
                    std::function<void(Status)> done) KV_EXCLUDES(mu_);

  EngineOptions options_;
  const LowerTierFactory* lower_factory_ = nullptr;  // Borrowed; used at Open only.
  std::unique_ptr<Env> owned_env_;  // An Env the factory created for its tiers (options.env null).
  Env* env_ = nullptr;              // options.env, else owned_env_ (null without either).
  Clock* clock_ = nullptr;
  Logger* logger_ = nullptr;
  Hash256 layout_digest_{};
  uint64_t block_bytes_ = 0;
  codecs::BlockGeometry geometry_;

  DeviceBackend backend_ = DeviceBackend::kCpu;  // Set at Open; never kAuto.
  std::unique_ptr<DeviceTier> device_;
  std::unique_ptr<HostTier> host_;
  std::unique_ptr<HostTier> cxl_;
  // The tiers below memory, fastest first (the SSD, then the remote tier, as configured). Set at
  // Open, never changed after.
  std::vector<LowerTier> tiers_;
  // The remote tier's store, for its counters in EngineStats::remote (null without one).
  RemoteStore* remote_store_ = nullptr;
  std::atomic<bool> empty_salt_warned_{false};  // One warning per engine.
  std::unique_ptr<codecs::Codec> codec_;
  std::unique_ptr<StagingPool> staging_;
  std::unique_ptr<CodecContextPool> contexts_;
  std::unique_ptr<ThreadPool> pool_;
  // The continuations of reads from the tiers below memory (decode, copy, promotion, erase of
  // unusable records, completion of the Load's layer). Separate from pool_ because a worker of
  // pool_ may wait for staging buffers that only a continuation releases; its queue holds one
  // task per staging buffer, so a tier's I/O thread never waits to submit one. Set at Open when
  // there is a tier below memory.
  std::unique_ptr<ThreadPool> completions_;
  Mutex io_mu_;
  CondVar io_drained_;  // Waited on with io_mu_; signalled when io_in_flight_ drops to 0.
  uint64_t io_in_flight_ KV_GUARDED_BY(io_mu_) = 0;
  std::shared_ptr<EngineUnpinner> unpinner_;
  // Fed by WriteToTier for local tiers; thread-safe on its own.
  std::unique_ptr<codecs::RatioMonitor> ratio_;
  std::thread cleaner_;                          // Joinable only when the cleaner runs.
  bool opened_ = false;  // Create completed: the destructor flushes only then.
  std::atomic<int64_t> live_handles_{0};

  Mutex mu_;
  BlockTable table_ KV_GUARDED_BY(mu_);
  std::array<std::optional<SlotClock>, kMemTiers> clocks_;  // Set at Open; contents under mu_.
  // Memory tiers, then the tiers below memory (LowerCounters).
  std::array<TierCounters, kMemTiers + kLowerTiersMax> counters_ KV_GUARDED_BY(mu_);
  EngineStats stats_ KV_GUARDED_BY(mu_);
  CondVar cleaner_cv_;  // Waited on with mu_.
  CondVar flushed_cv_;  // Waited on with mu_; signalled when a FlushBatch completes.
  // Dirty blocks evictions dropped after a failed write-back to a local tier (policy refusals not
  // counted): a Flush that saw this grow cannot say every dirty block is on its tier.
  uint64_t dirty_dropped_ KV_GUARDED_BY(mu_) = 0;
  bool cleaner_kick_ KV_GUARDED_BY(mu_) = false;
  // Per memory tier: evictions a caller found would need a write-back and left to the cleaner.
  std::array<uint32_t, kMemTiers> evict_wanted_ KV_GUARDED_BY(mu_){};
  bool cleaner_stop_ KV_GUARDED_BY(mu_) = false;

  // Access prediction; predictor_ and sessions_ are set at Open when prediction is enabled.
  Mutex pred_mu_;
  std::optional<AccessPredictor> predictor_ KV_GUARDED_BY(pred_mu_);
  std::optional<SessionTable> sessions_ KV_GUARDED_BY(pred_mu_);
  std::optional<uint64_t> last_session_ KV_GUARDED_BY(pred_mu_);  // The latest access observed.
  // The sessions promoted for after the latest access, which the next access is scored against.
  std::vector<uint64_t> predicted_ KV_GUARDED_BY(pred_mu_);
  uint64_t prediction_scored_ KV_GUARDED_BY(pred_mu_) = 0;
  uint64_t prediction_hits_ KV_GUARDED_BY(pred_mu_) = 0;
  std::atomic<uint64_t> promotion_tasks_pending_{0};
};

}  // namespace kvtier
