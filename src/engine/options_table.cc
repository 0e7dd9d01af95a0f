// The options table (options_table.h): its rows, the checked setter, and docs/options.md.
#include "engine/options_table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "codecs/codec_params.h"
#include "core/limits.h"
#include "core/thread_priority.h"

namespace kvtier {
namespace {

constexpr double kBytesMax = 1125899906842624.0;  // 1 PiB: a bound for flags, not the engine's.
constexpr double kMsHour = 3600.0 * 1000;
constexpr double kUsHour = 3600.0 * 1000 * 1000;
constexpr double kNumaNodeMax = 1023;

uint64_t U(const OptionValue& v) { return std::get<uint64_t>(v); }
uint32_t U32(const OptionValue& v) { return static_cast<uint32_t>(std::get<uint64_t>(v)); }
int32_t I32(const OptionValue& v) { return static_cast<int32_t>(std::get<int64_t>(v)); }
bool B(const OptionValue& v) { return std::get<bool>(v); }
const std::string& S(const OptionValue& v) { return std::get<std::string>(v); }

// kChoice values map to their enums by position in `choices` (the enums are ordered so; the
// value was checked to be one of them).
template <typename E>
E Pick(std::string_view choices, const OptionValue& v) {
  const std::vector<std::string_view> items = OptionList(choices);
  return static_cast<E>(std::find(items.begin(), items.end(), S(v)) - items.begin());
}

WritePolicy Policy(const OptionValue& v) {
  return S(v) == "through" ? WritePolicy::kWriteThrough : WritePolicy::kWriteBack;
}

// A setting of a tier the options may lack: applied only when the tier is there.
template <typename F>
Status OnSsd(EngineOptions& o, F f) {
  if (o.ssd.has_value()) f(*o.ssd);
  return Status::Ok();
}
template <typename F>
Status OnCxl(EngineOptions& o, F f) {
  if (o.cxl.has_value()) f(*o.cxl);
  return Status::Ok();
}
template <typename F>
Status OnRemote(EngineOptions& o, F f) {
  if (o.remote.has_value()) f(*o.remote);
  return Status::Ok();
}
template <typename F>
Status OnRedis(EngineOptions& o, F f) {
  if (o.remote.has_value() && o.remote->redis.has_value()) f(*o.remote->redis);
  return Status::Ok();
}
template <typename F>
Status OnFs(EngineOptions& o, F f) {
  if (o.remote.has_value() && o.remote->fs.has_value()) f(*o.remote->fs);
  return Status::Ok();
}

// The codec with one of its parameters changed, re-derived as ParseCodecParams does (0: the
// codec's default level or group size).
Status SetCodec(EngineOptions& o, const std::string& name, int level, uint32_t group) {
  Result<codecs::CodecParams> params = codecs::ParseCodecParams(name, level, group);
  if (!params.ok()) return params.status().WithContext("ssd_codec");
  o.ssd_codec = *params;
  return Status::Ok();
}
std::string CodecNameOf(const EngineOptions& o) { return codecs::CodecName(o.ssd_codec.codec); }

constexpr std::string_view kHugePages = "off|if_available";
constexpr std::string_view kLock = "off|if_permitted|required";
constexpr std::string_view kAdmission = "always|after_requests";
constexpr std::string_view kPolicy = "back|through";
constexpr std::string_view kCliGeometry =
    "Not a CLI flag: run and chat take the model's identity and geometry from the model file";
constexpr std::string_view kKeyEnvNote =
    "C and Python: the name of an environment variable holding the key file's text (the library "
    "itself never reads the environment); C++ callers pass the text itself, the CLI a file";
constexpr std::string_view kKeyTextNote =
    "C++ only: C and Python callers name a variable instead (*_key_env), so that key text never "
    "sits in an argument list, and the CLI reads a file";
constexpr std::string_view kFsNote =
    "Python, the CLI, its config file and kvtier serve (so C and C++ programs through "
    "kvtier_engine_connect / Engine::Connect); not in the fixed C struct or the public C++ "
    "options yet";

constexpr OptionSpec kTable[] = {
    // ---- Identity and geometry ----
    {.name = "layout", .type = OptionType::kLayout, .default_text = "required",
     .surfaces = kSurfaceCpp | kSurfaceC | kSurfacePython, .cpp_field = "layout",
     .doc = "KV geometry (layers, kv_heads, head_dim, dtype, block_tokens); enters every key",
     .note = "Not a CLI flag: run and chat read the geometry from the model file (--block-tokens "
             "sets the chunk size)"},
    {.name = "model_name", .type = OptionType::kString, .default_text = "\"\"",
     .surfaces = kSurfaceCpp | kSurfaceC | kSurfacePython, .cpp_field = "model_name",
     .doc = "The model's name; enters every key", .note = kCliGeometry,
     .set = [](EngineOptions& o, const OptionValue& v) {
       o.model.name = S(v);
       return Status::Ok();
     }},
    {.name = "weights_digest", .type = OptionType::kDigest, .default_text = "zeros",
     .surfaces = kSurfaceCpp | kSurfaceC | kSurfacePython, .cpp_field = "weights_digest",
     .doc = "SHA-256 of the weights (32 bytes); enters every key",
     .note = "Not a CLI flag: run and chat hash the model file's weights themselves"},
    // ---- Device tier ----
    {.name = "device_bytes", .type = OptionType::kBytes, .default_text = "0", .min = 0,
     .max = kBytesMax, .unit = "bytes", .cpp_field = "device.capacity_bytes",
     .doc = "Device tier capacity; 0: no device tier",
     .set = [](EngineOptions& o, const OptionValue& v) {
       o.device.capacity_bytes = U(v);
       return Status::Ok();
     }},
    {.name = "device_copy_threads", .type = OptionType::kUint, .default_text = "1", .min = 1,
     .max = 64, .cpp_field = "device.copy_threads",
     .doc = "CPU device backend: copy threads per copy kind",
     .set = [](EngineOptions& o, const OptionValue& v) {
       o.device.copy_threads = U32(v);
       return Status::Ok();
     }},
    {.name = "device_copy_queue_max", .type = OptionType::kUint, .default_text = "1024",
     .min = 1, .max = 1 << 20, .cpp_field = "device.copy_queue_max",
     .doc = "Copy regions queued per copy kind before a copy blocks",
     .set = [](EngineOptions& o, const OptionValue& v) {
       o.device.copy_queue_max = U32(v);
       return Status::Ok();
     }},
    {.name = "device_backend", .type = OptionType::kChoice, .default_text = "auto",
     .choices = "auto|cpu|cuda", .cpp_field = "device_backend",
     .doc = "Device and host tiers' implementation: cuda when built with it and a GPU is usable",
     .set = [](EngineOptions& o, const OptionValue& v) {
       o.device_backend = Pick<DeviceBackend>("auto|cpu|cuda", v);
       return Status::Ok();
     }},
    {.name = "cuda_device", .type = OptionType::kInt, .default_text = "0", .min = 0, .max = 1023,
     .cpp_field = "cuda_device", .doc = "CUDA device ordinal, when the backend is CUDA",
     .set = [](EngineOptions& o, const OptionValue& v) {
       o.cuda_device = I32(v);
       return Status::Ok();
     }},
    // ---- Host tier ----
    {.name = "host_bytes", .type = OptionType::kBytes, .default_text = "required", .min = 1,
     .max = kBytesMax, .unit = "bytes", .cpp_field = "host.capacity_bytes",
     .doc = "Host memory tier capacity",
     .note = "CLI default: twice the KV of the context, at least 16 MiB",
     .set = [](EngineOptions& o, const OptionValue& v) {
       o.host.capacity_bytes = U(v);
       return Status::Ok();
     }},
    {.name = "host_numa_node", .type = OptionType::kInt, .default_text = "-1", .min = -1,
     .max = kNumaNodeMax, .cpp_field = "host.numa_node",
     .doc = "NUMA node the host tier is bound to; -1: none", .aliases = "numa_node",
     .set = [](EngineOptions& o, const OptionValue& v) {
       o.host.numa_node = I32(v);
       return Status::Ok();
     }},
    {.name = "host_huge_pages", .type = OptionType::kChoice, .default_text = "if_available",
     .choices = kHugePages, .cpp_field = "host.huge_pages",
     .doc = "Transparent huge pages for the host tier",
     .set = [](EngineOptions& o, const OptionValue& v) {
       o.host.huge_pages = Pick<HugePages>(kHugePages, v);
       return Status::Ok();
     }},
    {.name = "host_lock", .type = OptionType::kChoice, .default_text = "if_permitted",
     .choices = kLock, .cpp_field = "host.lock", .doc = "mlock of the host tier",
     .set = [](EngineOptions& o, const OptionValue& v) {
       o.host.lock = Pick<MemoryLock>(kLock, v);
       return Status::Ok();
     }},
    {.name = "host_prefault", .type = OptionType::kBool, .default_text = "true",
     .cpp_field = "host.prefault", .doc = "Touch every page of the host tier at open",
     .set = [](EngineOptions& o, const OptionValue& v) {
       o.host.prefault = B(v);
       return Status::Ok();
     }},
    // ---- CXL tier ----
    {.name = "cxl_bytes", .type = OptionType::kBytes, .default_text = "0", .min = 0,
     .max = kBytesMax, .unit = "bytes", .cpp_field = "cxl.capacity_bytes",
     .doc = "CXL tier capacity (a second host tier, on a CPU-less NUMA node); 0: none",
     .set = [](EngineOptions& o, const OptionValue& v) {
       if (U(v) == 0) {
         o.cxl.reset();
       } else {
         if (!o.cxl.has_value()) o.cxl = HostTierOptions{.name = "cxl"};
         o.cxl->capacity_bytes = U(v);
       }
       return Status::Ok();
     }},
    {.name = "cxl_numa_node", .type = OptionType::kInt, .default_text = "-1", .min = -1,
     .max = kNumaNodeMax, .cpp_field = "cxl.numa_node",
     .doc = "NUMA node of the CXL memory (kvtier numa lists candidates); -1: none",
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnCxl(o, [&](HostTierOptions& t) { t.numa_node = I32(v); });
     }},
    {.name = "cxl_huge_pages", .type = OptionType::kChoice, .default_text = "if_available",
     .choices = kHugePages, .cpp_field = "cxl.huge_pages",
     .doc = "Transparent huge pages for the CXL tier",
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnCxl(o, [&](HostTierOptions& t) { t.huge_pages = Pick<HugePages>(kHugePages, v); });
     }},
    {.name = "cxl_lock", .type = OptionType::kChoice, .default_text = "if_permitted",
     .choices = kLock, .cpp_field = "cxl.lock", .doc = "mlock of the CXL tier",
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnCxl(o, [&](HostTierOptions& t) { t.lock = Pick<MemoryLock>(kLock, v); });
     }},
    {.name = "cxl_prefault", .type = OptionType::kBool, .default_text = "true",
     .cpp_field = "cxl.prefault", .doc = "Touch every page of the CXL tier at open",
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnCxl(o, [&](HostTierOptions& t) { t.prefault = B(v); });
     }},
    // ---- SSD tier ----
    {.name = "ssd_dirs", .type = OptionType::kStrings, .default_text = "none",
     .surfaces = kSurfaceCpp | kSurfaceC | kSurfacePython, .cpp_field = "ssd.dirs",
     .doc = "SSD tier directories (their order is part of the cache); none: no SSD tier",
     .note = "Not a CLI flag: --cache-dir gives run and chat one directory, with 16 MiB "
             "segments, periodic sync and write-through (a CLI run stores little and may be "
             "killed)",
     .set = [](EngineOptions& o, const OptionValue& v) {
       const auto& dirs = std::get<std::vector<std::string>>(v);
       if (dirs.empty()) {
         o.ssd.reset();
       } else {
         if (!o.ssd.has_value()) o.ssd.emplace();
         o.ssd->dirs = dirs;
       }
       return Status::Ok();
     }},
    {.name = "ssd_bytes", .type = OptionType::kBytes, .default_text = "4 GiB", .min = 1 << 20,
     .max = kBytesMax, .unit = "bytes", .cpp_field = "ssd.capacity_bytes",
     .doc = "SSD tier capacity, all directories together",
     .note = "0 in C and Python: the default; CLI default: 1 GiB",
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnSsd(o, [&](SsdTierOptions& t) { t.capacity_bytes = U(v); });
     }},
    {.name = "ssd_segment_bytes", .type = OptionType::kBytes, .default_text = "64 MiB",
     .min = 1 << 20, .max = 1 << 30, .unit = "bytes", .cpp_field = "ssd.segment_bytes",
     .doc = "Segment file size, a multiple of 4 KiB",
     .note = "0 in C and Python: the default; CLI default: 16 MiB",
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnSsd(o, [&](SsdTierOptions& t) { t.segment_bytes = U(v); });
     }},
    {.name = "ssd_sync", .type = OptionType::kChoice, .default_text = "per_batch",
     .choices = "none|per_batch|periodic", .cpp_field = "ssd.sync",
     .doc = "What a completed SSD write promises: nothing, fdatasync per batch, or periodic",
     .note = "CLI default: periodic",
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnSsd(o, [&](SsdTierOptions& t) {
         t.sync = Pick<SsdSyncMode>("none|per_batch|periodic", v);
       });
     }},
    {.name = "ssd_sync_interval_ms", .type = OptionType::kUint, .default_text = "100", .min = 1,
     .max = kMsHour, .unit = "ms", .cpp_field = "ssd.sync_interval_ms",
     .doc = "Time between fdatasyncs with ssd_sync periodic",
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnSsd(o, [&](SsdTierOptions& t) { t.sync_interval_ms = U32(v); });
     }},
    {.name = "ssd_checkpoint_interval_ms", .type = OptionType::kUint, .default_text = "0",
     .min = 0, .max = 24 * kMsHour, .unit = "ms", .cpp_field = "ssd.checkpoint_interval_ms",
     .doc = "Time between index checkpoints; 0: only on close and after errors",
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnSsd(o, [&](SsdTierOptions& t) { t.checkpoint_interval_ms = U32(v); });
     }},
    {.name = "ssd_io_depth", .type = OptionType::kUint, .default_text = "32", .min = 1,
     .max = 256, .cpp_field = "ssd.io_depth", .doc = "In-flight I/Os per directory",
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnSsd(o, [&](SsdTierOptions& t) { t.io_depth = U32(v); });
     }},
    {.name = "ssd_io_backend", .type = OptionType::kChoice, .default_text = "auto",
     .choices = "auto|io_uring|thread_pool", .cpp_field = "ssd.io_backend",
     .doc = "io_uring, a pread/pwrite thread pool, or auto (io_uring when permitted)",
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnSsd(o, [&](SsdTierOptions& t) {
         t.io_backend = Pick<IoBackend>("auto|io_uring|thread_pool", v);
       });
     }},
    {.name = "ssd_direct_io", .type = OptionType::kChoice, .default_text = "preferred",
     .choices = "off|preferred|required", .cpp_field = "ssd.direct_io",
     .doc = "O_DIRECT: off, where the filesystem takes it, or required",
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnSsd(o, [&](SsdTierOptions& t) {
         t.direct_io = Pick<DirectIo>("off|preferred|required", v);
       });
     }},
    {.name = "ssd_queue_jobs_max", .type = OptionType::kUint, .default_text = "64", .min = 1,
     .max = 4096, .cpp_field = "ssd.queue_jobs_max",
     .doc = "Queued jobs per directory before callers wait",
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnSsd(o, [&](SsdTierOptions& t) { t.queue_jobs_max = U32(v); });
     }},
    {.name = "ssd_staging_buffer_bytes", .type = OptionType::kBytes, .default_text = "1 MiB",
     .min = 4096, .max = 64 << 20, .unit = "bytes", .cpp_field = "ssd.staging_buffer_bytes",
     .doc = "Write staging buffer size, a multiple of 4 KiB",
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnSsd(o, [&](SsdTierOptions& t) { t.staging_buffer_bytes = U(v); });
     }},
    {.name = "ssd_staging_buffers", .type = OptionType::kUint, .default_text = "0", .min = 0,
     .max = 4096, .cpp_field = "ssd.staging_buffers",
     .doc = "Write staging buffers per directory; 0: min(ssd_io_depth, 64)",
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnSsd(o, [&](SsdTierOptions& t) { t.staging_buffers = U32(v); });
     }},
    {.name = "ssd_write_stall_ms_max", .type = OptionType::kUint, .default_text = "10000",
     .min = 0, .max = kMsHour, .unit = "ms", .cpp_field = "ssd.write_stall_ms_max",
     .doc = "A writer waiting for space gets Busy when reclaim frees no segment for this long",
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnSsd(o, [&](SsdTierOptions& t) { t.write_stall_ms_max = U32(v); });
     }},
    {.name = "ssd_admission", .type = OptionType::kChoice, .default_text = "always",
     .choices = kAdmission, .cpp_field = "ssd.admission",
     .doc = "Which writes the SSD takes: all, or blocks requested ssd_admission_requests times",
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnSsd(o, [&](SsdTierOptions& t) { t.admission = Pick<SsdAdmission>(kAdmission, v); });
     }},
    {.name = "ssd_admission_requests", .type = OptionType::kUint, .default_text = "2", .min = 1,
     .max = 255, .cpp_field = "ssd.admission_requests",
     .doc = "Requests (writes and misses) before a block is admitted to the SSD",
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnSsd(o, [&](SsdTierOptions& t) { t.admission_requests = U32(v); });
     }},
    {.name = "ssd_admission_slots", .type = OptionType::kUint, .default_text = "65536",
     .min = 1, .max = 1 << 26, .cpp_field = "ssd.admission_slots",
     .doc = "Counters of the SSD admission sketch (1 byte each)",
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnSsd(o, [&](SsdTierOptions& t) { t.admission_slots = U32(v); });
     }},
    {.name = "ssd_write_budget_bytes_per_s", .type = OptionType::kBytes, .default_text = "0",
     .min = 0, .max = kBytesMax, .unit = "bytes/s", .cpp_field = "ssd.write_budget_bytes_per_s",
     .doc = "Bytes written to the SSD per second; 0: unlimited",
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnSsd(o, [&](SsdTierOptions& t) { t.write_budget_bytes_per_s = U(v); });
     }},
    {.name = "ssd_write_budget_burst_bytes", .type = OptionType::kBytes, .default_text = "0",
     .min = 0, .max = kBytesMax, .unit = "bytes", .cpp_field = "ssd.write_budget_burst_bytes",
     .doc = "Burst above the SSD write budget; 0: one second of budget",
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnSsd(o, [&](SsdTierOptions& t) { t.write_budget_burst_bytes = U(v); });
     }},
    {.name = "ssd_key_file", .type = OptionType::kString, .default_text = "none",
     .cpp_field = "ssd.keys.file",
     .doc = "Deployment keys (a mode 0600 file) that seal SSD records at rest (AES-256-GCM)"},
    {.name = "ssd_key_env", .type = OptionType::kString, .default_text = "none",
     .surfaces = kSurfaceC | kSurfacePython,
     .doc = "An environment variable holding the SSD keys' text", .note = kKeyEnvNote},
    {.name = "ssd_key_text", .type = OptionType::kString, .default_text = "none",
     .surfaces = kSurfaceCpp, .cpp_field = "ssd.keys.text",
     .doc = "The SSD keys' text, in the key file's format", .note = kKeyTextNote},
    {.name = "ssd_file_mode", .type = OptionType::kUint, .default_text = "0600", .min = 0600,
     .max = 0660, .cpp_field = "ssd.file_mode",
     .doc = "Mode of the SSD tier's files: 0600, 0640 or 0660 (octal; group modes share the "
            "cache)",
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnSsd(o, [&](SsdTierOptions& t) { t.file_mode = U32(v); });
     }},
    // ---- Engine ----
    {.name = "write_policy", .type = OptionType::kChoice, .default_text = "back",
     .choices = kPolicy, .cpp_field = "write_policy",
     .doc = "back: blocks reach the SSD when evicted; through: before a store completes",
     .note = "CLI default with --cache-dir: through",
     .set = [](EngineOptions& o, const OptionValue& v) {
       o.write_policy = Policy(v);
       return Status::Ok();
     }},
    {.name = "writeback_dirty_fraction", .type = OptionType::kDouble, .default_text = "0.5",
     .min = 0.001, .max = 1, .cpp_field = "writeback_dirty_fraction",
     .doc = "Write-back: dirty share of a memory tier above which a cleaner writes down; 1: off",
     .set = [](EngineOptions& o, const OptionValue& v) {
       o.writeback_dirty_fraction = std::get<double>(v);
       return Status::Ok();
     }},
    {.name = "writeback_age_ms_max", .type = OptionType::kUint, .default_text = "1000",
     .min = 0, .max = kWritebackAgeMsMax, .unit = "ms", .cpp_field = "writeback_age_ms_max",
     .doc = "Write-back: a stored block is written to the SSD at most this long after its store "
            "completed; 0: write-through",
     .set = [](EngineOptions& o, const OptionValue& v) {
       o.writeback_age_ms_max = U32(v);
       return Status::Ok();
     }},
    {.name = "ssd_codec", .type = OptionType::kChoice, .default_text = "identity",
     .choices = "identity|shuffle-zstd|int8|int4|int8-rot|int4-rot|k8v4|k8v4-rot|ecq5|ecq6|ecq6v5",
     .cpp_field = "ssd_codec.codec",
     .doc = "Encoding on the SSD and remote tiers (all but identity and shuffle-zstd are lossy; "
            "docs/codecs.md)",
     .aliases = "codec",
     .set = [](EngineOptions& o, const OptionValue& v) { return SetCodec(o, S(v), 0, 0); }},
    {.name = "ssd_codec_zstd_level", .type = OptionType::kInt, .default_text = "0", .min = 0,
     .max = 22, .cpp_field = "ssd_codec.zstd_level",
     .doc = "zstd level; 0: the codec's default (shuffle-zstd and ecq 1, int8, int4 and their "
            "kin no zstd); else 1..22",
     .aliases = "ssd_codec_level",
     .set = [](EngineOptions& o, const OptionValue& v) {
       return SetCodec(o, CodecNameOf(o), I32(v), o.ssd_codec.group_size);
     }},
    {.name = "ssd_codec_group_size", .type = OptionType::kUint, .default_text = "0", .min = 0,
     .max = 1024, .cpp_field = "ssd_codec.group_size",
     .doc = "Grouped quantized codecs (int8, int4, their kin): tokens per key group and channels "
            "per value group, 8..1024; 0: the default, 32 (ecq takes 0)",
     .set = [](EngineOptions& o, const OptionValue& v) {
       return SetCodec(o, CodecNameOf(o), o.ssd_codec.zstd_level, U32(v));
     }},
    {.name = "default_ttl_ms", .type = OptionType::kUint, .default_text = "0", .min = 0,
     .max = static_cast<double>(kTtlMsMax), .unit = "ms", .cpp_field = "default_ttl_ms",
     .doc = "A store's TTL when it gives none; 0: no expiry",
     .set = [](EngineOptions& o, const OptionValue& v) {
       o.default_ttl_ms = U(v);
       return Status::Ok();
     }},
    {.name = "worker_threads", .type = OptionType::kUint, .default_text = "2", .min = 1,
     .max = 256, .cpp_field = "worker_threads",
     .doc = "Encode, decode and SSD staging threads; as many again continue the tiers' I/O",
     .note = "0 in Python: the default",
     .set = [](EngineOptions& o, const OptionValue& v) {
       o.worker_threads = U32(v);
       return Status::Ok();
     }},
    {.name = "thread_cpus", .type = OptionType::kString, .default_text = "\"\"",
     .surfaces = kSurfaceCpp | kSurfacePython | kSurfaceCli, .cpp_field = "thread_cpus",
     .doc = "CPUs the engine's threads run on: empty keeps the opening thread's, all is every CPU "
            "the process may use (its cgroup's cpuset), or a list such as 0-3,8",
     .note = "Not in the C struct (its layout is fixed): a C program opens the engine from a "
             "thread already on the CPUs it wants; empty: the opening thread's CPUs",
     .set = [](EngineOptions& o, const OptionValue& v) {
       o.thread_cpus = S(v);
       return Status::Ok();
     }},
    {.name = "background_nice", .type = OptionType::kUint, .default_text = "10", .min = 0,
     .max = kNiceMax, .surfaces = kSurfaceCpp | kSurfacePython | kSurfaceCli,
     .cpp_field = "background_nice",
     .doc = "Added to the nice value of the threads that only write blocks down (the SSD "
            "write-back, the remote puts), so loads and the inference engine come first on a "
            "busy machine; 0: the opening thread's priority",
     .note = "Not in the C struct (its layout is fixed): C programs get the default",
     .set = [](EngineOptions& o, const OptionValue& v) {
       o.background_nice = static_cast<int>(U32(v));
       return Status::Ok();
     }},
    {.name = "background_priority", .type = OptionType::kChoice, .default_text = "nice",
     .choices = "nice|idle", .surfaces = kSurfaceCpp | kSurfacePython | kSurfaceCli,
     .cpp_field = "background_priority",
     .doc = "nice: the threads that only write blocks down run at background_nice; idle: also "
            "under SCHED_IDLE, so their wake-ups never preempt the inference engine and they "
            "run on idle CPU time (for machines whose cores idle between its steps)",
     .note = "Not in the C struct (its layout is fixed): C programs get the default",
     .set = [](EngineOptions& o, const OptionValue& v) {
       o.background_priority = Pick<BackgroundPriority>("nice|idle", v);
       return Status::Ok();
     }},
    {.name = "sink_chunks", .type = OptionType::kUint, .default_text = "1", .min = 0,
     .max = 1 << 20, .cpp_field = "sink_chunks",
     .doc = "Leading chunks of a sequence stored at least at high priority",
     .set = [](EngineOptions& o, const OptionValue& v) {
       o.sink_chunks = U32(v);
       return Status::Ok();
     }},
    {.name = "promote_on_load", .type = OptionType::kBool, .default_text = "true",
     .cpp_field = "promote_on_load", .doc = "SSD hits served by a load are also cached in host",
     .set = [](EngineOptions& o, const OptionValue& v) {
       o.promote_on_load = B(v);
       return Status::Ok();
     }},
    {.name = "staging_buffers", .type = OptionType::kUint, .default_text = "32", .min = 8,
     .max = 4096, .cpp_field = "staging_buffers",
     .doc = "Aligned buffers for SSD and remote reads and encoding",
     .set = [](EngineOptions& o, const OptionValue& v) {
       o.staging_buffers = U32(v);
       return Status::Ok();
     }},
    // ---- Remote tier ----
    {.name = "remote_endpoints", .type = OptionType::kStrings, .default_text = "none",
     .cpp_field = "remote.endpoints",
     .doc = "Redis host:port (cluster: seeds); none: no remote tier",
     .note = "C: one comma-separated string", .aliases = "redis",
     .set = [](EngineOptions& o, const OptionValue& v) {
       const auto& endpoints = std::get<std::vector<std::string>>(v);
       if (endpoints.empty()) {
         o.remote.reset();
       } else {
         if (!o.remote.has_value()) o.remote = RemoteTierOptions{.redis = RedisStoreOptions{}};
         if (!o.remote->redis.has_value()) o.remote->redis.emplace();
         o.remote->redis->endpoints = endpoints;
       }
       return Status::Ok();
     }},
    // ---- The remote tier on a shared directory (the fs tier) ----
    {.name = "fs_dir", .type = OptionType::kString, .default_text = "\"\"",
     .surfaces = kSurfacePython | kSurfaceCli,
     .doc = "A shared directory (NFS, Lustre, CephFS, local) as the remote tier instead of "
            "Redis, one file per block; empty: none",
     .note = kFsNote,
     .set = [](EngineOptions& o, const OptionValue& v) {
       const std::string& dir = S(v);
       if (dir.empty()) {
         if (o.remote.has_value() && o.remote->fs.has_value()) o.remote.reset();
         return Status::Ok();
       }
       if (!o.remote.has_value()) o.remote = RemoteTierOptions{};
       if (!o.remote->fs.has_value()) o.remote->fs.emplace();
       o.remote->fs->dir = dir;
       return Status::Ok();
     }},
    {.name = "fs_bytes_max", .type = OptionType::kBytes, .default_text = "0", .min = 0,
     .max = kBytesMax, .unit = "bytes", .surfaces = kSurfacePython | kSurfaceCli,
     .doc = "Bytes the shared directory may hold, over every node; above it the oldest values "
            "go; 0: no bound",
     .note = kFsNote,
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnFs(o, [&](FsStoreOptions& f) { f.bytes_max = U(v); });
     }},
    {.name = "fs_max_age_s", .type = OptionType::kUint, .default_text = "0", .min = 0,
     .max = 10ull * 365 * 86400, .unit = "s", .surfaces = kSurfacePython | kSurfaceCli,
     .doc = "Values not read or written for this long are removed; 0: no bound",
     .note = kFsNote,
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnFs(o, [&](FsStoreOptions& f) { f.max_age_s = U(v); });
     }},
    {.name = "fs_sweep_interval_ms", .type = OptionType::kUint, .default_text = "10000",
     .min = 1, .max = 3'600'000, .unit = "ms", .surfaces = kSurfacePython | kSurfaceCli,
     .doc = "Time between two sweeps of the shared directory (with a bound set)",
     .note = kFsNote,
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnFs(o, [&](FsStoreOptions& f) { f.sweep_interval_ms = U32(v); });
     }},
    {.name = "fs_fsync", .type = OptionType::kBool, .default_text = "true",
     .surfaces = kSurfacePython | kSurfaceCli,
     .doc = "Sync each value before it is published (a crash then leaves it whole or absent)",
     .note = kFsNote,
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnFs(o, [&](FsStoreOptions& f) { f.fsync = B(v); });
     }},
    {.name = "fs_group_shared", .type = OptionType::kBool, .default_text = "false",
     .surfaces = kSurfacePython | kSurfaceCli,
     .doc = "Files 0660 and a group-writable directory allowed, for nodes that run as several "
            "users of one group",
     .note = kFsNote,
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnFs(o, [&](FsStoreOptions& f) { f.group_shared = B(v); });
     }},
    {.name = "remote_cluster", .type = OptionType::kBool, .default_text = "false",
     .cpp_field = "remote.mode", .doc = "The endpoints are Redis Cluster seeds",
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnRedis(o, [&](RedisStoreOptions& r) {
         r.mode = B(v) ? RedisMode::kCluster : RedisMode::kStandalone;
       });
     }},
    {.name = "remote_user", .type = OptionType::kString, .default_text = "\"\"",
     .cpp_field = "remote.user", .doc = "Redis ACL user; empty: the default user",
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnRedis(o, [&](RedisStoreOptions& r) { r.user = S(v); });
     }},
    {.name = "remote_password", .type = OptionType::kString, .default_text = "\"\"",
     .surfaces = kSurfaceCpp | kSurfaceC | kSurfacePython, .cpp_field = "remote.password",
     .doc = "Redis AUTH password; empty: no AUTH",
     .note = "Not on the CLI: a password on a command line is visible to every user (ps)",
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnRedis(o, [&](RedisStoreOptions& r) { r.password = S(v); });
     }},
    {.name = "remote_key_prefix", .type = OptionType::kString, .default_text = "kvt",
     .cpp_field = "remote.key_prefix", .doc = "Prefix of every Redis key name",
     .set = [](EngineOptions& o, const OptionValue& v) {
       OnFs(o, [&](FsStoreOptions& f) { f.key_prefix = S(v); }).IgnoreError();
       return OnRedis(o, [&](RedisStoreOptions& r) { r.key_prefix = S(v); });
     }},
    {.name = "remote_connect_timeout_ms", .type = OptionType::kUint, .default_text = "200",
     .min = 1, .max = 600000, .unit = "ms", .cpp_field = "remote.connect_timeout_ms",
     .doc = "Redis connect timeout",
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnRedis(o, [&](RedisStoreOptions& r) { r.connect_timeout_ms = U32(v); });
     }},
    {.name = "remote_command_timeout_ms", .type = OptionType::kUint, .default_text = "500",
     .min = 1, .max = 600000, .unit = "ms", .cpp_field = "remote.command_timeout_ms",
     .doc = "Deadline of one Redis command's write, and of its whole reply",
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnRedis(o, [&](RedisStoreOptions& r) { r.command_timeout_ms = U32(v); });
     }},
    {.name = "remote_breaker_failures_to_open", .type = OptionType::kUint, .default_text = "3",
     .min = 1, .max = 1000, .cpp_field = "remote.breaker_failures_to_open",
     .doc = "Consecutive failures that open a node's circuit breaker",
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnRedis(o, [&](RedisStoreOptions& r) { r.breaker.failures_to_open = U32(v); });
     }},
    {.name = "remote_breaker_open_cooldown_us", .type = OptionType::kUint,
     .default_text = "1000000", .min = 0, .max = kUsHour, .unit = "us",
     .cpp_field = "remote.breaker_open_cooldown_us",
     .doc = "Time a breaker stays open before one probe goes through",
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnRedis(o, [&](RedisStoreOptions& r) { r.breaker.open_cooldown_us = U(v); });
     }},
    {.name = "remote_redirects_max", .type = OptionType::kUint, .default_text = "5", .min = 0,
     .max = 16, .cpp_field = "remote.redirects_max", .doc = "MOVED/ASK hops per entry",
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnRedis(o, [&](RedisStoreOptions& r) { r.redirects_max = U32(v); });
     }},
    {.name = "remote_topology_refresh_interval_us", .type = OptionType::kUint,
     .default_text = "100000", .min = 0, .max = kUsHour, .unit = "us",
     .cpp_field = "remote.topology_refresh_interval_us",
     .doc = "Minimum time between CLUSTER SLOTS refreshes",
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnRedis(o, [&](RedisStoreOptions& r) { r.topology_refresh_interval_us = U(v); });
     }},
    {.name = "remote_cluster_allowed_hosts", .type = OptionType::kStrings, .default_text = "none",
     .cpp_field = "remote.cluster_allowed_hosts",
     .doc = "Hosts besides the seeds' that CLUSTER SLOTS, MOVED and ASK may name",
     .note = "C: one comma-separated string",
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnRedis(o, [&](RedisStoreOptions& r) {
         r.cluster_allowed_hosts = std::get<std::vector<std::string>>(v);
       });
     }},
    {.name = "remote_key_file", .type = OptionType::kString, .default_text = "none",
     .cpp_field = "remote.keys.file",
     .doc = "Deployment keys (a mode 0600 file) that seal remote values and hash key names"},
    {.name = "remote_key_env", .type = OptionType::kString, .default_text = "none",
     .surfaces = kSurfaceC | kSurfacePython,
     .doc = "An environment variable holding the remote keys' text", .note = kKeyEnvNote},
    {.name = "remote_key_text", .type = OptionType::kString, .default_text = "none",
     .surfaces = kSurfaceCpp, .cpp_field = "remote.keys.text",
     .doc = "The remote keys' text, in the key file's format", .note = kKeyTextNote},
    {.name = "remote_insecure_plaintext", .type = OptionType::kBool, .default_text = "false",
     .cpp_field = "remote.insecure_plaintext",
     .doc = "Remote values in the clear (only for a Redis or fs_dir nobody else can reach)",
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnRemote(o, [&](RemoteTierOptions& r) {
         if (bool* plaintext = r.insecure_plaintext(); plaintext != nullptr) *plaintext = B(v);
       });
     }},
    {.name = "remote_write_policy", .type = OptionType::kChoice, .default_text = "through",
     .choices = kPolicy, .cpp_field = "remote.write_policy",
     .doc = "through: a store also puts its blocks; back: when evicted and on flush",
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnRemote(o, [&](RemoteTierOptions& r) { r.write_policy = Policy(v); });
     }},
    {.name = "remote_admission", .type = OptionType::kChoice, .default_text = "always",
     .choices = kAdmission, .cpp_field = "remote.admission",
     .doc = "Which writes the remote tier takes (as ssd_admission)",
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnRemote(o, [&](RemoteTierOptions& r) {
         r.admission = Pick<SsdAdmission>(kAdmission, v);
       });
     }},
    {.name = "remote_admission_requests", .type = OptionType::kUint, .default_text = "2",
     .min = 1, .max = 255, .cpp_field = "remote.admission_requests",
     .doc = "Requests before a block is admitted to the remote tier",
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnRemote(o, [&](RemoteTierOptions& r) { r.admission_requests = U32(v); });
     }},
    {.name = "remote_admission_slots", .type = OptionType::kUint, .default_text = "65536",
     .min = 1, .max = 1 << 26, .cpp_field = "remote.admission_slots",
     .doc = "Counters of the remote admission sketch (1 byte each)",
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnRemote(o, [&](RemoteTierOptions& r) { r.admission_slots = U32(v); });
     }},
    {.name = "remote_write_budget_bytes_per_s", .type = OptionType::kBytes, .default_text = "0",
     .min = 0, .max = kBytesMax, .unit = "bytes/s",
     .cpp_field = "remote.write_budget_bytes_per_s",
     .doc = "Encoded bytes put per second; 0: unlimited",
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnRemote(o, [&](RemoteTierOptions& r) { r.write_budget_bytes_per_s = U(v); });
     }},
    {.name = "remote_write_budget_burst_bytes", .type = OptionType::kBytes, .default_text = "0",
     .min = 0, .max = kBytesMax, .unit = "bytes", .cpp_field = "remote.write_budget_burst_bytes",
     .doc = "Burst above the remote write budget; 0: one second of budget",
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnRemote(o, [&](RemoteTierOptions& r) { r.write_budget_burst_bytes = U(v); });
     }},
    {.name = "remote_promote_on_load", .type = OptionType::kBool, .default_text = "true",
     .cpp_field = "remote.promote_on_load",
     .doc = "Remote hits served by a load are also cached in host",
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnRemote(o, [&](RemoteTierOptions& r) { r.promote_on_load = B(v); });
     }},
    {.name = "remote_io_threads", .type = OptionType::kUint, .default_text = "2", .min = 1,
     .max = kRemoteIoThreadsMax, .cpp_field = "remote.io_threads",
     .doc = "Threads that run remote reads, and as many for its writes (workers never wait for "
            "the network)",
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnRemote(o, [&](RemoteTierOptions& r) { r.io_threads = U32(v); });
     }},
    {.name = "remote_connections", .type = OptionType::kUint, .default_text = "1", .min = 1,
     .max = kRemoteConnectionsMax, .surfaces = kSurfaceCpp | kSurfacePython | kSurfaceCli,
     .cpp_field = "remote.connections",
     .doc = "Connections to the remote server for reads, side by side; puts have one more of "
            "their own, so a get never waits for a put's pipeline",
     .note = "Not in the C struct (its layout is fixed): C programs get the default",
     .set = [](EngineOptions& o, const OptionValue& v) {
       return OnRemote(o, [&](RemoteTierOptions& r) { r.connections = U32(v); });
     }},
    // ---- Access prediction ----
    {.name = "prediction_enabled", .type = OptionType::kBool, .default_text = "false",
     .cpp_field = "prediction.enabled",
     .doc = "Learn the order of sessions and promote the predicted next ones' blocks",
     .aliases = "prediction",
     .set = [](EngineOptions& o, const OptionValue& v) {
       o.prediction.enabled = B(v);
       return Status::Ok();
     }},
    {.name = "prediction_window", .type = OptionType::kUint, .default_text = "2", .min = 1,
     .max = 16, .cpp_field = "prediction.window",
     .doc = "Recent accesses that vote for the next session",
     .set = [](EngineOptions& o, const OptionValue& v) {
       o.prediction.window = U32(v);
       return Status::Ok();
     }},
    {.name = "prediction_successors_max", .type = OptionType::kUint, .default_text = "8",
     .min = 1, .max = 64, .cpp_field = "prediction.successors_max",
     .doc = "Next sessions remembered per session",
     .set = [](EngineOptions& o, const OptionValue& v) {
       o.prediction.successors_max = U32(v);
       return Status::Ok();
     }},
    {.name = "prediction_sessions_max", .type = OptionType::kUint, .default_text = "1024",
     .min = 1, .max = 1 << 20, .cpp_field = "prediction.sessions_max",
     .doc = "Sessions remembered",
     .set = [](EngineOptions& o, const OptionValue& v) {
       o.prediction.sessions_max = U32(v);
       return Status::Ok();
     }},
    {.name = "prediction_session_chunks_max", .type = OptionType::kUint, .default_text = "128",
     .min = 1, .max = 4096, .cpp_field = "prediction.session_chunks_max",
     .doc = "Leading chunk hashes remembered per session (32 bytes each)",
     .set = [](EngineOptions& o, const OptionValue& v) {
       o.prediction.session_chunks_max = U32(v);
       return Status::Ok();
     }},
    {.name = "prediction_predict_k", .type = OptionType::kUint, .default_text = "1", .min = 1,
     .max = 64, .cpp_field = "prediction.predict_k",
     .doc = "Sessions promoted after each access",
     .set = [](EngineOptions& o, const OptionValue& v) {
       o.prediction.predict_k = U32(v);
       return Status::Ok();
     }},
    {.name = "prediction_blocks_max", .type = OptionType::kUint, .default_text = "256",
     .min = 1, .max = 65536, .cpp_field = "prediction.blocks_max",
     .doc = "Blocks promoted per access or hint (at most half the host tier)",
     .set = [](EngineOptions& o, const OptionValue& v) {
       o.prediction.blocks_max = U32(v);
       return Status::Ok();
     }},
};

