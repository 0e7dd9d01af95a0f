// See bench_engine.h.
#include "bench_engine.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "byte_size.h"
#include "core/aligned_buffer.h"
#include "core/limits.h"
#include "core/logger.h"
#include "engine/engine.h"
#include "flags.h"
#include "interrupt.h"
#include "json_output.h"
#include "log_level.h"
#include "progress.h"
#include "serve/client.h"
#include "tiers/redis/redis_connection.h"
#include "tiers/redis/redis_options.h"
#include "tiers/remote_crypto.h"
#include "tiers/ssd/ssd_options.h"

namespace kvtier::cli {

struct BenchEngineReport {
  KvLayout layout;
  // Part 1: host tier put/get beside memcpy.
  uint64_t put_get_bytes = 0;
  uint32_t repeat = 0;
  double put_bytes_per_s = 0, get_bytes_per_s = 0, memcpy_bytes_per_s = 0;
  // Part 2: the trace.
  uint32_t sessions = 0, turns = 0, requests = 0;
  uint64_t trace_host_bytes = 0, ssd_bytes = 0, blocks_requested = 0;
  uint64_t host_hits = 0, ssd_hits = 0, remote_hits = 0;
  uint64_t host_evictions = 0, ssd_evictions = 0, host_writebacks = 0, remote_puts = 0;
  uint64_t store_blocks = 0;
  // Bytes of the records the SSD tier wrote during the trace, and of those the bytes it copied
  // into its own staging buffers first (0: every record went from the engine's encode buffer).
  uint64_t ssd_write_bytes = 0, ssd_staged_write_bytes = 0;
  uint64_t store_busy_retries = 0;  // Stores tried again after Busy (write-back in progress).
  double load_ms_median = 0, store_ms_median = 0, request_ms_median = 0;
  bool remote = false;
  uint64_t remote_put_errors = 0;
  // --server: part 1 through the service.
  std::string server;
  double service_put_bytes_per_s = 0, service_get_bytes_per_s = 0;
  // The median over rounds of (in-process time / service time), each round's pair measured back
  // to back: steadier than the ratio of the two medians when the machine's speed drifts.
  double service_put_paired = 0, service_get_paired = 0;
  std::optional<RemoteTierOptions> remote_tier;  // From --redis, checked before anything runs.
  // Part 3: after a restart, Pin of each session's first turn (its blocks only on the SSD)
  // beside Load of the same blocks, each from a freshly reopened engine.
  std::string trace_namespace;                     // The trace's namespace name (its salt).
  std::vector<std::vector<uint32_t>> first_turns;  // Each session's first turn, whole chunks.
  uint32_t pin_sessions = 0;  // Sessions of which Pin found at least one chunk.
  uint64_t pin_blocks = 0;    // Blocks pinned per session (median).
  double pin_ms_median = 0, pin_load_ms_median = 0;  // Over sessions.
  double pin_over_load_paired = 0;                   // Median over sessions of pin / load time.
  // Part 4: write-through Stores of each session's first turn to an empty SSD directory.
  uint32_t through_sessions = 0;
  uint64_t through_blocks = 0;  // Per session.
  double through_ms_median = 0, through_bytes_per_s = 0;
  uint64_t through_write_bytes = 0, through_staged_write_bytes = 0;
};

namespace {

// The median over rounds of base[r] / other[r]: how fast `other` ran against `base` (times).
double PairedRatio(const std::vector<double>& base, const std::vector<double>& other) {
  std::vector<double> ratios;
  for (size_t r = 0; r < std::min(base.size(), other.size()); ++r) {
    ratios.push_back(base[r] / std::max(other[r], 1e-9));
  }
  return ratios.empty() ? 0 : Median(ratios);
}

// A trace Store that stays Busy this many times in a row (a millisecond apart) fails the run.
constexpr uint32_t kStoreBusyRetriesMax = 10'000;

// Fills `out` with bytes from `rng` (incompressible, like a codec-less block).
void FillRandom(std::mt19937_64& rng, std::span<std::byte> out) {
  size_t i = 0;
  for (; i + 8 <= out.size(); i += 8) {
    const uint64_t x = rng();
    std::memcpy(out.data() + i, &x, 8);
  }
  for (; i < out.size(); ++i) out[i] = static_cast<std::byte>(rng());
}

std::vector<uint32_t> RandomTokens(std::mt19937_64& rng, size_t n) {
  std::vector<uint32_t> t(n);
  for (uint32_t& x : t) x = static_cast<uint32_t>(rng() % 32000);
  return t;
}

// `count` buffers of `bytes` each, touched so that no page fault lands in a measurement.
Result<std::vector<AlignedBuffer>> Buffers(size_t count, uint64_t bytes) {
  std::vector<AlignedBuffer> out;
  out.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    KV_ASSIGN_OR_RETURN(AlignedBuffer b, AlignedBuffer::Allocate(bytes));
    std::memset(b.data(), 0, b.size());
    out.push_back(std::move(b));
  }
  return out;
}

template <typename T>
std::vector<std::span<T>> Spans(std::vector<AlignedBuffer>& buffers, size_t first, size_t n,
                                uint64_t bytes) {
  std::vector<std::span<T>> out;
  for (size_t i = first; i < first + n; ++i) {
    out.emplace_back(reinterpret_cast<T*>(buffers[i].data()), bytes);
  }
  return out;
}

const TierStats* FindTier(const EngineStats& s, TierKind kind) {
  for (const TierStats& t : s.tiers) {
    if (t.kind == kind) return &t;
  }
  return nullptr;
}

uint64_t Delta(const EngineStats& before, const EngineStats& after, TierKind kind,
               uint64_t TierStats::*field) {
  const TierStats* a = FindTier(after, kind);
  const TierStats* b = FindTier(before, kind);
  if (a == nullptr) return 0;
  return a->*field - (b == nullptr ? 0 : b->*field);
}

double Ratio(uint64_t part, uint64_t whole) {
  return whole == 0 ? 0 : static_cast<double>(part) / static_cast<double>(whole);
}

// Copies of a block's bytes on their way to the SSD: the encode out of its memory slot, plus the
// share of the SSD tier's records it copied again into its own staging buffers.
double CopiesBeforeDisk(uint64_t write_bytes, uint64_t staged_write_bytes) {
  if (write_bytes == 0) return 0;
  return 1.0 + Ratio(staged_write_bytes, write_bytes);
}

// The Redis tier of --redis: endpoints checked, keys from --remote-key-file, $KVTIER_REMOTE_KEY or
// a fresh key for the run; password from $KVTIER_REDIS_PASSWORD. Nothing without --redis.
Result<std::optional<RemoteTierOptions>> RedisTier(const std::string& list,
                                                   const std::string& key_file) {
  if (list.empty()) return std::optional<RemoteTierOptions>();
  RedisStoreOptions redis;
  Result<std::vector<std::string>> endpoints = SplitRedisEndpoints(list);
  if (!endpoints.ok()) return endpoints.status().WithContext("--redis");
  for (const std::string& e : *endpoints) {
    if (Result<RedisEndpoint> parsed = ParseRedisEndpoint(e); !parsed.ok()) {
      return parsed.status().WithContext("--redis");
    }
  }
  redis.endpoints = std::move(*endpoints);
  if (!key_file.empty()) {
    KV_ASSIGN_OR_RETURN(redis.keyring, RemoteKeyring::LoadFile(key_file, "--remote-key-file"));
  } else if (const char* text = std::getenv("KVTIER_REMOTE_KEY"); text != nullptr) {
    Result<RemoteKeyring> ring = RemoteKeyring::Parse(text);
    if (!ring.ok()) return ring.status().WithContext("$KVTIER_REMOTE_KEY");
    redis.keyring = std::move(ring).value();
  } else {
    KV_ASSIGN_OR_RETURN(const std::string fresh, RemoteKeyring::GenerateText(1));
    KV_ASSIGN_OR_RETURN(redis.keyring, RemoteKeyring::Parse(fresh));
  }
  if (const char* pw = std::getenv("KVTIER_REDIS_PASSWORD"); pw != nullptr) redis.password = pw;
  return std::optional<RemoteTierOptions>(
      RemoteTierOptions{.stores = TierOptionsSet::Of(kRedisStoreName, std::move(redis))});
}

// The share of the blocks asked that each tier served.
struct HitRatios {
  double host, ssd, remote;
};

HitRatios Hits(const BenchEngineReport& r) {
  return {.host = Ratio(r.host_hits, r.blocks_requested),
          .ssd = Ratio(r.ssd_hits, r.blocks_requested),
          .remote = Ratio(r.remote_hits, r.blocks_requested)};
}

void PrintText(const BenchEngineReport& r) {
  const double block = static_cast<double>(r.layout.BlockBytes());
  const auto [hit_host, hit_ssd, hit_remote] = Hits(r);
  std::printf("engine host tier, %s, %s per round, medians of %u\n", r.layout.ToString().c_str(),
              Progress::FormatBytes(static_cast<double>(r.put_get_bytes)).c_str(), r.repeat);
  std::printf("put (Store)        %8.0f MB/s  %.2fx memcpy\n", r.put_bytes_per_s / 1e6,
              r.put_bytes_per_s / r.memcpy_bytes_per_s);
  std::printf("get (Lookup+Load)  %8.0f MB/s  %.2fx memcpy\n", r.get_bytes_per_s / 1e6,
              r.get_bytes_per_s / r.memcpy_bytes_per_s);
  std::printf("memcpy             %8.0f MB/s\n", r.memcpy_bytes_per_s / 1e6);
  if (!r.server.empty()) {
    std::printf("service put        %8.0f MB/s  %.2fx the in-process engine\n",
                r.service_put_bytes_per_s / 1e6, r.service_put_bytes_per_s / r.put_bytes_per_s);
    std::printf("service get        %8.0f MB/s  %.2fx the in-process engine\n",
                r.service_get_bytes_per_s / 1e6, r.service_get_bytes_per_s / r.get_bytes_per_s);
    std::printf("service/in-process per round (median)  put %.2fx  get %.2fx\n",
                r.service_put_paired, r.service_get_paired);
  }
  std::printf("trace: %u sessions x %u turns, host tier %s, SSD tier %s%s\n", r.sessions, r.turns,
              Progress::FormatBytes(static_cast<double>(r.trace_host_bytes)).c_str(),
              Progress::FormatBytes(static_cast<double>(r.ssd_bytes)).c_str(),
              r.remote ? ", Redis tier" : "");
  std::printf("hit ratio  host %.3f  ssd %.3f", hit_host, hit_ssd);
  if (r.remote) std::printf("  remote %.3f", hit_remote);
  std::printf("  (of %llu blocks asked)\n", static_cast<unsigned long long>(r.blocks_requested));
  std::printf("bytes      host<-ssd %s  ssd<-host %s",
              Progress::FormatBytes(block * static_cast<double>(r.ssd_hits)).c_str(),
              Progress::FormatBytes(block * static_cast<double>(r.host_writebacks)).c_str());
  if (r.remote) {
    std::printf("  host<-remote %s  remote<-engine %s",
                Progress::FormatBytes(block * static_cast<double>(r.remote_hits)).c_str(),
                Progress::FormatBytes(block * static_cast<double>(r.remote_puts)).c_str());
  }
  if (r.remote) {
    std::printf("  (%llu failed puts)", static_cast<unsigned long long>(r.remote_put_errors));
  }
  std::printf("\nevictions  host %llu  ssd %llu\n",
              static_cast<unsigned long long>(r.host_evictions),
              static_cast<unsigned long long>(r.ssd_evictions));
  std::printf("ssd writes %s, %s of them copied by the tier: %.2f copies before the disk\n",
              Progress::FormatBytes(static_cast<double>(r.ssd_write_bytes)).c_str(),
              Progress::FormatBytes(static_cast<double>(r.ssd_staged_write_bytes)).c_str(),
              CopiesBeforeDisk(r.ssd_write_bytes, r.ssd_staged_write_bytes));
  std::printf("per request (medians)  lookup+load %.2f ms  store %.2f ms  total %.2f ms\n",
              r.load_ms_median, r.store_ms_median, r.request_ms_median);
  std::printf(
      "after a restart, %llu blocks from the SSD (medians over sessions)  pin %.2f ms  "
      "load %.2f ms  pin/load %.2fx\n",
      static_cast<unsigned long long>(r.pin_blocks), r.pin_ms_median, r.pin_load_ms_median,
      r.pin_over_load_paired);
  std::printf(
      "store to the SSD, write-through, %llu blocks (medians over sessions)  %.2f ms  "
      "%s/s  %.2f copies before the disk\n",
      static_cast<unsigned long long>(r.through_blocks), r.through_ms_median,
      Progress::FormatBytes(r.through_bytes_per_s).c_str(),
      CopiesBeforeDisk(r.through_write_bytes, r.through_staged_write_bytes));
}

// The report's "trace" object.
nlohmann::ordered_json TraceJson(const BenchEngineReport& r) {
  const auto [hit_host, hit_ssd, hit_remote] = Hits(r);
  nlohmann::ordered_json t;
  t["sessions"] = r.sessions;
  t["turns"] = r.turns;
  t["requests"] = r.requests;
  t["host_bytes"] = r.trace_host_bytes;
  t["ssd_bytes"] = r.ssd_bytes;
  t["blocks_requested"] = r.blocks_requested;
  t["blocks_stored"] = r.store_blocks;
  t["store_busy_retries"] = r.store_busy_retries;
  nlohmann::ordered_json hit;
  hit["host"] = hit_host;
  hit["ssd"] = hit_ssd;
  if (r.remote) hit["remote"] = hit_remote;
  hit["miss"] = 1.0 - hit_host - hit_ssd - hit_remote;
  t["hit_ratio"] = hit;
  nlohmann::ordered_json bytes;
  bytes["host_from_ssd"] = r.ssd_hits * r.layout.BlockBytes();
  bytes["ssd_from_host"] = r.host_writebacks * r.layout.BlockBytes();
  if (r.remote) {
    bytes["host_from_remote"] = r.remote_hits * r.layout.BlockBytes();
    bytes["remote_from_engine"] = r.remote_puts * r.layout.BlockBytes();
  }
  t["bytes"] = bytes;
  nlohmann::ordered_json ev;
  ev["host"] = r.host_evictions;
  ev["ssd"] = r.ssd_evictions;
  t["evictions"] = ev;
  t["ssd_write_bytes"] = r.ssd_write_bytes;
  t["ssd_staged_write_bytes"] = r.ssd_staged_write_bytes;
  t["copies_before_disk"] = CopiesBeforeDisk(r.ssd_write_bytes, r.ssd_staged_write_bytes);
  if (r.remote) t["remote_put_errors"] = r.remote_put_errors;
  t["load_ms_median"] = r.load_ms_median;
  t["store_ms_median"] = r.store_ms_median;
  t["request_ms_median"] = r.request_ms_median;
  return t;
}

void PrintJson(const BenchEngineReport& r) {
  nlohmann::ordered_json j;
  j["layout"] = r.layout.ToString();
  j["block_bytes"] = r.layout.BlockBytes();
  nlohmann::ordered_json h;
  h["bytes"] = r.put_get_bytes;
  h["repeat"] = r.repeat;
  h["put_bytes_per_s"] = r.put_bytes_per_s;
  h["get_bytes_per_s"] = r.get_bytes_per_s;
  h["memcpy_bytes_per_s"] = r.memcpy_bytes_per_s;
  h["put_over_memcpy"] = r.put_bytes_per_s / r.memcpy_bytes_per_s;
  h["get_over_memcpy"] = r.get_bytes_per_s / r.memcpy_bytes_per_s;
  j["host"] = h;
  if (!r.server.empty()) {
    nlohmann::ordered_json sv;
    sv["socket"] = r.server;
    sv["put_bytes_per_s"] = r.service_put_bytes_per_s;
    sv["get_bytes_per_s"] = r.service_get_bytes_per_s;
    sv["put_over_engine"] = r.service_put_bytes_per_s / r.put_bytes_per_s;
    sv["get_over_engine"] = r.service_get_bytes_per_s / r.get_bytes_per_s;
    sv["put_over_engine_paired"] = r.service_put_paired;
    sv["get_over_engine_paired"] = r.service_get_paired;
    j["service"] = sv;
  }
  j["trace"] = TraceJson(r);
  nlohmann::ordered_json pin;
  pin["sessions"] = r.pin_sessions;
  pin["blocks"] = r.pin_blocks;
  pin["pin_ms_median"] = r.pin_ms_median;
  pin["load_ms_median"] = r.pin_load_ms_median;
  pin["pin_over_load_paired"] = r.pin_over_load_paired;
  j["pin_after_restart"] = pin;
  nlohmann::ordered_json through;
  through["sessions"] = r.through_sessions;
  through["blocks"] = r.through_blocks;
  through["store_ms_median"] = r.through_ms_median;
  through["store_bytes_per_s"] = r.through_bytes_per_s;
  through["ssd_write_bytes"] = r.through_write_bytes;
  through["ssd_staged_write_bytes"] = r.through_staged_write_bytes;
  through["copies_before_disk"] =
      CopiesBeforeDisk(r.through_write_bytes, r.through_staged_write_bytes);
  j["store_to_ssd"] = through;
  std::printf("%s\n", JsonText(j, 2).c_str());
}

void Print(const BenchEngineReport& r, bool json) {
  if (json) {
    PrintJson(r);
  } else {
    PrintText(r);
  }
}

// The trace's engine: the host tier of `host_bytes`, the SSD tier of report.ssd_bytes in
// scratch/ssd, `policy` (write-back for the trace), and the report's remote tier when it has one.
// `logger` must outlive it.
Result<std::unique_ptr<Engine>> OpenTraceEngine(const BenchEngineReport& report,
                                                uint64_t host_bytes, const std::string& scratch,
                                                Logger* logger,
                                                WritePolicy policy = WritePolicy::kWriteBack) {
  EngineOptions o;
  o.layout = report.layout;
  o.model = {.name = "kvtier-bench-engine"};
  o.host.capacity_bytes = host_bytes;
  o.device_backend = DeviceBackend::kCpu;
  o.tiers.Emplace(kSsdTierName, SsdTierOptions{.dirs = {scratch + "/ssd"},
                                               .capacity_bytes = report.ssd_bytes,
                                               .segment_bytes = 16 * kMiB});
  o.write_policy = policy;
  o.logger = logger;
  o.remote = report.remote_tier;
  return Engine::Open(o);
}

// One turn's Store of the chunks from `first_chunk` on. Busy: the host tier's victims are being
// written back by the engine's cleaner; tried again after a millisecond, for at most
// kStoreBusyRetriesMax times (each counted in *retries).
Result<std::unique_ptr<StoreHandle>> StoreRetryingBusy(
    Engine& engine, const Namespace& ns, std::span<const uint32_t> prompt,
    std::span<const std::span<const std::byte>> src, size_t first_chunk, uint64_t* retries) {
  Result<std::unique_ptr<StoreHandle>> h = Status::Busy("not tried");
  for (uint32_t attempt = 0; attempt <= kStoreBusyRetriesMax; ++attempt) {
    if (attempt != 0) {
      ++*retries;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    h = engine.Store(ns, prompt, src, StoreOptions{.first_chunk = first_chunk});
    if (!h.status().IsBusy() || Interrupted()) break;
  }
  return h;
}

// The trace's tier counters: what the engine's statistics gained from `before` to `after`.
void CountTrace(const EngineStats& before, const EngineStats& after, BenchEngineReport* report) {
  report->host_hits = Delta(before, after, TierKind::kHost, &TierStats::hits);
  report->ssd_hits = Delta(before, after, TierKind::kSsd, &TierStats::hits);
  report->remote_hits = Delta(before, after, TierKind::kRemote, &TierStats::hits);
  report->host_evictions = Delta(before, after, TierKind::kHost, &TierStats::evictions);
  report->ssd_evictions = Delta(before, after, TierKind::kSsd, &TierStats::evictions);
  report->host_writebacks = Delta(before, after, TierKind::kHost, &TierStats::writebacks);
  report->remote_puts = Delta(before, after, TierKind::kRemote, &TierStats::writebacks);
  report->remote_put_errors = after.remote_put_errors - before.remote_put_errors;
  report->store_blocks = after.store_blocks - before.store_blocks;
  report->ssd_write_bytes = Delta(before, after, TierKind::kSsd, &TierStats::write_bytes);
  report->ssd_staged_write_bytes =
      Delta(before, after, TierKind::kSsd, &TierStats::staged_write_bytes);
}

}  // namespace

// Part 1 through the service (--server): one connection, Store and Lookup + Load from buffers in
// its shared staging, a round after each of the in-process engine's rounds (so both see the
// machine in the same state).
struct ServiceBench {
  std::unique_ptr<serve::RemoteEngine> engine;
  Namespace ns;
  std::span<std::byte> area;
  std::vector<std::span<const std::byte>> src;
  std::vector<std::span<std::byte>> dst;
  size_t chunks = 0;
  std::mt19937_64 rng;
  std::vector<double> put_s, get_s;

