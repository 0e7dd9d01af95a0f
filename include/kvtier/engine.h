// kvtier's C++ API: the prefix-cache engine over device, host, CXL, SSD and remote tiers
// (docs/integration.md, "The C++ API"; the design in docs/engine.md). Installed with libkvtier.so
// and the CMake package: this header and the ones it includes use only the standard library.
//
// An inference engine calls it around prefill and decode:
//   - Lookup(ns, tokens): how many leading tokens have every layer of their chunks cached;
//   - Load(ns, tokens, dst): copies the cached chunks into the caller's block buffers, with one
//     completion per layer, so attention for layer 0 can run while later layers still arrive;
//   - Store(ns, tokens, src): takes the full chunks of a sequence into the cache, asynchronously;
//   - Prefetch / Hint: promote cached chunks towards host memory ahead of need;
//   - Pin(ns, tokens): keeps chunks resident in memory while the handle lives.
// Engine::Open opens an engine in this process; Engine::Connect uses the engine of kvtier's node
// service (`kvtier serve`, docs/serve.md), shared by every process of the node, with the same
// methods. Only full chunks of layout.block_tokens tokens are cached; a partial tail is ignored.
//
// Blocks: each buffer is exactly block_bytes() long, in the canonical layout
// [k|v][token][kv_head][head_dim], and a block array is indexed [chunk * layers + layer].
// Errors are Status / Result (never exceptions); Busy means every slot is pinned or in use, so
// retry later: no call waits forever for a slot.
//
// Thread safety: every Engine method may be called from any thread concurrently. A handle is used
// by one thread at a time.
// Ownership: Engine::Open returns the only owner of the Engine. Handles keep the engine's internals
// alive, so an Engine may be destroyed before its handles (it then shuts down, flushing, when the
// last handle goes). Buffers passed to Load and Store are borrowed until the handle's Wait
// returned or the handle is destroyed (its destructor waits); every other argument is read only
// during the call.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/layout.h"
#include "kvtier/options.h"
#include "kvtier/result.h"
#include "kvtier/stats.h"
#include "kvtier/status.h"

namespace kvtier::api {

// A tenant's key space: the model, the layout, a salt and extra keys (docs/key_format.md). A value:
// copy it and keep it per tenant.
struct Namespace {
  std::array<uint8_t, 32> digest{};

  friend bool operator==(const Namespace&, const Namespace&) = default;
};

struct LookupOptions {
  // The conversation or agent the request belongs to, for access prediction; per namespace.
  // 0: derived from the request's first chunk.
  uint64_t session_id = 0;
};

struct LookupResult {
  size_t matched_tokens = 0;  // A multiple of block_tokens.
  // Per matched chunk: the slowest tier a Load of the whole chunk reaches down to.
  std::vector<TierKind> chunk_tiers;
};

// Eviction priority: higher priorities are evicted only when no lower one is left in the tier.
enum class BlockPriority : uint8_t { kNormal = 0, kHigh = 1, kPinnedPrompt = 2 };

struct StoreOptions {
  BlockPriority priority = BlockPriority::kNormal;
  uint64_t ttl_ms = 0;  // 0: EngineOptions::default_ttl_ms.
};

// Completion of a Load, layer by layer. Move-only; the destructor waits for copies in flight.
class LoadHandle {
 public:
  struct Impl;
  explicit LoadHandle(std::unique_ptr<Impl> impl);  // By Engine::Load only.
  LoadHandle(LoadHandle&&) noexcept;
  LoadHandle& operator=(LoadHandle&&) noexcept;
  ~LoadHandle();

  // Blocks until every chunk of `layer` is in the destination buffers (OK), or returns why that
  // layer is unavailable (NotFound after a failed verification: recompute the layer).
  Status WaitLayer(uint32_t layer);
  bool LayerReady(uint32_t layer);
  Status Wait();  // All layers; the first error.
  size_t chunks() const;

 private:
  std::unique_ptr<Impl> impl_;
};

// Completion of a Store. Move-only; the destructor waits.
class StoreHandle {
 public:
  struct Impl;
  explicit StoreHandle(std::unique_ptr<Impl> impl);  // By Engine::Store only.
  StoreHandle(StoreHandle&&) noexcept;
  StoreHandle& operator=(StoreHandle&&) noexcept;
  ~StoreHandle();

