/* kvtier C API: a stable C ABI over the engine (src/engine/engine.h) for other languages and for
 * inference engines that should not depend on kvtier's C++ types.
 *
 * Why a C ABI: connectors to inference engines churn with every release of the engine they plug
 * into; a small, versioned C surface lets thin shims (vLLM, SGLang, TRT-LLM, Rust, Go) bind once.
 * docs/integration.md describes the calls from an inference engine's point of view.
 *
 * Conventions:
 *   - Every fallible function returns a kvtier_status_t (KVTIER_OK = 0) and takes an optional
 *     `kvtier_error_t* err` as its last argument. When err is not NULL it is always filled: code
 *     and a NUL-terminated message (empty on success). There is no thread-local "last error".
 *   - No C++ exception crosses this boundary: the library catches everything; an unexpected
 *     failure (out of memory) is KVTIER_INTERNAL.
 *   - Handles are opaque and owned by the caller, who releases each with its *_destroy / *_close
 *     function exactly once. Destroy functions accept NULL.
 *   - Namespaces and statistics are plain values the caller owns.
 *   - Buffers: every pointer argument is borrowed for the duration of the call only, except the
 *     block buffers given to kvtier_load / kvtier_store, which stay borrowed until the returned
 *     handle reports completion (kvtier_load_wait / kvtier_store_wait returned) or is destroyed
 *     (the destroy function waits). The caller must not free or reuse them before.
 *   - Block buffers are in the canonical layout [k|v][token][kv_head][head_dim] of the engine's
 *     layout, exactly kvtier_engine_block_bytes() bytes each, and are passed as pointer arrays
 *     indexed [chunk * layers + layer]. Only full chunks of block_tokens tokens are cached.
 *   - Option and statistics structs begin with a struct_size field (set by the *_init function):
 *     fields are only ever appended, so a program built against an older header keeps working.
 *
 * Thread safety: engine functions may be called from any thread concurrently. A load, store or
 * pin handle is used by one thread at a time and must not be destroyed while another thread still
 * uses it. An engine may be closed while
 * load/store/pin handles are alive: it is torn down when the last of them is destroyed.
 */
#ifndef KVTIER_C_API_H_
#define KVTIER_C_API_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define KVTIER_API
#else
#define KVTIER_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped on any incompatible change of this header (it is the shared library's SOVERSION).
 * Appending functions, enum values or trailing struct fields keeps it. */
#define KVTIER_ABI_VERSION 1

/* The ABI version the loaded library implements; compare with KVTIER_ABI_VERSION. */
KVTIER_API uint32_t kvtier_abi_version(void);
/* "0.1.0": the library's release. Static storage; never freed. */
KVTIER_API const char* kvtier_version_string(void);

/* ---- Errors ------------------------------------------------------------------------------- */

/* Mirrors kvtier::StatusCode (include/kvtier/status.h); values never change. */
typedef enum kvtier_status {
  KVTIER_OK = 0,
  KVTIER_NOT_FOUND = 1,
  KVTIER_CORRUPTION = 2,
  KVTIER_IO_ERROR = 3,
  KVTIER_INVALID_ARGUMENT = 4,
  KVTIER_NOT_SUPPORTED = 5,
  KVTIER_NO_SPACE = 6,
  KVTIER_BUSY = 7, /* Every slot pinned or in use: retry later. */
  KVTIER_ABORTED = 8,
  KVTIER_TIMED_OUT = 9,
  KVTIER_UNAVAILABLE = 10,
  KVTIER_INTERNAL = 255 /* C API only: an unexpected failure caught at the boundary. */
} kvtier_status_t;

#define KVTIER_ERROR_MESSAGE_BYTES 256

typedef struct kvtier_error_s {
  kvtier_status_t code;
  char message[KVTIER_ERROR_MESSAGE_BYTES]; /* NUL-terminated; truncated when longer. */
} kvtier_error_t;

/* "OK", "NotFound", ...; "Unknown" for other values. Static storage. */
KVTIER_API const char* kvtier_status_name(kvtier_status_t code);

/* ---- Options ------------------------------------------------------------------------------ */

typedef enum kvtier_dtype {
  KVTIER_DTYPE_F16 = 1,
  KVTIER_DTYPE_BF16 = 2,
  KVTIER_DTYPE_F32 = 3
} kvtier_dtype_t;

typedef enum kvtier_write_policy {
  KVTIER_WRITE_BACK = 0,   /* Blocks reach the SSD when evicted from memory (and at flush). */
  KVTIER_WRITE_THROUGH = 1 /* Store also writes every block to the SSD before it completes. */
} kvtier_write_policy_t;