  ~ServiceBench() {
    if (engine != nullptr && !area.empty()) engine->ReleaseStaging(area);
  }

  Status Round() {
    const KvLayout& layout = engine->options().layout;
    const std::vector<uint32_t> tokens = RandomTokens(rng, chunks * layout.block_tokens);
    const Stopwatch pw;
    KV_ASSIGN_OR_RETURN(std::unique_ptr<StoreHandle> h, engine->Store(ns, tokens, src, {}));
    KV_RETURN_IF_ERROR(h->Wait());
    put_s.push_back(pw.Seconds());
    if (h->chunks_stored() != chunks) {
      return Status::Aborted("the service stored " + std::to_string(h->chunks_stored()) + " of " +
                             std::to_string(chunks) + " chunks (is its host tier large enough?)");
    }
    const Stopwatch gw;
    KV_ASSIGN_OR_RETURN(const LookupResult hit, engine->Lookup(ns, tokens));
    if (hit.matched_tokens != tokens.size()) {
      return Status::Aborted("the service found " + std::to_string(hit.matched_tokens) + " of " +
                             std::to_string(tokens.size()) + " tokens just stored");
    }
    KV_ASSIGN_OR_RETURN(std::unique_ptr<LoadHandle> l, engine->Load(ns, tokens, dst));
    KV_RETURN_IF_ERROR(l->Wait());
    get_s.push_back(gw.Seconds());
    if (std::memcmp(dst.back().data(), src.back().data(), layout.BlockBytes()) != 0) {
      return Status::Corruption("a block loaded through the service differs from the stored one");
    }
    return Status::Ok();
  }
};

BenchEngine::BenchEngine(CLI::App* bench)
    : app_(bench->add_subcommand(
          "engine",
          "Host tier put/get beside memcpy, a multi-turn chat trace replayed "
          "through host + SSD (+ Redis) tiers, and Pin beside Load after a restart")) {
  app_->add_option("--layers", layers_, "Layers of the KV layout (default 4)")
      ->check(WholeNumber(1, kLayersMax));
  app_->add_option("--kv-heads", kv_heads_, "KV heads (default 8)")
      ->check(WholeNumber(1, kKvHeadsMax));
  app_->add_option("--head-dim", head_dim_, "Elements per head (default 128)")
      ->check(WholeNumber(1, kHeadDimMax));
  app_->add_option("--block-tokens", block_tokens_,
                   "Tokens per block, a multiple of 16 in 16..1024 (default 256)")
      ->check(BlockTokens());
  app_->add_option("--put-bytes", put_text_,
                   "Bytes stored and loaded per round of the host tier test (default 256MiB)")
      ->check(ByteSize(1, 64 * kGiB));
  app_->add_option("--repeat", repeat_, "Rounds of the host tier test (default 5)")
      ->check(WholeNumber(1, 1000));
  app_->add_option("--sessions", sessions_, "Conversations in the trace (default 4)")
      ->check(WholeNumber(1, 4096));
  app_->add_option("--turns", turns_, "Turns per conversation (default 4)")
      ->check(WholeNumber(1, 4096));
  app_->add_option("--first-tokens", first_tokens_, "Tokens of a first turn (default 2048)")
      ->check(WholeNumber(1, 1u << 24));
  app_->add_option("--turn-tokens", turn_tokens_, "Tokens each later turn adds (default 1024)")
      ->check(WholeNumber(1, 1u << 24));
  app_->add_option("--trace-host-bytes", trace_host_text_,
                   "Host tier of the trace (default: a quarter of the trace's KV, at least "
                   "twice the largest turn)")
      ->check(ByteSize(1, 1ull << 40));
  app_->add_option("--ssd-bytes", ssd_text_, "SSD tier capacity of the trace (default 4GiB)")
      ->check(ByteSize(64 * kMiB, 1ull << 40));
  app_->add_option("--dir", dir_,
                   "Where the SSD tier's scratch directory is made (default $TMPDIR or /tmp); "
                   "removed at the end");
  app_->add_option("--redis", redis_, "host:port[,host:port...] of a Redis tier for the trace");
  app_->add_option("--remote-key-file", key_file_,
                   "Deployment keys for --redis (mode 0600); else $KVTIER_REMOTE_KEY; else a "
                   "fresh key");
  app_->add_option("--seed", seed_, "Seed of the tokens and block bytes (default 1)");
  app_->add_option("--server", server_,
                   "Socket of a kvtier service (kvtier serve): the host put/get also runs "
                   "through it, beside the in-process engine (the layout is then the service's)");
  app_->add_flag("--json", json_, "Print one JSON object");
}

Status BenchEngine::RunPutGet(BenchEngineReport* report) {
  const KvLayout& layout = report->layout;
  const uint64_t block = layout.BlockBytes();
  KV_ASSIGN_OR_RETURN(const uint64_t put_bytes, ParseBytes("--put-bytes", put_text_));
  const uint64_t chunk_bytes = block * layout.layers;
  const size_t chunks = std::max<uint64_t>(1, put_bytes / chunk_bytes);
  const size_t blocks = chunks * layout.layers;
  report->put_get_bytes = blocks * block;
  report->repeat = repeat_;
  std::mt19937_64 rng(seed_);
  KV_ASSIGN_OR_RETURN(std::vector<AlignedBuffer> src, Buffers(blocks, block));
  KV_ASSIGN_OR_RETURN(std::vector<AlignedBuffer> dst, Buffers(blocks, block));
  for (AlignedBuffer& b : src) FillRandom(rng, {b.data(), b.size()});
  const std::vector<std::span<const std::byte>> src_spans =
      Spans<const std::byte>(src, 0, blocks, block);
  const std::vector<std::span<std::byte>> dst_spans = Spans<std::byte>(dst, 0, blocks, block);
  StderrLogger logger(CliLogLevel());
  std::vector<double> put_s, get_s, copy_s;
  Progress progress("bench engine: host put/get", repeat_, ProgressUnit::kCount, "rounds");
  for (uint32_t r = 0; r < repeat_; ++r) {
    if (Interrupted()) return Status::Aborted("interrupted");
    // The service's round goes first every other round, so that neither side always follows the
    // other.
    if (service_ != nullptr && r % 2 == 1) KV_RETURN_IF_ERROR(service_->Round());
    EngineOptions o;
    o.layout = layout;
    o.model = {.name = "kvtier-bench-engine"};
    o.host.capacity_bytes = (blocks + 2) * block;
    o.device_backend = DeviceBackend::kCpu;
    o.logger = &logger;
    KV_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Open(o));
    KV_ASSIGN_OR_RETURN(const Namespace ns, engine->MakeNamespace("bench"));
    const std::vector<uint32_t> tokens = RandomTokens(rng, chunks * layout.block_tokens);
    {
      const Stopwatch w;
      KV_ASSIGN_OR_RETURN(std::unique_ptr<StoreHandle> h, engine->Store(ns, tokens, src_spans));
      KV_RETURN_IF_ERROR(h->Wait());
      put_s.push_back(w.Seconds());
      if (h->chunks_stored() != chunks) {
        return Status::Aborted("the engine stored " + std::to_string(h->chunks_stored()) + " of " +
                               std::to_string(chunks) + " chunks");
      }
    }
    {
      const Stopwatch w;
      KV_ASSIGN_OR_RETURN(const LookupResult hit, engine->Lookup(ns, tokens));
      if (hit.matched_tokens != tokens.size()) {
        return Status::Aborted("Lookup found " + std::to_string(hit.matched_tokens) + " of " +
                               std::to_string(tokens.size()) + " tokens just stored");
      }
      KV_ASSIGN_OR_RETURN(std::unique_ptr<LoadHandle> h, engine->Load(ns, tokens, dst_spans));
      KV_RETURN_IF_ERROR(h->Wait());
      get_s.push_back(w.Seconds());
    }
    if (std::memcmp(dst.back().data(), src.back().data(), block) != 0) {
      return Status::Corruption("a loaded block differs from the stored one");
    }
    {
      const Stopwatch w;
      for (size_t b = 0; b < blocks; ++b) std::memcpy(dst[b].data(), src[b].data(), block);
      copy_s.push_back(w.Seconds());
    }
    if (service_ != nullptr && r % 2 == 0) KV_RETURN_IF_ERROR(service_->Round());
    progress.Add(1);
  }
  progress.Finish();
  const double bytes = static_cast<double>(report->put_get_bytes);
  report->put_bytes_per_s = bytes / std::max(Median(put_s), 1e-9);
  report->get_bytes_per_s = bytes / std::max(Median(get_s), 1e-9);
  report->memcpy_bytes_per_s = bytes / std::max(Median(copy_s), 1e-9);
  if (service_ != nullptr) {
    report->service_put_bytes_per_s = bytes / std::max(Median(service_->put_s), 1e-9);
    report->service_get_bytes_per_s = bytes / std::max(Median(service_->get_s), 1e-9);
    report->service_put_paired = PairedRatio(put_s, service_->put_s);
    report->service_get_paired = PairedRatio(get_s, service_->get_s);
  }
  return Status::Ok();
}