// Which alternative of OptionValue each type takes.
size_t ValueIndex(OptionType type) {
  switch (type) {
    case OptionType::kBool:
      return 0;
    case OptionType::kUint:
    case OptionType::kBytes:
      return 1;
    case OptionType::kInt:
      return 2;
    case OptionType::kDouble:
      return 3;
    case OptionType::kStrings:
      return 5;
    default:
      return 4;
  }
}

bool HasChoice(std::string_view choices, std::string_view value) {
  const std::vector<std::string_view> items = OptionList(choices);
  return std::find(items.begin(), items.end(), value) != items.end();
}

// "a, b" or "`a`, `b`" from "a|b".
std::string JoinList(std::string_view bars, std::string_view quote) {
  std::string out;
  for (std::string_view item : OptionList(bars)) {
    out += (out.empty() ? "" : ", ") + std::string(quote) + std::string(item) + std::string(quote);
  }
  return out;
}

std::string Num(double v) {
  char text[40];
  if (std::abs(v) >= 1e15 || v == std::floor(v)) {
    std::snprintf(text, sizeof(text), "%.0f", v);
  } else {
    std::snprintf(text, sizeof(text), "%g", v);
  }
  return text;
}

// 1048576 as "1 MiB" (whole binary units only).
std::string BytesText(double v) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  if (v < 1024 || std::fmod(v, 1024) != 0) return Num(v);
  int unit = -1;
  while (unit < 4 && v >= 1024 && std::fmod(v, 1024) == 0) {
    v /= 1024;
    ++unit;
  }
  return Num(v) + " " + kUnits[unit];
}