typedef enum kvtier_codec {
  KVTIER_CODEC_IDENTITY = 1,
  KVTIER_CODEC_SHUFFLE_ZSTD = 2, /* Lossless. */
  KVTIER_CODEC_INT8 = 3,         /* Lossy (KIVI-style). */
  KVTIER_CODEC_INT4 = 4,         /* Lossy (KIVI-style). */
  KVTIER_CODEC_INT8_ROT = 5,     /* Lossy: int8, values rotated per head (Hadamard) first. */
  KVTIER_CODEC_INT4_ROT = 6,     /* Lossy: int4, values rotated per head first. */
  KVTIER_CODEC_K8V4 = 7,         /* Lossy: keys int8, values int4. */
  KVTIER_CODEC_K8V4_ROT = 8,     /* Lossy: k8v4, values rotated per head first. */
  KVTIER_CODEC_ECQ5 = 9,         /* Lossy: entropy-coded quantization, about 5 bits. */
  KVTIER_CODEC_ECQ6 = 10,        /* Lossy: entropy-coded quantization, about 6 bits. */
  KVTIER_CODEC_ECQ6V5 = 11       /* Lossy: ecq6's keys, values about 5.25 bits. */
} kvtier_codec_t;

typedef enum kvtier_ssd_sync {
  KVTIER_SSD_SYNC_NONE = 0,      /* Pure cache: fdatasync only at checkpoints and close. */
  KVTIER_SSD_SYNC_PER_BATCH = 1, /* Default. */
  KVTIER_SSD_SYNC_PERIODIC = 2
} kvtier_ssd_sync_t;

typedef enum kvtier_tier {
  KVTIER_TIER_NONE = 0,
  KVTIER_TIER_DEVICE = 1,
  KVTIER_TIER_HOST = 2,
  KVTIER_TIER_CXL = 3,
  KVTIER_TIER_SSD = 4,
  KVTIER_TIER_REMOTE = 5
} kvtier_tier_t;

/* The KV geometry (docs/key_format.md): one block is one chunk of block_tokens tokens of one
 * layer, 2 * block_tokens * kv_heads * head_dim * sizeof(dtype) bytes. */
typedef struct kvtier_layout_s {
  uint32_t layers;
  uint32_t kv_heads;
  uint32_t head_dim;
  kvtier_dtype_t dtype;
  uint32_t block_tokens; /* A multiple of 16 in [16, 1024]. */
} kvtier_layout_t;

/* What one token's KV is (docs/key_format.md). A kvtier_layout_t is K|V unless an options
 * struct's appended layout_kind says otherwise. */
typedef enum kvtier_layout_kind {
  KVTIER_LAYOUT_KV = 0,    /* K and V per KV head: the block [k|v][token][kv_head][head_dim]. */
  KVTIER_LAYOUT_LATENT = 1 /* One latent vector per token (MLA: DeepSeek-V2/V3): the block
                            * [token][head_dim], block_tokens * head_dim elements; kv_heads 1. */
} kvtier_layout_kind_t;

typedef enum kvtier_log_level {
  KVTIER_LOG_DEBUG = 0,
  KVTIER_LOG_INFO = 1,
  KVTIER_LOG_WARN = 2,
  KVTIER_LOG_ERROR = 3
} kvtier_log_level_t;

/* A log line: its level and a NUL-terminated message, valid only during the call. */
typedef void (*kvtier_log_fn)(void* context, kvtier_log_level_t level, const char* message);

/* Appended enums of the options appended below; their values never change. */
typedef enum kvtier_device_backend {
  KVTIER_DEVICE_BACKEND_AUTO = 0, /* CUDA when built with it and a GPU is usable, else CPU. */
  KVTIER_DEVICE_BACKEND_CPU = 1,
  KVTIER_DEVICE_BACKEND_CUDA = 2
} kvtier_device_backend_t;

typedef enum kvtier_huge_pages {
  KVTIER_HUGE_PAGES_OFF = 0,
  KVTIER_HUGE_PAGES_IF_AVAILABLE = 1
} kvtier_huge_pages_t;

typedef enum kvtier_memory_lock {
  KVTIER_MEMORY_LOCK_OFF = 0,
  KVTIER_MEMORY_LOCK_IF_PERMITTED = 1,
  KVTIER_MEMORY_LOCK_REQUIRED = 2
} kvtier_memory_lock_t;

typedef enum kvtier_io_backend {
  KVTIER_IO_BACKEND_AUTO = 0,
  KVTIER_IO_BACKEND_IO_URING = 1,
  KVTIER_IO_BACKEND_THREAD_POOL = 2
} kvtier_io_backend_t;

typedef enum kvtier_direct_io {
  KVTIER_DIRECT_IO_OFF = 0,
  KVTIER_DIRECT_IO_PREFERRED = 1,
  KVTIER_DIRECT_IO_REQUIRED = 2
} kvtier_direct_io_t;

typedef enum kvtier_admission {
  KVTIER_ADMISSION_ALWAYS = 0,
  KVTIER_ADMISSION_AFTER_REQUESTS = 1
} kvtier_admission_t;