BenchEngine::~BenchEngine() = default;

// Connects to --server; its layout becomes the run's.
Status BenchEngine::ConnectService(BenchEngineReport* report) {
  logger_ = std::make_unique<StderrLogger>(CliLogLevel());
  serve::ClientOptions co;
  co.socket_path = server_;
  co.name = "kvtier bench engine";
  co.timeout_ms = 600'000;
  co.logger = logger_.get();
  auto sb = std::make_unique<ServiceBench>();
  KV_ASSIGN_OR_RETURN(sb->engine, serve::Connect(co));
  report->server = server_;
  report->layout = sb->engine->options().layout;
  const KvLayout& layout = report->layout;
  const uint64_t block = layout.BlockBytes();
  KV_ASSIGN_OR_RETURN(const uint64_t put_bytes, ParseBytes("--put-bytes", put_text_));
  sb->chunks = std::max<uint64_t>(1, put_bytes / (block * layout.layers));
  const size_t blocks = sb->chunks * layout.layers;
  Result<std::span<std::byte>> area = sb->engine->AcquireStaging(2 * blocks * block);
  if (!area.ok()) {
    return Status(area.status().code(), "--server: staging for " + std::to_string(2 * blocks) +
                                            " blocks: " + area.status().message() +
                                            " (lower --put-bytes)");
  }
  sb->area = *area;
  for (size_t b = 0; b < blocks; ++b) {
    sb->src.push_back(area->subspan(b * block, block));
    sb->dst.push_back(area->subspan((blocks + b) * block, block));
  }
  sb->rng.seed(seed_ ^ 0x5e7e);
  FillRandom(sb->rng, area->first(blocks * block));
  std::memset(area->data() + blocks * block, 0, blocks * block);
  // A namespace of this run's own: the service may hold an earlier run's blocks.
  std::random_device entropy;
  KV_ASSIGN_OR_RETURN(sb->ns, sb->engine->MakeNamespace("bench-" + std::to_string(entropy()) + "-" +
                                                        std::to_string(entropy())));
  service_ = std::move(sb);
  return Status::Ok();
}

