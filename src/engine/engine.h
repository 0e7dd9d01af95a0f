// Engine: kvtier's prefix-cache API over an ordered list of tiers
// (device -> host -> optional CXL host -> SSD -> optional remote tier shared by every node).
//
// An inference engine calls it around prefill and decode:
//   - Lookup(ns, tokens): how many leading tokens have every layer of their chunks cached, and in
//     which tier each chunk is;
//   - Load(ns, tokens, dst): copies the cached chunks into the caller's block buffers, with one
//     completion per layer so layer 0 can be used while later layers still arrive;
//   - Store(ns, tokens, src): takes the full chunks of a sequence into the cache, asynchronously;
//   - Prefetch(ns, tokens): a hint to promote cached chunks towards the host tier ahead of need;
//   - Hint(ns, tokens, session): the caller's next requests; with access prediction
//     (EngineOptions::prediction) the engine also learns the order of sessions from Lookups and
//     promotes the predicted next session's blocks by itself;
//   - Pin(ns, tokens): an RAII handle that keeps chunks resident in memory while it lives.
//
// Keys follow docs/key_format.md: a Namespace (from the model, the layout, the tenant salt and
// extra keys) and the chained chunk hashes of the tokens; a block is (chunk hash, layer). Only
// full chunks are cached; a partial tail is ignored by every call.
//
// Block buffers are in the canonical layout `[k|v][token][kv_head][head_dim]` of the engine's
// KvLayout, exactly layout.BlockBytes() bytes each, and are passed as spans indexed
// [chunk * layers + layer].
//
// Correctness rules: a block is visible to Lookup and Load only after every byte of it is in a
// tier (a Store in progress is invisible); a block read from SSD or the remote tier is
// checked (checksum, key, layout digest) and a failure is a miss, never wrong data; when every
// slot is pinned or in use the call returns Busy instead of waiting forever.
//
// Thread safety: every method may be called from any thread concurrently.
// Ownership: the Engine owns its tiers and threads. LoadHandles and StoreHandles must be destroyed
// before the Engine (checked); a PinHandle may outlive it. Spans passed to Load/Store are borrowed
// until the returned handle reports completion (LoadHandle::Wait / StoreHandle::Wait) or is
// destroyed (the destructor waits). Options' Env and Logger are borrowed and must outlive the
// Engine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "codecs/codec_params.h"
#include "core/block_key.h"
#include "core/kv_layout.h"
#include "core/limits.h"
#include "env/env.h"
#include "policies/ssd_policy.h"
#include "tiers/memory_tier.h"
#include "tiers/remote_store.h"
#include "tiers/tier_options.h"