typedef struct kvtier_engine_options_s {
  size_t struct_size; /* sizeof(kvtier_engine_options_t); set by kvtier_engine_options_init. */
  kvtier_layout_t layout;
  const char* model_name;        /* Borrowed during open; NULL = "". Enters every key. */
  const uint8_t* weights_digest; /* NULL or 32 bytes (SHA-256 of the weights); enters keys. */
  uint64_t device_bytes;         /* 0 (default): no device tier. */
  uint64_t host_bytes;           /* Required, > 0. */
  int32_t host_numa_node;        /* -1 (default): no binding. */
  const char* const* ssd_dirs;   /* ssd_dir_count paths, borrowed during open; none: no SSD. */
  size_t ssd_dir_count;
  uint64_t ssd_bytes;         /* 0: the SSD tier's default (4 GiB). */
  uint64_t ssd_segment_bytes; /* 0: default (64 MiB). ssd_bytes holds >= 2 per dir + 2. */
  kvtier_ssd_sync_t ssd_sync;
  kvtier_write_policy_t write_policy; /* Default KVTIER_WRITE_BACK. */
  kvtier_codec_t ssd_codec;           /* Default KVTIER_CODEC_IDENTITY. */
  int32_t ssd_codec_zstd_level;       /* 0 (default): the codec's own (shuffle-zstd 1, */
                                      /* int8/int4 no zstd); else 1..22; identity 0 only. */
  uint32_t ssd_codec_group_size;      /* int8/int4 only; 0 (default): 32. */
  uint64_t default_ttl_ms;            /* 0: blocks do not expire. */
  uint32_t worker_threads;            /* Default 2. */
  uint32_t sink_chunks;               /* Default 1. */
  uint32_t promote_on_load;           /* Bool, default 1: SSD hits are copied into host memory. */
  /* Appended: the remote tier on Redis or Redis Cluster (docs/remote_tier.md). Off while
   * remote_endpoints is NULL. Its failures never fail a call: remote reads become misses. */
  const char* remote_endpoints; /* "host:port[,host:port...]", borrowed during open; cluster:
                                   seeds. NULL (default): no remote tier. */
  uint32_t remote_cluster;      /* Bool, default 0: a single Redis; 1: Redis Cluster. */
  kvtier_write_policy_t remote_write_policy; /* Default KVTIER_WRITE_THROUGH. */
  const char* remote_user;                   /* NULL: the default user. Borrowed during open. */
  const char* remote_password;               /* NULL: no AUTH. Borrowed during open. */
  const char* remote_key_prefix;             /* NULL: "kvt". Borrowed during open. */
  uint32_t remote_connect_timeout_ms;        /* 0: default (200). */
  uint32_t remote_command_timeout_ms;        /* Per command and per reply; 0: default (500). */
  /* Appended: access prediction (docs/engine.md, "Access prediction"): sessions' next requests
   * are predicted from their order and their blocks promoted from SSD / remote into host memory
   * in the background. Off by default. 0 in a numeric field: its default. */
  uint32_t prediction_enabled;            /* Bool, default 0. */
  uint32_t prediction_window;             /* Recent accesses that vote; [1, 16], default 2. */
  uint32_t prediction_successors_max;     /* Next sessions per session; [1, 64], default 8. */
  uint32_t prediction_sessions_max;       /* Sessions remembered; [1, 2^20], default 1024. */
  uint32_t prediction_session_chunks_max; /* Chunk hashes per session; [1, 4096], default 128. */
  uint32_t prediction_predict_k;          /* Sessions promoted per access; [1, 64], default 1. */
  /* Blocks promoted per access or hint; [1, 65536], default 256; at most half the host tier. */
  uint32_t prediction_blocks_max;
  /* Appended: remote-tier security (docs/security.md). Remote values are sealed with AES-256-GCM
   * and key names are keyed hashes under the deployment keys, read from remote_key_file (a
   * regular file of mode 0600 or stricter) or from the environment variable named by
   * remote_key_env (its value is the key file's text), never from an argument. Without either, a
   * remote tier opens only when remote_insecure_plaintext is 1 (values in the clear). */
  const char* remote_key_file;        /* NULL: none. Borrowed during open. */
  const char* remote_key_env;         /* NULL: none. Borrowed during open. */
  uint32_t remote_insecure_plaintext; /* Bool, default 0. */
  /* Appended: SSD records sealed at rest (AES-256-GCM; docs/ssd_format.md, "Sealed records"),
   * for NVMe shared by tenants of one host: the keys from ssd_key_file (mode 0600 or stricter)
   * or from the environment variable named by ssd_key_env, in the remote key file's format.
   * NULL (default): records are not sealed. */
  const char* ssd_key_file; /* Borrowed during open. */
  const char* ssd_key_env;  /* Borrowed during open. */
  /* Appended: the engine's log lines (state changes: a tier opened, a fallback taken, a remote
   * node's breaker tripped; never one per block). NULL (default): silent. Called from the
   * engine's threads, possibly concurrently, until kvtier_engine_close returns; it must not call
   * kvtier. Lines below log_min_level are not passed. */
  kvtier_log_fn log_fn;
  void* log_context;               /* Passed to log_fn. */
  kvtier_log_level_t log_min_level; /* Default KVTIER_LOG_INFO. */
  /* Appended: every other option of the engine (docs/options.md lists each with its range and
   * default; kvtier_engine_options_init sets the defaults). ssd_* fields apply only with
   * ssd_dirs, remote_* only with remote_endpoints, cxl_* only with cxl_bytes > 0. */
  uint32_t device_copy_threads;        /* CPU backend: copy threads per copy kind; default 1. */
  uint32_t device_copy_queue_max;      /* Copy regions queued per kind; default 1024. */
  kvtier_device_backend_t device_backend; /* Default KVTIER_DEVICE_BACKEND_AUTO. */
  int32_t cuda_device;                 /* CUDA device ordinal; default 0. */
  kvtier_huge_pages_t host_huge_pages; /* Default KVTIER_HUGE_PAGES_IF_AVAILABLE. */
  kvtier_memory_lock_t host_lock;      /* Default KVTIER_MEMORY_LOCK_IF_PERMITTED. */
  uint32_t host_prefault;              /* Bool, default 1: touch every page at open. */
  uint64_t cxl_bytes;                  /* The CXL tier (a second host tier); 0 (default): none. */
  int32_t cxl_numa_node;               /* Its CPU-less NUMA node; -1 (default): no binding. */
  kvtier_huge_pages_t cxl_huge_pages;
  kvtier_memory_lock_t cxl_lock;
  uint32_t cxl_prefault;                 /* Bool, default 1. */
  uint32_t ssd_sync_interval_ms;         /* KVTIER_SSD_SYNC_PERIODIC: default 100. */
  uint32_t ssd_checkpoint_interval_ms;   /* 0 (default): checkpoints on close and after errors. */
  uint32_t ssd_io_depth;                 /* In-flight I/Os per directory; default 32. */
  kvtier_io_backend_t ssd_io_backend;    /* Default KVTIER_IO_BACKEND_AUTO. */
  kvtier_direct_io_t ssd_direct_io;      /* Default KVTIER_DIRECT_IO_PREFERRED. */
  uint32_t ssd_queue_jobs_max;           /* Queued jobs per directory; default 64. */
  uint64_t ssd_staging_buffer_bytes;     /* Per write request; default 1 MiB. */
  uint32_t ssd_staging_buffers;          /* Per directory; 0 (default): min(io_depth, 64). */
  uint32_t ssd_write_stall_ms_max;       /* A writer waiting for space gives up; default 10000. */
  kvtier_admission_t ssd_admission;      /* Default KVTIER_ADMISSION_ALWAYS. */
  uint32_t ssd_admission_requests;       /* Default 2. */
  uint32_t ssd_admission_slots;          /* Default 65536. */
  uint64_t ssd_write_budget_bytes_per_s; /* 0 (default): unlimited. */
  uint64_t ssd_write_budget_burst_bytes; /* 0 (default): one second of budget. */
  uint32_t ssd_file_mode;                /* 0600 (default), 0640 or 0660. */
  double writeback_dirty_fraction;       /* In (0, 1], default 0.5; 1: no cleaner. */
  uint32_t staging_buffers;              /* Read and encode buffers; [8, 4096], default 32. */
  uint32_t remote_breaker_failures_to_open;     /* Default 3. */
  uint64_t remote_breaker_open_cooldown_us;     /* Default 1000000. */
  uint32_t remote_redirects_max;                /* MOVED/ASK hops; default 5. */
  uint64_t remote_topology_refresh_interval_us; /* Default 100000. */
  kvtier_admission_t remote_admission;          /* Default KVTIER_ADMISSION_ALWAYS. */
  uint32_t remote_admission_requests;           /* Default 2. */
  uint32_t remote_admission_slots;              /* Default 65536. */
  uint64_t remote_write_budget_bytes_per_s;     /* 0 (default): unlimited. */
  uint64_t remote_write_budget_burst_bytes;     /* 0 (default): one second of budget. */
  uint32_t remote_promote_on_load; /* Bool, default 1: remote hits are cached in host memory. */
  /* Appended: threads that run the remote tier's reads and writes, so that the engine's workers
   * never wait for the network; [1, 64], 0: default (2). */
  uint32_t remote_io_threads;
  /* Appended: Redis Cluster hosts besides the seeds' that CLUSTER SLOTS, MOVED and ASK may name,
   * "host[,host...]" (docs/security.md); an endpoint on any other host is refused, never
   * connected to. NULL (default): the seeds' hosts only. Borrowed during open. */
  const char* remote_cluster_allowed_hosts;
  /* Appended: write-back only, a stored block reaches the SSD at most this many milliseconds
   * after its store completed (docs/reliability.md); 0: write-through; default 1000. */
  uint32_t writeback_age_ms_max;
  /* Appended: the kind of `layout`; default KVTIER_LAYOUT_KV. KVTIER_LAYOUT_LATENT caches MLA's
   * latent vectors (kv_heads must be 1); it enters every key. */
  kvtier_layout_kind_t layout_kind;
} kvtier_engine_options_t;

