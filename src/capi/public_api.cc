// The public C++ API (include/kvtier/engine.h) over the internal Engine (engine/engine.h): options
// converted once at Open, every call forwarded, results converted back. Behaviour is the internal
// engine's; this file adds no logic beyond the conversions and the shared ownership below. How
// the engine is opened and keys are read differs per library: public_api_tiers.cc (libkvtier)
// and public_api_host.cc (libkvtier_host).
#include "capi/public_api.h"

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "codecs/codec_params.h"
#include "core/block_key.h"
#include "engine/stats_fields.h"
#include "tiers/redis/redis_options.h"
#include "tiers/ssd/ssd_options.h"

namespace kvtier {
namespace {

// The public enums mirror the internal ones value for value, so conversions are casts.
static_assert(static_cast<int>(api::DType::kF16) == static_cast<int>(DType::kF16));
static_assert(static_cast<int>(api::DType::kBF16) == static_cast<int>(DType::kBF16));
static_assert(static_cast<int>(api::DType::kF32) == static_cast<int>(DType::kF32));
static_assert(static_cast<int>(api::WritePolicy::kWriteBack) ==
              static_cast<int>(WritePolicy::kWriteBack));
static_assert(static_cast<int>(api::WritePolicy::kWriteThrough) ==
              static_cast<int>(WritePolicy::kWriteThrough));
static_assert(static_cast<int>(api::DeviceBackend::kCuda) ==
              static_cast<int>(DeviceBackend::kCuda));
static_assert(static_cast<int>(api::DeviceBackend::kCpu) == static_cast<int>(DeviceBackend::kCpu));
static_assert(static_cast<int>(api::SsdSync::kPeriodic) ==
              static_cast<int>(SsdSyncMode::kPeriodic));
static_assert(static_cast<int>(api::SsdSync::kPerBatch) ==
              static_cast<int>(SsdSyncMode::kPerBatch));
static_assert(static_cast<int>(api::Admission::kAfterRequests) ==
              static_cast<int>(AdmissionMode::kAfterRequests));
static_assert(static_cast<int>(api::Codec::kInt4) == static_cast<int>(codecs::CodecId::kInt4));
static_assert(static_cast<int>(api::Codec::kInt8Rot) ==
              static_cast<int>(codecs::CodecId::kInt8Rot));
static_assert(static_cast<int>(api::Codec::kInt4Rot) ==
              static_cast<int>(codecs::CodecId::kInt4Rot));
static_assert(static_cast<int>(api::Codec::kK8V4) == static_cast<int>(codecs::CodecId::kK8V4));
static_assert(static_cast<int>(api::Codec::kK8V4Rot) ==
              static_cast<int>(codecs::CodecId::kK8V4Rot));
static_assert(static_cast<int>(api::Codec::kEcq5) == static_cast<int>(codecs::CodecId::kEcq5));
static_assert(static_cast<int>(api::Codec::kEcq6) == static_cast<int>(codecs::CodecId::kEcq6));
static_assert(static_cast<int>(api::Codec::kEcq6V5) ==
              static_cast<int>(codecs::CodecId::kEcq6V5));
// The range a caller's codec must lie in is the codec registry's (codecs/codec_params.h: ids from
// 1 to kCodecIdLast), so a new codec needs no change here; the public enum names it.
constexpr auto kApiCodecFirst = static_cast<api::Codec>(codecs::CodecId::kIdentity);
constexpr auto kApiCodecLast = static_cast<api::Codec>(codecs::kCodecIdLast);
static_assert(static_cast<int>(api::Codec::kShuffleZstd) ==
              static_cast<int>(codecs::CodecId::kShuffleZstd));
static_assert(static_cast<int>(api::HugePages::kIfAvailable) ==
              static_cast<int>(HugePages::kIfAvailable));
static_assert(static_cast<int>(api::MemoryLock::kRequired) ==
              static_cast<int>(MemoryLock::kRequired));
static_assert(static_cast<int>(api::IoBackend::kThreadPool) ==
              static_cast<int>(IoBackend::kThreadPool));
static_assert(static_cast<int>(api::DirectIo::kRequired) == static_cast<int>(DirectIo::kRequired));
static_assert(static_cast<int>(api::RemoteMode::kCluster) == static_cast<int>(RedisMode::kCluster));
static_assert(static_cast<int>(api::LogLevel::kError) == static_cast<int>(LogLevel::kError));
static_assert(static_cast<int>(api::TierKind::kRemote) == static_cast<int>(TierKind::kRemote));
static_assert(static_cast<int>(api::BreakerState::kHalfOpen) ==
              static_cast<int>(BreakerState::kHalfOpen));
static_assert(static_cast<int>(api::BlockPriority::kPinnedPrompt) ==
              static_cast<int>(BlockPriority::kPinnedPrompt));

// `value` cast to the internal enum `To`, or InvalidArgument naming `field` when it lies outside
// [min, max] (a caller may cast any integer to a public enum).
template <typename To, typename From>
Status CastEnum(From value, From min, From max, std::string_view field, To* out) {
  if (value < min || value > max) {
    return Status::InvalidArgument(std::string(field) + " " +
                                   std::to_string(static_cast<int>(value)) + " is out of range");
  }
  *out = static_cast<To>(value);
  return Status::Ok();
}

Result<HostTierOptions> ConvertHost(const api::HostTierOptions& in, const std::string& field) {
  HostTierOptions out;
  out.name = field;
  out.capacity_bytes = in.capacity_bytes;
  out.numa_node = in.numa_node;
  KV_RETURN_IF_ERROR(CastEnum(in.huge_pages, api::HugePages::kOff, api::HugePages::kIfAvailable,
                              field + ".huge_pages", &out.huge_pages));
  KV_RETURN_IF_ERROR(CastEnum(in.lock, api::MemoryLock::kOff, api::MemoryLock::kRequired,
                              field + ".lock", &out.lock));
  out.prefault = in.prefault;
  return out;
}

Status ConvertSsdAdmission(const api::SsdTierOptions& in, SsdTierOptions* out) {
  KV_RETURN_IF_ERROR(CastEnum(in.admission, api::Admission::kAlways,
                              api::Admission::kAfterRequests, "ssd.admission", &out->admission));
  out->admission_requests = in.admission_requests;
  out->admission_slots = in.admission_slots;
  out->write_budget_bytes_per_s = in.write_budget_bytes_per_s;
  out->write_budget_burst_bytes = in.write_budget_burst_bytes;
  return Status::Ok();
}

Result<SsdTierOptions> ConvertSsd(const api::SsdTierOptions& in) {
  SsdTierOptions out;
  out.dirs = in.dirs;
  out.capacity_bytes = in.capacity_bytes;
  out.segment_bytes = in.segment_bytes;
  KV_RETURN_IF_ERROR(
      CastEnum(in.sync, api::SsdSync::kNone, api::SsdSync::kPeriodic, "ssd.sync", &out.sync));
  out.sync_interval_ms = in.sync_interval_ms;
  out.checkpoint_interval_ms = in.checkpoint_interval_ms;
  out.io_depth = in.io_depth;
  KV_RETURN_IF_ERROR(CastEnum(in.io_backend, api::IoBackend::kAuto, api::IoBackend::kThreadPool,
                              "ssd.io_backend", &out.io_backend));
  KV_RETURN_IF_ERROR(CastEnum(in.direct_io, api::DirectIo::kOff, api::DirectIo::kRequired,
                              "ssd.direct_io", &out.direct_io));
  out.queue_jobs_max = in.queue_jobs_max;
  out.staging_buffer_bytes = in.staging_buffer_bytes;
  out.staging_buffers = in.staging_buffers;
  out.write_stall_ms_max = in.write_stall_ms_max;
  KV_RETURN_IF_ERROR(ConvertSsdAdmission(in, &out));
  KV_RETURN_IF_ERROR(public_api::ConvertKeys(in.keys, "ssd.keys", &out.keyring));
  out.file_mode = in.file_mode;
  return out;
}

Result<RedisStoreOptions> ConvertRedis(const api::RemoteTierOptions& in) {
  RedisStoreOptions out;
  out.endpoints = in.endpoints;
  KV_RETURN_IF_ERROR(CastEnum(in.mode, api::RemoteMode::kStandalone, api::RemoteMode::kCluster,
                              "remote.mode", &out.mode));
  out.user = in.user;
  out.password = in.password;
  out.connect_timeout_ms = in.connect_timeout_ms;
  out.command_timeout_ms = in.command_timeout_ms;
  out.breaker.failures_to_open = in.breaker_failures_to_open;
  out.breaker.open_cooldown_us = in.breaker_open_cooldown_us;
  out.redirects_max = in.redirects_max;
  out.topology_refresh_interval_us = in.topology_refresh_interval_us;
  out.cluster_allowed_hosts = in.cluster_allowed_hosts;
  out.key_prefix = in.key_prefix;
  KV_RETURN_IF_ERROR(public_api::ConvertKeys(in.keys, "remote.keys", &out.keyring));
  out.insecure_plaintext = in.insecure_plaintext;
  return out;
}

Result<RemoteTierOptions> ConvertRemote(const api::RemoteTierOptions& in) {
  RemoteTierOptions out;
  KV_ASSIGN_OR_RETURN(RedisStoreOptions redis, ConvertRedis(in));
  out.stores.Emplace(kRedisStoreName, std::move(redis));
  KV_RETURN_IF_ERROR(CastEnum(in.write_policy, api::WritePolicy::kWriteThrough,
                              api::WritePolicy::kWriteBack, "remote.write_policy",
                              &out.write_policy));
  KV_RETURN_IF_ERROR(CastEnum(in.admission, api::Admission::kAlways,
                              api::Admission::kAfterRequests, "remote.admission", &out.admission));
  out.admission_requests = in.admission_requests;
  out.admission_slots = in.admission_slots;
  out.write_budget_bytes_per_s = in.write_budget_bytes_per_s;
  out.write_budget_burst_bytes = in.write_budget_burst_bytes;
  out.promote_on_load = in.promote_on_load;
  out.io_threads = in.io_threads;
  out.connections = in.connections;
  return out;
}

PredictionOptions ConvertPrediction(const api::PredictionOptions& in) {
  return PredictionOptions{.enabled = in.enabled,
                           .window = in.window,
                           .successors_max = in.successors_max,
                           .sessions_max = in.sessions_max,
                           .session_chunks_max = in.session_chunks_max,
                           .predict_k = in.predict_k,
                           .blocks_max = in.blocks_max};
}

// The tiers: device, host, CXL, SSD, remote.
Status ConvertTiers(const api::EngineOptions& in, EngineOptions* out) {
  out->device.capacity_bytes = in.device.capacity_bytes;
  out->device.copy_threads = in.device.copy_threads;
  out->device.copy_queue_max = in.device.copy_queue_max;
  KV_ASSIGN_OR_RETURN(out->host, ConvertHost(in.host, "host"));
  KV_RETURN_IF_ERROR(CastEnum(in.device_backend, api::DeviceBackend::kAuto,
                              api::DeviceBackend::kCuda, "device_backend", &out->device_backend));
  out->cuda_device = in.cuda_device;
  if (in.cxl.has_value()) {
    KV_ASSIGN_OR_RETURN(out->cxl, ConvertHost(*in.cxl, "cxl"));
  }
  if (in.ssd.has_value()) {
    KV_ASSIGN_OR_RETURN(SsdTierOptions ssd, ConvertSsd(*in.ssd));
    out->tiers.Emplace(kSsdTierName, std::move(ssd));
  }
  if (in.remote.has_value()) {
    KV_ASSIGN_OR_RETURN(out->remote, ConvertRemote(*in.remote));
  }
  return Status::Ok();
}


}  // namespace

namespace public_api {

void FunctionLogger::Log(LogLevel level, std::string_view message) {
  log_(static_cast<api::LogLevel>(level), message);
}

KvLayout ToKvLayout(const api::Layout& layout) {
  return KvLayout{.layers = layout.layers,
                  .kv_heads = layout.kv_heads,
                  .head_dim = layout.head_dim,
                  .dtype = static_cast<DType>(layout.dtype),
                  .block_tokens = layout.block_tokens,
                  .kind = static_cast<LayoutKind>(layout.kind)};
}

api::Layout FromKvLayout(const KvLayout& layout) {
  return api::Layout{.layers = layout.layers,
                     .kv_heads = layout.kv_heads,
                     .head_dim = layout.head_dim,
                     .dtype = static_cast<api::DType>(layout.dtype),
                     .block_tokens = layout.block_tokens,
                     .kind = static_cast<api::LayoutKind>(layout.kind)};
}

Result<EngineOptions> ToEngineOptions(const api::EngineOptions& in, Logger* logger) {
  EngineOptions out;
  DType dtype;  // Checked here; ToKvLayout casts.
  KV_RETURN_IF_ERROR(
      CastEnum(in.layout.dtype, api::DType::kF16, api::DType::kF32, "layout.dtype", &dtype));
  LayoutKind kind;  // Checked here; ToKvLayout casts.
  KV_RETURN_IF_ERROR(CastEnum(in.layout.kind, api::LayoutKind::kKv, api::LayoutKind::kLatent,
                              "layout.kind", &kind));
  out.layout = ToKvLayout(in.layout);
  out.model.name = in.model_name;
  std::memcpy(out.model.weights_digest.data(), in.weights_digest.data(),
              out.model.weights_digest.size());
  static_assert(sizeof(in.weights_digest) == sizeof(out.model.weights_digest));
  KV_RETURN_IF_ERROR(ConvertTiers(in, &out));
  KV_RETURN_IF_ERROR(CastEnum(in.write_policy, api::WritePolicy::kWriteThrough,
                              api::WritePolicy::kWriteBack, "write_policy", &out.write_policy));
  out.writeback_dirty_fraction = in.writeback_dirty_fraction;
  out.writeback_age_ms_max = in.writeback_age_ms_max;
  KV_RETURN_IF_ERROR(CastEnum(in.ssd_codec.codec, kApiCodecFirst, kApiCodecLast,
                              "ssd_codec.codec", &out.ssd_codec.codec));
  out.ssd_codec.zstd_level = in.ssd_codec.zstd_level;
  out.ssd_codec.group_size = in.ssd_codec.group_size;
  out.default_ttl_ms = in.default_ttl_ms;
  out.worker_threads = in.worker_threads;
  out.thread_cpus = in.thread_cpus;
  out.background_nice = in.background_nice;
  KV_RETURN_IF_ERROR(CastEnum(in.background_priority, api::BackgroundPriority::kNice,
                              api::BackgroundPriority::kIdle, "background_priority",
                              &out.background_priority));
  out.sink_chunks = in.sink_chunks;
  out.promote_on_load = in.promote_on_load;
  out.prediction = ConvertPrediction(in.prediction);
  out.staging_buffers = in.staging_buffers;
  out.logger = logger;
  return out;
}

// api::EngineStats, api::TierStats and api::RemoteStats hold every row of the stats table, of the
// row's type, and nothing else but the tier list, the remote store's counters and the tier's kind.
#define KVTIER_API_STATS_ENGINE_ROW(name, type, kind, unit, scope, help) \
  KVTIER_STATS_CHECK_MIRROR_ROW(api::EngineStats, name, type)
#define KVTIER_API_STATS_TIER_ROW(name, type, kind, unit, scope, help) \
  KVTIER_STATS_CHECK_MIRROR_ROW(api::TierStats, name, type)
KVTIER_ENGINE_STATS(KVTIER_API_STATS_ENGINE_ROW)
KVTIER_TIER_STATS(KVTIER_API_STATS_TIER_ROW)
#define KVTIER_API_STATS_REMOTE_ROW(name, type, kind, unit, scope, help) \
  KVTIER_STATS_CHECK_MIRROR_ROW(api::RemoteStats, name, type)
KVTIER_REMOTE_STORE_STATS(KVTIER_API_STATS_REMOTE_ROW)
#undef KVTIER_API_STATS_ENGINE_ROW
#undef KVTIER_API_STATS_TIER_ROW
#undef KVTIER_API_STATS_REMOTE_ROW
static_assert(MemberCount<api::EngineStats>() == stats_internal::kEngineRows + 2,
              "api::EngineStats has a member outside the stats table (tiers and remote aside)");
static_assert(MemberCount<api::TierStats>() == stats_internal::kTierRows + 2,
              "api::TierStats has a member outside the stats table (kind and name aside)");
static_assert(MemberCount<api::RemoteStats>() == stats_internal::kRemoteStoreRows,
              "api::RemoteStats has a member outside the stats table");

api::EngineStats FromEngineStats(const EngineStats& in) {
  api::EngineStats out;
  CopyEngineStatRows(in, &out);
  for (const TierStats& t : in.tiers) {
    api::TierStats& tier = out.tiers.emplace_back();
    tier.kind = static_cast<api::TierKind>(t.kind);
    tier.name = t.name;
    CopyTierStatRows(t, &tier);
  }
  if (in.remote.has_value()) CopyRemoteStoreStatRows(*in.remote, &out.remote.emplace());
  return out;
}

}  // namespace public_api
}  // namespace kvtier