namespace kvtier {

enum class TierKind : uint8_t {
  kNone = 0,  // Not cached.
  kDevice = 1,
  kHost = 2,
  kCxl = 3,
  kSsd = 4,
  kRemote = 5,
};
std::string_view TierKindName(TierKind kind);

// How the threads that only write blocks down (the SSD write-back, the remote puts) give way to
// the rest (core/thread_priority.h): kNice adds EngineOptions::background_nice to their nice
// value; kIdle also runs them under SCHED_IDLE, for machines whose cores idle between the
// inference engine's steps (docs/engine.md, "Background writes").
enum class BackgroundPriority : uint8_t {
  kNice = 0,
  kIdle = 1,
};

enum class WritePolicy : uint8_t {
  kWriteThrough = 0,  // Store also writes every block to the persistent tier (SSD) right away.
  kWriteBack = 1,     // Blocks are written down only when evicted from memory (dirty bit).
};

// Which implementation backs the device tier (and the host tier). Why an option and not a build
// switch: one CUDA build runs on machines with and without a GPU, and tests pick the CPU tiers.
enum class DeviceBackend : uint8_t {
  // kCuda when the build has the CUDA backend (KVTIER_WITH_CUDA) and a GPU is usable, else kCpu.
  kAuto = 0,
  // The CPU-simulated device tier (host memory and copy threads) and a plain host tier.
  kCpu = 1,
  // CudaDeviceTier (slots in GPU memory, copies on CUDA streams) and the pinned host tier
  // (page-locked, registered with CUDA). NotSupported at Open, saying why, when the build has no
  // CUDA backend or no GPU is usable.
  kCuda = 2,
};
std::string_view DeviceBackendName(DeviceBackend backend);  // "auto", "cpu", "cuda".

// Eviction priority of stored chunks: higher priorities are evicted only when no lower one is
// left in the tier. The first chunk of a sequence (the attention sink) is stored at least kHigh.
enum class BlockPriority : uint8_t { kNormal = 0, kHigh = 1, kPinnedPrompt = 2 };

// Bytes of TierStats::name at most (a provider's registered name is shorter).
inline constexpr size_t kTierNameMax = 15;
// Whether `name` can be a tier's name: 1 to kTierNameMax of a-z, 0-9, '_' and '-'.
bool IsTierName(std::string_view name);

// Keys one Exists batch of a Lookup asks the remote tier about at most, and the keys one Lookup
// asks about in all (in batches, one after the other, until a batch finds a block missing): 64
// batches cover 64k blocks, a 128k-token prompt of 32 layers in 64-token chunks.
inline constexpr size_t kRemoteLookupKeysMax = 1024;
inline constexpr size_t kRemoteLookupBatchesMax = 64;
static_assert(kRemoteLookupKeysMax <= kRemoteBatchMax);

// Memory tiers with fewer slots are never cleaned in the background (EngineOptions).
inline constexpr uint32_t kCleanerTierSlotsMin = 16;

// TTLs above this (about 10 years) are refused as mistakes.
inline constexpr uint64_t kTtlMsMax = 10ull * 365 * 24 * 3600 * 1000;

// Write-back age limits above this (one hour) are refused as mistakes (EngineOptions).
inline constexpr uint32_t kWritebackAgeMsMax = 3600 * 1000;
// While dirty blocks are waiting for their age, the cleaner looks at them again at least this
// often (real time), so that a clock that jumps (a ManualClock in tests, a suspended machine)
// is noticed within this period.
inline constexpr uint32_t kCleanerAgePollMsMax = 100;
// Blocks past their age limit the cleaner takes from one scan of the block table at most.
inline constexpr size_t kCleanerAgedScanMax = 1024;

// The remote tier (docs/remote_tier.md, "Engine integration"): below the SSD tier (or below the
// memory tiers when there is no SSD), shared by every engine that points at the same store. Its
// blocks are encoded with EngineOptions::ssd_codec. Exactly one of `stores` (one store the engine
// opens and owns) and `store` (borrowed; tests and custom stores) is set. Remote failures never
// fail a call: reads become misses, writes are counted in EngineStats and logged.
struct RemoteTierOptions {
  // The store, by its provider's registered name (tiers/tier_registry.h) with the options of that
  // provider's type: RedisStoreOptions under "redis" (tiers/redis/redis_options.h), or a shared
  // directory, FsStoreOptions under "fs" (tiers/fs/fs_options.h). One entry at most. The store's
  // keyring and insecure_plaintext are its own fields; the engine fills in its clock, logger and
  // layout digest when it opens it.
  TierOptionsSet stores;
  RemoteStore* store = nullptr;  // Borrowed; must outlive the Engine.
  // kWriteThrough: every Store also puts its blocks (on a worker, before StoreHandle::Wait
  // returns). kWriteBack: blocks are put when their last memory copy is evicted, and on Flush.
  WritePolicy write_policy = WritePolicy::kWriteThrough;
  AdmissionMode admission = AdmissionMode::kAlways;  // As the SSD tier's admission filter.
  uint32_t admission_requests = 2;
  uint32_t admission_slots = 1u << 16;    // Counters of the admission sketch (1 byte each).
  uint64_t write_budget_bytes_per_s = 0;  // Encoded bytes put per second; 0 = unlimited.
  uint64_t write_budget_burst_bytes = 0;  // 0 = one second of budget.
  // Remote hits served by Load are also copied into a free or clean host slot.
  bool promote_on_load = true;
  // The remote tier's I/O threads: reads are handed to io_threads readers and writes to as many
  // writers (at EngineOptions::background_nice), so no engine worker waits for the network;
  // [1, kRemoteIoThreadsMax].
  uint32_t io_threads = kRemoteIoThreadsDefault;
  // Stores opened on the server for the reads (gets and lookups), each with its own
  // connections, side by side (tiers/remote_lanes.h); the puts get one more of their own, so a
  // get never waits for a put's pipeline. [1, kRemoteConnectionsMax]. Used by a store that keeps
  // connections (Redis); a directory and a borrowed store are used as they are.
  uint32_t connections = kRemoteConnectionsDefault;