/* Fills *options with the defaults (and struct_size). Call it before setting fields. */
KVTIER_API void kvtier_engine_options_init(kvtier_engine_options_t* options);

/* A tenant salt: 64 lowercase hex digits and a NUL written to salt_out, HMAC-SHA256(secret,
 * "kvtier tenant salt v1" 0 tenant_id). Salts separate tenants only while they are secret
 * (docs/security.md); one deployment secret (at least 16 bytes) gives every tenant its own.
 * INVALID_ARGUMENT for an empty tenant id, a shorter secret or NULL pointers. */
KVTIER_API kvtier_status_t kvtier_derive_tenant_salt(const char* tenant_id, const void* secret,
                                                     size_t secret_bytes, char salt_out[65],
                                                     kvtier_error_t* err);

/* K and V of one chunk for one layer; INVALID_ARGUMENT (naming the field) for a bad layout. */
KVTIER_API kvtier_status_t kvtier_layout_block_bytes(const kvtier_layout_t* layout,
                                                     uint64_t* block_bytes, kvtier_error_t* err);
/* The same for a layout of either kind (a latent block holds one plane: half a K|V block's bytes
 * at the same kv_heads = 1 and head_dim). */
KVTIER_API kvtier_status_t kvtier_layout_kind_block_bytes(const kvtier_layout_t* layout,
                                                          kvtier_layout_kind_t kind,
                                                          uint64_t* block_bytes,
                                                          kvtier_error_t* err);

