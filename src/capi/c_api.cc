// The C API of include/kvtier/c_api.h over the C++ engine (engine/engine.h).
//
// Every exported function is a thin translation: C arguments -> C++ types, one engine call,
// Status -> kvtier_status_t + kvtier_error_t. Exceptions (only std::bad_alloc and friends can
// escape the engine, which itself never throws) are caught at the boundary by Guard().
//
// Lifetime: kvtier_engine_t holds a shared_ptr to the Engine and every load/store/pin handle holds
// another, so kvtier_engine_close may come before the handles are destroyed (the engine requires
// its Load/Store handles to be destroyed first; the shared owner makes that order automatic).
#include "kvtier/c_api.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "codecs/codec_params.h"
#include "core/assert.h"
#include "core/block_key.h"
#include "core/kv_layout.h"
#include "engine/engine.h"
#include "engine/options_table.h"
#include "engine/stats_fields.h"
#include "kvtier/status.h"
#include "kvtier/version.h"
#include "serve/client.h"
#include "tiers/redis/redis_connection.h"
#include "tiers/redis/redis_options.h"
#include "tiers/remote_crypto.h"
#include "tiers/ssd/ssd_options.h"

namespace {
// Forwards log lines to the caller's kvtier_log_fn.
class CallbackLogger final : public kvtier::Logger {
 public:
  CallbackLogger(kvtier_log_fn fn, void* context, kvtier_log_level_t min_level)
      : fn_(fn), context_(context), min_level_(min_level) {}
  void Log(kvtier::LogLevel level, std::string_view message) override {
    const auto c_level = static_cast<kvtier_log_level_t>(level);
    if (c_level < min_level_) return;
    const std::string line(message);  // NUL-terminated for C.
    fn_(context_, c_level, line.c_str());
  }

 private:
  const kvtier_log_fn fn_;
  void* const context_;
  const kvtier_log_level_t min_level_;
};
}  // namespace

struct kvtier_engine_s {
  std::unique_ptr<CallbackLogger> logger;  // Declared first: destroyed after the engine.
  std::shared_ptr<kvtier::Engine> engine;
  kvtier::KvLayout layout;
  uint64_t block_bytes = 0;
};

struct kvtier_load_s {
  std::shared_ptr<kvtier::Engine> engine;  // Declared first: destroyed after the handle.
  std::unique_ptr<kvtier::LoadHandle> handle;
};

struct kvtier_store_s {
  std::shared_ptr<kvtier::Engine> engine;
  std::unique_ptr<kvtier::StoreHandle> handle;
  bool waited = false;
};

struct kvtier_pin_s {
  std::shared_ptr<kvtier::Engine> engine;
  kvtier::PinHandle pin;
};

