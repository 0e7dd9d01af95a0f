// LlmSession: what `kvtier run` and `kvtier chat` share. It loads a model file (llama2.c
// checkpoint + tokenizer, or GGUF), opens an Engine (host tier, plus an SSD tier under a cache
// directory when one is given) keyed by the model's weights digest and the tenant salt, and
// runs one sequence at a time: Prefill() goes through CachedPrefill (Lookup, layer-gated Load,
// compute the rest, Store), Step() decodes one token with Model::Forward, and StoreSequence()
// hands the decoded tokens' full chunks to the engine so that a later turn finds them.
// CacheChunks() fills the cache with a prompt's chunks without generating (`kvtier preload`).
//
// Why a separate engine key per model: the namespace digest covers the weights' SHA-256 and the
// KV layout, so two models (or two block sizes) never share cached KV, whatever the file names.
//
// Thread safety: single-threaded (the CLI's main thread). Ownership: the session owns the
// model, tokenizer, engine and the sequence's KV blocks; the Engine borrows the session's
// logger, which is declared first so that it outlives the engine.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/logger.h"
#include "engine/engine.h"
#include "engine/options_table.h"
#include "kvtier/result.h"
#include "runtime/cached_prefill.h"
#include "runtime/kv_blocks.h"
#include "runtime/model.h"
#include "runtime/sampler.h"
#include "runtime/tokenizer.h"

namespace kvtier::cli {

// The context a session gets when --context is not given: the model's trained context, but at
// most this many tokens. The host tier is sized from the context (twice its KV bytes, reserved
// at Open), so a model file declaring a 1M-token context would otherwise cost gigabytes before
// generating anything; 4096 tokens cover every llama2.c model and common prompts, and a longer
// context is one --context away.
inline constexpr uint32_t kDefaultContextTokensMax = 4096;

// Segments of the --cache-dir SSD tier: small, since a CLI run stores little.
inline constexpr uint64_t kCacheSegmentBytes = uint64_t{16} << 20;

struct LlmSessionOptions {
  std::string model_path;       // llama2.c checkpoint or GGUF.
  std::string tokenizer_path;   // llama2.c tokenizer; empty for GGUF (its vocabulary is used).
  std::string cache_dir;        // SSD tier directory; empty: host tier only (nothing persists).
  std::string salt;             // Tenant salt: different salts never share cached KV.
  uint32_t block_tokens = 16;   // Tokens per cached chunk; only full chunks are cached.
  uint32_t context_tokens = 0;  // Positions a sequence may use; 0: the model's seq_len, at
                                // most kDefaultContextTokensMax.
  uint64_t ssd_capacity_bytes = uint64_t{1} << 30;
  uint64_t host_bytes = 0;      // Host tier; 0: twice the context's KV, at least 16 MiB.
  std::string codec = "identity";  // How blocks are encoded on the SSD and in Redis.
  // The shared Redis tier: "host:port[,host:port...]" (empty: none), and its deployment keys.
  std::string redis;
  std::string remote_key_file;
  bool remote_insecure_plaintext = false;
  std::string ssd_key_file;  // Keys that seal the --cache-dir records at rest.
  // A running `kvtier serve`'s socket ("unix:PATH" or PATH): the session's KV goes through the
  // service's tiers instead of an engine of its own (then no cache_dir, redis, host_bytes or
  // further engine settings: those are the service's). Its layout must be the model's; the
  // weights digest enters the namespace as an extra key, the salt is the tenant id.
  std::string server;
  std::string server_token_file;  // The service's client token, when it has one.
  LogLevel log_level = LogLevel::kWarn;  // Engine log lines below it are dropped.
  // Further engine options (engine/options_table.h), applied in this order after the above.
  // InvalidArgument for a setting of a tier the session does not have (an ssd_* option without
  // cache_dir, a remote_* one without redis, a cxl_* one without cxl_bytes).
  std::vector<std::pair<const OptionSpec*, OptionValue>> engine_settings;
};

class LlmSession {
 public:
  // Errors: the loader's (missing, truncated or hostile files), InvalidArgument when the model
  // has no tokenizer or the context is out of range, and the engine's.
  static Result<std::unique_ptr<LlmSession>> Open(const LlmSessionOptions& options);

  const runtime::Tokenizer& tokenizer() const { return *tokenizer_; }
  // The engine's counters in the Prometheus text format (engine/engine_metrics.h).
  std::string MetricsText() { return engine_->MetricsText(); }
  // A snapshot of the engine's counters (per-tier blocks, bytes, evictions, ...).
  EngineStats Stats() { return engine_->Stats(); }
  const runtime::ModelConfig& config() const { return model_->config(); }
  uint32_t context_tokens() const { return context_tokens_; }
  std::string Description() const;
  // True when the KV goes through a `kvtier serve` (LlmSessionOptions::server).
  bool via_server() const { return via_server_; }
  // Bytes held for KV: the host tier's capacity (reserved at Open) plus the sequence's blocks
  // (allocated as positions are written).
  uint64_t KvMemoryBytes() const;