// The trace's host tier: --trace-host-bytes, or a quarter of the trace's KV but at least twice
// the largest Store. InvalidArgument when it cannot take one turn's blocks (a Store is all or
// nothing).
Result<uint64_t> BenchEngine::TraceHostBytes(const KvLayout& layout) const {
  const uint64_t chunk_bytes = layout.BlockBytes() * layout.layers;
  const uint64_t final_tokens = first_tokens_ + uint64_t{turns_ - 1} * turn_tokens_;
  const uint64_t trace_bytes =
      uint64_t{sessions_} * (final_tokens / layout.block_tokens) * chunk_bytes;
  // The largest Store takes a first turn's chunks (or a later turn's, plus the partial chunk the
  // turn before left).
  const uint64_t largest_store =
      ((std::max(first_tokens_, turn_tokens_) + layout.block_tokens - 1) / layout.block_tokens +
       1) *
      chunk_bytes;
  if (trace_host_text_.empty()) return std::max(trace_bytes / 4, 2 * largest_store);
  KV_ASSIGN_OR_RETURN(const uint64_t host_bytes,
                      ParseBytes("--trace-host-bytes", trace_host_text_));
  if (host_bytes < largest_store) {
    return Status::InvalidArgument("--trace-host-bytes: " + std::to_string(host_bytes) +
                                   " is less than the largest turn's "
                                   "KV (" +
                                   std::to_string(largest_store) +
                                   " bytes); raise it or lower --first-tokens / "
                                   "--turn-tokens");
  }
  return host_bytes;
}

