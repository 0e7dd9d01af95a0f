// EngineOptions: everything Engine::Open takes, as public value types (docs/integration.md,
// "The C++ API"). Each field states its unit and default; the defaults are the engine's own, so
// `EngineOptions{.layout = ..., .host = {.capacity_bytes = ...}}` opens the same engine as the
// internal options with the same two fields. Engine::Open checks every field and returns
// InvalidArgument naming the first bad one (units included).
//
// Why a separate set of structs from the engine's internal ones: those hold tier internals (Env,
// Logger, RemoteStore pointers, key material) from headers that are not installed. These hold only
// standard-library types, so the header installs with libkvtier.so and keeps its shape when the
// internals change.
//
// Enum values are only ever appended; they equal the C API's values where the C API has the enum.
//
// Every field is a row of the engine's options table (docs/options.md gives each one's range and
// its names in C, Python and the CLI); options_table_test fails when a field and the table
// disagree.
//
// ConnectOptions (at the end) are Engine::Connect's: a client of kvtier's node service
// (`kvtier serve`, docs/serve.md), not an engine of its own, so they are not rows of the table.
//
// Thread safety: value types. Ownership: options are copied by Engine::Open; nothing is borrowed.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/layout.h"

namespace kvtier::api {

// How the threads that only write blocks down give way to the rest.
enum class BackgroundPriority : uint8_t {
  kNice = 0,  // At background_nice.
  kIdle = 1,  // At background_nice and under SCHED_IDLE.
};

enum class WritePolicy : uint8_t {
  kWriteThrough = 0,  // A Store also writes its blocks to the tier below before Wait returns.
  kWriteBack = 1,     // Blocks are written down when evicted from memory, on Flush and on close.
};

// Which implementation backs the device and host tiers.
enum class DeviceBackend : uint8_t {
  kAuto = 0,  // CUDA when the library was built with it and a GPU is usable, else the CPU tiers.
  kCpu = 1,   // Host memory with copy threads standing in for the device.
  kCuda = 2,  // GPU memory and a pinned host tier; NotSupported at Open when unavailable.
};

// What a completed SSD write batch promises about durability (docs/ssd_format.md §6).
enum class SsdSync : uint8_t {
  kNone = 0,      // Pure cache: fdatasync only at checkpoints and on close.
  kPerBatch = 1,  // A batch completes after fdatasync of every segment it wrote.
  kPeriodic = 2,  // fdatasync of written segments every sync_interval_ms.
};

// Which writes a persistent tier (SSD, remote) takes.
enum class Admission : uint8_t {
  kAlways = 0,         // Every write.
  kAfterRequests = 1,  // A block once it was requested admission_requests times (writes + misses).
};

// How blocks are encoded below memory (docs/codecs.md).
enum class Codec : uint8_t {
  kIdentity = 1,     // Raw bytes.
  kShuffleZstd = 2,  // Byte planes, then zstd. Lossless.
  kInt8 = 3,         // KIVI-style 8-bit quantization (+ optional zstd). Lossy.
  kInt4 = 4,         // KIVI-style 4-bit quantization (+ optional zstd). Lossy.
  kInt8Rot = 5,      // int8, values rotated per head (randomized Hadamard) first. Lossy.
  kInt4Rot = 6,      // int4, values rotated per head first. Lossy.
  kK8V4 = 7,         // Keys int8, values int4. Lossy.
  kK8V4Rot = 8,      // k8v4, values rotated per head first. Lossy.
  kEcq5 = 9,         // Entropy-coded quantization, about 5 bits (step sd / 8), zstd. Lossy.
  kEcq6 = 10,        // Entropy-coded quantization, about 6 bits (step sd / 16), zstd. Lossy.
  kEcq6V5 = 11,      // ecq6's keys, values about 5.25 bits (step sd / 9.5). Lossy.
};

enum class HugePages : uint8_t {
  kOff = 0,
  kIfAvailable = 1,  // madvise(MADV_HUGEPAGE); 4 KiB pages where transparent huge pages are off.
};

enum class MemoryLock : uint8_t {
  kOff = 0,
  kIfPermitted = 1,  // mlock; when refused, one log line says so and the memory stays unlocked.
  kRequired = 2,     // mlock or Open fails, naming RLIMIT_MEMLOCK / CAP_IPC_LOCK.
};

enum class IoBackend : uint8_t {
  kAuto = 0,        // io_uring; a pread/pwrite thread pool when io_uring_setup is refused.
  kIoUring = 1,     // io_uring or an error.
  kThreadPool = 2,  // pread/pwrite on worker threads.
};

enum class DirectIo : uint8_t {
  kOff = 0,        // Buffered I/O through the page cache.
  kPreferred = 1,  // O_DIRECT where the filesystem takes it, else buffered with a logged reason.
  kRequired = 2,   // O_DIRECT or NotSupported.
};

enum class RemoteMode : uint8_t { kStandalone = 0, kCluster = 1 };

enum class LogLevel : uint8_t { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

// Deployment keys (docs/security.md): AES-256-GCM keys that seal SSD records or remote values. At
// most one of the two is set; both empty means no keys. The text format is the key file's: one
// key per line, "<id> <64 hex digits>". kvtier never reads the environment: a caller that keeps
// the keys in a variable passes its value as `text`.
struct Keyring {
  std::string file;  // A regular file of mode 0600 or stricter.
  std::string text;  // The file's contents, from wherever the caller keeps secrets.