/* ---- Engine ------------------------------------------------------------------------------- */

typedef struct kvtier_engine_s kvtier_engine_t;
typedef struct kvtier_load_s kvtier_load_t;
typedef struct kvtier_store_s kvtier_store_t;
typedef struct kvtier_pin_s kvtier_pin_t;

/* A tenant's key namespace: a value (the namespace digest) the caller owns and may copy. */
typedef struct kvtier_namespace_s {
  uint8_t digest[32];
} kvtier_namespace_t;

/* Opens the engine (maps memory tiers, recovers the SSD tier). *engine is set on success and
 * must be released with kvtier_engine_close. Strings in options are only read during the call.
 * INVALID_ARGUMENT names the bad option; NOT_SUPPORTED when options come from a newer header
 * and set fields this library does not know. */
KVTIER_API kvtier_status_t kvtier_engine_open(const kvtier_engine_options_t* options,
                                              kvtier_engine_t** engine, kvtier_error_t* err);
/* Releases the caller's reference; the engine shuts down (writing nothing more: call
 * kvtier_flush first for durability) once every load/store/pin handle is destroyed too. */
KVTIER_API void kvtier_engine_close(kvtier_engine_t* engine);

/* The engine's validated layout and block size. */
KVTIER_API void kvtier_engine_layout(const kvtier_engine_t* engine, kvtier_layout_t* layout);
KVTIER_API uint64_t kvtier_engine_block_bytes(const kvtier_engine_t* engine);
/* The kind of the engine's layout: a service's, for an engine from kvtier_engine_connect. */
KVTIER_API kvtier_layout_kind_t kvtier_engine_layout_kind(const kvtier_engine_t* engine);

/* The namespace of a tenant: salt (salt_len bytes, may contain NUL) and extra keys (LoRA id,
 * media hashes; each extra_key_lens[i] bytes, or NUL-terminated when extra_key_lens is NULL). */
KVTIER_API kvtier_status_t kvtier_make_namespace(kvtier_engine_t* engine, const void* salt,
                                                 size_t salt_len, const char* const* extra_keys,
                                                 const size_t* extra_key_lens,
                                                 size_t extra_key_count, kvtier_namespace_t* ns,
                                                 kvtier_error_t* err);

/* How many leading tokens have every layer of their chunks cached (*matched_tokens, a multiple
 * of block_tokens) and, when chunk_tiers is not NULL, the fastest tier of each matched chunk
 * (the first min(matched chunks, chunk_tiers_capacity) entries are written). */
KVTIER_API kvtier_status_t kvtier_lookup(kvtier_engine_t* engine, const kvtier_namespace_t* ns,
                                         const uint32_t* tokens, size_t token_count,
                                         size_t* matched_tokens, kvtier_tier_t* chunk_tiers,
                                         size_t chunk_tiers_capacity, kvtier_error_t* err);

/* Per-lookup options; versioned by struct_size like every options struct. */
typedef struct kvtier_lookup_options_s {
  size_t struct_size; /* Set by kvtier_lookup_options_init. */
  /* The request's session (a conversation, an agent), per namespace. 0 (default): derived from
   * the first chunk of the tokens, so requests sharing a system prompt of at least block_tokens
   * tokens share one derived session: pass ids for them. Used by access prediction only. */
  uint64_t session_id;
} kvtier_lookup_options_t;

KVTIER_API void kvtier_lookup_options_init(kvtier_lookup_options_t* options);