Status BenchEngine::RunTrace(const std::string& scratch, BenchEngineReport* report) {
  const KvLayout& layout = report->layout;
  const uint64_t block = layout.BlockBytes();
  const uint64_t final_tokens = first_tokens_ + uint64_t{turns_ - 1} * turn_tokens_;
  const uint64_t host_bytes = report->trace_host_bytes;
  KV_ASSIGN_OR_RETURN(const uint64_t ssd_bytes, ParseBytes("--ssd-bytes", ssd_text_));
  report->sessions = sessions_;
  report->turns = turns_;
  report->ssd_bytes = ssd_bytes;
  StderrLogger logger(CliLogLevel());
  KV_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                      OpenTraceEngine(*report, host_bytes, scratch, &logger));
  // Every run gets its own salt, so a shared Redis never serves a previous run's blocks.
  std::mt19937_64 rng(seed_ + 7);
  report->trace_namespace = "bench-" + std::to_string(std::random_device{}());
  KV_ASSIGN_OR_RETURN(const Namespace ns, engine->MakeNamespace(report->trace_namespace));
  const size_t max_blocks = (final_tokens / layout.block_tokens) * layout.layers;
  KV_ASSIGN_OR_RETURN(std::vector<AlignedBuffer> buffers, Buffers(max_blocks, block));
  std::vector<std::vector<uint32_t>> prompts(sessions_);
  std::vector<double> load_ms, store_ms, request_ms;
  const EngineStats before = engine->Stats();
  Progress progress("bench engine: trace", uint64_t{sessions_} * turns_, ProgressUnit::kCount,
                    "requests");
  for (uint32_t turn = 0; turn < turns_; ++turn) {
    for (uint32_t s = 0; s < sessions_; ++s) {
      if (Interrupted()) return Status::Aborted("interrupted");
      std::vector<uint32_t>& prompt = prompts[s];
      const std::vector<uint32_t> added =
          RandomTokens(rng, turn == 0 ? first_tokens_ : turn_tokens_);
      prompt.insert(prompt.end(), added.begin(), added.end());
      const size_t full = prompt.size() / layout.block_tokens;
      report->blocks_requested += full * layout.layers;
      const Stopwatch request;
      KV_ASSIGN_OR_RETURN(const LookupResult hit,
                          engine->Lookup(ns, prompt, LookupOptions{.session_id = s + 1}));
      const size_t cached = hit.matched_tokens / layout.block_tokens;
      if (cached > 0) {
        KV_ASSIGN_OR_RETURN(
            std::unique_ptr<LoadHandle> h,
            engine->Load(ns, prompt, Spans<std::byte>(buffers, 0, cached * layout.layers, block)));
        KV_RETURN_IF_ERROR(h->Wait());
      }
      load_ms.push_back(request.Seconds() * 1e3);
      if (full > cached) {
        // The new chunks' KV, as a prefill would compute it (not timed).
        for (size_t b = cached * layout.layers; b < full * layout.layers; ++b) {
          FillRandom(rng, {buffers[b].data(), buffers[b].size()});
        }
        const double before_store = request.Seconds();
        Result<std::unique_ptr<StoreHandle>> h =
            StoreRetryingBusy(*engine, ns, prompt,
                              Spans<const std::byte>(buffers, cached * layout.layers,
                                                     (full - cached) * layout.layers, block),
                              cached, &report->store_busy_retries);
        KV_RETURN_IF_ERROR(h.status());
        KV_RETURN_IF_ERROR((*h)->Wait());
        store_ms.push_back((request.Seconds() - before_store) * 1e3);
        request_ms.push_back(load_ms.back() + store_ms.back());
      } else {
        request_ms.push_back(load_ms.back());
      }
      ++report->requests;
      progress.Add(1);
    }
  }
  progress.Finish();
  CountTrace(before, engine->Stats(), report);
  report->load_ms_median = Median(load_ms);
  report->store_ms_median = Median(store_ms);
  report->request_ms_median = Median(request_ms);
  // Part 3 pins each session's first turn, or as many of its chunks as half the host tier holds.
  const size_t first_chunks = std::min<size_t>(first_tokens_ / layout.block_tokens,
                                               host_bytes / (2 * block * layout.layers));
  for (const std::vector<uint32_t>& prompt : prompts) {
    report->first_turns.emplace_back(
        prompt.begin(),
        prompt.begin() + static_cast<std::ptrdiff_t>(first_chunks * layout.block_tokens));
  }
  return engine->Flush();  // Part 3 reopens the SSD tier.
}