  friend bool operator==(const Keyring&, const Keyring&) = default;
};

struct CodecOptions {
  Codec codec = Codec::kIdentity;
  // 0 (the default): the codec's default level, which is 1 for kShuffleZstd, kEcq5 and kEcq6
  // and no zstd stage after quantization for kInt8 / kInt4 and their kin. Else 1..22 (kIdentity:
  // 0 only).
  int32_t zstd_level = 0;
  // kInt8 / kInt4 and their kin: tokens per key group and channels per value group, 8..1024; 0
  // (the default): 32. Otherwise 0 (kEcq5 and kEcq6 scale each channel by its own spread).
  uint32_t group_size = 0;

  friend bool operator==(const CodecOptions&, const CodecOptions&) = default;
};

// Device memory. capacity_bytes 0 (the default) means no device tier.
struct DeviceTierOptions {
  uint64_t capacity_bytes = 0;
  uint32_t copy_threads = 1;       // CPU backend: threads per copy kind.
  uint32_t copy_queue_max = 1024;  // Copy regions queued per copy kind before a copy blocks.

  friend bool operator==(const DeviceTierOptions&, const DeviceTierOptions&) = default;
};

// Host memory (and the optional CXL tier, a second host tier on a CPU-less NUMA node).
struct HostTierOptions {
  uint64_t capacity_bytes = 0;  // Required (> 0); rounded down to whole blocks, at least one.
  int32_t numa_node = -1;       // -1: no binding; else the node the memory is bound to.
  HugePages huge_pages = HugePages::kIfAvailable;
  MemoryLock lock = MemoryLock::kIfPermitted;
  bool prefault = true;  // Touch every page at Open, so that no Store takes a page fault.

  friend bool operator==(const HostTierOptions&, const HostTierOptions&) = default;
};

// The persistent tier: a crash-safe segment log over one or more directories (docs/ssd_format.md).
struct SsdTierOptions {
  std::vector<std::string> dirs;                 // At least one; their order is part of the cache.
  uint64_t capacity_bytes = 4ull << 30;          // Segments on disk, all directories together.
  uint64_t segment_bytes = 64ull << 20;          // A multiple of 4 KiB in [1 MiB, 1 GiB].
  SsdSync sync = SsdSync::kPerBatch;
  uint32_t sync_interval_ms = 100;               // SsdSync::kPeriodic only.
  uint32_t checkpoint_interval_ms = 0;           // 0: checkpoints only on close and after errors.
  uint32_t io_depth = 32;                        // In-flight I/Os per directory.
  IoBackend io_backend = IoBackend::kAuto;
  DirectIo direct_io = DirectIo::kPreferred;
  uint32_t queue_jobs_max = 64;                  // Queued jobs per directory before callers wait.
  uint64_t staging_buffer_bytes = 1ull << 20;    // Per write request; multiple of 4 KiB.
  uint32_t staging_buffers = 0;                  // Per directory; 0: min(io_depth, 64).
  uint32_t write_stall_ms_max = 10'000;  // Busy when reclaim frees no segment this long.
  Admission admission = Admission::kAlways;
  uint32_t admission_requests = 2;               // Admission::kAfterRequests only.
  uint32_t admission_slots = 1u << 16;           // Counters of the admission sketch (1 B each).
  uint64_t write_budget_bytes_per_s = 0;         // 0: unlimited.
  uint64_t write_budget_burst_bytes = 0;         // 0: one second of budget.
  Keyring keys;                                  // Records sealed at rest when set.
  uint32_t file_mode = 0600;                     // Of its files; 0640 or 0660 share the cache.

