// The options table (options_table.h): its rows, the checked setter, and docs/options.md.
#include "engine/options_table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <utility>

#include "codecs/codec_params.h"
#include "core/limits.h"
#include "core/thread_priority.h"
#include "tiers/tier_registry.h"

namespace kvtier {
namespace {

constexpr double kBytesMax = kOptionBytesMax;
constexpr double kNumaNodeMax = 1023;

uint64_t U(const OptionValue& v) { return OptionU64(v); }
uint32_t U32(const OptionValue& v) { return OptionU32(v); }
int32_t I32(const OptionValue& v) { return OptionI32(v); }
bool B(const OptionValue& v) { return OptionBool(v); }
const std::string& S(const OptionValue& v) { return OptionString(v); }
template <typename E>
E Pick(std::string_view choices, const OptionValue& v) {
  return OptionPick<E>(choices, v);
}

WritePolicy Policy(const OptionValue& v) {
  return S(v) == "through" ? WritePolicy::kWriteThrough : WritePolicy::kWriteBack;
}

// A setting of a tier the options may lack: applied only when the tier is there.
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

// The engine's own rows, in three parts: the providers' rows of tiers of their own (the SSD
// tier) go between the first two, those of the remote tier's stores between the last two
// (MergedTable()).
constexpr OptionSpec kEngineRowsFirst[] = {
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
};

constexpr OptionSpec kEngineRowsMiddle[] = {
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
};

constexpr OptionSpec kEngineRowsLast[] = {
    // ---- Remote tier (its stores' own settings are their rows) ----
    {.name = "remote_key_file", .type = OptionType::kString, .default_text = "none",
     .cpp_field = "remote.keys.file",
     .doc = "Deployment keys (a mode 0600 file) that seal remote values and hash key names"},
    {.name = "remote_key_env", .type = OptionType::kString, .default_text = "none",
     .surfaces = kSurfaceC | kSurfacePython,
     .doc = "An environment variable holding the remote keys' text", .note = kOptionKeyEnvNote},
    {.name = "remote_key_text", .type = OptionType::kString, .default_text = "none",
     .surfaces = kSurfaceCpp, .cpp_field = "remote.keys.text",
     .doc = "The remote keys' text, in the key file's format", .note = kOptionKeyTextNote},
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
         r.admission = Pick<AdmissionMode>(kAdmission, v);
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
     }},};

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

// The rows of every registered provider of `kind`, each name once (a row two stores share is
// shown once, as the first provider gives it), the switches first so that a surface that applies
// the rows in order sets a tier up before its settings.
void AppendTierRows(TierProviderKind kind, std::vector<OptionSpec>* table) {
  for (const bool switches : {true, false}) {
    for (const TierProvider* p : TierProviders()) {
      if (p->kind() != kind) continue;
      for (const OptionSpec& row : p->OptionRows()) {
        if (row.tier_switch != switches) continue;
        const bool seen = std::any_of(table->begin(), table->end(),
                                      [&](const OptionSpec& r) { return r.name == row.name; });
        if (!seen) table->push_back(row);
      }
    }
  }
}

// The engine's rows with the providers' merged in: the tiers of their own after the CXL tier's,
// the remote tier's stores before the remote tier's own settings.
std::vector<OptionSpec> MergedTable() {
  std::vector<OptionSpec> table(std::begin(kEngineRowsFirst), std::end(kEngineRowsFirst));
  AppendTierRows(TierProviderKind::kTier, &table);
  table.insert(table.end(), std::begin(kEngineRowsMiddle), std::end(kEngineRowsMiddle));
  AppendTierRows(TierProviderKind::kRemoteStore, &table);
  table.insert(table.end(), std::begin(kEngineRowsLast), std::end(kEngineRowsLast));
  return table;
}