namespace kvtier {
namespace {

// The C enums mirror the C++ ones value for value.
static_assert(KVTIER_OK == static_cast<int>(StatusCode::kOk));
static_assert(KVTIER_NOT_FOUND == static_cast<int>(StatusCode::kNotFound));
static_assert(KVTIER_CORRUPTION == static_cast<int>(StatusCode::kCorruption));
static_assert(KVTIER_IO_ERROR == static_cast<int>(StatusCode::kIoError));
static_assert(KVTIER_INVALID_ARGUMENT == static_cast<int>(StatusCode::kInvalidArgument));
static_assert(KVTIER_NOT_SUPPORTED == static_cast<int>(StatusCode::kNotSupported));
static_assert(KVTIER_NO_SPACE == static_cast<int>(StatusCode::kNoSpace));
static_assert(KVTIER_BUSY == static_cast<int>(StatusCode::kBusy));
static_assert(KVTIER_ABORTED == static_cast<int>(StatusCode::kAborted));
static_assert(KVTIER_TIMED_OUT == static_cast<int>(StatusCode::kTimedOut));
static_assert(KVTIER_UNAVAILABLE == static_cast<int>(StatusCode::kUnavailable));
static_assert(KVTIER_TIER_NONE == static_cast<int>(TierKind::kNone));
static_assert(KVTIER_TIER_DEVICE == static_cast<int>(TierKind::kDevice));
static_assert(KVTIER_TIER_HOST == static_cast<int>(TierKind::kHost));
static_assert(KVTIER_TIER_CXL == static_cast<int>(TierKind::kCxl));
static_assert(KVTIER_TIER_SSD == static_cast<int>(TierKind::kSsd));
static_assert(KVTIER_TIER_REMOTE == static_cast<int>(TierKind::kRemote));
static_assert(KVTIER_DTYPE_F16 == static_cast<int>(DType::kF16));
static_assert(KVTIER_DTYPE_BF16 == static_cast<int>(DType::kBF16));
static_assert(KVTIER_DTYPE_F32 == static_cast<int>(DType::kF32));
static_assert(KVTIER_LAYOUT_KV == static_cast<int>(LayoutKind::kKv));
static_assert(KVTIER_LAYOUT_LATENT == static_cast<int>(LayoutKind::kLatent));
static_assert(KVTIER_CODEC_IDENTITY == static_cast<int>(codecs::CodecId::kIdentity));
static_assert(KVTIER_CODEC_SHUFFLE_ZSTD == static_cast<int>(codecs::CodecId::kShuffleZstd));
static_assert(KVTIER_CODEC_INT8 == static_cast<int>(codecs::CodecId::kInt8));
static_assert(KVTIER_CODEC_INT4 == static_cast<int>(codecs::CodecId::kInt4));
static_assert(KVTIER_CODEC_INT8_ROT == static_cast<int>(codecs::CodecId::kInt8Rot));
static_assert(KVTIER_CODEC_INT4_ROT == static_cast<int>(codecs::CodecId::kInt4Rot));
static_assert(KVTIER_CODEC_K8V4 == static_cast<int>(codecs::CodecId::kK8V4));
static_assert(KVTIER_CODEC_K8V4_ROT == static_cast<int>(codecs::CodecId::kK8V4Rot));
static_assert(KVTIER_CODEC_ECQ5 == static_cast<int>(codecs::CodecId::kEcq5));
static_assert(KVTIER_CODEC_ECQ6 == static_cast<int>(codecs::CodecId::kEcq6));
static_assert(KVTIER_CODEC_ECQ6V5 == static_cast<int>(codecs::CodecId::kEcq6V5));
static_assert(KVTIER_PRIORITY_PINNED_PROMPT == static_cast<int>(BlockPriority::kPinnedPrompt));
static_assert(KVTIER_DEVICE_BACKEND_CUDA == static_cast<int>(DeviceBackend::kCuda));
static_assert(KVTIER_HUGE_PAGES_IF_AVAILABLE == static_cast<int>(HugePages::kIfAvailable));
static_assert(KVTIER_MEMORY_LOCK_REQUIRED == static_cast<int>(MemoryLock::kRequired));
static_assert(KVTIER_IO_BACKEND_THREAD_POOL == static_cast<int>(IoBackend::kThreadPool));
static_assert(KVTIER_DIRECT_IO_REQUIRED == static_cast<int>(DirectIo::kRequired));
static_assert(KVTIER_ADMISSION_AFTER_REQUESTS == static_cast<int>(AdmissionMode::kAfterRequests));

// The struct sizes of ABI version 1. Callers built against a later header pass larger structs;
// the fields appended since then must be zero for this library to accept them.
// The first version ended before the remote tier's fields (appended since).
constexpr size_t kEngineOptionsV1Bytes = offsetof(kvtier_engine_options_t, remote_endpoints);
constexpr size_t kStoreOptionsV1Bytes = sizeof(kvtier_store_options_t);
constexpr size_t kLookupOptionsV1Bytes = sizeof(kvtier_lookup_options_t);
// The first version ended before layout_kind (appended since).
constexpr size_t kConnectOptionsV1Bytes = offsetof(kvtier_connect_options_t, layout_kind);
// The offset of the first field appended to kvtier_engine_stats_t since ABI version 1 (the
// prediction counters): callers built against the first header pass exactly this many bytes.
constexpr size_t kStatsV1Bytes = offsetof(kvtier_engine_stats_t, prediction_accesses);
// A struct_size above this is a garbage value (uninitialized memory, a pointer), not a newer
// header: refusing it keeps ReadVersioned from scanning that many bytes past the caller's struct.
constexpr size_t kVersionedStructBytesMax = 4096;
static_assert(sizeof(kvtier_engine_options_t) <= kVersionedStructBytesMax);
static_assert(sizeof(kvtier_store_options_t) <= kVersionedStructBytesMax);
static_assert(sizeof(kvtier_engine_stats_t) <= kVersionedStructBytesMax);
static_assert(sizeof(kvtier_lookup_options_t) <= kVersionedStructBytesMax);
static_assert(sizeof(kvtier_connect_options_t) <= kVersionedStructBytesMax);

// InvalidArgument unless `size` (a caller's struct_size) is in [min_bytes, the cap].
Status CheckStructSize(size_t size, size_t min_bytes, std::string_view what) {
  if (size < min_bytes) {
    return Status::InvalidArgument(std::string(what) + ".struct_size " + std::to_string(size) +
                                   " is smaller than " + std::to_string(min_bytes) +
                                   " (call the *_init function first)");
  }
  if (size > kVersionedStructBytesMax) {
    return Status::InvalidArgument(std::string(what) + ".struct_size " + std::to_string(size) +
                                   " is larger than " + std::to_string(kVersionedStructBytesMax) +
                                   " (not initialized? call the *_init function first)");
  }
  return Status::Ok();
}

// The value a C caller stored in an enum-typed field, read as an int: the caller may store any
// int there, and loading an out-of-range value through the C++ enum type is undefined behavior.
template <typename E>
int32_t RawEnum(const E& field) {
  static_assert(sizeof(E) == sizeof(int32_t), "C enums are int-sized on every supported ABI");
  int32_t value;
  std::memcpy(&value, &field, sizeof(value));
  return value;
}

void FillError(kvtier_error_t* err, kvtier_status_t code, std::string_view message) {
  if (err == nullptr) return;
  err->code = code;
  const size_t n = std::min(message.size(), sizeof(err->message) - 1);
  std::memcpy(err->message, message.data(), n);
  err->message[n] = '\0';
}

kvtier_status_t Finish(kvtier_error_t* err, const Status& status) {
  const auto code = static_cast<kvtier_status_t>(status.code());
  FillError(err, code, status.message());
  return code;
}

// Runs `body` (returning a Status) with every exception turned into KVTIER_INTERNAL.
template <typename Body>
kvtier_status_t Guard(kvtier_error_t* err, Body&& body) noexcept {
  try {
    return Finish(err, body());
  } catch (const std::bad_alloc&) {
    FillError(err, KVTIER_INTERNAL, "out of memory");
  } catch (const std::exception& e) {
    FillError(err, KVTIER_INTERNAL, e.what());
  } catch (...) {
    FillError(err, KVTIER_INTERNAL, "unknown exception");
  }
  return KVTIER_INTERNAL;
}

// Copies a caller's versioned struct over `*dst` (holding the defaults). Fields the caller does not
// know keep their defaults; fields this library does not know must be zero.
template <typename T>
Status ReadVersioned(const T* src, size_t min_bytes, T* dst, std::string_view what) {
  const size_t size = src->struct_size;
  KV_RETURN_IF_ERROR(CheckStructSize(size, min_bytes, what));
  const auto* bytes = reinterpret_cast<const unsigned char*>(src);
  for (size_t i = sizeof(T); i < size; ++i) {
    if (bytes[i] != 0) {
      return Status::NotSupported(std::string(what) + " sets fields unknown to kvtier " +
                                  kVersionString + " (struct_size " + std::to_string(size) + " > " +
                                  std::to_string(sizeof(T)) + ")");
    }
  }
  std::memcpy(static_cast<void*>(dst), src, std::min(size, sizeof(T)));
  return Status::Ok();
}

// `kind` is a kvtier_layout_kind_t's raw value (RawEnum): it may be out of the enum's range.
Result<KvLayout> ConvertLayout(const kvtier_layout_t& in, int32_t kind) {
  const int32_t dtype = RawEnum(in.dtype);
  if (dtype < KVTIER_DTYPE_F16 || dtype > KVTIER_DTYPE_F32) {
    return Status::InvalidArgument("layout.dtype " + std::to_string(dtype) +
                                   " is not a kvtier_dtype_t");
  }
  if (kind < KVTIER_LAYOUT_KV || kind > KVTIER_LAYOUT_LATENT) {
    return Status::InvalidArgument("layout_kind " + std::to_string(kind) +
                                   " is not a kvtier_layout_kind_t");
  }
  KvLayout layout{.layers = in.layers,
                  .kv_heads = in.kv_heads,
                  .head_dim = in.head_dim,
                  .dtype = static_cast<DType>(dtype),
                  .block_tokens = in.block_tokens,
                  .kind = static_cast<LayoutKind>(kind)};
  KV_RETURN_IF_ERROR(layout.Validate().WithContext("layout"));
  return layout;
}

// Keys from a file or an environment variable (the C API is a binding: it may read the
// environment, the library never does); `what` names the option pair in errors.
Status LoadKeys(const char* file, const char* env, const std::string& what,
                std::optional<RemoteKeyring>* out) {
  if (file != nullptr && env != nullptr) {
    return Status::InvalidArgument(what + "_key_file and " + what + "_key_env: give one of them");
  }
  if (file != nullptr) {
    KV_ASSIGN_OR_RETURN(*out, RemoteKeyring::LoadFile(file, what + "_key_file"));
  } else if (env != nullptr) {
    const char* text = std::getenv(env);
    if (text == nullptr) {
      return Status::InvalidArgument(what + "_key_env: the environment variable " + env +
                                     " is not set");
    }
    Result<RemoteKeyring> ring = RemoteKeyring::Parse(text);
    if (!ring.ok()) return ring.status().WithContext(std::string("$") + env);
    *out = std::move(ring).value();
  }
  return Status::Ok();
}

// The deployment keys, and the explicit plaintext choice.
Status ConvertRemoteKeys(const kvtier_engine_options_t& in, RedisStoreOptions* redis) {
  KV_RETURN_IF_ERROR(LoadKeys(in.remote_key_file, in.remote_key_env, "remote", &redis->keyring));
  redis->insecure_plaintext = in.remote_insecure_plaintext != 0;
  return Status::Ok();
}

Result<std::optional<RemoteTierOptions>> ConvertRemoteOptions(const kvtier_engine_options_t& in) {
  if (in.remote_endpoints == nullptr) return std::optional<RemoteTierOptions>();
  RedisStoreOptions redis;
  Result<std::vector<std::string>> endpoints = SplitRedisEndpoints(in.remote_endpoints);
  if (!endpoints.ok()) return endpoints.status().WithContext("remote_endpoints");
  redis.endpoints = std::move(*endpoints);
  redis.mode = in.remote_cluster != 0 ? RedisMode::kCluster : RedisMode::kStandalone;
  if (in.remote_user != nullptr) redis.user = in.remote_user;
  if (in.remote_password != nullptr) redis.password = in.remote_password;
  if (in.remote_key_prefix != nullptr) redis.key_prefix = in.remote_key_prefix;
  if (in.remote_connect_timeout_ms != 0) redis.connect_timeout_ms = in.remote_connect_timeout_ms;
  if (in.remote_command_timeout_ms != 0) redis.command_timeout_ms = in.remote_command_timeout_ms;
  if (in.remote_cluster_allowed_hosts != nullptr) {
    Result<std::vector<std::string>> hosts = SplitRedisEndpoints(in.remote_cluster_allowed_hosts);
    if (!hosts.ok()) return hosts.status().WithContext("remote_cluster_allowed_hosts");
    redis.cluster_allowed_hosts = std::move(*hosts);
  }
  KV_RETURN_IF_ERROR(ConvertRemoteKeys(in, &redis));
  RemoteTierOptions remote;
  remote.stores.Emplace(kRedisStoreName, std::move(redis));
  const int32_t policy = RawEnum(in.remote_write_policy);
  if (policy != KVTIER_WRITE_BACK && policy != KVTIER_WRITE_THROUGH) {
    return Status::InvalidArgument("remote_write_policy " + std::to_string(policy) +
                                   " is not a kvtier_write_policy_t");
  }
  remote.write_policy =
      policy == KVTIER_WRITE_BACK ? WritePolicy::kWriteBack : WritePolicy::kWriteThrough;
  return std::optional<RemoteTierOptions>(std::move(remote));
}

// 0 in a numeric field keeps the default; EngineOptions::Validate checks the ranges.
PredictionOptions ConvertPredictionOptions(const kvtier_engine_options_t& in) {
  PredictionOptions p;
  p.enabled = in.prediction_enabled != 0;
  auto set = [](uint32_t value, uint32_t* field) {
    if (value != 0) *field = value;
  };
  set(in.prediction_window, &p.window);
  set(in.prediction_successors_max, &p.successors_max);
  set(in.prediction_sessions_max, &p.sessions_max);
  set(in.prediction_session_chunks_max, &p.session_chunks_max);
  set(in.prediction_predict_k, &p.predict_k);
  set(in.prediction_blocks_max, &p.blocks_max);
  return p;
}

// The fields appended for the options table's rows (docs/options.md): each is read by its C type
// and set through SetEngineOption, which checks the row's range. options_table_test checks that
// the struct holds exactly the table's C rows; this list names where each appended one lives.
enum class CField : uint8_t { kU32, kU64, kI32, kBool, kDouble, kEnum };
struct AppendedOption {
  std::string_view name;
  size_t offset;
  CField type;
};
#define KVTIER_C_FIELD(name, type) \
  AppendedOption { #name, offsetof(kvtier_engine_options_t, name), CField::type }
constexpr AppendedOption kAppendedOptions[] = {
    KVTIER_C_FIELD(device_copy_threads, kU32),
    KVTIER_C_FIELD(device_copy_queue_max, kU32),
    KVTIER_C_FIELD(device_backend, kEnum),
    KVTIER_C_FIELD(cuda_device, kI32),
    KVTIER_C_FIELD(host_huge_pages, kEnum),
    KVTIER_C_FIELD(host_lock, kEnum),
    KVTIER_C_FIELD(host_prefault, kBool),
    KVTIER_C_FIELD(cxl_bytes, kU64),
    KVTIER_C_FIELD(cxl_numa_node, kI32),
    KVTIER_C_FIELD(cxl_huge_pages, kEnum),
    KVTIER_C_FIELD(cxl_lock, kEnum),
    KVTIER_C_FIELD(cxl_prefault, kBool),
    KVTIER_C_FIELD(ssd_sync_interval_ms, kU32),
    KVTIER_C_FIELD(ssd_checkpoint_interval_ms, kU32),
    KVTIER_C_FIELD(ssd_io_depth, kU32),
    KVTIER_C_FIELD(ssd_io_backend, kEnum),
    KVTIER_C_FIELD(ssd_direct_io, kEnum),
    KVTIER_C_FIELD(ssd_queue_jobs_max, kU32),
    KVTIER_C_FIELD(ssd_staging_buffer_bytes, kU64),
    KVTIER_C_FIELD(ssd_staging_buffers, kU32),
    KVTIER_C_FIELD(ssd_write_stall_ms_max, kU32),
    KVTIER_C_FIELD(ssd_admission, kEnum),
    KVTIER_C_FIELD(ssd_admission_requests, kU32),
    KVTIER_C_FIELD(ssd_admission_slots, kU32),
    KVTIER_C_FIELD(ssd_write_budget_bytes_per_s, kU64),
    KVTIER_C_FIELD(ssd_write_budget_burst_bytes, kU64),
    KVTIER_C_FIELD(ssd_file_mode, kU32),
    KVTIER_C_FIELD(writeback_dirty_fraction, kDouble),
    KVTIER_C_FIELD(staging_buffers, kU32),
    KVTIER_C_FIELD(remote_breaker_failures_to_open, kU32),
    KVTIER_C_FIELD(remote_breaker_open_cooldown_us, kU64),
    KVTIER_C_FIELD(remote_redirects_max, kU32),
    KVTIER_C_FIELD(remote_topology_refresh_interval_us, kU64),
    KVTIER_C_FIELD(remote_admission, kEnum),
    KVTIER_C_FIELD(remote_admission_requests, kU32),
    KVTIER_C_FIELD(remote_admission_slots, kU32),
    KVTIER_C_FIELD(remote_write_budget_bytes_per_s, kU64),
    KVTIER_C_FIELD(remote_write_budget_burst_bytes, kU64),
    KVTIER_C_FIELD(remote_promote_on_load, kBool),
    KVTIER_C_FIELD(remote_io_threads, kU32),
    KVTIER_C_FIELD(writeback_age_ms_max, kU32),
};
#undef KVTIER_C_FIELD

template <typename T>
T FieldAt(const kvtier_engine_options_t& in, size_t offset) {
  T value;
  std::memcpy(&value, reinterpret_cast<const unsigned char*>(&in) + offset, sizeof(value));
  return value;
}

// The `index`th of "a|b|c", or empty when there is none.
std::string ChoiceAt(std::string_view choices, int32_t index) {
  const std::vector<std::string_view> items = OptionList(choices);
  if (index < 0 || static_cast<size_t>(index) >= items.size()) return std::string();
  return std::string(items[static_cast<size_t>(index)]);
}

Status ConvertAppendedOptions(const kvtier_engine_options_t& in, EngineOptions* out) {
  for (const AppendedOption& field : kAppendedOptions) {
    const OptionSpec* spec = FindEngineOption(field.name);
    KV_CHECK(spec != nullptr);
    OptionValue value;
    switch (field.type) {
      case CField::kU32:
        value = uint64_t{FieldAt<uint32_t>(in, field.offset)};
        break;
      case CField::kU64:
        value = FieldAt<uint64_t>(in, field.offset);
        break;
      case CField::kI32:
        value = int64_t{FieldAt<int32_t>(in, field.offset)};
        break;
      case CField::kBool:
        value = FieldAt<uint32_t>(in, field.offset) != 0;
        break;
      case CField::kDouble:
        value = FieldAt<double>(in, field.offset);
        break;
      case CField::kEnum: {
        const int32_t raw = FieldAt<int32_t>(in, field.offset);
        std::string choice = ChoiceAt(spec->choices, raw);
        if (choice.empty()) {
          return Status::InvalidArgument(std::string(field.name) + " " + std::to_string(raw) +
                                         " is out of range");
        }
        value = std::move(choice);
        break;
      }
    }
    if (IsUnsetValue(*spec, value)) continue;  // 0 where 0 is not valid: the default.
    KV_RETURN_IF_ERROR(SetEngineOption(out, *spec, value));
  }
  return Status::Ok();
}

Result<EngineOptions> ConvertOptions(const kvtier_engine_options_t& in) {
  EngineOptions out;
  KV_ASSIGN_OR_RETURN(out.layout, ConvertLayout(in.layout, RawEnum(in.layout_kind)));
  if (in.model_name != nullptr) out.model.name = in.model_name;
  if (in.weights_digest != nullptr) {
    std::memcpy(out.model.weights_digest.data(), in.weights_digest,
                out.model.weights_digest.size());
  }
  out.device.capacity_bytes = in.device_bytes;
  out.host.capacity_bytes = in.host_bytes;
  out.host.numa_node = in.host_numa_node;
  if (in.ssd_dir_count > 0) {
    if (in.ssd_dirs == nullptr) {
      return Status::InvalidArgument("ssd_dirs is NULL but ssd_dir_count is " +
                                     std::to_string(in.ssd_dir_count));
    }
    SsdTierOptions ssd;
    for (size_t i = 0; i < in.ssd_dir_count; ++i) {
      if (in.ssd_dirs[i] == nullptr) {
        return Status::InvalidArgument("ssd_dirs[" + std::to_string(i) + "] is NULL");
      }
      ssd.dirs.emplace_back(in.ssd_dirs[i]);
    }
    if (in.ssd_bytes != 0) ssd.capacity_bytes = in.ssd_bytes;
    if (in.ssd_segment_bytes != 0) ssd.segment_bytes = in.ssd_segment_bytes;
    const int32_t sync = RawEnum(in.ssd_sync);
    if (sync < KVTIER_SSD_SYNC_NONE || sync > KVTIER_SSD_SYNC_PERIODIC) {
      return Status::InvalidArgument("ssd_sync " + std::to_string(sync) +
                                     " is not a kvtier_ssd_sync_t");
    }
    ssd.sync = static_cast<SsdSyncMode>(sync);
    KV_RETURN_IF_ERROR(LoadKeys(in.ssd_key_file, in.ssd_key_env, "ssd", &ssd.keyring));
    out.tiers.Emplace(kSsdTierName, std::move(ssd));
  }
  const int32_t write_policy = RawEnum(in.write_policy);
  switch (write_policy) {
    case KVTIER_WRITE_BACK:
      out.write_policy = WritePolicy::kWriteBack;
      break;
    case KVTIER_WRITE_THROUGH:
      out.write_policy = WritePolicy::kWriteThrough;
      break;
    default:
      return Status::InvalidArgument("write_policy " + std::to_string(write_policy) +
                                     " is not a kvtier_write_policy_t");
  }
  const int32_t codec = RawEnum(in.ssd_codec);
  // The codec registry's ids (codecs/codec_params.h): a new codec needs no change here.
  if (codec < static_cast<int32_t>(codecs::CodecId::kIdentity) ||
      codec > static_cast<int32_t>(codecs::kCodecIdLast)) {
    return Status::InvalidArgument("ssd_codec " + std::to_string(codec) +
                                   " is not a kvtier_codec_t");
  }
  // Zeros are the codec's defaults (shuffle-zstd level 1, int8/int4 groups of 32).
  out.ssd_codec = codecs::CodecParams{.codec = static_cast<codecs::CodecId>(codec),
                                      .zstd_level = in.ssd_codec_zstd_level,
                                      .group_size = in.ssd_codec_group_size}
                      .WithDefaults();
  KV_RETURN_IF_ERROR(out.ssd_codec.Validate().WithContext("ssd_codec"));
  out.default_ttl_ms = in.default_ttl_ms;
  out.worker_threads = in.worker_threads;
  out.sink_chunks = in.sink_chunks;
  out.promote_on_load = in.promote_on_load != 0;
  KV_ASSIGN_OR_RETURN(out.remote, ConvertRemoteOptions(in));
  out.prediction = ConvertPredictionOptions(in);
  KV_RETURN_IF_ERROR(ConvertAppendedOptions(in, &out));
  return out;
}

Status CheckEngine(const kvtier_engine_t* engine) {
  if (engine == nullptr || !engine->engine) return Status::InvalidArgument("engine is NULL");
  return Status::Ok();
}

// The engine and namespace checks every keyed call shares; returns the token span.
Result<std::span<const uint32_t>> CheckKeyed(const kvtier_engine_t* engine,
                                             const kvtier_namespace_t* ns, const uint32_t* tokens,
                                             size_t token_count) {
  KV_RETURN_IF_ERROR(CheckEngine(engine));
  if (ns == nullptr) return Status::InvalidArgument("ns is NULL");
  if (tokens == nullptr && token_count != 0) {
    return Status::InvalidArgument("tokens is NULL but token_count is " +
                                   std::to_string(token_count));
  }
  return std::span<const uint32_t>(tokens, tokens == nullptr ? 0 : token_count);
}

Namespace ToNamespace(const kvtier_namespace_t& ns) {
  Namespace out;
  std::memcpy(out.digest.data(), ns.digest, out.digest.size());
  return out;
}

Status CheckBlockArray(const kvtier_engine_t* engine, const void* array, size_t count,
                       std::string_view name) {
  const uint32_t layers = engine->layout.layers;
  if (array == nullptr || count == 0 || count % layers != 0) {
    return Status::InvalidArgument(std::string(name) + " must name a positive multiple of " +
                                   std::to_string(layers) + " (layers) blocks, got " +
                                   std::to_string(array == nullptr ? 0 : count));
  }
  return Status::Ok();
}

// Where the per-tier rows of the stats table live in C: fields of kvtier_tier_stats_t (those of
// ABI version 1), or arrays tier_<name>[KVTIER_STATS_TIERS_MAX] appended to kvtier_engine_stats_t.
// Together they name every row once (the checks below).
#define KVTIER_C_TIER_STRUCT_ROWS(X) \
  X(capacity_bytes) X(used_bytes) X(blocks) X(hits) X(evictions) X(writebacks) X(promotions)
#define KVTIER_C_TIER_ARRAY_ROWS(X) \
  X(write_failures) X(writeback_horizon_us) X(writeback_lag_us) X(write_bytes) X(staged_write_bytes)

void FillTierStats(const TierStats& in, size_t i, kvtier_engine_stats_t* out) {
  out->tiers[i].kind = static_cast<kvtier_tier_t>(in.kind);
  static_assert(KVTIER_TIER_NAME_BYTES > kTierNameMax);
  const std::string_view name = in.name.empty() ? TierKindName(in.kind) : in.name;
  const size_t n = std::min(name.size(), size_t{KVTIER_TIER_NAME_BYTES} - 1);
  std::memcpy(out->tier_names[i], name.data(), n);
  out->tier_names[i][n] = '\0';
#define KVTIER_C_COPY_IN_STRUCT(name) out->tiers[i].name = in.name;
#define KVTIER_C_COPY_TO_ARRAY(name) out->tier_##name[i] = in.name;
  KVTIER_C_TIER_STRUCT_ROWS(KVTIER_C_COPY_IN_STRUCT)
  KVTIER_C_TIER_ARRAY_ROWS(KVTIER_C_COPY_TO_ARRAY)
#undef KVTIER_C_COPY_IN_STRUCT
#undef KVTIER_C_COPY_TO_ARRAY
}

// The C stats structs against the stats table (stats_table.h): each row is a field of the row's
// name and type, and the structs hold no other field (the fields named here, sorted by offset,
// must follow each other with only alignment padding between and end where the struct does).
struct StructField {
  size_t offset, size, align;
};
template <size_t N>
constexpr bool FieldsTile(std::array<StructField, N> fields, size_t size, size_t align) {
  const auto round_up = [](size_t n, size_t a) { return (n + a - 1) / a * a; };
  std::sort(fields.begin(), fields.end(),
            [](const StructField& a, const StructField& b) { return a.offset < b.offset; });
  size_t end = 0;
  for (const StructField& f : fields) {
    if (f.offset != round_up(end, f.align)) return false;
    end = f.offset + f.size;
  }
  return round_up(end, align) == size;
}
#define KVTIER_C_FIELD(Struct, member) \
  StructField{offsetof(Struct, member), sizeof(Struct::member), alignof(decltype(Struct::member))},
#define KVTIER_C_ENGINE_ROW(name, type, kind, unit, scope, help) \
  KVTIER_STATS_CHECK_MIRROR_ROW(kvtier_engine_stats_t, name, type)
#define KVTIER_C_STRUCT_ROW(name) \
  KVTIER_STATS_CHECK_MIRROR_ROW(kvtier_tier_stats_t, name, decltype(TierStats::name))
#define KVTIER_C_ARRAY_ROW(name)                                                   \
  static_assert(std::is_same_v<decltype(kvtier_engine_stats_t::tier_##name),       \
                               decltype(TierStats::name)[KVTIER_STATS_TIERS_MAX]>, \
                "kvtier_engine_stats_t::tier_" #name " is not an array of the row's type");
#define KVTIER_C_REMOTE_ROW(name, type, kind, unit, scope, help) \
  KVTIER_STATS_CHECK_MIRROR_ROW(kvtier_remote_stats_t, name, type)
KVTIER_ENGINE_STATS(KVTIER_C_ENGINE_ROW)
KVTIER_REMOTE_STORE_STATS(KVTIER_C_REMOTE_ROW)
KVTIER_C_TIER_STRUCT_ROWS(KVTIER_C_STRUCT_ROW)
KVTIER_C_TIER_ARRAY_ROWS(KVTIER_C_ARRAY_ROW)
#define KVTIER_C_COUNT(name) +1
static_assert(0 KVTIER_C_TIER_STRUCT_ROWS(KVTIER_C_COUNT)
                      KVTIER_C_TIER_ARRAY_ROWS(KVTIER_C_COUNT) == stats_internal::kTierRows,
              "a per-tier row of the stats table is in neither C place (struct or array)");
#define KVTIER_C_ENGINE_FIELD(name, type, kind, unit, scope, help) \
  KVTIER_C_FIELD(kvtier_engine_stats_t, name)
#define KVTIER_C_REMOTE_FIELD(name, type, kind, unit, scope, help) \
  KVTIER_C_FIELD(kvtier_remote_stats_t, name)
#define KVTIER_C_ARRAY_FIELD(name) KVTIER_C_FIELD(kvtier_engine_stats_t, tier_##name)
#define KVTIER_C_STRUCT_FIELD(name) KVTIER_C_FIELD(kvtier_tier_stats_t, name)
// A list built from macros, which clang-format would lay out as nested calls.
// clang-format off
static_assert(FieldsTile(std::to_array<StructField>({
                             KVTIER_C_FIELD(kvtier_engine_stats_t, struct_size)
                             KVTIER_C_FIELD(kvtier_engine_stats_t, tier_count)
                             KVTIER_C_FIELD(kvtier_engine_stats_t, tiers)
                             KVTIER_C_FIELD(kvtier_engine_stats_t, has_remote)
                             KVTIER_C_FIELD(kvtier_engine_stats_t, remote)
                             KVTIER_C_FIELD(kvtier_engine_stats_t, tier_names)
                             KVTIER_ENGINE_STATS(KVTIER_C_ENGINE_FIELD)
                             KVTIER_C_TIER_ARRAY_ROWS(KVTIER_C_ARRAY_FIELD)}),
                         sizeof(kvtier_engine_stats_t), alignof(kvtier_engine_stats_t)),
              "kvtier_engine_stats_t has a field that is not a row of the stats table");
// clang-format on
static_assert(
    FieldsTile(std::to_array<StructField>({KVTIER_C_FIELD(kvtier_tier_stats_t, kind)
                                               KVTIER_C_TIER_STRUCT_ROWS(KVTIER_C_STRUCT_FIELD)}),
               sizeof(kvtier_tier_stats_t), alignof(kvtier_tier_stats_t)),
    "kvtier_tier_stats_t has a field that is not a row of the stats table");
static_assert(
    FieldsTile(std::to_array<StructField>({KVTIER_REMOTE_STORE_STATS(KVTIER_C_REMOTE_FIELD)}),
               sizeof(kvtier_remote_stats_t), alignof(kvtier_remote_stats_t)),
    "kvtier_remote_stats_t has a field that is not a row of the stats table");
static_assert(KVTIER_BREAKER_HALF_OPEN == static_cast<int>(BreakerState::kHalfOpen) &&
              KVTIER_BREAKER_OPEN == static_cast<int>(BreakerState::kOpen));
#undef KVTIER_C_FIELD
#undef KVTIER_C_REMOTE_ROW
#undef KVTIER_C_REMOTE_FIELD
#undef KVTIER_C_ENGINE_ROW
#undef KVTIER_C_STRUCT_ROW
#undef KVTIER_C_ARRAY_ROW
#undef KVTIER_C_COUNT
#undef KVTIER_C_ENGINE_FIELD
#undef KVTIER_C_ARRAY_FIELD
#undef KVTIER_C_STRUCT_FIELD

}  // namespace
}  // namespace kvtier

using kvtier::Guard;
using kvtier::Status;

extern "C" {

uint32_t kvtier_abi_version(void) { return KVTIER_ABI_VERSION; }

const char* kvtier_version_string(void) { return kvtier::kVersionString; }

const char* kvtier_status_name(kvtier_status_t code) {
  const int32_t value = kvtier::RawEnum(code);
  if (value == KVTIER_INTERNAL) return "Internal";
  if (value < KVTIER_OK || value > KVTIER_UNAVAILABLE) return "Unknown";
  // StatusCodeName returns views of string literals: NUL-terminated static storage.
  return kvtier::StatusCodeName(static_cast<kvtier::StatusCode>(value)).data();
}

void kvtier_engine_options_init(kvtier_engine_options_t* options) {
  if (options == nullptr) return;
  std::memset(static_cast<void*>(options), 0, sizeof(*options));
  options->struct_size = sizeof(*options);
  options->layout.dtype = KVTIER_DTYPE_F16;
  options->layout.block_tokens = 256;
  options->host_numa_node = -1;
  options->ssd_sync = KVTIER_SSD_SYNC_PER_BATCH;
  options->write_policy = KVTIER_WRITE_BACK;
  options->ssd_codec = KVTIER_CODEC_IDENTITY;
  const kvtier::EngineOptions defaults;
  options->worker_threads = defaults.worker_threads;
  options->sink_chunks = defaults.sink_chunks;
  options->promote_on_load = defaults.promote_on_load ? 1 : 0;
  options->remote_write_policy = KVTIER_WRITE_THROUGH;
  const kvtier::PredictionOptions prediction;
  options->prediction_enabled = prediction.enabled ? 1 : 0;
  options->prediction_window = prediction.window;
  options->prediction_successors_max = prediction.successors_max;
  options->prediction_sessions_max = prediction.sessions_max;
  options->prediction_session_chunks_max = prediction.session_chunks_max;
  options->prediction_predict_k = prediction.predict_k;
  options->prediction_blocks_max = prediction.blocks_max;
  options->log_min_level = KVTIER_LOG_INFO;
  // The appended options' defaults: the engine's own.
  options->device_copy_threads = defaults.device.copy_threads;
  options->device_copy_queue_max = defaults.device.copy_queue_max;
  options->device_backend = static_cast<kvtier_device_backend_t>(defaults.device_backend);
  options->cuda_device = defaults.cuda_device;
  options->host_huge_pages = static_cast<kvtier_huge_pages_t>(defaults.host.huge_pages);
  options->host_lock = static_cast<kvtier_memory_lock_t>(defaults.host.lock);
  options->host_prefault = defaults.host.prefault ? 1 : 0;
  options->cxl_numa_node = defaults.host.numa_node;
  options->cxl_huge_pages = options->host_huge_pages;
  options->cxl_lock = options->host_lock;
  options->cxl_prefault = options->host_prefault;
  const kvtier::SsdTierOptions ssd;
  options->ssd_sync_interval_ms = ssd.sync_interval_ms;
  options->ssd_checkpoint_interval_ms = ssd.checkpoint_interval_ms;
  options->ssd_io_depth = ssd.io_depth;
  options->ssd_io_backend = static_cast<kvtier_io_backend_t>(ssd.io_backend);
  options->ssd_direct_io = static_cast<kvtier_direct_io_t>(ssd.direct_io);
  options->ssd_queue_jobs_max = ssd.queue_jobs_max;
  options->ssd_staging_buffer_bytes = ssd.staging_buffer_bytes;
  options->ssd_staging_buffers = ssd.staging_buffers;
  options->ssd_write_stall_ms_max = ssd.write_stall_ms_max;
  options->ssd_admission = static_cast<kvtier_admission_t>(ssd.admission);
  options->ssd_admission_requests = ssd.admission_requests;
  options->ssd_admission_slots = ssd.admission_slots;
  options->ssd_write_budget_bytes_per_s = ssd.write_budget_bytes_per_s;
  options->ssd_write_budget_burst_bytes = ssd.write_budget_burst_bytes;
  options->ssd_file_mode = ssd.file_mode;
  options->writeback_dirty_fraction = defaults.writeback_dirty_fraction;
  options->staging_buffers = defaults.staging_buffers;
  const kvtier::RedisStoreOptions redis;
  options->remote_breaker_failures_to_open = redis.breaker.failures_to_open;
  options->remote_breaker_open_cooldown_us = redis.breaker.open_cooldown_us;
  options->remote_redirects_max = redis.redirects_max;
  options->remote_topology_refresh_interval_us = redis.topology_refresh_interval_us;
  const kvtier::RemoteTierOptions remote;
  options->remote_admission = static_cast<kvtier_admission_t>(remote.admission);
  options->remote_admission_requests = remote.admission_requests;
  options->remote_admission_slots = remote.admission_slots;
  options->remote_write_budget_bytes_per_s = remote.write_budget_bytes_per_s;
  options->remote_write_budget_burst_bytes = remote.write_budget_burst_bytes;
  options->remote_promote_on_load = remote.promote_on_load ? 1 : 0;
  options->remote_io_threads = remote.io_threads;
  options->writeback_age_ms_max = defaults.writeback_age_ms_max;
}

kvtier_status_t kvtier_derive_tenant_salt(const char* tenant_id, const void* secret,
                                          size_t secret_bytes, char salt_out[65],
                                          kvtier_error_t* err) {
  return Guard(err, [&]() -> Status {
    if (tenant_id == nullptr || secret == nullptr || salt_out == nullptr) {
      return Status::InvalidArgument("tenant_id, secret and salt_out must not be NULL");
    }
    KV_ASSIGN_OR_RETURN(
        const std::string salt,
        kvtier::DeriveTenantSalt(tenant_id, {static_cast<const std::byte*>(secret), secret_bytes}));
    std::memcpy(salt_out, salt.c_str(), salt.size() + 1);
    return Status::Ok();
  });
}

kvtier_status_t kvtier_layout_block_bytes(const kvtier_layout_t* layout, uint64_t* block_bytes,
                                          kvtier_error_t* err) {
  return Guard(err, [&]() -> Status {
    if (layout == nullptr || block_bytes == nullptr) {
      return Status::InvalidArgument("layout and block_bytes must not be NULL");
    }
    KV_ASSIGN_OR_RETURN(const kvtier::KvLayout converted,
                        kvtier::ConvertLayout(*layout, KVTIER_LAYOUT_KV));
    *block_bytes = converted.BlockBytes();
    return Status::Ok();
  });
}

kvtier_status_t kvtier_layout_kind_block_bytes(const kvtier_layout_t* layout,
                                               kvtier_layout_kind_t kind, uint64_t* block_bytes,
                                               kvtier_error_t* err) {
  return Guard(err, [&]() -> Status {
    if (layout == nullptr || block_bytes == nullptr) {
      return Status::InvalidArgument("layout and block_bytes must not be NULL");
    }
    KV_ASSIGN_OR_RETURN(const kvtier::KvLayout converted,
                        kvtier::ConvertLayout(*layout, kvtier::RawEnum(kind)));
    *block_bytes = converted.BlockBytes();
    return Status::Ok();
  });
}

kvtier_status_t kvtier_engine_open(const kvtier_engine_options_t* options, kvtier_engine_t** engine,
                                   kvtier_error_t* err) {
  return Guard(err, [&]() -> Status {
    if (options == nullptr || engine == nullptr) {
      return Status::InvalidArgument("options and engine must not be NULL");
    }
    *engine = nullptr;
    kvtier_engine_options_t in;
    kvtier_engine_options_init(&in);
    KV_RETURN_IF_ERROR(
        kvtier::ReadVersioned(options, kvtier::kEngineOptionsV1Bytes, &in, "engine options"));
    KV_ASSIGN_OR_RETURN(kvtier::EngineOptions converted, kvtier::ConvertOptions(in));
    const int32_t min_level = kvtier::RawEnum(in.log_min_level);
    if (min_level < KVTIER_LOG_DEBUG || min_level > KVTIER_LOG_ERROR) {
      return Status::InvalidArgument("log_min_level " + std::to_string(min_level) +
                                     " is not a kvtier_log_level_t");
    }
    auto handle = std::make_unique<kvtier_engine_s>();
    if (in.log_fn != nullptr) {
      handle->logger =
          std::make_unique<CallbackLogger>(in.log_fn, in.log_context, in.log_min_level);
      converted.logger = handle->logger.get();
    }
    KV_ASSIGN_OR_RETURN(std::unique_ptr<kvtier::Engine> opened, kvtier::Engine::Open(converted));
    handle->layout = converted.layout;
    handle->block_bytes = converted.layout.BlockBytes();
    handle->engine = std::move(opened);
    *engine = handle.release();
    return Status::Ok();
  });
}

void kvtier_connect_options_init(kvtier_connect_options_t* options) {
  if (options == nullptr) return;
  std::memset(static_cast<void*>(options), 0, sizeof(*options));
  options->struct_size = sizeof(*options);
  options->log_min_level = KVTIER_LOG_INFO;
}

kvtier_status_t kvtier_engine_connect(const char* socket, const kvtier_connect_options_t* options,
                                      kvtier_engine_t** engine, kvtier_error_t* err) {
  return Guard(err, [&]() -> Status {
    if (socket == nullptr || engine == nullptr) {
      return Status::InvalidArgument("socket and engine must not be NULL");
    }
    *engine = nullptr;
    kvtier_connect_options_t in;
    kvtier_connect_options_init(&in);
    if (options != nullptr) {
      KV_RETURN_IF_ERROR(
          kvtier::ReadVersioned(options, kvtier::kConnectOptionsV1Bytes, &in, "connect options"));
    }
    const int32_t min_level = kvtier::RawEnum(in.log_min_level);
    if (min_level < KVTIER_LOG_DEBUG || min_level > KVTIER_LOG_ERROR) {
      return Status::InvalidArgument("log_min_level " + std::to_string(min_level) +
                                     " is not a kvtier_log_level_t");
    }
    kvtier::serve::ClientOptions client;
    client.socket_path = socket;
    if (in.token != nullptr) client.token = in.token;
    if (in.name != nullptr) client.name = in.name;
    if (in.layout != nullptr) {
      KV_ASSIGN_OR_RETURN(client.layout,
                          kvtier::ConvertLayout(*in.layout, kvtier::RawEnum(in.layout_kind)));
    }
    if (in.timeout_ms != 0) client.timeout_ms = in.timeout_ms;
    if (in.reconnect_interval_ms != 0) client.reconnect_interval_ms = in.reconnect_interval_ms;
    auto handle = std::make_unique<kvtier_engine_s>();
    if (in.log_fn != nullptr) {
      handle->logger =
          std::make_unique<CallbackLogger>(in.log_fn, in.log_context, in.log_min_level);
      client.logger = handle->logger.get();
    }
    KV_ASSIGN_OR_RETURN(std::unique_ptr<kvtier::serve::RemoteEngine> remote,
                        kvtier::serve::Connect(client));
    handle->layout = remote->options().layout;  // The service's.
    handle->block_bytes = handle->layout.BlockBytes();
    handle->engine = std::move(remote);
    *engine = handle.release();
    return Status::Ok();
  });
}

void kvtier_engine_close(kvtier_engine_t* engine) {
  // The destructor of the last owner shuts the engine down; nothing there throws.
  delete engine;
}

void kvtier_engine_layout(const kvtier_engine_t* engine, kvtier_layout_t* layout) {
  if (engine == nullptr || layout == nullptr) return;
  layout->layers = engine->layout.layers;
  layout->kv_heads = engine->layout.kv_heads;
  layout->head_dim = engine->layout.head_dim;
  layout->dtype = static_cast<kvtier_dtype_t>(engine->layout.dtype);
  layout->block_tokens = engine->layout.block_tokens;
}

uint64_t kvtier_engine_block_bytes(const kvtier_engine_t* engine) {
  return engine == nullptr ? 0 : engine->block_bytes;
}

kvtier_layout_kind_t kvtier_engine_layout_kind(const kvtier_engine_t* engine) {
  if (engine == nullptr || engine->layout.kind == kvtier::LayoutKind::kKv) return KVTIER_LAYOUT_KV;
  return KVTIER_LAYOUT_LATENT;
}

kvtier_status_t kvtier_make_namespace(kvtier_engine_t* engine, const void* salt, size_t salt_len,
                                      const char* const* extra_keys, const size_t* extra_key_lens,
                                      size_t extra_key_count, kvtier_namespace_t* ns,
                                      kvtier_error_t* err) {
  return Guard(err, [&]() -> Status {
    KV_RETURN_IF_ERROR(kvtier::CheckEngine(engine));
    if (ns == nullptr) return Status::InvalidArgument("ns is NULL");
    if (salt == nullptr && salt_len != 0) return Status::InvalidArgument("salt is NULL");
    if (extra_keys == nullptr && extra_key_count != 0) {
      return Status::InvalidArgument("extra_keys is NULL");
    }
    std::vector<std::string> keys;
    keys.reserve(extra_key_count);
    for (size_t i = 0; i < extra_key_count; ++i) {
      if (extra_keys[i] == nullptr) {
        return Status::InvalidArgument("extra_keys[" + std::to_string(i) + "] is NULL");
      }
      keys.emplace_back(extra_keys[i],
                        extra_key_lens != nullptr ? extra_key_lens[i] : std::strlen(extra_keys[i]));
    }
    const std::string_view salt_view(static_cast<const char*>(salt),
                                     salt == nullptr ? 0 : salt_len);
    KV_ASSIGN_OR_RETURN(const kvtier::Namespace made,
                        engine->engine->MakeNamespace(salt_view, keys));
    std::memcpy(ns->digest, made.digest.data(), sizeof(ns->digest));
    return Status::Ok();
  });
}

kvtier_status_t kvtier_lookup(kvtier_engine_t* engine, const kvtier_namespace_t* ns,
                              const uint32_t* tokens, size_t token_count, size_t* matched_tokens,
                              kvtier_tier_t* chunk_tiers, size_t chunk_tiers_capacity,
                              kvtier_error_t* err) {
  return kvtier_lookup_with_options(engine, ns, tokens, token_count, nullptr, matched_tokens,
                                    chunk_tiers, chunk_tiers_capacity, err);
}

void kvtier_lookup_options_init(kvtier_lookup_options_t* options) {
  if (options == nullptr) return;
  std::memset(static_cast<void*>(options), 0, sizeof(*options));
  options->struct_size = sizeof(*options);
}

kvtier_status_t kvtier_lookup_with_options(kvtier_engine_t* engine, const kvtier_namespace_t* ns,
                                           const uint32_t* tokens, size_t token_count,
                                           const kvtier_lookup_options_t* options,
                                           size_t* matched_tokens, kvtier_tier_t* chunk_tiers,
                                           size_t chunk_tiers_capacity, kvtier_error_t* err) {
  return Guard(err, [&]() -> Status {
    KV_ASSIGN_OR_RETURN(auto span, kvtier::CheckKeyed(engine, ns, tokens, token_count));
    if (matched_tokens == nullptr) return Status::InvalidArgument("matched_tokens is NULL");
    kvtier_lookup_options_t in;
    kvtier_lookup_options_init(&in);
    if (options != nullptr) {
      KV_RETURN_IF_ERROR(
          kvtier::ReadVersioned(options, kvtier::kLookupOptionsV1Bytes, &in, "lookup options"));
    }
    KV_ASSIGN_OR_RETURN(
        const kvtier::LookupResult result,
        engine->engine->Lookup(kvtier::ToNamespace(*ns), span, {.session_id = in.session_id}));
    *matched_tokens = result.matched_tokens;
    if (chunk_tiers != nullptr) {
      const size_t n = std::min(chunk_tiers_capacity, result.chunk_tiers.size());
      for (size_t i = 0; i < n; ++i) {
        chunk_tiers[i] = static_cast<kvtier_tier_t>(result.chunk_tiers[i]);
      }
    }
    return Status::Ok();
  });
}

kvtier_status_t kvtier_load(kvtier_engine_t* engine, const kvtier_namespace_t* ns,
                            const uint32_t* tokens, size_t token_count, void* const* dst,
                            size_t dst_count, kvtier_load_t** load, kvtier_error_t* err) {
  return Guard(err, [&]() -> Status {
    KV_ASSIGN_OR_RETURN(auto span, kvtier::CheckKeyed(engine, ns, tokens, token_count));
    if (load == nullptr) return Status::InvalidArgument("load is NULL");
    *load = nullptr;
    KV_RETURN_IF_ERROR(kvtier::CheckBlockArray(engine, dst, dst_count, "dst"));
    std::vector<std::span<std::byte>> blocks;
    blocks.reserve(dst_count);
    for (size_t i = 0; i < dst_count; ++i) {
      if (dst[i] == nullptr) {
        return Status::InvalidArgument("dst[" + std::to_string(i) + "] is NULL");
      }
      blocks.emplace_back(static_cast<std::byte*>(dst[i]), engine->block_bytes);
    }
    KV_ASSIGN_OR_RETURN(std::unique_ptr<kvtier::LoadHandle> started,
                        engine->engine->Load(kvtier::ToNamespace(*ns), span, blocks));
    auto handle = std::make_unique<kvtier_load_s>();
    handle->engine = engine->engine;
    handle->handle = std::move(started);
    *load = handle.release();
    return Status::Ok();
  });
}

kvtier_status_t kvtier_load_wait_layer(kvtier_load_t* load, uint32_t layer, kvtier_error_t* err) {
  return Guard(err, [&]() -> Status {
    if (load == nullptr) return Status::InvalidArgument("load is NULL");
    return load->handle->WaitLayer(layer);
  });
}

int kvtier_load_layer_ready(kvtier_load_t* load, uint32_t layer) {
  return load != nullptr && load->handle->LayerReady(layer) ? 1 : 0;
}

kvtier_status_t kvtier_load_wait(kvtier_load_t* load, kvtier_error_t* err) {
  return Guard(err, [&]() -> Status {
    if (load == nullptr) return Status::InvalidArgument("load is NULL");
    return load->handle->Wait();
  });
}

size_t kvtier_load_chunks(const kvtier_load_t* load) {
  return load == nullptr ? 0 : load->handle->chunks();
}

void kvtier_load_destroy(kvtier_load_t* load) { delete load; }

void kvtier_store_options_init(kvtier_store_options_t* options) {
  if (options == nullptr) return;
  std::memset(static_cast<void*>(options), 0, sizeof(*options));
  options->struct_size = sizeof(*options);
  options->priority = KVTIER_PRIORITY_NORMAL;
}

kvtier_status_t kvtier_store(kvtier_engine_t* engine, const kvtier_namespace_t* ns,
                             const uint32_t* tokens, size_t token_count, const void* const* src,
                             size_t src_count, const kvtier_store_options_t* options,
                             kvtier_store_t** store, kvtier_error_t* err) {
  return Guard(err, [&]() -> Status {
    KV_ASSIGN_OR_RETURN(auto span, kvtier::CheckKeyed(engine, ns, tokens, token_count));
    if (store == nullptr) return Status::InvalidArgument("store is NULL");
    *store = nullptr;
    KV_RETURN_IF_ERROR(kvtier::CheckBlockArray(engine, src, src_count, "src"));
    kvtier_store_options_t in;
    kvtier_store_options_init(&in);
    if (options != nullptr) {
      KV_RETURN_IF_ERROR(
          kvtier::ReadVersioned(options, kvtier::kStoreOptionsV1Bytes, &in, "store options"));
    }
    const int32_t priority = kvtier::RawEnum(in.priority);
    if (priority < KVTIER_PRIORITY_NORMAL || priority > KVTIER_PRIORITY_PINNED_PROMPT) {
      return Status::InvalidArgument("store priority " + std::to_string(priority) +
                                     " is not a kvtier_priority_t");
    }
    const kvtier::StoreOptions store_options{
        .priority = static_cast<kvtier::BlockPriority>(priority), .ttl_ms = in.ttl_ms};
    std::vector<std::span<const std::byte>> blocks;
    blocks.reserve(src_count);
    for (size_t i = 0; i < src_count; ++i) {
      if (src[i] == nullptr) {
        return Status::InvalidArgument("src[" + std::to_string(i) + "] is NULL");
      }
      blocks.emplace_back(static_cast<const std::byte*>(src[i]), engine->block_bytes);
    }
    KV_ASSIGN_OR_RETURN(
        std::unique_ptr<kvtier::StoreHandle> started,
        engine->engine->Store(kvtier::ToNamespace(*ns), span, blocks, store_options));
    auto handle = std::make_unique<kvtier_store_s>();
    handle->engine = engine->engine;
    handle->handle = std::move(started);
    *store = handle.release();
    return Status::Ok();
  });
}

kvtier_status_t kvtier_store_wait(kvtier_store_t* store, kvtier_error_t* err) {
  return Guard(err, [&]() -> Status {
    if (store == nullptr) return Status::InvalidArgument("store is NULL");
    return store->handle->Wait();
  });
}

size_t kvtier_store_chunks_stored(const kvtier_store_t* store) {
  return store == nullptr ? 0 : store->handle->chunks_stored();
}

void kvtier_store_destroy(kvtier_store_t* store) { delete store; }

kvtier_status_t kvtier_prefetch(kvtier_engine_t* engine, const kvtier_namespace_t* ns,
                                const uint32_t* tokens, size_t token_count, kvtier_error_t* err) {
  return Guard(err, [&]() -> Status {
    KV_ASSIGN_OR_RETURN(auto span, kvtier::CheckKeyed(engine, ns, tokens, token_count));
    return engine->engine->Prefetch(kvtier::ToNamespace(*ns), span);
  });
}

kvtier_status_t kvtier_hint(kvtier_engine_t* engine, const kvtier_namespace_t* ns,
                            const uint32_t* tokens, size_t token_count, uint64_t session_id,
                            kvtier_error_t* err) {
  return Guard(err, [&]() -> Status {
    KV_ASSIGN_OR_RETURN(auto span, kvtier::CheckKeyed(engine, ns, tokens, token_count));
    return engine->engine->Hint(kvtier::ToNamespace(*ns), span, session_id);
  });
}

kvtier_status_t kvtier_pin(kvtier_engine_t* engine, const kvtier_namespace_t* ns,
                           const uint32_t* tokens, size_t token_count, kvtier_pin_t** pin,
                           kvtier_error_t* err) {
  return Guard(err, [&]() -> Status {
    KV_ASSIGN_OR_RETURN(auto span, kvtier::CheckKeyed(engine, ns, tokens, token_count));
    if (pin == nullptr) return Status::InvalidArgument("pin is NULL");
    *pin = nullptr;
    KV_ASSIGN_OR_RETURN(kvtier::PinHandle pinned,
                        engine->engine->Pin(kvtier::ToNamespace(*ns), span));
    auto handle = std::make_unique<kvtier_pin_s>();
    handle->engine = engine->engine;
    handle->pin = std::move(pinned);
    *pin = handle.release();
    return Status::Ok();
  });
}

size_t kvtier_pin_chunks(const kvtier_pin_t* pin) { return pin == nullptr ? 0 : pin->pin.chunks(); }

void kvtier_unpin(kvtier_pin_t* pin) { delete pin; }

kvtier_status_t kvtier_flush(kvtier_engine_t* engine, kvtier_error_t* err) {
  return Guard(err, [&]() -> Status {
    KV_RETURN_IF_ERROR(kvtier::CheckEngine(engine));
    return engine->engine->Flush();
  });
}

void kvtier_stats_init(kvtier_engine_stats_t* stats) {
  if (stats == nullptr) return;
  std::memset(static_cast<void*>(stats), 0, sizeof(*stats));
  stats->struct_size = sizeof(*stats);
}

kvtier_status_t kvtier_metrics_text(kvtier_engine_t* engine, char* buf, size_t capacity,
                                    size_t* needed, kvtier_error_t* err) {
  return Guard(err, [&]() -> Status {
    KV_RETURN_IF_ERROR(kvtier::CheckEngine(engine));
    const std::string text = engine->engine->MetricsText();
    if (needed != nullptr) *needed = text.size() + 1;
    if (buf == nullptr || capacity < text.size() + 1) {
      return Status::NoSpace("metrics text needs " + std::to_string(text.size() + 1) +
                             " bytes; the buffer has " + std::to_string(buf ? capacity : 0));
    }
    std::memcpy(buf, text.c_str(), text.size() + 1);
    return Status::Ok();
  });
}

kvtier_status_t kvtier_engine_stats(kvtier_engine_t* engine, kvtier_engine_stats_t* stats,
                                    kvtier_error_t* err) {
  return Guard(err, [&]() -> Status {
    KV_RETURN_IF_ERROR(kvtier::CheckEngine(engine));
    if (stats == nullptr) return Status::InvalidArgument("stats is NULL");
    const size_t size = stats->struct_size;
    KV_RETURN_IF_ERROR(kvtier::CheckStructSize(size, kvtier::kStatsV1Bytes, "stats"));
    const kvtier::EngineStats in = engine->engine->Stats();
    kvtier_engine_stats_t out;
    kvtier_stats_init(&out);
    kvtier::CopyEngineStatRows(in, &out);
    const size_t tiers = std::min<size_t>(in.tiers.size(), KVTIER_STATS_TIERS_MAX);
    out.tier_count = static_cast<uint32_t>(tiers);
    for (size_t i = 0; i < tiers; ++i) kvtier::FillTierStats(in.tiers[i], i, &out);
    out.has_remote = in.remote.has_value() ? 1 : 0;
    if (in.remote.has_value()) kvtier::CopyRemoteStoreStatRows(*in.remote, &out.remote);
    // Only the caller's struct_size bytes are written: a caller built against an older, smaller
    // header has no room for the fields appended since. Fields appended after the caller's header
    // keep whatever the caller had (nothing is known about them); struct_size keeps its value.
    out.struct_size = size;
    std::memcpy(static_cast<void*>(stats), &out, std::min(size, sizeof(out)));
    return Status::Ok();
  });
}

}  // extern "C"