/* kvtier_lookup with options (NULL: defaults). With prediction enabled the lookup is an access of
 * its session: the engine learns from it and promotes the predicted next sessions' blocks in the
 * background; the result is computed first. */
KVTIER_API kvtier_status_t kvtier_lookup_with_options(
    kvtier_engine_t* engine, const kvtier_namespace_t* ns, const uint32_t* tokens,
    size_t token_count, const kvtier_lookup_options_t* options, size_t* matched_tokens,
    kvtier_tier_t* chunk_tiers, size_t chunk_tiers_capacity, kvtier_error_t* err);

/* Starts copying the first dst_count / layers chunks of `tokens` (each must be cached; call
 * kvtier_lookup first) into dst[chunk * layers + layer], each pointing to block_bytes writable
 * bytes. dst_count must be a positive multiple of layers. The pointer array itself is only read
 * during the call; the buffers it names are borrowed until the handle completes. */
KVTIER_API kvtier_status_t kvtier_load(kvtier_engine_t* engine, const kvtier_namespace_t* ns,
                                       const uint32_t* tokens, size_t token_count, void* const* dst,
                                       size_t dst_count, kvtier_load_t** load, kvtier_error_t* err);
/* Blocks until every chunk of `layer` is in its destination buffers. NOT_FOUND when the layer
 * could not be served (a block failed verification): recompute it. */
KVTIER_API kvtier_status_t kvtier_load_wait_layer(kvtier_load_t* load, uint32_t layer,
                                                  kvtier_error_t* err);
/* 1 when `layer` is complete (successfully or not), else 0. Does not block. */
KVTIER_API int kvtier_load_layer_ready(kvtier_load_t* load, uint32_t layer);
/* Waits for all layers; the first error. */
KVTIER_API kvtier_status_t kvtier_load_wait(kvtier_load_t* load, kvtier_error_t* err);
KVTIER_API size_t kvtier_load_chunks(const kvtier_load_t* load);
/* Waits for copies still in flight, then frees the handle. */
KVTIER_API void kvtier_load_destroy(kvtier_load_t* load);

typedef enum kvtier_priority {
  KVTIER_PRIORITY_NORMAL = 0,
  KVTIER_PRIORITY_HIGH = 1,
  KVTIER_PRIORITY_PINNED_PROMPT = 2
} kvtier_priority_t;

typedef struct kvtier_store_options_s {
  size_t struct_size; /* Set by kvtier_store_options_init. */
  kvtier_priority_t priority;
  uint64_t ttl_ms; /* 0: the engine's default_ttl_ms. */
} kvtier_store_options_t;

KVTIER_API void kvtier_store_options_init(kvtier_store_options_t* options);

/* Starts storing the first src_count / layers full chunks of `tokens` from src[chunk * layers +
 * layer] (block_bytes readable bytes each). options may be NULL (defaults). The buffers are
 * borrowed until kvtier_store_wait returned or the handle is destroyed. */
KVTIER_API kvtier_status_t kvtier_store(kvtier_engine_t* engine, const kvtier_namespace_t* ns,
                                        const uint32_t* tokens, size_t token_count,
                                        const void* const* src, size_t src_count,
                                        const kvtier_store_options_t* options,
                                        kvtier_store_t** store, kvtier_error_t* err);
/* OK once the source buffers are no longer needed and the blocks are visible to lookups. */
KVTIER_API kvtier_status_t kvtier_store_wait(kvtier_store_t* store, kvtier_error_t* err);
/* Full chunks newly taken (chunks already cached are skipped). Meaningful after wait. */
KVTIER_API size_t kvtier_store_chunks_stored(const kvtier_store_t* store);
KVTIER_API void kvtier_store_destroy(kvtier_store_t* store);

/* A hint: promotes the cached chunks of `tokens` towards host memory; returns at once. */
KVTIER_API kvtier_status_t kvtier_prefetch(kvtier_engine_t* engine, const kvtier_namespace_t* ns,
                                           const uint32_t* tokens, size_t token_count,
                                           kvtier_error_t* err);

/* The caller's queue: a request of session_id (0: derived, as kvtier_lookup_options_t says)
 * with these tokens comes soon. Promotes its cached prefix into host memory in the background
 * (at most prediction_blocks_max blocks) and, with prediction enabled, makes the session the
 * first prediction until it is looked up. Returns at once. */
KVTIER_API kvtier_status_t kvtier_hint(kvtier_engine_t* engine, const kvtier_namespace_t* ns,
                                       const uint32_t* tokens, size_t token_count,
                                       uint64_t session_id, kvtier_error_t* err);

/* Keeps the leading cached chunks of `tokens` resident in memory until kvtier_unpin. BUSY when
 * memory is full of pinned blocks. */
KVTIER_API kvtier_status_t kvtier_pin(kvtier_engine_t* engine, const kvtier_namespace_t* ns,
                                      const uint32_t* tokens, size_t token_count,
                                      kvtier_pin_t** pin, kvtier_error_t* err);