// Where the options of provider `p` live: EngineOptions::tiers, or the remote tier's stores
// (nullptr when the options have no remote tier).
TierOptionsSet* TierSet(EngineOptions& o, const TierProvider& p) {
  if (p.kind() == TierProviderKind::kTier) return &o.tiers;
  return o.remote.has_value() ? &o.remote->stores : nullptr;
}

// A tier row of provider `p`: a setting applies to the tier when the options have it; a switch
// sets the tier up (a store: the remote tier first, when there is none) or, left empty, removes
// it (a store: the remote tier with it when no other store is left). Two store switches give
// the remote tier two stores, which its Validate refuses by name: nothing is dropped silently.
Status SetTierRow(EngineOptions& o, const TierProvider& p, const OptionSpec& row,
                  const OptionValue& value) {
  TierOptionsSet* set = TierSet(o, p);
  std::any* have = set == nullptr ? nullptr : set->FindAny(p.name());
  if (!row.tier_switch) return have == nullptr ? Status::Ok() : row.set_tier(*have, value);
  std::any options = have != nullptr ? *have : std::any();
  KV_RETURN_IF_ERROR(row.set_tier(options, value));
  const bool store = p.kind() == TierProviderKind::kRemoteStore;
  if (!options.has_value()) {
    if (have != nullptr) set->Erase(p.name());
    if (store && have != nullptr && o.remote->stores.empty() && o.remote->store == nullptr) {
      o.remote.reset();
    }
    return Status::Ok();
  }
  if (store && !o.remote.has_value()) o.remote.emplace();
  TierSet(o, p)->Put(p.name(), std::move(options));
  return Status::Ok();
}

// A tier row by name, on every provider that has a row of that name.
Status SetTierOption(EngineOptions& o, std::string_view name, const OptionValue& value) {
  for (const TierProvider* p : TierProviders()) {
    for (const OptionSpec& row : p->OptionRows()) {
      if (row.name == name) KV_RETURN_IF_ERROR(SetTierRow(o, *p, row, value));
    }
  }
  return Status::Ok();
}

}  // namespace

std::span<const OptionSpec> EngineOptionTable() {
  static const std::vector<OptionSpec> table = MergedTable();
  return table;
}

const OptionSpec* FindEngineOption(std::string_view name) {
  for (const OptionSpec& spec : EngineOptionTable()) {
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
  if (!spec.settable()) {
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
  if (!spec.tier.empty()) return SetTierOption(*options, spec.name, value);
  return spec.set(*options, value);
}

std::string OptionsMarkdown() {
  std::string out =
      "# Engine options\n\n"
      "<!-- Generated from src/engine/options_table.cc and the tiers' rows by OptionsMarkdown();\n"
      "     options_table_test fails when this file differs. Regenerate:\n"
      "     build/src/engine/options_table_test\n"
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
      "1. Add a row: an engine setting to src/engine/options_table.cc, with a setter into\n"
      "   `kvtier::EngineOptions`; a setting of a tier below memory to that tier's rows\n"
      "   (src/tiers/<name>/<name>_option_rows.cc, its provider's `OptionRows()`), with a setter\n"
      "   into the tier's own options. A row gives the name, type, default, range, unit, doc,\n"
      "   surfaces (and a note saying why a surface lacks it) and the C++ field.\n"
      "2. The CLI flags, environment variables, config keys, Python keywords and this file follow\n"
      "   from the row (regenerate this file as its header says).\n"
      "3. Add the field to `kvtier::api::EngineOptions` (and public_api.cc's conversion)\n"
      "   and, when the row names C, append it to `kvtier_engine_options_t` (with its line in\n"
      "   c_api.cc's `kAppendedOptions` and a default in `kvtier_engine_options_init`).\n"
      "   options_table_test fails until the C struct, the C++ options and this file match.\n\n"
      "## The table\n\n"
      "| name | type | default | valid | unit | surfaces | C++ field | description |\n"
      "|---|---|---|---|---|---|---|---|\n";
  for (const OptionSpec& s : EngineOptionTable()) {
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
