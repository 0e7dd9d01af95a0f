#include "llm_session.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "cache_dir.h"
#include "codecs/codec_params.h"
#include "core/assert.h"
#include "core/sha256.h"
#include "runtime/model_loader.h"
#include "runtime/runtime_limits.h"
#include "serve/client.h"
#include "serve_common.h"
#include "tiers/fs/fs_options.h"
#include "tiers/redis/redis_connection.h"
#include "tiers/redis/redis_options.h"
#include "tiers/ssd/ssd_options.h"

namespace kvtier::cli {

namespace {

// The model's identity in every cache key: SHA-256 over the config and every tensor, so the
// same weights share KV whatever the file is called (and llama2.c vs GGUF copies of one model
// differ only if their tensors do).
Hash256 WeightsDigest(const runtime::ModelWeights& weights) {
  Sha256 h;
  h.Update(weights.config().ToString());
  const uint32_t layers = weights.config().n_layers;
  for (size_t k = 0; k < runtime::kWeightKindCount; ++k) {
    const auto kind = static_cast<runtime::WeightKind>(k);
    const uint32_t copies = runtime::IsPerLayer(kind) ? layers : 1;
    for (uint32_t l = 0; l < copies; ++l) h.Update(std::as_bytes(weights.Get(kind, l)));
  }
  return h.Finish();
}

// The further options (--ssd-io-depth, --device-backend, ...) over the session's own choices. A
// setting of a tier the session does not have would be ignored by the table's setter: here it
// is an error that names what is missing.
Status ApplyEngineSettings(const LlmSessionOptions& options, EngineOptions* o) {
  for (const auto& [spec, value] : options.engine_settings) {
    KV_RETURN_IF_ERROR(SetEngineOption(o, *spec, value));
    const bool cxl_switch = spec->name == "cxl_bytes";
    std::string needs;
    if (spec->name.starts_with("ssd_") && !o->tiers.Has(kSsdTierName)) needs = "--cache-dir";
    if (spec->name.starts_with("remote_") && !o->remote.has_value()) {
      needs = "--redis or --fs-dir";
    }
    if (spec->name.starts_with("fs_") && spec->name != "fs_dir" &&
        !(o->remote.has_value() && o->remote->stores.Has(kFsStoreName))) {
      needs = "--fs-dir";
    }
    if (spec->name.starts_with("cxl_") && !cxl_switch && !o->cxl.has_value()) {
      needs = "--cxl-bytes";
    }
    if (!needs.empty()) {
      std::string dashed(spec->name);
      std::replace(dashed.begin(), dashed.end(), '_', '-');
      return Status::InvalidArgument("--" + dashed + " needs " + needs);
    }
  }
  return Status::Ok();
}

Result<EngineOptions> MakeEngineOptions(const LlmSessionOptions& options, const KvLayout& layout,
                                        uint32_t context_tokens, const Hash256& digest,
                                        Logger* logger) {
  // The host tier holds at least two full contexts, so one Store of a whole conversation
  // (all or nothing) always finds slots. It scales with the context, never with the model's
  // declared maximum: the default context is capped (kDefaultContextTokensMax), and a longer one
  // must be asked for with --context.
  const uint64_t chunks = (context_tokens + layout.block_tokens - 1) / layout.block_tokens;
  const uint64_t context_bytes = chunks * layout.layers * layout.BlockBytes();
  EngineOptions o;
  o.layout = layout;
  o.model = {.name = "kvtier-cli", .weights_digest = digest};
  o.host.capacity_bytes = std::max<uint64_t>(16 * kMiB, 2 * context_bytes);
  if (options.host_bytes != 0) {
    if (options.host_bytes < 2 * context_bytes) {
      return Status::InvalidArgument("--host-bytes " + std::to_string(options.host_bytes) +
                                     " is less than twice the KV of the context (" +
                                     std::to_string(2 * context_bytes) + " bytes for " +
                                     std::to_string(context_tokens) +
                                     " tokens): lower --context or raise --host-bytes");
    }
    o.host.capacity_bytes = options.host_bytes;
  }
  KV_RETURN_IF_ERROR(ApplyCacheOptions(options, &o));
  o.logger = logger;
  return o;
}

// The engine of a session whose KV goes through a running `kvtier serve`: the service's, reached
// on its socket; refused when the options also ask for tiers of its own or the service's layout
// is not the model's.
Result<std::unique_ptr<Engine>> ConnectToServer(const LlmSessionOptions& options,
                                                const KvLayout& layout, Logger* logger) {
  if (!options.cache_dir.empty() || !options.redis.empty() || options.host_bytes != 0 ||
      options.codec != "identity" || !options.ssd_key_file.empty() ||
      !options.remote_key_file.empty() || options.remote_insecure_plaintext ||
      !options.engine_settings.empty()) {
    return Status::InvalidArgument(
        "--server: the service owns the tiers; give no --cache-dir, --redis, --host-bytes or "
        "other cache engine option with it (they are the service's)");
  }
  serve::ClientOptions c{.name = "kvtier cli (pid " + std::to_string(::getpid()) + ")",
                         .logger = logger};
  c.socket_path = std::string_view(options.server).starts_with("unix:") ? options.server.substr(5)
                                                                        : options.server;
  if (!options.server_token_file.empty()) {
    KV_ASSIGN_OR_RETURN(c.token, ReadSecretFile(options.server_token_file, "--server-token-file"));
  }
  Result<std::unique_ptr<serve::RemoteEngine>> engine = serve::Connect(c);
  if (!engine.ok()) return ExplainConnectFailure(engine.status(), "--server-token-file");
  const KvLayout& served = (*engine)->options().layout;
  if (served.ToString() != layout.ToString()) {
    return Status::InvalidArgument("--server " + c.socket_path + " serves the layout " +
                                   served.ToString() + "; this model's (with --block-tokens) is " +
                                   layout.ToString());
  }
  return std::unique_ptr<Engine>(std::move(*engine));
}

}  // namespace

Status ApplyCacheOptions(const LlmSessionOptions& options, EngineOptions* o) {
  KV_ASSIGN_OR_RETURN(o->ssd_codec, codecs::ParseCodecParams(options.codec));
  if (!options.cache_dir.empty()) {
    SsdTierOptions& ssd =
        o->tiers.Emplace(kSsdTierName, SsdTierOptions{.dirs = {options.cache_dir},
                                                      .capacity_bytes = options.ssd_capacity_bytes,
                                                      .segment_bytes = kCacheSegmentBytes,
                                                      .sync = SsdSyncMode::kPeriodic});
    // Every stored block also reaches the SSD at once, so the next process finds it even if
    // this one is killed before closing the engine.
    o->write_policy = WritePolicy::kWriteThrough;
    if (!options.ssd_key_file.empty()) {
      KV_ASSIGN_OR_RETURN(ssd.keyring,
                          RemoteKeyring::LoadFile(options.ssd_key_file, "--ssd-key-file"));
    }
  } else if (!options.ssd_key_file.empty()) {
    return Status::InvalidArgument("--ssd-key-file needs --cache-dir");
  }
  if (!options.redis.empty()) {
    if (options.remote_key_file.empty() && !options.remote_insecure_plaintext) {
      return Status::InvalidArgument(
          "--redis needs --remote-key-file (deployment keys that encrypt and authenticate the "
          "values; docs/security.md), or --remote-insecure-plaintext for a Redis nobody else "
          "can reach");
    }
    RedisStoreOptions redis;
    Result<std::vector<std::string>> endpoints = SplitRedisEndpoints(options.redis);
    if (!endpoints.ok()) return endpoints.status().WithContext("--redis");
    redis.endpoints = std::move(*endpoints);
    if (!options.remote_key_file.empty()) {
      KV_ASSIGN_OR_RETURN(redis.keyring,
                          RemoteKeyring::LoadFile(options.remote_key_file, "--remote-key-file"));
    }
    redis.insecure_plaintext = options.remote_insecure_plaintext;
    o->remote.emplace().stores.Emplace(kRedisStoreName, std::move(redis));
  }
  KV_RETURN_IF_ERROR(ApplyEngineSettings(options, o));
  FsStoreOptions* fs =
      o->remote.has_value() ? o->remote->stores.Find<FsStoreOptions>(kFsStoreName) : nullptr;
  if (fs != nullptr) {
    if (!options.redis.empty()) {
      return Status::InvalidArgument("--fs-dir and --redis name two remote tiers; give one");
    }
    if (options.remote_key_file.empty() && !options.remote_insecure_plaintext) {
      return Status::InvalidArgument(
          "--fs-dir needs --remote-key-file (deployment keys that encrypt and authenticate the "
          "values; docs/security.md), or --remote-insecure-plaintext for a directory nobody "
          "else can read or write");
    }
    if (!options.remote_key_file.empty()) {
      KV_ASSIGN_OR_RETURN(fs->keyring,
                          RemoteKeyring::LoadFile(options.remote_key_file, "--remote-key-file"));
    }
    fs->insecure_plaintext = options.remote_insecure_plaintext;
  }
  return Status::Ok();
}

Result<std::unique_ptr<LlmSession>> LlmSession::Open(const LlmSessionOptions& options) {
  if (options.model_path.empty()) return Status::InvalidArgument("--model is required");
  // Before the model is loaded: a cache directory that cannot hold one segment is an error now,
  // not a run that reports chunks stored that never reach the disk.
  if (!options.cache_dir.empty() && options.server.empty()) {
    KV_RETURN_IF_ERROR(CheckCacheDirUsable(options.cache_dir, kCacheSegmentBytes));
  }
  KV_ASSIGN_OR_RETURN(runtime::LoadedModel loaded,
                      runtime::LoadModel(options.model_path, options.tokenizer_path));
  if (!loaded.tokenizer.has_value()) {
    return Status::InvalidArgument(options.model_path +
                                   ": a llama2.c checkpoint needs --tokenizer FILE");
  }
  std::unique_ptr<LlmSession> s(new LlmSession(options.log_level));
  s->model_path_ = options.model_path;
  s->tokenizer_ = std::move(*loaded.tokenizer);
  const Hash256 digest = WeightsDigest(loaded.weights);
  KV_ASSIGN_OR_RETURN(s->model_, runtime::Model::Create(std::move(loaded.weights)));
  const runtime::ModelConfig& config = s->model_->config();
  // The default is capped (kDefaultContextTokensMax) because the host tier is sized from the
  // context; the KV blocks themselves are allocated as the sequence grows.
  s->context_tokens_ = options.context_tokens != 0
                           ? options.context_tokens
                           : std::min(config.seq_len, kDefaultContextTokensMax);
  if (s->context_tokens_ == 0 || s->context_tokens_ > runtime::kContextTokensMax) {
    return Status::InvalidArgument("context of " + std::to_string(s->context_tokens_) +
                                   " tokens: give --context between 1 and " +
                                   std::to_string(runtime::kContextTokensMax));
  }
  if (s->context_tokens_ > config.seq_len) {
    s->logger_.Log(LogLevel::kWarn, "--context " + std::to_string(s->context_tokens_) +
                                        " exceeds the model's trained context of " +
                                        std::to_string(config.seq_len) +
                                        " tokens; quality may degrade");
  }
  const KvLayout layout = config.KvLayoutFor(options.block_tokens);
  KV_RETURN_IF_ERROR(layout.Validate().WithContext("--block-tokens"));
  if (!options.server.empty()) {
    KV_ASSIGN_OR_RETURN(s->engine_, ConnectToServer(options, layout, &s->logger_));
    // The service's model identity is its own: this model's weights keep its KV apart.
    const std::string weights = "kvtier-cli-weights:" + ToHex(digest);
    KV_ASSIGN_OR_RETURN(s->ns_, s->engine_->MakeNamespace(options.salt, std::span(&weights, 1)));
    s->via_server_ = true;
  } else {
    KV_ASSIGN_OR_RETURN(
        EngineOptions engine_options,
        MakeEngineOptions(options, layout, s->context_tokens_, digest, &s->logger_));
    KV_ASSIGN_OR_RETURN(s->engine_, Engine::Open(engine_options));
    KV_ASSIGN_OR_RETURN(s->ns_, s->engine_->MakeNamespace(options.salt));
  }
  KV_ASSIGN_OR_RETURN(s->kv_, runtime::InMemoryKvBlocks::Create(layout, s->context_tokens_));
  s->has_ssd_ = !options.cache_dir.empty();
  return s;
}

uint64_t LlmSession::KvMemoryBytes() const {
  uint64_t bytes = kv_->AllocatedBytes();
  for (const TierStats& tier : engine_->Stats().tiers) {
    if (tier.kind == TierKind::kHost) bytes += tier.capacity_bytes;
  }
  return bytes;
}

std::string LlmSession::Description() const {
  return model_path_ + " (" + model_->config().ToString() + "), context " +
         std::to_string(context_tokens_) + " tokens, KV cache: host" +
         (has_ssd_ ? " + SSD" : " only");
}

Result<runtime::CachedPrefillStats> LlmSession::Prefill(std::span<const uint32_t> tokens,
                                                        std::vector<float>* logits) {
  if (tokens.size() > context_tokens_) {
    return Status::NoSpace(std::to_string(tokens.size()) + " tokens exceed the context of " +
                           std::to_string(context_tokens_));
  }
  kv_->Clear();
  return runtime::CachedPrefill(*model_, *engine_, ns_, tokens, *kv_, {}, logits);
}

Result<LlmSession::CacheChunksStats> LlmSession::CacheChunks(
    std::span<const uint32_t> tokens, const std::function<bool(size_t)>& after_step) {
  if (tokens.size() > context_tokens_) {
    return Status::NoSpace(std::to_string(tokens.size()) + " tokens exceed the context of " +
                           std::to_string(context_tokens_));
  }
  const size_t block_tokens = kv_->Layout().block_tokens;
  CacheChunksStats st;
  st.chunks = tokens.size() / block_tokens;
  if (st.chunks == 0) return st;
  const std::span<const uint32_t> full = tokens.first(st.chunks * block_tokens);
  KV_ASSIGN_OR_RETURN(LookupResult hit, engine_->Lookup(ns_, full));
  st.present_chunks = hit.matched_tokens / block_tokens;
  if (st.present_chunks == st.chunks) return st;
  const size_t step_chunks = std::max<size_t>(1, kCacheStepTokens / block_tokens);
  const runtime::ForwardOptions no_logits{.logits = runtime::LogitsMode::kNone};
  std::vector<float> none;  // Forward clears it.
  kv_->Clear();
  // The first step goes through CachedPrefill, which loads the chunks found and computes the
  // step's after them; the later ones extend the sequence.
  size_t done = std::min(st.chunks, st.present_chunks + step_chunks);
  KV_ASSIGN_OR_RETURN(
      runtime::CachedPrefillStats first,
      runtime::CachedPrefill(*model_, *engine_, ns_, full.first(done * block_tokens), *kv_,
                             {.forward = no_logits}, &none));
  KV_RETURN_IF_ERROR(first.store_status);
  st.stored_chunks += first.stored_chunks;
  st.computed_tokens += first.computed_tokens;
  st.compute_us += first.compute_us;
  st.store_us += first.store_us;
  while (true) {
    const bool go_on = after_step(done * block_tokens);
    if (done == st.chunks) break;
    if (!go_on) {
      st.stopped = true;
      break;
    }
    const size_t next = std::min(st.chunks, done + step_chunks);
    const std::span<const uint32_t> step =
        full.subspan(done * block_tokens, (next - done) * block_tokens);
    const uint64_t t0 = SteadyNowUs();
    KV_RETURN_IF_ERROR(
        model_->Forward(step, static_cast<uint32_t>(done * block_tokens), *kv_, no_logits, &none));
    const uint64_t t1 = SteadyNowUs();
    st.computed_tokens += step.size();
    KV_ASSIGN_OR_RETURN(
        size_t stored,
        runtime::StoreKvChunks(*engine_, ns_, full.first(next * block_tokens), *kv_, {}));
    st.stored_chunks += stored;
    st.compute_us += t1 - t0;
    st.store_us += SteadyNowUs() - t1;
    done = next;
  }
  return st;
}

uint64_t LlmSession::SsdLiveBytes() {
  for (const TierStats& tier : engine_->Stats().tiers) {
    if (tier.kind == TierKind::kSsd) return tier.used_bytes;
  }
  return 0;
}

Status LlmSession::Step(uint32_t token, uint32_t pos, std::vector<float>* logits) {
  if (pos >= context_tokens_) {
    return Status::NoSpace("position " + std::to_string(pos) + " is past the context of " +
                           std::to_string(context_tokens_));
  }
  return model_->Forward(std::span<const uint32_t>(&token, 1), pos, *kv_, {}, logits);
}

Result<size_t> LlmSession::StoreSequence(std::span<const uint32_t> tokens) {
  return runtime::StoreKvChunks(*engine_, ns_, tokens, *kv_, {});
}

const char* LlmSession::StopName(Stop stop) {
  switch (stop) {
    case Stop::kMaxTokens:
      return "max_tokens";
    case Stop::kEndOfText:
      return "end_of_text";
    case Stop::kEndOfLine:
      return "end_of_line";
    case Stop::kContext:
      return "context";
  }
  return "unknown";
}

Result<LlmSession::Decoded> LlmSession::Decode(std::vector<uint32_t>& sequence,
                                               std::vector<float>& logits,
                                               runtime::Sampler& sampler,
                                               const DecodeOptions& options, std::FILE* out) {
  KV_CHECK(!sequence.empty());
  Decoded d;
  while (true) {
    if (d.tokens >= options.max_new_tokens) {
      d.stop = Stop::kMaxTokens;
      break;
    }
    if (sequence.size() >= context_tokens_) {
      d.stop = Stop::kContext;
      break;
    }
    const uint32_t token = sampler.Sample(logits);
    if (token == tokenizer_->bos_id() || token == tokenizer_->eos_id()) {
      d.stop = Stop::kEndOfText;
      break;
    }
    const std::string piece = tokenizer_->DecodeToken(sequence.back(), token);
    if (options.stop_at == StopAt::kEndOfLine && piece.find('\n') != std::string::npos) {
      d.stop = Stop::kEndOfLine;
      break;
    }
    std::fwrite(piece.data(), 1, piece.size(), out);
    std::fflush(out);
    sequence.push_back(token);
    ++d.tokens;
    const bool last = d.tokens == options.max_new_tokens || sequence.size() == context_tokens_;
    if (last && options.run_last == RunLast::kNo) {
      d.stop = d.tokens == options.max_new_tokens ? Stop::kMaxTokens : Stop::kContext;
      break;
    }
    KV_RETURN_IF_ERROR(Step(token, static_cast<uint32_t>(sequence.size() - 1), &logits));
  }
  return d;
}

std::string CachedTierList(const std::vector<TierKind>& tiers) {
  // Counts per tier, in the order tiers first appear.
  std::vector<std::pair<TierKind, size_t>> counts;
  for (TierKind t : tiers) {
    auto it =
        std::find_if(counts.begin(), counts.end(), [t](const auto& c) { return c.first == t; });
    if (it == counts.end()) {
      counts.emplace_back(t, 1);
    } else {
      ++it->second;
    }
  }
  std::string out;
  for (const auto& [tier, n] : counts) {
    if (!out.empty()) out += " + ";
    out += std::to_string(n) + " " + std::string(TierKindName(tier));
  }
  return out.empty() ? "-" : out;
}

double MsFromUs(uint64_t us) { return static_cast<double>(us) / 1000.0; }

uint64_t SteadyNowUs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace kvtier::cli