  // The fields of this struct and that `stores` holds one entry at most; the store's own
  // options are checked by its provider when the engine opens it.
  Status Validate() const;
};

// Access prediction (docs/engine.md, "Access prediction"): the engine tags every Lookup with a
// session (LookupOptions::session_id, or one derived from the request), remembers the chunk hashes
// of each session's latest request, feeds the sequence of sessions to a sliding-window + Markov
// predictor (policies/access_predictor.h) and, after each access, promotes the predicted next
// sessions' cached blocks from the SSD (and the remote tier) into the host tier in the background.
// Off by default: it spends SSD reads and clean host slots on guesses, which pays only when
// sessions come back in a learnable order; EngineStats says whether it does.
struct PredictionOptions {
  bool enabled = false;
  uint32_t window = 2;           // Recent accesses that vote for the next session; [1, 16].
  uint32_t successors_max = 8;   // Next sessions remembered per session; [1, 64].
  uint32_t sessions_max = 1024;  // Sessions remembered (least recently seen forgotten); [1, 2^20].
  // Leading chunk hashes remembered per session (32 bytes each): its latest request's first
  // chunks; [1, kPredictionSessionChunksMax]. Memory: sessions_max * session_chunks_max * 32 B at
  // most (4 MiB with the defaults).
  uint32_t session_chunks_max = 128;
  uint32_t predict_k = 1;  // Sessions promoted after each access, best first; [1, 64].
  // Blocks (chunks x layers) promoted at most per access (all predicted sessions together) and per
  // Hint; [1, kPredictionBlocksMax]. Never more than half of the host tier's slots either.
  uint32_t blocks_max = 256;

  // InvalidArgument naming the first bad field (always checked, also when disabled).
  Status Validate() const;
};

// Bounds of PredictionOptions beyond the predictor's own (policies/access_predictor.h).
inline constexpr uint32_t kPredictionSessionChunksMax = 4096;
inline constexpr uint32_t kPredictionBlocksMax = 1u << 16;

struct EngineOptions {
  KvLayout layout;           // Validated; its digest enters every key.
  ModelIdentity model;       // Name and weights digest; enter every namespace.
  DeviceTierOptions device;  // capacity_bytes 0: no device tier. slot_bytes is set by the engine.
  HostTierOptions host;      // Required: capacity_bytes > 0. slot_bytes is set by the engine.
  // The device and host tiers' implementation; Open logs the one in use (Info). With kCuda the
  // device tier's slots are GPU memory, but Load and Store buffers stay host memory (pinned
  // memory is fastest): the engine copies with cudaMemcpyDefault and decodes on the CPU.
  DeviceBackend device_backend = DeviceBackend::kAuto;
  int32_t cuda_device = 0;  // CUDA device ordinal (kCuda, or kAuto resolving to kCuda).
  // The CXL tier (below) stays a plain host tier with every backend.
  std::optional<HostTierOptions> cxl;  // A second host tier bound to a CPU-less NUMA node.
  // The tiers below memory that stand on their own, by their providers' registered names
  // (tiers/tier_registry.h): the persistent SSD tier is SsdTierOptions under "ssd"
  // (tiers/ssd/ssd_options.h). Opened in the registry's order, below the memory tiers and above
  // the remote tier.
  TierOptionsSet tiers;
  WritePolicy write_policy = WritePolicy::kWriteBack;
  // Write-back only: when more than this fraction of a memory tier's slots hold dirty blocks (its
  // fastest copy), the engine's cleaner thread writes dirty, unpinned blocks to the SSD in small
  // batches until half that many are left, so eviction normally finds clean victims. In (0, 1];
  // 1 turns the cleaner off (eviction alone writes back). Tiers under kCleanerTierSlotsMin slots
  // are left to eviction (a batch in flight would pin a large share of them).
  double writeback_dirty_fraction = 0.5;
  // Write-back only: the longest a stored block stays dirty for a local tier below memory (the
  // SSD) before the cleaner writes it there, measured on env->clock()'s monotonic time from the
  // completion of its Store (docs/reliability.md, "Write-back age limit"). A block is then on
  // the SSD this long plus the time of its write after its Store completed, whatever happens to
  // the process afterwards; blocks the SSD refuses (admission filter, write budget) are retried
  // one age later. 0: write-through (Stores complete after their SSD writes); at most
  // kWritebackAgeMsMax.
  uint32_t writeback_age_ms_max = 1000;
  // How blocks are encoded on the SSD (default identity). A zstd_level or group_size of 0 means
  // the codec's default (CodecParams::WithDefaults): {.codec = kShuffleZstd} is level 1.
  codecs::CodecParams ssd_codec;
  uint64_t default_ttl_ms = 0;    // 0: blocks do not expire.
  uint32_t worker_threads = 2;    // Encode/decode and SSD staging, off the caller's thread.
  // The CPUs every thread the engine starts runs on (env/thread_cpus.h): "" those of the thread
  // that opens it, "all" every CPU the process may use, or a list such as "0-3,8".
  std::string thread_cpus;
  // Added to the nice value of the engine's threads that only write blocks down to the tiers
  // below memory (the cleaner's write-back to the SSD, the remote tier's puts), so that on a
  // busy machine they give way to loads and to the inference engine's own threads
  // (core/thread_priority.h; docs/engine.md, "Background writes"). [0, 19]; 0 keeps them at
  // the opening thread's priority.
  int background_nice = kBackgroundNiceDefault;
  BackgroundPriority background_priority = BackgroundPriority::kNice;
  uint32_t sink_chunks = 1;       // Leading chunks stored at least at BlockPriority::kHigh.
  // SSD hits served by Load are also copied into the host tier (only into free or clean slots:
  // a promotion never forces a write-back).
  bool promote_on_load = true;
  std::optional<RemoteTierOptions> remote;  // The shared remote tier; none by default.
  PredictionOptions prediction;             // Promotion ahead of need; off by default.
  // 4 KiB-aligned buffers that SSD and remote reads land in and blocks are encoded into (bounded
  // pool, allocated at Open when an SSD or remote tier exists), each large enough for one encoded
  // record. At least kLoadStagingBatchMax.
  uint32_t staging_buffers = 32;
  Env* env = nullptr;        // Borrowed; nullptr: a PosixEnv owned by the engine.
  Logger* logger = nullptr;  // Borrowed; nullptr: silent.