std::string SurfaceList(uint32_t surfaces) {
  std::string out;
  auto add = [&](uint32_t bit, const char* name) {
    if ((surfaces & bit) == 0) return;
    out += (out.empty() ? "" : ", ") + std::string(name);
  };
  add(kSurfaceCpp, "C++");
  add(kSurfaceC, "C");
  add(kSurfacePython, "Python");
  add(kSurfaceCli, "CLI");
  return out;
}

}  // namespace

std::string_view OptionTypeName(OptionType type) {
  switch (type) {
    case OptionType::kBool:
      return "bool";
    case OptionType::kUint:
      return "uint";
    case OptionType::kInt:
      return "int";
    case OptionType::kBytes:
      return "bytes";
    case OptionType::kDouble:
      return "real";
    case OptionType::kString:
      return "string";
    case OptionType::kStrings:
      return "strings";
    case OptionType::kChoice:
      return "choice";
    case OptionType::kLayout:
      return "layout";
    case OptionType::kDigest:
      return "digest";
  }
  return "invalid";
}

std::vector<std::string_view> OptionList(std::string_view bars) {
  std::vector<std::string_view> items;
  while (!bars.empty()) {
    const size_t bar = bars.find('|');
    items.push_back(bars.substr(0, bar));
    if (bar == std::string_view::npos) break;
    bars.remove_prefix(bar + 1);
  }
  return items;
}