  // Starts a new sequence with `tokens` (non-empty, at most context_tokens()) at position 0:
  // its cached leading chunks are loaded, the rest computed and its full chunks stored.
  // `logits` receives the last token's.
  Result<runtime::CachedPrefillStats> Prefill(std::span<const uint32_t> tokens,
                                              std::vector<float>* logits);
  // Runs `token` at position `pos` (every earlier position already computed); NoSpace past the
  // context.
  Status Step(uint32_t token, uint32_t pos, std::vector<float>* logits);
  // Stores the full chunks of `tokens`, every one of which has been run (Prefill or Step).
  Result<size_t> StoreSequence(std::span<const uint32_t> tokens);

  // What CacheChunks did with the full chunks of one prompt.
  struct CacheChunksStats {
    size_t chunks = 0;           // Full chunks of the prompt (the tail is never cached).
    size_t present_chunks = 0;   // Already in the cache (Lookup): not computed again.
    size_t stored_chunks = 0;    // Computed and newly taken by the engine.
    size_t computed_tokens = 0;  // Tokens run through the model.
    uint64_t compute_us = 0;     // In the model (and loading the chunks found, which overlaps).
    uint64_t store_us = 0;       // Storing the computed chunks (written through to the SSD).
    bool stopped = false;        // `after_step` said stop while chunks were left.
  };
  // Makes the cache hold every full chunk of `tokens` (a prompt as Prefill takes it, at most
  // context_tokens()), as Prefill would store them: the leading chunks Lookup finds stay as they
  // are (loaded, never recomputed, and only when a missing chunk follows them), the missing ones
  // are computed kCacheStepTokens at a time, each step stored before the next. After each step
  // `after_step(tokens_done)` is called; false stops there, with every step done so far stored.
  // A store that fails (NoSpace, an I/O error) is an error.
  static constexpr size_t kCacheStepTokens = 256;
  Result<CacheChunksStats> CacheChunks(std::span<const uint32_t> tokens,
                                       const std::function<bool(size_t)>& after_step);
  // Writes every stored block down and syncs the SSD tier (Engine::Flush).
  Status Flush() { return engine_->Flush(); }
  // Record bytes of the blocks the SSD tier indexes (0 without one).
  uint64_t SsdLiveBytes();

  // Decodes after `sequence` (whose last token's logits are in `logits`): samples up to
  // `max_new_tokens` tokens, stops (exclusive) at BOS or EOS, and with StopAt::kEndOfLine also
  // at a token whose text holds a newline, prints each token's text to `out`
  // as soon as it is known, and appends it to `sequence`. Every appended token is run through
  // the model (so the KV covers the whole sequence), except the last one when `run_last` is
  // kNo. Stops early, without error, when the context is full. Returns the tokens generated
  // and why it stopped.
  enum class RunLast : uint8_t { kNo = 0, kYes = 1 };
  enum class StopAt : uint8_t { kEndOfText = 0, kEndOfLine = 1 };
  struct DecodeOptions {
    uint32_t max_new_tokens = 256;
    RunLast run_last = RunLast::kNo;
    StopAt stop_at = StopAt::kEndOfText;
  };
  enum class Stop : uint8_t { kMaxTokens = 0, kEndOfText = 1, kEndOfLine = 2, kContext = 3 };
  // "max_tokens", "end_of_text", "end_of_line", "context" (the JSON reports' "stop").
  static const char* StopName(Stop stop);
  struct Decoded {
    size_t tokens = 0;
    Stop stop = Stop::kMaxTokens;
  };
  Result<Decoded> Decode(std::vector<uint32_t>& sequence, std::vector<float>& logits,
                         runtime::Sampler& sampler, const DecodeOptions& options, std::FILE* out);

 private:
  explicit LlmSession(LogLevel log_level) : logger_(log_level) {}

  StderrLogger logger_;  // Borrowed by engine_: declared before it.
  std::string model_path_;
  std::optional<runtime::Tokenizer> tokenizer_;  // Set by Open().
  std::unique_ptr<runtime::Model> model_;
  std::unique_ptr<Engine> engine_;
  Namespace ns_;
  std::unique_ptr<runtime::InMemoryKvBlocks> kv_;
  uint32_t context_tokens_ = 0;
  bool has_ssd_ = false;
  bool via_server_ = false;
};

// The cache flags' engine options on top of `*o`, whose layout, model identity and host tier the
// caller set: the codec, the SSD tier under options.cache_dir (16 MiB segments, periodic sync,
// write-through, sealed with ssd_key_file), the Redis tier with its keys, then the further
// settings (engine_settings). InvalidArgument naming the flag. `kvtier serve` builds its engine
// with it too.
Status ApplyCacheOptions(const LlmSessionOptions& options, EngineOptions* o);

// "3 host + 2 ssd" for the tiers cached chunks came from; "-" when none.
std::string CachedTierList(const std::vector<TierKind>& tiers);

// Milliseconds from microseconds, for messages.
double MsFromUs(uint64_t us);

// Microseconds of a steady clock, for timing messages.
uint64_t SteadyNowUs();

}  // namespace kvtier::cli