  // InvalidArgument naming the first bad field (units included). The SSD tier's own options
  // (ssd's fields) are checked by the tier factory at Open (engine/lower_tier_factory.h).
  Status Validate() const;
};

struct Namespace {
  Hash256 digest{};
};

// A session groups the requests of one conversation or agent, whose next request usually extends
// the previous one. Session ids are per namespace (two tenants' session 7 are different sessions).
// 0: the engine derives one from the request's first chunk hash (which covers the namespace and
// the first block_tokens tokens), so requests that share their first chunk (a common system
// prompt at least block_tokens long) fall into one session: such callers should pass ids.
struct LookupOptions {
  uint64_t session_id = 0;
};

struct LookupResult {
  size_t matched_tokens = 0;  // A multiple of block_tokens.
  // Per matched chunk: the slowest among its layers' fastest copies, i.e. the tier a Load of the
  // whole chunk reaches down to (kSsd when any layer is only on the SSD).
  std::vector<TierKind> chunk_tiers;
};

// Write-through: StoreHandle::Wait returns after the blocks are in memory (visible to Lookup as
// soon as the memory copy completed) AND their SSD write finished; any SSD write error of one of
// its blocks (NoSpace when the disk is full) is reported by Wait, and the blocks stay cached in
// memory, dirty, for Flush to retry. Blocks the SSD refused (admission filter, write
// budget) stay dirty and are retried on eviction and Flush. A remote tier with write-through is
// written in the same task, before Wait returns, but its errors are never reported by Wait (only
// by EngineStats and the log): the blocks are cached locally.
struct StoreOptions {
  BlockPriority priority = BlockPriority::kNormal;
  uint64_t ttl_ms = 0;  // 0: the engine's default_ttl_ms. Measured on env->clock()'s wall time.
  // The chunk src starts at: src holds chunks [first_chunk, first_chunk + src.size() / layers) of
  // `tokens` (their keys still chain over every token before them). For a caller that knows the
  // leading chunks are cached (it just loaded them) and need not copy them again. A chunk stored
  // without its predecessors is only found once they are cached too: Lookup matches prefixes.
  size_t first_chunk = 0;
};

// Completion of a Load: per-layer readiness.
class LoadHandle {
 public:
  virtual ~LoadHandle() = default;  // Waits for copies still in flight.
  // Blocks until every chunk of `layer` is in the destination buffers (OK), or returns the error
  // that made that layer unavailable (NotFound after a failed verification: recompute it).
  virtual Status WaitLayer(uint32_t layer) = 0;
  virtual bool LayerReady(uint32_t layer) = 0;
  // Waits for all layers; the first error.
  virtual Status Wait() = 0;
  virtual size_t chunks() const = 0;
};

class StoreHandle {
 public:
  virtual ~StoreHandle() = default;  // Waits.
  // OK once the source buffers are no longer needed and the blocks are visible to Lookup.
  virtual Status Wait() = 0;
  // Whether Wait() would return at once.
  virtual bool Done() = 0;
  virtual size_t chunks_stored() const = 0;  // Full chunks newly taken (existing ones skipped).
};

class EngineImpl;
// Keeps the blocks of the chunks it covers resident in a memory tier (not evicted) until
// destroyed. Move-only. A handle may outlive its Engine: the engine's destructor detaches the
// shared Unpinner, after which destroying the handle does nothing.
class PinHandle {
 public:
  // Releases pinned chunks: the in-process engine's (engine_impl.h) or a service client's
  // (serve/client.cc), which asks the service to release them. Thread-safe.
  class Unpinner {
   public:
    virtual ~Unpinner() = default;
    virtual void Unpin(std::span<const Hash256> chunks) = 0;
  };