Status BenchEngine::RunPin(const std::string& scratch, BenchEngineReport* report) {
  const KvLayout& layout = report->layout;
  const size_t blocks_max =
      report->first_turns.front().size() / layout.block_tokens * layout.layers;
  if (blocks_max == 0) return Status::Ok();  // A first turn shorter than a chunk.
  KV_ASSIGN_OR_RETURN(std::vector<AlignedBuffer> buffers, Buffers(blocks_max, layout.BlockBytes()));
  StderrLogger logger(CliLogLevel());
  // Each measure opens an engine on the trace's SSD tier, so that the blocks are on the SSD
  // only; the host tier holds a first turn (TraceHostBytes: at least twice the largest turn).
  auto reopen = [&]() -> Result<std::pair<std::unique_ptr<Engine>, Namespace>> {
    KV_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                        OpenTraceEngine(*report, report->trace_host_bytes, scratch, &logger));
    KV_ASSIGN_OR_RETURN(Namespace ns, engine->MakeNamespace(report->trace_namespace));
    return std::pair(std::move(engine), std::move(ns));
  };
  std::vector<double> pin_ms, load_ms, ratios, blocks;
  for (const std::vector<uint32_t>& turn : report->first_turns) {
    if (Interrupted()) return Status::Aborted("interrupted");
    // The chunks Pin found (the SSD may have reclaimed a session's oldest ones): Load reads those.
    size_t chunks = 0;
    double pin_s = 0;
    {
      KV_ASSIGN_OR_RETURN(auto opened, reopen());
      const Stopwatch w;
      KV_ASSIGN_OR_RETURN(PinHandle pin, opened.first->Pin(opened.second, turn));
      pin_s = w.Seconds();
      chunks = pin.chunks();
    }
    if (chunks == 0) continue;
    const std::span<const uint32_t> prefix(turn.data(), chunks * layout.block_tokens);
    KV_ASSIGN_OR_RETURN(auto opened, reopen());
    const Stopwatch w;
    KV_ASSIGN_OR_RETURN(std::unique_ptr<LoadHandle> h,
                        opened.first->Load(opened.second, prefix,
                                           Spans<std::byte>(buffers, 0, chunks * layout.layers,
                                                            layout.BlockBytes())));
    KV_RETURN_IF_ERROR(h->Wait());
    pin_ms.push_back(pin_s * 1e3);
    load_ms.push_back(w.Seconds() * 1e3);
    ratios.push_back(pin_ms.back() / std::max(load_ms.back(), 1e-6));
    blocks.push_back(static_cast<double>(chunks * layout.layers));
  }
  report->pin_sessions = static_cast<uint32_t>(pin_ms.size());
  report->pin_blocks = static_cast<uint64_t>(Median(blocks));
  report->pin_ms_median = Median(pin_ms);
  report->pin_load_ms_median = Median(load_ms);
  report->pin_over_load_paired = Median(ratios);
  return Status::Ok();
}