std::span<const OptionSpec> EngineOptionTable() { return kTable; }

const OptionSpec* FindEngineOption(std::string_view name) {
  for (const OptionSpec& spec : kTable) {
    if (spec.name == name || HasChoice(spec.aliases, name)) {
      return &spec;
    }
  }
  return nullptr;
}

bool IsUnsetValue(const OptionSpec& spec, const OptionValue& value) {
  if (const auto* u = std::get_if<uint64_t>(&value)) return *u == 0 && spec.min > 0;
  if (const auto* i = std::get_if<int64_t>(&value)) return *i == 0 && spec.min > 0;
  if (const auto* s = std::get_if<std::string>(&value)) return s->empty();
  if (const auto* l = std::get_if<std::vector<std::string>>(&value)) return l->empty();
  return false;
}

std::string OptionRangeText(const OptionSpec& spec) {
  switch (spec.type) {
    case OptionType::kBytes:
      return "from " + BytesText(spec.min) + " to " + BytesText(spec.max);
    case OptionType::kUint:
      if (spec.default_text.size() > 1 && spec.default_text[0] == '0') {  // A mode, in octal.
        char text[48];
        std::snprintf(text, sizeof(text), "from 0%o to 0%o", static_cast<unsigned>(spec.min),
                      static_cast<unsigned>(spec.max));
        return text;
      }
      return "from " + Num(spec.min) + " to " + Num(spec.max);
    case OptionType::kInt:
    case OptionType::kDouble:
      return "from " + Num(spec.min) + " to " + Num(spec.max);
    case OptionType::kChoice:
      return "one of " + JoinList(spec.choices, "");
    case OptionType::kBool:
      return "true or false";
    default:
      return std::string();
  }
}