  PinHandle() = default;
  // By the engines: `owner` is told the chunks once, when the handle is destroyed.
  PinHandle(std::shared_ptr<Unpinner> owner, std::vector<Hash256> keys);
  PinHandle(PinHandle&&) noexcept;
  PinHandle& operator=(PinHandle&&) noexcept;
  ~PinHandle();
  size_t chunks() const { return keys_.size(); }

 private:
  void Release();
  // Shared with the engine (why shared: the handle may be destroyed after the engine, which then
  // has detached it).
  std::shared_ptr<Unpinner> owner_;
  std::vector<Hash256> keys_;  // Chunk hashes; every layer of each chunk is pinned.
};

struct TierStats {
  TierKind kind = TierKind::kNone;  // The tier's place in the stack.
  // The tier's name: a memory tier's kind ("device", "host", "cxl"); below memory, the name its
  // provider registered (tiers/tier_registry.h): "ssd", and for the remote tier its store's,
  // "redis" or "fs" ("remote" for a borrowed store). At most kTierNameMax bytes.
  std::string name;
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;
  uint64_t blocks = 0;
  uint64_t hits = 0;        // Blocks served from this tier.
  uint64_t evictions = 0;   // Blocks removed to make room.
  uint64_t writebacks = 0;  // Dirty blocks written to the tier below before eviction (remote:
                            // blocks put into the remote tier, write-through included).
  uint64_t promotions = 0;  // Blocks copied up into this tier.
  // Blocks that were to be written into this tier and are not there because of an error (SSD:
  // I/O error, no space, a segment that could not be created, an encode failure; remote: failed
  // puts, as remote_put_errors). Refusals by admission or a write budget are not failures.
  uint64_t write_failures = 0;
  // Write-back tiers with an age limit (EngineOptions::writeback_age_ms_max; 0 elsewhere): every
  // Store that completed before `writeback_horizon_us` (env->clock()'s monotonic time) has its
  // blocks on this tier, with the tier's sync mode, except blocks counted in write_failures,
  // refused by its admission filter or write budget, expired or removed (a block another Store
  // was still copying in when this one completed counts from that Store's completion, since
  // this one skipped it). The cleaner moves it forward at each scan; it is the current time while
  // nothing is dirty for the tier. `writeback_lag_us`: how far it trails the time of the Stats()
  // call (docs/reliability.md).
  uint64_t writeback_horizon_us = 0;
  uint64_t writeback_lag_us = 0;
  // Tiers below memory that count them (the SSD tier; 0 elsewhere): bytes of the records written
  // to the tier, headers and padding included, and of those the bytes the tier copied into
  // buffers of its own before the disk. A record written from the engine's encode buffer is
  // copied once on its way down, by its encoder (docs/engine.md, "One copy before the disk").
  uint64_t write_bytes = 0;
  uint64_t staged_write_bytes = 0;
};

// Every counter below and in TierStats is a row of the stats table (engine/stats_table.h), from
// which the public structs, Python, Prometheus and the service's JSON take it: add a row with a
// new field (the build fails without one).
struct EngineStats {
  uint64_t lookups = 0, lookup_hit_tokens = 0, lookup_tokens = 0;
  uint64_t loads = 0, load_blocks = 0, load_failures = 0;
  uint64_t stores = 0, store_blocks = 0, busy_rejections = 0;
  uint64_t prefetches = 0, prefetch_blocks = 0;
  uint64_t corrupt_blocks = 0;   // Blocks refused by verification (served as misses).
  std::vector<TierStats> tiers;  // Fastest first; the remote tier (kRemote) last.
  // Remote tier only. Puts that failed (store down, slow, OOM), were refused by the admission
  // filter or went over the write budget; lookups whose remote Exists failed (served as misses).
  uint64_t remote_put_errors = 0, remote_not_admitted = 0, remote_over_budget = 0;
  uint64_t remote_lookup_errors = 0;
  std::optional<RemoteStoreStats> remote;  // The store's own counters and breaker state.
  // Dirty blocks the cleaner wrote to the SSD (also counted in their tier's writebacks).
  uint64_t background_writebacks = 0;
  // Bytes copied out of memory slots into staging buffers before an SSD or remote write. Only
  // device slots are copied out; host and CXL slots are encoded where they are.
  uint64_t staged_copy_bytes = 0;
  // The SSD codec's compression-ratio monitor (codecs/ratio_monitor.h): samples recorded (one per
  // encoded block, write-through and write-back) and CV events raised (each also logged).
  uint64_t ratio_samples = 0, ratio_cv_events = 0;
  // Access prediction (EngineOptions::prediction). An access is a Lookup with at least one full
  // chunk; a Lookup of the session observed just before, with the same chunks, is the same access
  // asked again and is not counted. A prediction (the sessions promoted for, never the session
  // just seen) is scored against the access that follows it.
  uint64_t prediction_accesses = 0;  // Accesses observed.
  uint64_t prediction_scored = 0;    // Accesses that had a prediction made before them.
  uint64_t prediction_hits = 0;      // ... whose session was in that prediction.
  double prediction_accuracy = 0;    // prediction_hits / prediction_scored (0 before any).
  // Blocks copied into the host tier because their session was predicted; of those, how many a
  // later Load served from memory (the rest were evicted unused or are still waiting).
  uint64_t prediction_promoted_blocks = 0, prediction_useful_blocks = 0;
  // Hint calls, and the same two counters for the blocks they promoted.
  uint64_t hints = 0, hint_promoted_blocks = 0, hint_useful_blocks = 0;
  // Promotions (prediction or hint) given up: the worker queue was full, no free or clean host
  // slot was left, or the block could not be read.
  uint64_t prediction_dropped_blocks = 0;
  uint64_t prediction_sessions = 0;       // Gauge: sessions remembered.
  uint64_t prediction_tasks_pending = 0;  // Gauge: promotion tasks queued or running.
};

class LowerTierFactory;  // engine/lower_tier_factory.h

// Memory an engine reads stores from and loads into without a copy: a service client's staging
// region shared with the service (serve/client.h). Buffers stay valid until released, even after
// the engine is gone. Thread-safe.
class StagingSource {
 public:
  virtual ~StagingSource() = default;
  // `bytes` of staging, 64-byte aligned; Busy when none is free, Unavailable while the engine
  // cannot lend any (callers then use their own memory).
  virtual Result<std::span<std::byte>> Acquire(size_t bytes) = 0;
  virtual void Release(std::span<std::byte> buffer) = 0;
};

class Engine {
 public:
  // With the SSD and remote tiers the options ask for (StandardLowerTiers(); kvtier_engine).
  static Result<std::unique_ptr<Engine>> Open(const EngineOptions& options);
  // With the tiers below memory that `lower` constructs (borrowed for the call). nullptr: memory
  // tiers only; options that ask for an SSD or remote tier are then refused with NotSupported
  // naming the library that provides it. The engine core (kvtier_engine_core) has only this one:
  // it links neither the SSD tier (liburing) nor the remote tier (hiredis).
  static Result<std::unique_ptr<Engine>> Open(const EngineOptions& options,
                                              const LowerTierFactory* lower);
  virtual ~Engine() = default;