Status BenchEngine::RunStoreThrough(const std::string& scratch, BenchEngineReport* report) {
  const KvLayout& layout = report->layout;
  const uint64_t block = layout.BlockBytes();
  const size_t blocks = report->first_turns.front().size() / layout.block_tokens * layout.layers;
  if (blocks == 0) return Status::Ok();  // A first turn shorter than a chunk.
  KV_ASSIGN_OR_RETURN(std::vector<AlignedBuffer> buffers, Buffers(blocks, block));
  StderrLogger logger(CliLogLevel());
  BenchEngineReport through = *report;
  through.remote_tier.reset();
  KV_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                      OpenTraceEngine(through, report->trace_host_bytes, scratch + "/through",
                                      &logger, WritePolicy::kWriteThrough));
  KV_ASSIGN_OR_RETURN(const Namespace ns,
                      engine->MakeNamespace("through-" + std::to_string(std::random_device{}())));
  std::mt19937_64 rng(seed_ + 11);
  std::vector<double> ms;
  const EngineStats before = engine->Stats();
  for (const std::vector<uint32_t>& turn : report->first_turns) {
    if (Interrupted()) return Status::Aborted("interrupted");
    for (AlignedBuffer& b : buffers) FillRandom(rng, {b.data(), b.size()});  // Not timed.
    const Stopwatch w;
    Result<std::unique_ptr<StoreHandle>> h =
        StoreRetryingBusy(*engine, ns, turn, Spans<const std::byte>(buffers, 0, blocks, block), 0,
                          &report->store_busy_retries);
    KV_RETURN_IF_ERROR(h.status());
    KV_RETURN_IF_ERROR((*h)->Wait());
    ms.push_back(w.Seconds() * 1e3);
  }
  const EngineStats after = engine->Stats();
  report->through_sessions = static_cast<uint32_t>(ms.size());
  report->through_blocks = blocks;
  report->through_ms_median = Median(ms);
  report->through_bytes_per_s =
      static_cast<double>(blocks * block) / std::max(report->through_ms_median * 1e-3, 1e-12);
  report->through_write_bytes = Delta(before, after, TierKind::kSsd, &TierStats::write_bytes);
  report->through_staged_write_bytes =
      Delta(before, after, TierKind::kSsd, &TierStats::staged_write_bytes);
  return Status::Ok();
}