Status SetEngineOption(EngineOptions* options, const OptionSpec& spec, const OptionValue& value) {
  const std::string name(spec.name);
  if (spec.set == nullptr) {
    return Status::NotSupported(name + " is converted by each surface, not by SetEngineOption");
  }
  if (value.index() != ValueIndex(spec.type)) {
    return Status::InvalidArgument(name + ": a " + std::string(OptionTypeName(spec.type)) +
                                   " value is required");
  }
  double number = 0;
  bool numeric = true;
  if (const auto* u = std::get_if<uint64_t>(&value)) {
    number = static_cast<double>(*u);
  } else if (const auto* i = std::get_if<int64_t>(&value)) {
    number = static_cast<double>(*i);
  } else if (const auto* d = std::get_if<double>(&value)) {
    number = *d;
  } else {
    numeric = false;
  }
  if (numeric && !(number >= spec.min && number <= spec.max)) {
    return Status::InvalidArgument(name + "=" + Num(number) + ": must be " +
                                   OptionRangeText(spec));
  }
  if (spec.type == OptionType::kChoice && !HasChoice(spec.choices, std::get<std::string>(value))) {
    return Status::InvalidArgument(name + " '" + std::get<std::string>(value) + "' is not " +
                                   OptionRangeText(spec));
  }
  return spec.set(*options, value);
}