  // OK once the source buffers are no longer needed and the blocks are visible to Lookup. With
  // write-through to the SSD, also after their SSD write, whose error (NoSpace, ...) it returns.
  Status Wait();
  bool Done();                  // Whether Wait would return at once.
  size_t chunks_stored() const;  // Full chunks newly taken (chunks already cached are skipped).

 private:
  std::unique_ptr<Impl> impl_;
};

// Keeps the chunks it covers resident in memory until destroyed. Move-only.
class PinHandle {
 public:
  struct Impl;
  explicit PinHandle(std::unique_ptr<Impl> impl);  // By Engine::Pin only.
  PinHandle(PinHandle&&) noexcept;
  PinHandle& operator=(PinHandle&&) noexcept;
  ~PinHandle();

  size_t chunks() const;

 private:
  std::unique_ptr<Impl> impl_;
};

class Engine {
 public:
  struct Impl;

  // Validates the options (InvalidArgument naming the first bad field), opens the tiers and
  // recovers the SSD tier's contents.
  static Result<std::unique_ptr<Engine>> Open(const EngineOptions& options);
  // A client of the node service listening on the Unix socket `socket` (docs/serve.md): the
  // same methods over the service's engine, whose tiers every client shares. Namespaces name
  // tenants: MakeNamespace's salt is sent as a tenant id, from which the service derives the
  // namespace (clients of different uids never share). Stats() are the service engine's.
  // While the service is unreachable Lookup matches nothing, Load and Store fail with
  // Unavailable, Prefetch, Hint and Pin do nothing, and the client reconnects by itself; a call
  // never waits longer than options.timeout_ms. Unavailable when the service cannot be reached
  // and options.layout is not set; InvalidArgument for a bad layout or socket path.
  static Result<std::unique_ptr<Engine>> Connect(const std::string& socket,
                                                 const ConnectOptions& options = {});
  explicit Engine(std::unique_ptr<Impl> impl);  // Through Open and Connect only.
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;
  ~Engine();

  const Layout& layout() const;
  uint64_t block_bytes() const;  // layout().BlockBytes().
  DeviceBackend device_backend() const;  // What kAuto resolved to: kCpu or kCuda.

  // The namespace of a tenant: the salt and extra keys (LoRA id, media hashes) enter every key.
  Result<Namespace> MakeNamespace(std::string_view salt,
                                  std::span<const std::string> extra_keys = {});

  // Cached leading tokens. Expired blocks are misses; a remote tier that does not answer is a miss.
  Result<LookupResult> Lookup(const Namespace& ns, std::span<const uint32_t> tokens,
                              const LookupOptions& options = {});
  // Loads the first dst.size() / layers chunks, which must be cached (Lookup first).
  // InvalidArgument when dst.size() is not a multiple of layers, exceeds the full chunks of
  // `tokens`, or a buffer is not block_bytes() long.
  Result<LoadHandle> Load(const Namespace& ns, std::span<const uint32_t> tokens,
                          std::span<const std::span<std::byte>> dst);
  // Stores the first src.size() / layers full chunks of `tokens`. All or nothing: Busy, with
  // nothing stored, when memory slots cannot be had.
  Result<StoreHandle> Store(const Namespace& ns, std::span<const uint32_t> tokens,
                            std::span<const std::span<const std::byte>> src,
                            const StoreOptions& options = {});
  // Promotes the cached chunks of `tokens` towards host memory; returns at once.
  Status Prefetch(const Namespace& ns, std::span<const uint32_t> tokens);
  // A request of `session_id` with these tokens comes soon: promotes its cached prefix in the
  // background and, with prediction on, tells the predictor. Returns at once.
  Status Hint(const Namespace& ns, std::span<const uint32_t> tokens, uint64_t session_id = 0);
  // Pins the leading cached chunks of `tokens` in memory (promoting them first if needed).
  Result<PinHandle> Pin(const Namespace& ns, std::span<const uint32_t> tokens);

  // Writes every dirty block down and syncs the SSD tier; the first error of a block that did not
  // reach it. Destroying the engine flushes too.
  Status Flush();
  EngineStats Stats();

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier::api