KVTIER_API size_t kvtier_pin_chunks(const kvtier_pin_t* pin);
/* Releases the pin and frees the handle. */
KVTIER_API void kvtier_unpin(kvtier_pin_t* pin);

/* Writes every dirty block down and syncs the SSD tier. Blocks until done. */
KVTIER_API kvtier_status_t kvtier_flush(kvtier_engine_t* engine, kvtier_error_t* err);

/* ---- Statistics --------------------------------------------------------------------------- */

/* Every counter is a row of the engine's stats table (docs/stats.md), with the same name here. */

#define KVTIER_STATS_TIERS_MAX 8
/* Bytes of a tier's name in kvtier_engine_stats_t::tier_names, its NUL included. */
#define KVTIER_TIER_NAME_BYTES 16

/* A remote node's circuit breaker; the worst over all nodes is kvtier_remote_stats_t's. */
typedef enum kvtier_breaker_state {
  KVTIER_BREAKER_CLOSED = 0,
  KVTIER_BREAKER_OPEN = 1,
  KVTIER_BREAKER_HALF_OPEN = 2
} kvtier_breaker_state_t;

/* The remote store's own counters (docs/stats.md, scope "remote store"); fields only appended. */
typedef struct kvtier_remote_stats_s {
  uint64_t gets, hits, misses; /* Keys asked; found a usable value; found none. */
  uint64_t corrupt;            /* Values that failed their checks (misses). */
  uint64_t mismatched;         /* Well-formed values for another key or layout (misses). */
  uint64_t auth_failures;      /* Sealed values refused by authentication (misses). */
  uint64_t puts;
  uint64_t errors, timeouts, reconnects, breaker_trips;
  uint32_t breakers_open;               /* Gauge: nodes whose breaker is not closed. */
  kvtier_breaker_state_t breaker_state; /* Gauge: the worst over all nodes. */
  uint64_t redirects_moved, redirects_ask, redirects_refused;
  uint64_t endpoints_refused; /* Cluster endpoints on a host neither a seed's nor allowed. */
  uint64_t topology_refreshes;
} kvtier_remote_stats_t;

typedef struct kvtier_tier_stats_s {
  kvtier_tier_t kind;
  uint64_t capacity_bytes;
  uint64_t used_bytes;
  uint64_t blocks;
  uint64_t hits;
  uint64_t evictions;
  uint64_t writebacks;
  uint64_t promotions;
} kvtier_tier_stats_t;

typedef struct kvtier_engine_stats_s {
  size_t struct_size; /* The caller sets sizeof(kvtier_engine_stats_t) (or kvtier_stats_init). */
  uint64_t lookups, lookup_hit_tokens, lookup_tokens;
  uint64_t loads, load_blocks, load_failures;
  uint64_t stores, store_blocks, busy_rejections;
  uint64_t prefetches, prefetch_blocks;
  uint64_t corrupt_blocks;
  uint32_t tier_count; /* Entries of tiers[] filled, fastest first. */
  kvtier_tier_stats_t tiers[KVTIER_STATS_TIERS_MAX];
  /* Appended: access prediction (docs/engine.md, "Access prediction"). */
  uint64_t prediction_accesses;        /* Lookups observed as accesses of a session. */
  uint64_t prediction_scored;          /* Accesses that had a prediction made before them. */
  uint64_t prediction_hits;            /* ... whose session was in it. */
  double prediction_accuracy;          /* hits / scored; 0 before any. */
  uint64_t prediction_promoted_blocks; /* Copied into host memory for predicted sessions. */
  uint64_t prediction_useful_blocks;   /* ... of those, served from memory by a later load. */
  uint64_t hints, hint_promoted_blocks, hint_useful_blocks; /* The same for kvtier_hint. */
  uint64_t prediction_dropped_blocks; /* Promotions given up (queue full, no clean slot). */
  uint64_t prediction_sessions;       /* Gauge: sessions remembered. */
  uint64_t prediction_tasks_pending;  /* Gauge: promotion tasks queued or running. */
  /* Appended: per entry of tiers[], blocks that were to be written into that tier and are not
   * there because of an error (SSD: I/O error, no space; remote: failed puts). Refusals by
   * admission or a write budget are not counted. */
  uint64_t tier_write_failures[KVTIER_STATS_TIERS_MAX];
  /* Appended: per entry of tiers[], the write-back horizon of a write-back tier with an age limit
   * (0 for the others): every store that completed before it (CLOCK_MONOTONIC microseconds) has
   * its blocks on that tier, except blocks counted in tier_write_failures, refused by admission
   * or the write budget, expired or removed; and how far it trails the time of this call. */
  uint64_t tier_writeback_horizon_us[KVTIER_STATS_TIERS_MAX];
  uint64_t tier_writeback_lag_us[KVTIER_STATS_TIERS_MAX];
  /* Appended: the remote tier's refusals and errors (0 without one): puts that failed, puts
   * refused by the admission filter or over the write budget, lookups whose remote check failed
   * (served as misses). */
  uint64_t remote_put_errors, remote_not_admitted, remote_over_budget, remote_lookup_errors;
  uint64_t background_writebacks; /* Dirty blocks the cleaner wrote to the SSD. */
  /* Bytes copied out of memory slots into staging buffers before an SSD or remote write. */
  uint64_t staged_copy_bytes;
  /* The SSD codec's compression-ratio monitor: blocks sampled, variation events raised. */
  uint64_t ratio_samples, ratio_cv_events;
  /* Appended: the remote store's own counters; has_remote is 1 with a remote tier (remote is all
   * zeros without one). */
  uint32_t has_remote;
  kvtier_remote_stats_t remote;
  /* Appended: per entry of tiers[] below memory that counts them (the SSD tier; 0 elsewhere),
   * bytes of the records written to it (headers and padding included), and of those the bytes
   * the tier copied into buffers of its own before the disk. */
  uint64_t tier_write_bytes[KVTIER_STATS_TIERS_MAX];
  uint64_t tier_staged_write_bytes[KVTIER_STATS_TIERS_MAX];
  /* Appended: per entry of tiers[], its name, NUL-terminated: a memory tier's kind ("device",
   * "host", "cxl"); below memory, the name its tier registered: "ssd", and the remote tier's
   * store, "redis" or "fs". */
  char tier_names[KVTIER_STATS_TIERS_MAX][KVTIER_TIER_NAME_BYTES];
} kvtier_engine_stats_t;