std::string OptionsMarkdown() {
  std::string out =
      "# Engine options\n\n"
      "<!-- Generated from src/engine/options_table.cc by OptionsMarkdown(); options_table_test\n"
      "     fails when this file differs. Regenerate: build/src/engine/options_table_test\n"
      "     --gtest_filter='*Docs*' with KVTIER_WRITE_OPTIONS_MD=docs/options.md. -->\n\n"
      "Every user-facing option of the engine, from the one table all surfaces are derived from\n"
      "or checked against (docs/architecture.md, \"The options table\"). The name is the C field,\n"
      "the Python keyword and the `kvtier --config` key; the CLI flag of `kvtier run`,\n"
      "`kvtier chat` and `kvtier preload` is the name with dashes (`--ssd-io-depth`) and its\n"
      "environment variable `KVTIER_<NAME>` (`KVTIER_SSD_IO_DEPTH`). C++ is the field of\n"
      "`kvtier::api::EngineOptions` (include/kvtier/options.h). Settings of a tier that is not\n"
      "configured (an `ssd_*` option without `ssd_dirs`, a `remote_*` one without\n"
      "`remote_endpoints`, a `cxl_*` one without `cxl_bytes`) are ignored.\n\n"
      "## Adding an option\n\n"
      "1. Add a row to `kTable` in src/engine/options_table.cc: name, type, default, range, unit,\n"
      "   doc, surfaces (and a note saying why a surface lacks it), the C++ field, and a setter\n"
      "   into `kvtier::EngineOptions`.\n"
      "2. The CLI flags, environment variables, config keys, Python keywords and this file follow\n"
      "   from the row (regenerate this file as its header says).\n"
      "3. Add the field to `kvtier::api::EngineOptions` (and public_api.cc's conversion)\n"
      "   and, when the row names C, append it to `kvtier_engine_options_t` (with its line in\n"
      "   c_api.cc's `kAppendedOptions` and a default in `kvtier_engine_options_init`).\n"
      "   options_table_test fails until the C struct, the C++ options and this file match.\n\n"
      "## The table\n\n"
      "| name | type | default | valid | unit | surfaces | C++ field | description |\n"
      "|---|---|---|---|---|---|---|---|\n";
  for (const OptionSpec& s : kTable) {
    std::string doc(s.doc);
    if (!s.note.empty()) doc += ". " + std::string(s.note);
    if (!s.aliases.empty()) doc += ". Also accepted: " + JoinList(s.aliases, "`");
    out += "| `" + std::string(s.name) + "` | " + std::string(OptionTypeName(s.type)) + " | " +
           std::string(s.default_text) + " | " + OptionRangeText(s) + " | " + std::string(s.unit) +
           " | " + SurfaceList(s.surfaces) + " | " +
           (s.cpp_field.empty() ? std::string("-") : "`" + std::string(s.cpp_field) + "`") +
           " | " + doc + " |\n";
  }
  return out;
}

}  // namespace kvtier