namespace kvtier::api {
namespace {

// The internal engine and what it borrows, shared by the Engine and its handles. Why shared: the
// internal engine requires its Load and Store handles to be destroyed first, and the public API
// lets an Engine go before its handles; the last owner destroys the engine, then the logger.
struct EngineCore {
  std::unique_ptr<public_api::FunctionLogger> logger;  // Borrowed by `engine`; declared first.
  std::unique_ptr<kvtier::Engine> engine;
  Layout layout;
};

kvtier::Namespace ToNamespace(const Namespace& ns) {
  return kvtier::Namespace{.digest = ns.digest};
}

}  // namespace

std::string_view TierKindName(TierKind kind) {
  return kvtier::TierKindName(static_cast<kvtier::TierKind>(kind));
}

struct Engine::Impl {
  std::shared_ptr<EngineCore> core;
};
struct LoadHandle::Impl {
  std::shared_ptr<EngineCore> core;  // Declared first: outlives `handle`.
  std::unique_ptr<kvtier::LoadHandle> handle;
};
struct StoreHandle::Impl {
  std::shared_ptr<EngineCore> core;  // Declared first: outlives `handle`.
  std::unique_ptr<kvtier::StoreHandle> handle;
};
struct PinHandle::Impl {
  kvtier::PinHandle pin;  // May outlive the engine by itself.
};

LoadHandle::LoadHandle(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LoadHandle::LoadHandle(LoadHandle&&) noexcept = default;
LoadHandle& LoadHandle::operator=(LoadHandle&&) noexcept = default;
LoadHandle::~LoadHandle() = default;
Status LoadHandle::WaitLayer(uint32_t layer) { return impl_->handle->WaitLayer(layer); }
bool LoadHandle::LayerReady(uint32_t layer) { return impl_->handle->LayerReady(layer); }
Status LoadHandle::Wait() { return impl_->handle->Wait(); }
size_t LoadHandle::chunks() const { return impl_->handle->chunks(); }

StoreHandle::StoreHandle(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
StoreHandle::StoreHandle(StoreHandle&&) noexcept = default;
StoreHandle& StoreHandle::operator=(StoreHandle&&) noexcept = default;
StoreHandle::~StoreHandle() = default;
Status StoreHandle::Wait() { return impl_->handle->Wait(); }
bool StoreHandle::Done() { return impl_->handle->Done(); }
size_t StoreHandle::chunks_stored() const { return impl_->handle->chunks_stored(); }

PinHandle::PinHandle(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PinHandle::PinHandle(PinHandle&&) noexcept = default;
PinHandle& PinHandle::operator=(PinHandle&&) noexcept = default;
PinHandle::~PinHandle() = default;
size_t PinHandle::chunks() const { return impl_->pin.chunks(); }

Result<std::unique_ptr<Engine>> Engine::Open(const EngineOptions& options) {
  auto core = std::make_shared<EngineCore>();
  if (options.log) core->logger = std::make_unique<public_api::FunctionLogger>(options.log);
  KV_ASSIGN_OR_RETURN(kvtier::EngineOptions internal,
                      public_api::ToEngineOptions(options, core->logger.get()));
  KV_ASSIGN_OR_RETURN(core->engine, public_api::OpenEngine(internal));
  core->layout = options.layout;
  return std::make_unique<Engine>(std::make_unique<Impl>(Impl{.core = std::move(core)}));
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

const Layout& Engine::layout() const { return impl_->core->layout; }
uint64_t Engine::block_bytes() const { return impl_->core->layout.BlockBytes(); }
DeviceBackend Engine::device_backend() const {
  return static_cast<DeviceBackend>(impl_->core->engine->device_backend());
}

Result<Namespace> Engine::MakeNamespace(std::string_view salt,
                                        std::span<const std::string> extra_keys) {
  KV_ASSIGN_OR_RETURN(kvtier::Namespace ns, impl_->core->engine->MakeNamespace(salt, extra_keys));
  return Namespace{.digest = ns.digest};
}

Result<LookupResult> Engine::Lookup(const Namespace& ns, std::span<const uint32_t> tokens,
                                    const LookupOptions& options) {
  KV_ASSIGN_OR_RETURN(
      kvtier::LookupResult r,
      impl_->core->engine->Lookup(ToNamespace(ns), tokens, {.session_id = options.session_id}));
  LookupResult out{.matched_tokens = r.matched_tokens};
  out.chunk_tiers.reserve(r.chunk_tiers.size());
  for (kvtier::TierKind kind : r.chunk_tiers) {
    out.chunk_tiers.push_back(static_cast<TierKind>(kind));
  }
  return out;
}

Result<LoadHandle> Engine::Load(const Namespace& ns, std::span<const uint32_t> tokens,
                                std::span<const std::span<std::byte>> dst) {
  KV_ASSIGN_OR_RETURN(std::unique_ptr<kvtier::LoadHandle> handle,
                      impl_->core->engine->Load(ToNamespace(ns), tokens, dst));
  return LoadHandle(std::make_unique<LoadHandle::Impl>(
      LoadHandle::Impl{.core = impl_->core, .handle = std::move(handle)}));
}

Result<StoreHandle> Engine::Store(const Namespace& ns, std::span<const uint32_t> tokens,
                                  std::span<const std::span<const std::byte>> src,
                                  const StoreOptions& options) {
  if (options.priority > BlockPriority::kPinnedPrompt) {
    return Status::InvalidArgument("StoreOptions.priority is out of range");
  }
  const kvtier::StoreOptions internal{
      .priority = static_cast<kvtier::BlockPriority>(options.priority), .ttl_ms = options.ttl_ms};
  KV_ASSIGN_OR_RETURN(std::unique_ptr<kvtier::StoreHandle> handle,
                      impl_->core->engine->Store(ToNamespace(ns), tokens, src, internal));
  return StoreHandle(std::make_unique<StoreHandle::Impl>(
      StoreHandle::Impl{.core = impl_->core, .handle = std::move(handle)}));
}

Status Engine::Prefetch(const Namespace& ns, std::span<const uint32_t> tokens) {
  return impl_->core->engine->Prefetch(ToNamespace(ns), tokens);
}

Status Engine::Hint(const Namespace& ns, std::span<const uint32_t> tokens, uint64_t session_id) {
  return impl_->core->engine->Hint(ToNamespace(ns), tokens, session_id);
}

Result<PinHandle> Engine::Pin(const Namespace& ns, std::span<const uint32_t> tokens) {
  KV_ASSIGN_OR_RETURN(kvtier::PinHandle pin, impl_->core->engine->Pin(ToNamespace(ns), tokens));
  return PinHandle(std::make_unique<PinHandle::Impl>(PinHandle::Impl{.pin = std::move(pin)}));
}

Status Engine::Flush() { return impl_->core->engine->Flush(); }

EngineStats Engine::Stats() { return public_api::FromEngineStats(impl_->core->engine->Stats()); }

}  // namespace kvtier::api

namespace kvtier::public_api {

std::unique_ptr<api::Engine> WrapEngine(std::unique_ptr<Engine> engine,
                                        std::unique_ptr<FunctionLogger> logger) {
  auto core = std::make_shared<api::EngineCore>();
  core->logger = std::move(logger);
  core->engine = std::move(engine);
  core->layout = FromKvLayout(core->engine->options().layout);
  return std::make_unique<api::Engine>(
      std::make_unique<api::Engine::Impl>(api::Engine::Impl{.core = std::move(core)}));
}

}  // namespace kvtier::public_api