Status BenchEngine::Run() {
  InstallInterruptHandler();
  BenchEngineReport report;
  report.layout = KvLayout{.layers = layers_,
                           .kv_heads = kv_heads_,
                           .head_dim = head_dim_,
                           .dtype = DType::kF16,
                           .block_tokens = block_tokens_};
  KV_RETURN_IF_ERROR(report.layout.Validate());
  if (!server_.empty()) KV_RETURN_IF_ERROR(ConnectService(&report));  // Its layout, from here.
  KV_ASSIGN_OR_RETURN(report.trace_host_bytes, TraceHostBytes(report.layout));
  KV_ASSIGN_OR_RETURN(report.remote_tier, RedisTier(redis_, key_file_));
  report.remote = report.remote_tier.has_value();
  KV_ASSIGN_OR_RETURN(const std::string scratch, MakeScratchDir(dir_, "kvtier-bench-engine"));
  const ScopedRemoval removal(scratch);
  KV_RETURN_IF_ERROR(RunPutGet(&report));
  KV_RETURN_IF_ERROR(RunTrace(scratch, &report));
  KV_RETURN_IF_ERROR(RunPin(scratch, &report));
  KV_RETURN_IF_ERROR(RunStoreThrough(scratch, &report));
  Print(report, json_);
  return Status::Ok();
}

}  // namespace kvtier::cli