  friend bool operator==(const SsdTierOptions&, const SsdTierOptions&) = default;
};

// The remote tier on Redis or Redis Cluster, shared by every engine pointed at it
// (docs/remote_tier.md). Its failures never fail a call: reads become misses, write errors are
// counted in EngineStats. Values are encoded with EngineOptions::ssd_codec.
struct RemoteTierOptions {
  std::vector<std::string> endpoints;  // "host:port": exactly one standalone; cluster: seeds.
  RemoteMode mode = RemoteMode::kStandalone;
  std::string user;      // ACL user; empty: the default user.
  std::string password;  // Empty: no AUTH.
  uint32_t connect_timeout_ms = 200;
  uint32_t command_timeout_ms = 500;  // Deadline of one command's write, and of its whole reply.
  uint32_t breaker_failures_to_open = 3;          // Consecutive failures opening a node's breaker.
  uint64_t breaker_open_cooldown_us = 1'000'000;  // Time open before one probe goes through.
  uint32_t redirects_max = 5;                     // MOVED/ASK hops per entry; at most 16.
  uint64_t topology_refresh_interval_us = 100'000;  // Minimum time between CLUSTER SLOTS.
  // Cluster: hosts besides the seeds' that CLUSTER SLOTS, MOVED and ASK may send the client to
  // (docs/security.md); an endpoint on any other host is refused and counted.
  std::vector<std::string> cluster_allowed_hosts;
  std::string key_prefix = "kvt";
  // Values sealed and key names hashed under these keys. Required unless insecure_plaintext.
  Keyring keys;
  // Values in the clear, for a store nobody else can reach (docs/security.md). Open fails when
  // neither keys nor this is given, or both are.
  bool insecure_plaintext = false;
  // kWriteThrough: every Store also puts its blocks before StoreHandle::Wait returns.
  // kWriteBack: blocks are put when their last memory copy is evicted, and on Flush.
  WritePolicy write_policy = WritePolicy::kWriteThrough;
  Admission admission = Admission::kAlways;
  uint32_t admission_requests = 2;
  uint32_t admission_slots = 1u << 16;
  uint64_t write_budget_bytes_per_s = 0;  // Encoded bytes put per second; 0: unlimited.
  uint64_t write_budget_burst_bytes = 0;  // 0: one second of budget.
  bool promote_on_load = true;            // Remote hits served by Load are also cached in host.
  uint32_t io_threads = 2;  // Threads that run the tier's reads, and as many its writes; [1, 64].
  // Connections to the server the reads (gets, lookups) use side by side; puts have one more of
  // their own, so a get never waits for a put's pipeline; [1, 64].
  uint32_t connections = 1;

  friend bool operator==(const RemoteTierOptions&, const RemoteTierOptions&) = default;
};

// Access prediction (docs/engine.md, "Access prediction"): the engine learns the order in which
// sessions come back and promotes the predicted next session's blocks into host memory. Off by
// default; EngineStats says whether it pays.
struct PredictionOptions {
  bool enabled = false;
  uint32_t window = 2;                // Recent accesses that vote for the next session; [1, 16].
  uint32_t successors_max = 8;        // Next sessions remembered per session; [1, 64].
  uint32_t sessions_max = 1024;       // Sessions remembered; [1, 2^20].
  uint32_t session_chunks_max = 128;  // Leading chunk hashes per session (32 B each); [1, 4096].
  uint32_t predict_k = 1;             // Sessions promoted after each access; [1, 64].
  uint32_t blocks_max = 256;          // Blocks promoted per access or Hint; [1, 65536].