  // The namespace of a tenant: salt and extra keys (LoRA id, media hashes) enter every key.
  virtual Result<Namespace> MakeNamespace(std::string_view salt,
                                          std::span<const std::string> extra_keys = {}) = 0;

  // Memory copies come from the engine's index, SSD copies from the SSD tier's own index (which
  // survives restarts). Expired blocks are misses. With a remote tier, the blocks found in neither
  // are asked of it in batched Exists calls, in chunk order (kRemoteLookupKeysMax keys each, at
  // most kRemoteLookupBatchesMax of them; the next batch is sent only when every block of the
  // previous one was found; the store's timeouts and breaker bound each); an unanswered Exists is
  // a miss. The remote is not asked whether a
  // value verifies: a corrupt remote value is found at Load time (its layer fails closed).
  //
  // With EngineOptions::prediction enabled the Lookup is also an access of its session
  // (LookupOptions): the session's chunks are remembered, the predictor learns, and the blocks of
  // the sessions it predicts next are promoted towards the host tier in the background (worker
  // pool, clean victims only); the result is computed before any of that.
  virtual Result<LookupResult> Lookup(const Namespace& ns, std::span<const uint32_t> tokens,
                                      const LookupOptions& options) = 0;
  Result<LookupResult> Lookup(const Namespace& ns, std::span<const uint32_t> tokens) {
    return Lookup(ns, tokens, LookupOptions{});
  }
  // Loads the first dst.size() / layers chunks (each must be cached; Lookup first).
  // InvalidArgument (naming the index) when dst.size() is not a multiple of layers, exceeds the
  // full chunks of `tokens`, or a span is not layout.BlockBytes() long. A block that is missing
  // or refused by verification at load time makes its layer's WaitLayer return NotFound.
  // Memory sources are pinned until the handle completed (Wait() or destruction).
  virtual Result<std::unique_ptr<LoadHandle>> Load(const Namespace& ns,
                                                   std::span<const uint32_t> tokens,
                                                   std::span<const std::span<std::byte>> dst) = 0;
  // Stores the first src.size() / layers full chunks of `tokens` (from options.first_chunk on).
  // Blocks already cached (in any tier, the SSD included) or being stored by another call are
  // skipped. All or nothing: Busy, with nothing stored, when memory slots cannot be had (every
  // slot pinned or in flight, or the victims dirty: the cleaner writes them back, never the
  // caller's thread, and a later retry finds the slots); so
  // one call takes at most as many new blocks as the memory tiers have slots together.
  // Write-back: new blocks are dirty and reach the SSD when evicted, on Flush, or when the
  // engine is destroyed. Write-through: see StoreOptions.
  virtual Result<std::unique_ptr<StoreHandle>> Store(
      const Namespace& ns, std::span<const uint32_t> tokens,
      std::span<const std::span<const std::byte>> src, const StoreOptions& options = {}) = 0;
  // Promotes the cached chunks of `tokens` towards the host tier; returns at once.
  virtual Status Prefetch(const Namespace& ns, std::span<const uint32_t> tokens) = 0;
  // The caller's queue: a request of `session_id` (0: derived as LookupOptions says) with these
  // tokens comes soon. Promotes the cached prefix of `tokens` from the SSD (and the remote tier)
  // into the host tier in the background, at most prediction.blocks_max blocks, like Prefetch;
  // with prediction enabled it also remembers the tokens' chunks as the session's latest request
  // and makes the predictor name the session first until it is looked up (or, never looked up,
  // until 64 accesses went by). Returns at once; never an error for a miss.
  virtual Status Hint(const Namespace& ns, std::span<const uint32_t> tokens,
                      uint64_t session_id = 0) = 0;
  // Pins the leading cached chunks of `tokens` in memory (promoting from SSD first if needed).
  virtual Result<PinHandle> Pin(const Namespace& ns, std::span<const uint32_t> tokens) = 0;

  // Writes every dirty block down, syncs the SSD tier. Blocks until done. Every dirty block is
  // tried; the result is the first error of a block that did not reach the SSD (NoSpace when the
  // disk is full), OK only when all of them did (blocks refused by admission or a write budget
  // excepted). The destructor flushes too (an error there is logged), so a clean shutdown keeps
  // write-back blocks across restarts.
  virtual Status Flush() = 0;
  virtual EngineStats Stats() = 0;
  // Stats() in the Prometheus text exposition format (engine_metrics.h).
  std::string MetricsText();
  virtual const EngineOptions& options() const = 0;
  // The backend in use: kCpu or kCuda (what kAuto resolved to), never kAuto.
  virtual DeviceBackend device_backend() const = 0;
  // Where staging for Load and Store is zero-copy; nullptr (the in-process engine): anywhere.
  virtual std::shared_ptr<StagingSource> staging_source() { return nullptr; }
};

}  // namespace kvtier