KVTIER_API void kvtier_stats_init(kvtier_engine_stats_t* stats);
/* Fills the first stats->struct_size bytes of *stats. */
KVTIER_API kvtier_status_t kvtier_engine_stats(kvtier_engine_t* engine,
                                               kvtier_engine_stats_t* stats, kvtier_error_t* err);

/* The engine's counters in the Prometheus text exposition format (per-tier hits, blocks, bytes,
 * evictions, write-backs, failed writes; lookups, loads, stores, corrupt blocks; the remote
 * tier's errors). Writes the text and a NUL into buf when `capacity` bytes hold them; *needed
 * (when not NULL) gets the text's length plus one either way. A buffer too small is
 * KVTIER_NO_SPACE with buf untouched: call again with *needed bytes. */
KVTIER_API kvtier_status_t kvtier_metrics_text(kvtier_engine_t* engine, char* buf,
                                               size_t capacity, size_t* needed,
                                               kvtier_error_t* err);

/* ---- The node service ---------------------------------------------------------------------- */

/* How to reach kvtier's node service (`kvtier serve`, docs/serve.md), one process that owns the
 * node's tiers and serves every inference engine of the node on a Unix socket. */
typedef struct kvtier_connect_options_s {
  size_t struct_size; /* sizeof(kvtier_connect_options_t); set by kvtier_connect_options_init. */
  const char* token;  /* Sent in the hello; required when the service has one. NULL: none. */
  const char* name;   /* How the service names this client in logs and metrics. NULL: "". */
  /* NULL (default): the service's layout, and the service must be reachable now. Else the
   * connection succeeds before the service is up (lookups miss until it is), and a service
   * with another layout is refused at each connection. Read during the call only. */
  const kvtier_layout_t* layout;
  uint32_t timeout_ms;            /* The longest wait for a reply; 0 (default): 10000. */
  uint32_t reconnect_interval_ms; /* Between attempts while the service is down; 0: 1000. */
  /* The connection's log lines (connected, lost, refused), as kvtier_engine_options_t's. */
  kvtier_log_fn log_fn;
  void* log_context;
  kvtier_log_level_t log_min_level; /* Default KVTIER_LOG_INFO. */
  /* Appended: the kind of `layout` when one is given; default KVTIER_LAYOUT_KV. */
  kvtier_layout_kind_t layout_kind;
} kvtier_connect_options_t;

/* Fills *options with the defaults (and struct_size). Call it before setting fields. */
KVTIER_API void kvtier_connect_options_init(kvtier_connect_options_t* options);

/* Connects to the node service listening on the Unix socket `socket`: *engine is an engine
 * handle like kvtier_engine_open's, with every kvtier_* engine function, served by the service's
 * engine (shared by all its clients; statistics are the service's). A namespace's salt is sent
 * as a tenant id, from which the service derives the namespace, so clients of two uids never
 * share KV. While the service is unreachable, lookups match nothing, loads and stores fail with
 * KVTIER_UNAVAILABLE (recompute; the store is skipped), prefetch, hint and pin do nothing, and
 * the handle reconnects by itself; no call waits longer than timeout_ms. options may be NULL
 * (defaults). UNAVAILABLE when the service cannot be reached and no layout is given;
 * INVALID_ARGUMENT naming a bad option. Release *engine with kvtier_engine_close. */
KVTIER_API kvtier_status_t kvtier_engine_connect(const char* socket,
                                                 const kvtier_connect_options_t* options,
                                                 kvtier_engine_t** engine, kvtier_error_t* err);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KVTIER_C_API_H_ */