  friend bool operator==(const PredictionOptions&, const PredictionOptions&) = default;
};

struct EngineOptions {
  Layout layout;                         // Enters every key.
  std::string model_name;                // e.g. "meta-llama/Llama-2-7b-hf"; enters every key.
  std::array<uint8_t, 32> weights_digest{};  // SHA-256 of the weights; zeros if unknown.
  DeviceTierOptions device;              // No device tier by default.
  HostTierOptions host;                  // Required: host.capacity_bytes > 0.
  DeviceBackend device_backend = DeviceBackend::kAuto;
  int32_t cuda_device = 0;               // CUDA device ordinal, when the backend is CUDA.
  std::optional<HostTierOptions> cxl;    // A second host tier (CXL memory); none by default.
  std::optional<SsdTierOptions> ssd;     // The persistent tier; none by default.
  WritePolicy write_policy = WritePolicy::kWriteBack;  // Towards the SSD tier.
  // Write-back: above this fraction of dirty slots in a memory tier, a cleaner thread writes
  // dirty blocks down until half as many are left. In (0, 1]; 1 turns the cleaner off.
  double writeback_dirty_fraction = 0.5;
  // Write-back: a stored block reaches the SSD at most this long after its store completed,
  // whatever happens to the process later (docs/reliability.md); 0: write-through.
  uint32_t writeback_age_ms_max = 1000;
  CodecOptions ssd_codec;                // Encoding on the SSD and remote tiers.
  uint64_t default_ttl_ms = 0;           // Store's TTL when it gives none; 0: no expiry.
  uint32_t worker_threads = 2;           // Encode, decode and SSD staging threads.
  // CPUs of the engine's threads: "" the opening thread's, "all" every CPU the process may use,
  // or a list such as "0-3,8".
  std::string thread_cpus;
  // Added to the nice value of the threads that only write blocks down to the SSD and remote
  // tiers, so that they give way to loads and the inference engine on a busy machine; [0, 19].
  int background_nice = 10;
  // kIdle: those threads also run under SCHED_IDLE, so their wake-ups never preempt the
  // application's threads and they use idle CPU time (for machines with idle cores).
  BackgroundPriority background_priority = BackgroundPriority::kNice;
  uint32_t sink_chunks = 1;              // Leading chunks stored at least at kHigh priority.
  bool promote_on_load = true;           // SSD hits served by Load are also cached in host.
  std::optional<RemoteTierOptions> remote;  // The shared remote tier; none by default.
  PredictionOptions prediction;          // Off by default.
  uint32_t staging_buffers = 32;         // Aligned buffers for SSD/remote reads and encoding.
  // Where the engine's log lines go; empty (the default): nowhere. Called from the engine's
  // threads concurrently, so it must be thread-safe; it must not call back into the Engine.
  std::function<void(LogLevel level, std::string_view message)> log;
};

// Engine::Connect's options: how to reach the node service (`kvtier serve`, docs/serve.md) whose
// engine the returned Engine uses. The tiers are the service's; these are only the connection's.
struct ConnectOptions {
  std::string token;  // Sent in the hello; required when the service was started with one.
  std::string name;   // How the service names this client in its logs and metrics.
  // With a layout, Connect succeeds while the service is not reachable yet (lookups miss and
  // loads and stores fail with Unavailable until it is), and a service with another layout is
  // refused at each connection. Without, the service must be reachable and its layout is used.
  std::optional<Layout> layout;
  uint32_t timeout_ms = 10000;            // The longest wait for any reply of the service.
  uint32_t reconnect_interval_ms = 1000;  // Between connection attempts while it is down.
  // Where the connection's log lines go (connected, lost, refused); empty: nowhere. Thread-safe.
  std::function<void(LogLevel level, std::string_view message)> log;
};

}  // namespace kvtier::api
