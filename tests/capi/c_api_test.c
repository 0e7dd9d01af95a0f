/* The C API from C (compiled as C11): open an engine with an SSD directory in a temporary
 * directory, store a prefix, look it up, load it back layer by layer, compare the bytes, pin,
 * prefetch, flush, read statistics (the remote store's absent without a remote tier), hint a
 * session and look it up with a session id (access prediction), set the options appended for the
 * options table (docs/options.md: CXL tier, device backend, SSD I/O, staging buffers, file mode)
 * and check that they reach the engine, and check the error paths (bad layout, bad block
 * arrays, versioned structs, bad prediction options, appended options out of their table range),
 * that a codec's zstd level and group size of 0
 * are its defaults, and that a latent (MLA) layout, asked for by the appended layout_kind, caches
 * one plane per block byte for byte (and a bad kind, or a latent layout with two KV heads, is
 * refused naming the field). Exits 0 on success, 1 with a message on the first failed check. */
#define _POSIX_C_SOURCE 200809L

#include "kvtier/c_api.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int failures = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      failures++;                                                              \
      return;                                                                  \
    }                                                                          \
  } while (0)

#define CHECK_OK(expr)                                                      \
  do {                                                                      \
    kvtier_status_t check_st_ = (expr);                                     \
    if (check_st_ != KVTIER_OK) {                                           \
      fprintf(stderr, "%s:%d: %s returned %s\n", __FILE__, __LINE__, #expr, \
              kvtier_status_name(check_st_));                               \
      failures++;                                                           \
      return;                                                               \
    }                                                                       \
  } while (0)

enum { kLayers = 3, kKvHeads = 2, kHeadDim = 16, kBlockTokens = 16, kChunks = 4 };

static char temp_dir[256];

/* A recognizable byte pattern per (chunk, layer, byte). */
static uint8_t Pattern(size_t chunk, size_t layer, size_t i) {
  return (uint8_t)((chunk * 31u + layer * 7u + i * 13u + 5u) & 0xffu);
}

static void InitOptions(kvtier_engine_options_t* o, const char* const* dirs) {
  kvtier_engine_options_init(o);
  o->layout.layers = kLayers;
  o->layout.kv_heads = kKvHeads;
  o->layout.head_dim = kHeadDim;
  o->layout.dtype = KVTIER_DTYPE_F16;
  o->layout.block_tokens = kBlockTokens;
  o->model_name = "c-api-test";
  o->host_bytes = 4u << 20;
  o->ssd_dirs = dirs;
  o->ssd_dir_count = 1;
  o->ssd_bytes = 16u << 20;
  o->ssd_segment_bytes = 1u << 20;
  o->write_policy = KVTIER_WRITE_THROUGH;
}

/* Stores one chunk (`tokens`: kBlockTokens of them) whose kLayers blocks are all `fill` bytes, and
 * waits for it; the store must succeed. */
static void StoreOneChunk(kvtier_engine_t* engine, const kvtier_namespace_t* ns,
                          const uint32_t* tokens, int fill) {
  const uint64_t block_bytes = kvtier_engine_block_bytes(engine);
  uint8_t* src = malloc(kLayers * block_bytes);
  CHECK(src != NULL);
  if (src == NULL) return;
  memset(src, fill, kLayers * block_bytes);
  const void* src_ptrs[kLayers];
  for (size_t l = 0; l < kLayers; ++l) src_ptrs[l] = src + l * block_bytes;
  kvtier_store_t* store = NULL;
  kvtier_error_t err;
  CHECK_OK(kvtier_store(engine, ns, tokens, kBlockTokens, src_ptrs, kLayers, NULL, &store, &err));
  CHECK_OK(kvtier_store_wait(store, &err));
  kvtier_store_destroy(store);
  free(src);
}

static void TestVersion(void) {
  CHECK(kvtier_abi_version() == KVTIER_ABI_VERSION);
  CHECK(kvtier_version_string() != NULL && strlen(kvtier_version_string()) > 0);
  CHECK(strcmp(kvtier_status_name(KVTIER_OK), "OK") == 0);
  CHECK(strcmp(kvtier_status_name(KVTIER_BUSY), "Busy") == 0);
  CHECK(strcmp(kvtier_status_name(KVTIER_INTERNAL), "Internal") == 0);
  CHECK(strcmp(kvtier_status_name((kvtier_status_t)77), "Unknown") == 0);
}

static void TestBadLayout(void) {
  const char* dirs[1] = {temp_dir};
  kvtier_engine_options_t o;
  InitOptions(&o, dirs);
  o.layout.block_tokens = 17; /* Not a multiple of 16. */
  kvtier_engine_t* engine = (kvtier_engine_t*)(uintptr_t)1;
  kvtier_error_t err;
  kvtier_status_t st = kvtier_engine_open(&o, &engine, &err);
  CHECK(st == KVTIER_INVALID_ARGUMENT);
  CHECK(err.code == KVTIER_INVALID_ARGUMENT);
  CHECK(engine == NULL);
  CHECK(strstr(err.message, "block_tokens") != NULL);

  /* The same through the layout helper, and with a NULL error pointer. */
  uint64_t bytes = 0;
  CHECK(kvtier_layout_block_bytes(&o.layout, &bytes, NULL) == KVTIER_INVALID_ARGUMENT);
  o.layout.block_tokens = kBlockTokens;
  o.layout.dtype = (kvtier_dtype_t)9;
  CHECK(kvtier_layout_block_bytes(&o.layout, &bytes, &err) == KVTIER_INVALID_ARGUMENT);
  CHECK(strstr(err.message, "dtype") != NULL);
  o.layout.dtype = KVTIER_DTYPE_F16;
  CHECK_OK(kvtier_layout_block_bytes(&o.layout, &bytes, &err));
  CHECK(bytes == 2u * kBlockTokens * kKvHeads * kHeadDim * 2u);

  /* Enum fields holding values outside their enum. */
  o.write_policy = (kvtier_write_policy_t)7;
  CHECK(kvtier_engine_open(&o, &engine, &err) == KVTIER_INVALID_ARGUMENT);
  CHECK(strstr(err.message, "write_policy") != NULL);
  o.write_policy = KVTIER_WRITE_BACK;
  o.ssd_codec = (kvtier_codec_t)300;
  CHECK(kvtier_engine_open(&o, &engine, &err) == KVTIER_INVALID_ARGUMENT);
  CHECK(strstr(err.message, "ssd_codec") != NULL);
  o.ssd_codec = KVTIER_CODEC_IDENTITY;

  /* No host tier. */
  o.host_bytes = 0;
  CHECK(kvtier_engine_open(&o, &engine, &err) == KVTIER_INVALID_ARGUMENT);
  CHECK(strlen(err.message) > 0);

  /* Versioned structs: too small is refused; larger with unknown non-zero fields too. */
  struct {
    kvtier_engine_options_t known;
    uint64_t future_field;
  } bigger;
  InitOptions(&bigger.known, dirs);
  bigger.known.struct_size = 8;
  CHECK(kvtier_engine_open(&bigger.known, &engine, &err) == KVTIER_INVALID_ARGUMENT);
  CHECK(strstr(err.message, "struct_size") != NULL);
  bigger.known.struct_size = sizeof(bigger);
  bigger.future_field = 1;
  CHECK(kvtier_engine_open(&bigger.known, &engine, &err) == KVTIER_NOT_SUPPORTED);
  /* A garbage struct_size is refused before anything past the struct is read (ASan would flag
   * the scan of unknown trailing fields otherwise). */
  bigger.known.struct_size = (size_t)1 << 40;
  CHECK(kvtier_engine_open(&bigger.known, &engine, &err) == KVTIER_INVALID_ARGUMENT);
  CHECK(strstr(err.message, "struct_size") != NULL);
  bigger.known.struct_size = 4097;
  CHECK(kvtier_engine_open(&bigger.known, &engine, &err) == KVTIER_INVALID_ARGUMENT);

  /* NULL arguments are errors, not crashes. */
  CHECK(kvtier_engine_open(NULL, &engine, &err) == KVTIER_INVALID_ARGUMENT);
  CHECK(kvtier_flush(NULL, &err) == KVTIER_INVALID_ARGUMENT);
  kvtier_engine_close(NULL);
  kvtier_load_destroy(NULL);
  kvtier_store_destroy(NULL);
  kvtier_unpin(NULL);
}

static void TestRoundTrip(void) {
  const char* dirs[1] = {temp_dir};
  kvtier_engine_options_t o;
  InitOptions(&o, dirs);
  kvtier_engine_t* engine = NULL;
  kvtier_error_t err;
  if (kvtier_engine_open(&o, &engine, &err) != KVTIER_OK) {
    fprintf(stderr, "open: %s: %s\n", kvtier_status_name(err.code), err.message);
    failures++;
    return;
  }
  const uint64_t block_bytes = kvtier_engine_block_bytes(engine);
  CHECK(block_bytes == 2u * kBlockTokens * kKvHeads * kHeadDim * 2u);
  kvtier_layout_t layout;
  kvtier_engine_layout(engine, &layout);
  CHECK(layout.layers == kLayers && layout.block_tokens == kBlockTokens);

  kvtier_namespace_t ns, other_ns;
  const char* extra[1] = {"lora:7"};
  CHECK_OK(kvtier_make_namespace(engine, "tenant-a", 8, extra, NULL, 1, &ns, &err));
  CHECK_OK(kvtier_make_namespace(engine, "tenant-b", 8, NULL, NULL, 0, &other_ns, &err));
  CHECK(memcmp(ns.digest, other_ns.digest, sizeof(ns.digest)) != 0);

  /* kChunks full chunks plus a partial tail (ignored). */
  enum { kTokens = kChunks * kBlockTokens + 5 };
  uint32_t tokens[kTokens];
  for (size_t i = 0; i < kTokens; ++i) tokens[i] = (uint32_t)(1000 + i * 3);

  size_t matched = 99;
  CHECK_OK(kvtier_lookup(engine, &ns, tokens, kTokens, &matched, NULL, 0, &err));
  CHECK(matched == 0);

  /* Store every chunk. */
  uint8_t* src = malloc(kChunks * kLayers * block_bytes);
  uint8_t* dst = malloc(kChunks * kLayers * block_bytes);
  CHECK(src != NULL && dst != NULL);
  const void* src_ptrs[kChunks * kLayers];
  void* dst_ptrs[kChunks * kLayers];
  for (size_t c = 0; c < kChunks; ++c) {
    for (size_t l = 0; l < kLayers; ++l) {
      uint8_t* block = src + (c * kLayers + l) * block_bytes;
      for (size_t i = 0; i < block_bytes; ++i) block[i] = Pattern(c, l, i);
      src_ptrs[c * kLayers + l] = block;
      dst_ptrs[c * kLayers + l] = dst + (c * kLayers + l) * block_bytes;
    }
  }
  memset(dst, 0, kChunks * kLayers * block_bytes);

  kvtier_store_options_t sopts;
  kvtier_store_options_init(&sopts);
  sopts.priority = KVTIER_PRIORITY_HIGH;
  kvtier_store_t* store = NULL;
  CHECK_OK(kvtier_store(engine, &ns, tokens, kTokens, src_ptrs, kChunks * kLayers, &sopts, &store,
                        &err));
  CHECK_OK(kvtier_store_wait(store, &err));
  CHECK(kvtier_store_chunks_stored(store) == kChunks);
  kvtier_store_destroy(store);

  /* Lookup: every chunk, in memory; the other tenant sees nothing. */
  kvtier_tier_t tiers[kChunks + 2];
  for (size_t i = 0; i < kChunks + 2; ++i) tiers[i] = KVTIER_TIER_NONE;
  CHECK_OK(kvtier_lookup(engine, &ns, tokens, kTokens, &matched, tiers, kChunks + 2, &err));
  CHECK(matched == kChunks * kBlockTokens);
  for (size_t i = 0; i < kChunks; ++i) CHECK(tiers[i] == KVTIER_TIER_HOST);
  CHECK(tiers[kChunks] == KVTIER_TIER_NONE);
  CHECK_OK(kvtier_lookup(engine, &other_ns, tokens, kTokens, &matched, NULL, 0, &err));
  CHECK(matched == 0);

  /* Load back, layer by layer. */
  kvtier_load_t* load = NULL;
  CHECK_OK(kvtier_load(engine, &ns, tokens, kTokens, dst_ptrs, kChunks * kLayers, &load, &err));
  CHECK(kvtier_load_chunks(load) == kChunks);
  for (uint32_t l = 0; l < kLayers; ++l) {
    CHECK_OK(kvtier_load_wait_layer(load, l, &err));
    CHECK(kvtier_load_layer_ready(load, l) == 1);
    for (size_t c = 0; c < kChunks; ++c) {
      CHECK(memcmp(dst_ptrs[c * kLayers + l], src_ptrs[c * kLayers + l], block_bytes) == 0);
    }
  }
  CHECK_OK(kvtier_load_wait(load, &err));
  CHECK(kvtier_load_wait_layer(load, kLayers, &err) == KVTIER_INVALID_ARGUMENT);
  CHECK(kvtier_load_layer_ready(load, kLayers) == 0);
  kvtier_load_destroy(load);

  /* A shorter load: the first two chunks only. */
  memset(dst, 0, kChunks * kLayers * block_bytes);
  CHECK_OK(kvtier_load(engine, &ns, tokens, kTokens, dst_ptrs, 2 * kLayers, &load, &err));
  CHECK_OK(kvtier_load_wait(load, &err));
  kvtier_load_destroy(load);
  CHECK(memcmp(dst, src, 2 * kLayers * block_bytes) == 0);

  /* Error paths of keyed calls: not a multiple of layers, NULL arrays, NULL namespace. */
  CHECK(kvtier_load(engine, &ns, tokens, kTokens, dst_ptrs, kLayers + 1, &load, &err) ==
        KVTIER_INVALID_ARGUMENT);
  CHECK(load == NULL);
  CHECK(strstr(err.message, "layers") != NULL);
  CHECK(kvtier_store(engine, &ns, tokens, kTokens, NULL, kLayers, NULL, &store, &err) ==
        KVTIER_INVALID_ARGUMENT);
  CHECK(kvtier_lookup(engine, NULL, tokens, kTokens, &matched, NULL, 0, &err) ==
        KVTIER_INVALID_ARGUMENT);
  CHECK(kvtier_lookup(engine, &ns, NULL, 5, &matched, NULL, 0, &err) == KVTIER_INVALID_ARGUMENT);
  /* Loading chunks that are not cached fails (the other tenant has none). */
  {
    kvtier_status_t st =
        kvtier_load(engine, &other_ns, tokens, kTokens, dst_ptrs, kLayers, &load, &err);
    if (st == KVTIER_OK) {
      st = kvtier_load_wait(load, &err);
      kvtier_load_destroy(load);
    }
    CHECK(st != KVTIER_OK);
    CHECK(strlen(err.message) > 0);
  }

  /* Pin, prefetch, flush, statistics. */
  kvtier_pin_t* pin = NULL;
  CHECK_OK(kvtier_pin(engine, &ns, tokens, kTokens, &pin, &err));
  CHECK(kvtier_pin_chunks(pin) == kChunks);
  CHECK_OK(kvtier_prefetch(engine, &ns, tokens, kTokens, &err));
  CHECK_OK(kvtier_flush(engine, &err));

  kvtier_engine_stats_t stats;
  kvtier_stats_init(&stats);
  CHECK_OK(kvtier_engine_stats(engine, &stats, &err));
  CHECK(stats.lookups >= 3);
  CHECK(stats.store_blocks == kChunks * kLayers);
  CHECK(stats.load_blocks >= (kChunks + 2) * kLayers);
  CHECK(stats.tier_count >= 2); /* host and SSD */
  CHECK(strcmp(stats.tier_names[0], "host") == 0);
  CHECK(stats.tiers[stats.tier_count - 1].kind == KVTIER_TIER_SSD);
  CHECK(strcmp(stats.tier_names[stats.tier_count - 1], "ssd") == 0); /* Its registered name. */
  CHECK(stats.has_remote == 0 && stats.remote.gets == 0 && stats.remote.puts == 0);
  CHECK(stats.remote.breaker_state == KVTIER_BREAKER_CLOSED);
  {
    /* A caller built before the remote store's counters: they keep the caller's values. */
    kvtier_engine_stats_t before;
    kvtier_stats_init(&before);
    before.struct_size = offsetof(kvtier_engine_stats_t, has_remote);
    before.has_remote = 7;
    CHECK_OK(kvtier_engine_stats(engine, &before, &err));
    CHECK(before.has_remote == 7 && before.store_blocks == kChunks * kLayers);
  }
  {
    size_t needed = 0;
    char small[8] = "keep";
    CHECK(kvtier_metrics_text(engine, small, sizeof(small), &needed, &err) == KVTIER_NO_SPACE);
    CHECK(strcmp(small, "keep") == 0 && needed > 100);
    char* text = (char*)malloc(needed);
    CHECK(text != NULL);
    CHECK_OK(kvtier_metrics_text(engine, text, needed, &needed, &err));
    CHECK(strlen(text) + 1 == needed);
    CHECK(strstr(text, "# TYPE kvtier_tier_hits_total counter") != NULL);
    CHECK(strstr(text, "kvtier_tier_blocks{tier=\"ssd\",name=\"ssd\"}") != NULL);
    free(text);
  }
  stats.struct_size = 4;
  CHECK(kvtier_engine_stats(engine, &stats, &err) == KVTIER_INVALID_ARGUMENT);
  stats.struct_size = (size_t)1 << 40;
  CHECK(kvtier_engine_stats(engine, &stats, &err) == KVTIER_INVALID_ARGUMENT);
  CHECK(strstr(err.message, "struct_size") != NULL);
  /* A caller built against a newer header: only the fields known here are written, the rest and
   * struct_size keep the caller's values. */
  {
    struct {
      kvtier_engine_stats_t known;
      uint64_t future_fields[4];
    } newer;
    memset(&newer, 0xA5, sizeof(newer));
    newer.known.struct_size = sizeof(newer);
    CHECK_OK(kvtier_engine_stats(engine, &newer.known, &err));
    CHECK(newer.known.struct_size == sizeof(newer));
    CHECK(newer.known.store_blocks == kChunks * kLayers);
    for (size_t i = 0; i < 4; ++i) CHECK(newer.future_fields[i] == 0xA5A5A5A5A5A5A5A5ull);
  }
  /* Garbage struct_size in the store options is refused as well. */
  {
    kvtier_store_options_t bad;
    kvtier_store_options_init(&bad);
    bad.struct_size = (size_t)-1;
    kvtier_store_t* none = NULL;
    CHECK(kvtier_store(engine, &ns, tokens, kTokens, src_ptrs, kLayers, &bad, &none, &err) ==
          KVTIER_INVALID_ARGUMENT);
    CHECK(none == NULL);
  }

  /* Handles may outlive the caller's engine reference: the engine goes with the last one. */
  kvtier_engine_close(engine);
  kvtier_unpin(pin);

  /* Reopen: the write-through SSD tier still has every block. */
  engine = NULL;
  CHECK_OK(kvtier_engine_open(&o, &engine, &err));
  CHECK_OK(kvtier_make_namespace(engine, "tenant-a", 8, extra, NULL, 1, &ns, &err));
  CHECK_OK(kvtier_lookup(engine, &ns, tokens, kTokens, &matched, tiers, kChunks, &err));
  CHECK(matched == kChunks * kBlockTokens);
  CHECK(tiers[0] == KVTIER_TIER_SSD);
  memset(dst, 0, kChunks * kLayers * block_bytes);
  CHECK_OK(kvtier_load(engine, &ns, tokens, kTokens, dst_ptrs, kChunks * kLayers, &load, &err));
  CHECK_OK(kvtier_load_wait(load, &err));
  kvtier_load_destroy(load);
  CHECK(memcmp(dst, src, kChunks * kLayers * block_bytes) == 0);
  kvtier_engine_close(engine);

  free(src);
  free(dst);
}

/* Tenant salts: 64 hex digits, the same for the same tenant and secret, different otherwise; a
 * short secret and an empty tenant id are refused. */
static void TestTenantSalt(void) {
  const char secret[] = "0123456789abcdef0123456789abcdef";
  char a[65], b[65], c[65];
  kvtier_error_t err;
  CHECK_OK(kvtier_derive_tenant_salt("tenant-a", secret, 32, a, &err));
  CHECK_OK(kvtier_derive_tenant_salt("tenant-a", secret, 32, b, &err));
  CHECK_OK(kvtier_derive_tenant_salt("tenant-b", secret, 32, c, &err));
  CHECK(strlen(a) == 64 && strcmp(a, b) == 0 && strcmp(a, c) != 0);
  CHECK(kvtier_derive_tenant_salt("tenant-a", secret, 15, a, &err) == KVTIER_INVALID_ARGUMENT);
  CHECK(kvtier_derive_tenant_salt("", secret, 32, a, &err) == KVTIER_INVALID_ARGUMENT);
}

/* The remote tier's options: a malformed endpoint list is refused; so is a remote tier with no
 * key and no explicit insecure_plaintext, and a key variable that is not set; an unreachable
 * Redis (nothing listens on 127.0.0.1:1) still opens, stores succeed locally, lookups of unknown
 * prefixes are misses, and the stats list the remote tier last; a caller built before the remote
 * fields (struct_size ending before them) still opens, without a remote tier. */
/* The log callback: the host tier's open line arrives at INFO; with log_min_level WARN it does
 * not; a level out of range is refused. */
struct LogSink {
  int info_lines;
  int host_tier_lines;
};

static void CountLine(void* context, kvtier_log_level_t level, const char* message) {
  struct LogSink* sink = (struct LogSink*)context;
  if (level == KVTIER_LOG_INFO) sink->info_lines++;
  if (strstr(message, "host tier") != NULL) sink->host_tier_lines++;
}

static void TestLogCallback(void) {
  kvtier_error_t err;
  kvtier_engine_options_t o;
  InitOptions(&o, NULL);
  o.ssd_dir_count = 0;
  CHECK(o.log_min_level == KVTIER_LOG_INFO);
  struct LogSink sink = {0, 0};
  o.log_fn = CountLine;
  o.log_context = &sink;
  kvtier_engine_t* engine = NULL;
  CHECK_OK(kvtier_engine_open(&o, &engine, &err));
  kvtier_engine_close(engine);
  CHECK(sink.info_lines > 0 && sink.host_tier_lines > 0);

  struct LogSink quiet = {0, 0};
  o.log_context = &quiet;
  o.log_min_level = KVTIER_LOG_WARN;
  CHECK_OK(kvtier_engine_open(&o, &engine, &err));
  kvtier_engine_close(engine);
  CHECK(quiet.info_lines == 0 && quiet.host_tier_lines == 0);

  o.log_min_level = (kvtier_log_level_t)7;
  CHECK(kvtier_engine_open(&o, &engine, &err) == KVTIER_INVALID_ARGUMENT);
  CHECK(strstr(err.message, "log_min_level") != NULL);
}

static void TestRemoteOptions(void) {
  kvtier_engine_options_t o;
  InitOptions(&o, NULL);
  o.ssd_dir_count = 0;
  kvtier_engine_t* engine = NULL;
  kvtier_error_t err;
  o.remote_endpoints = "127.0.0.1:1,";
  CHECK(kvtier_engine_open(&o, &engine, &err) == KVTIER_INVALID_ARGUMENT);
  CHECK(strstr(err.message, "remote_endpoints") != NULL);
  o.remote_endpoints = "127.0.0.1:1";
  o.remote_cluster_allowed_hosts = "10.0.0.9,,10.0.0.10"; /* An empty item: refused, named. */
  CHECK(kvtier_engine_open(&o, &engine, &err) == KVTIER_INVALID_ARGUMENT);
  CHECK(strstr(err.message, "remote_cluster_allowed_hosts") != NULL);
  o.remote_cluster_allowed_hosts = "10.0.0.9,10.0.0.10";
  o.remote_connect_timeout_ms = 100;
  o.remote_command_timeout_ms = 100;
  /* Neither a key nor the explicit plaintext choice: refused, naming the choice. */
  CHECK(kvtier_engine_open(&o, &engine, &err) == KVTIER_INVALID_ARGUMENT);
  CHECK(strstr(err.message, "insecure_plaintext") != NULL);
  /* The key from an environment variable: refused while it is unset, used once it is set. */
  o.remote_key_env = "KVTIER_C_API_TEST_REMOTE_KEY";
  unsetenv(o.remote_key_env);
  CHECK(kvtier_engine_open(&o, &engine, &err) == KVTIER_INVALID_ARGUMENT);
  CHECK(strstr(err.message, "KVTIER_C_API_TEST_REMOTE_KEY") != NULL);
  CHECK(setenv(o.remote_key_env,
               "1 00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff", 1) == 0);
  CHECK_OK(kvtier_engine_open(&o, &engine, &err));
  kvtier_namespace_t ns;
  CHECK_OK(kvtier_make_namespace(engine, "t", 1, NULL, NULL, 0, &ns, &err));
  uint32_t tokens[kBlockTokens];
  for (size_t i = 0; i < kBlockTokens; ++i) tokens[i] = (uint32_t)(7 + i);
  StoreOneChunk(engine, &ns, tokens, 0x11); /* The remote put failed; the store did not. */
  size_t matched = 0;
  CHECK_OK(kvtier_lookup(engine, &ns, tokens, kBlockTokens, &matched, NULL, 0, &err));
  CHECK(matched == kBlockTokens);
  tokens[0] = 99;
  CHECK_OK(kvtier_lookup(engine, &ns, tokens, kBlockTokens, &matched, NULL, 0, &err));
  CHECK(matched == 0);
  kvtier_engine_stats_t stats;
  kvtier_stats_init(&stats);
  CHECK_OK(kvtier_engine_stats(engine, &stats, &err));
  CHECK(stats.tier_count >= 2);
  CHECK(stats.tiers[stats.tier_count - 1].kind == KVTIER_TIER_REMOTE);
  CHECK(strcmp(stats.tier_names[stats.tier_count - 1], "redis") == 0); /* The store's name. */
  kvtier_engine_close(engine);

  o.struct_size = offsetof(kvtier_engine_options_t, remote_endpoints);
  CHECK_OK(kvtier_engine_open(&o, &engine, &err));
  CHECK_OK(kvtier_engine_stats(engine, &stats, &err));
  CHECK(stats.tiers[stats.tier_count - 1].kind == KVTIER_TIER_HOST);
  kvtier_engine_close(engine);
}

/* Waits (at most 5 s) until no promotion task is pending. */
static int WaitForPromotions(kvtier_engine_t* engine) {
  for (int i = 0; i < 5000; ++i) {
    kvtier_engine_stats_t stats;
    kvtier_stats_init(&stats);
    if (kvtier_engine_stats(engine, &stats, NULL) != KVTIER_OK) return 0;
    if (stats.prediction_tasks_pending == 0) return 1;
    const struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
  }
  return 0;
}

/* Access prediction: options are validated, a hint promotes a session that is on the SSD only
 * (a reopened engine) into host memory, a lookup with a session id is counted as an access, and
 * callers built before the prediction fields (options and stats) keep working. */
static void TestPrediction(void) {
  char dir[300];
  snprintf(dir, sizeof(dir), "%s/prediction", temp_dir);
  const char* dirs[1] = {dir};
  kvtier_engine_options_t o;
  InitOptions(&o, dirs);
  o.prediction_enabled = 1;
  kvtier_engine_t* engine = NULL;
  kvtier_error_t err;
  o.prediction_window = 17;
  CHECK(kvtier_engine_open(&o, &engine, &err) == KVTIER_INVALID_ARGUMENT);
  CHECK(strstr(err.message, "prediction") != NULL);
  o.prediction_window = 0; /* The default. */
  CHECK_OK(kvtier_engine_open(&o, &engine, &err));
  const uint64_t block_bytes = kvtier_engine_block_bytes(engine);
  kvtier_namespace_t ns;
  CHECK_OK(kvtier_make_namespace(engine, "t", 1, NULL, NULL, 0, &ns, &err));
  enum { kTokens = 2 * kBlockTokens };
  uint32_t tokens[kTokens];
  for (size_t i = 0; i < kTokens; ++i) tokens[i] = (uint32_t)(500 + i);
  uint8_t* src = malloc(2 * kLayers * block_bytes);
  CHECK(src != NULL);
  memset(src, 0x22, 2 * kLayers * block_bytes);
  const void* src_ptrs[2 * kLayers];
  for (size_t b = 0; b < 2 * kLayers; ++b) src_ptrs[b] = src + b * block_bytes;
  kvtier_store_t* store = NULL;
  CHECK_OK(kvtier_store(engine, &ns, tokens, kTokens, src_ptrs, 2 * kLayers, NULL, &store, &err));
  CHECK_OK(kvtier_store_wait(store, &err));
  kvtier_store_destroy(store);
  free(src);
  kvtier_engine_close(engine); /* Write-through: the blocks are on the SSD. */

  CHECK_OK(kvtier_engine_open(&o, &engine, &err));
  CHECK_OK(kvtier_hint(engine, &ns, tokens, kTokens, 42, &err));
  CHECK(WaitForPromotions(engine));
  kvtier_lookup_options_t lo;
  kvtier_lookup_options_init(&lo);
  lo.session_id = 42;
  size_t matched = 0;
  kvtier_tier_t tiers[2] = {KVTIER_TIER_NONE, KVTIER_TIER_NONE};
  CHECK_OK(kvtier_lookup_with_options(engine, &ns, tokens, kTokens, &lo, &matched, tiers, 2, &err));
  CHECK(matched == kTokens);
  CHECK(tiers[0] == KVTIER_TIER_HOST && tiers[1] == KVTIER_TIER_HOST);
  lo.struct_size = 3;
  CHECK(kvtier_lookup_with_options(engine, &ns, tokens, kTokens, &lo, &matched, NULL, 0, &err) ==
        KVTIER_INVALID_ARGUMENT);
  kvtier_engine_stats_t stats;
  kvtier_stats_init(&stats);
  CHECK_OK(kvtier_engine_stats(engine, &stats, &err));
  CHECK(stats.hints == 1);
  CHECK(stats.hint_promoted_blocks == 2 * kLayers);
  CHECK(stats.prediction_accesses == 1);
  CHECK(stats.prediction_sessions == 1);
  CHECK(stats.prediction_tasks_pending == 0);
  /* A caller built before the prediction counters: the fields after its struct stay untouched. */
  kvtier_stats_init(&stats);
  stats.struct_size = offsetof(kvtier_engine_stats_t, prediction_accesses);
  stats.hints = 77;
  CHECK_OK(kvtier_engine_stats(engine, &stats, &err));
  CHECK(stats.hints == 77 && stats.lookups == 1);
  kvtier_engine_close(engine);

  /* A caller built before the prediction options opens without prediction. */
  o.struct_size = offsetof(kvtier_engine_options_t, prediction_enabled);
  CHECK_OK(kvtier_engine_open(&o, &engine, &err));
  CHECK_OK(kvtier_lookup(engine, &ns, tokens, kTokens, &matched, NULL, 0, &err));
  kvtier_stats_init(&stats);
  CHECK_OK(kvtier_engine_stats(engine, &stats, &err));
  CHECK(stats.prediction_accesses == 0 && stats.prediction_sessions == 0);
  kvtier_engine_close(engine);
}

static void RemoveTree(const char* path) {
  char command[512];
  snprintf(command, sizeof(command), "rm -rf '%s'", path);
  if (system(command) != 0) fprintf(stderr, "warning: could not remove %s\n", path);
}

/* The fields appended for the options table: each reaches the engine, and a value outside the
 * table's range is refused naming the option and its range. */
static void TestAppendedOptions(void) {
  char dir[300];
  snprintf(dir, sizeof(dir), "%s/appended", temp_dir);
  CHECK(mkdir(dir, 0700) == 0);
  const char* dirs[1] = {dir};
  kvtier_engine_options_t o;
  InitOptions(&o, dirs);
  CHECK(o.staging_buffers == 32 && o.ssd_io_depth == 32 && o.host_prefault == 1);
  CHECK(o.writeback_dirty_fraction == 0.5 && o.ssd_file_mode == 0600 && o.cxl_numa_node == -1);
  o.cxl_bytes = 1u << 20;
  o.device_backend = KVTIER_DEVICE_BACKEND_CPU;
  o.staging_buffers = 16;
  o.ssd_io_depth = 4;
  o.ssd_io_backend = KVTIER_IO_BACKEND_THREAD_POOL;
  o.ssd_file_mode = 0640;
  o.writeback_dirty_fraction = 0.75;
  o.remote_redirects_max = 0; /* Ignored: no remote tier. */
  kvtier_engine_t* engine = NULL;
  kvtier_error_t err;
  CHECK_OK(kvtier_engine_open(&o, &engine, &err));
  kvtier_engine_stats_t stats;
  kvtier_stats_init(&stats);
  CHECK_OK(kvtier_engine_stats(engine, &stats, &err));
  int has_cxl = 0;
  for (uint32_t i = 0; i < stats.tier_count; ++i) has_cxl |= stats.tiers[i].kind == KVTIER_TIER_CXL;
  CHECK(has_cxl);
  kvtier_engine_close(engine);
  char manifest[320];
  snprintf(manifest, sizeof(manifest), "%s/MANIFEST", dir);
  struct stat st;
  CHECK(stat(manifest, &st) == 0);
  CHECK((st.st_mode & 0777) == 0640);

  o.ssd_io_depth = 999;
  engine = NULL;
  CHECK(kvtier_engine_open(&o, &engine, &err) == KVTIER_INVALID_ARGUMENT);
  CHECK(engine == NULL);
  CHECK(strcmp(err.message, "ssd_io_depth=999: must be from 1 to 256") == 0);
  o.ssd_io_depth = 0; /* 0 where 0 is not valid: the default. */
  o.device_backend = (kvtier_device_backend_t)9;
  CHECK(kvtier_engine_open(&o, &engine, &err) == KVTIER_INVALID_ARGUMENT);
  CHECK(strcmp(err.message, "device_backend 9 is out of range") == 0);
  o.device_backend = KVTIER_DEVICE_BACKEND_AUTO;
  o.writeback_dirty_fraction = 2.0;
  CHECK(kvtier_engine_open(&o, &engine, &err) == KVTIER_INVALID_ARGUMENT);
  CHECK(strstr(err.message, "writeback_dirty_fraction=2") != NULL);
}

/* A zstd level or group size of 0 is the codec's default for every codec (shuffle-zstd level 1,
 * the quantized codecs groups of 32 without zstd, ecq level 1): the engine opens and round-trips
 * a block. The rotated and mixed-width codecs (5..8) and the entropy-coded ones (9, 10) are
 * accepted like the others. */
static void TestCodecDefaults(void) {
  const kvtier_codec_t codecs[] = {KVTIER_CODEC_SHUFFLE_ZSTD, KVTIER_CODEC_INT8,
                                   KVTIER_CODEC_INT4,         KVTIER_CODEC_INT8_ROT,
                                   KVTIER_CODEC_INT4_ROT,     KVTIER_CODEC_K8V4,
                                   KVTIER_CODEC_K8V4_ROT,     KVTIER_CODEC_ECQ5,
                                   KVTIER_CODEC_ECQ6,         KVTIER_CODEC_ECQ6V5};
  for (size_t c = 0; c < sizeof(codecs) / sizeof(codecs[0]); ++c) {
    char dir[300];
    snprintf(dir, sizeof(dir), "%s/codec%zu", temp_dir, c);
    CHECK(mkdir(dir, 0700) == 0);
    const char* dirs[1] = {dir};
    kvtier_engine_options_t o;
    InitOptions(&o, dirs);
    o.ssd_codec = codecs[c];
    CHECK(o.ssd_codec_zstd_level == 0 && o.ssd_codec_group_size == 0);
    kvtier_engine_t* engine = NULL;
    kvtier_error_t err;
    kvtier_status_t st = kvtier_engine_open(&o, &engine, &err);
    if (st != KVTIER_OK) fprintf(stderr, "codec %d: %s\n", (int)codecs[c], err.message);
    CHECK(st == KVTIER_OK);
    kvtier_engine_close(engine);
  }
}

static void TestLatentLayout(void) {
  const char* dirs[1] = {temp_dir};
  kvtier_engine_options_t o;
  InitOptions(&o, dirs);
  o.model_name = "c-api-test-latent";
  o.layout.kv_heads = 1;
  o.layout_kind = KVTIER_LAYOUT_LATENT;
  kvtier_error_t err;
  uint64_t kv_bytes = 0, latent_bytes = 0;
  CHECK_OK(kvtier_layout_block_bytes(&o.layout, &kv_bytes, &err));
  CHECK_OK(kvtier_layout_kind_block_bytes(&o.layout, KVTIER_LAYOUT_LATENT, &latent_bytes, &err));
  CHECK(kv_bytes == 2u * kBlockTokens * kHeadDim * 2u);
  CHECK(latent_bytes == kv_bytes / 2);
  CHECK(kvtier_layout_kind_block_bytes(&o.layout, (kvtier_layout_kind_t)5, &latent_bytes, &err) ==
        KVTIER_INVALID_ARGUMENT);
  CHECK(strstr(err.message, "layout_kind") != NULL);

  kvtier_engine_t* engine = NULL;
  CHECK_OK(kvtier_engine_open(&o, &engine, &err));
  CHECK(kvtier_engine_layout_kind(engine) == KVTIER_LAYOUT_LATENT);
  const uint64_t block_bytes = kvtier_engine_block_bytes(engine);
  CHECK(block_bytes == latent_bytes);
  kvtier_namespace_t ns;
  CHECK_OK(kvtier_make_namespace(engine, "t", 1, NULL, NULL, 0, &ns, &err));
  uint32_t tokens[kBlockTokens];
  for (size_t i = 0; i < kBlockTokens; ++i) tokens[i] = (uint32_t)(500 + i);
  uint8_t* src = malloc(kLayers * block_bytes);
  uint8_t* dst = calloc(kLayers, block_bytes);
  CHECK(src != NULL && dst != NULL);
  const void* src_ptrs[kLayers];
  void* dst_ptrs[kLayers];
  for (size_t l = 0; l < kLayers; ++l) {
    for (size_t i = 0; i < block_bytes; ++i) src[l * block_bytes + i] = Pattern(9, l, i);
    src_ptrs[l] = src + l * block_bytes;
    dst_ptrs[l] = dst + l * block_bytes;
  }
  kvtier_store_t* store = NULL;
  CHECK_OK(kvtier_store(engine, &ns, tokens, kBlockTokens, src_ptrs, kLayers, NULL, &store, &err));
  CHECK_OK(kvtier_store_wait(store, &err));
  kvtier_store_destroy(store);
  kvtier_load_t* load = NULL;
  CHECK_OK(kvtier_load(engine, &ns, tokens, kBlockTokens, dst_ptrs, kLayers, &load, &err));
  CHECK_OK(kvtier_load_wait(load, &err));
  kvtier_load_destroy(load);
  CHECK(memcmp(src, dst, kLayers * block_bytes) == 0);
  free(src);
  free(dst);
  kvtier_engine_close(engine);

  o.layout_kind = (kvtier_layout_kind_t)3;
  CHECK(kvtier_engine_open(&o, &engine, &err) == KVTIER_INVALID_ARGUMENT);
  CHECK(strstr(err.message, "layout_kind") != NULL);
  o.layout_kind = KVTIER_LAYOUT_LATENT;
  o.layout.kv_heads = 2;
  CHECK(kvtier_engine_open(&o, &engine, &err) == KVTIER_INVALID_ARGUMENT);
  CHECK(strstr(err.message, "kv_heads") != NULL);
}

static uint64_t MonotonicUs(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000u + (uint64_t)t.tv_nsec / 1000u;
}

/* The write-back horizon: 0 for the host tier and for a write-through SSD; with write-back and a
 * 50 ms age limit, the SSD's horizon passes a store once the cleaner wrote it (waited for, at most
 * 10 s), and a caller built before the field keeps its own value there. */
static void TestWritebackHorizon(void) {
  char dir[300];
  snprintf(dir, sizeof(dir), "%s/horizon", temp_dir);
  const char* dirs[1] = {dir};
  kvtier_engine_options_t o;
  InitOptions(&o, dirs);
  o.write_policy = KVTIER_WRITE_BACK;
  o.writeback_age_ms_max = 50;
  kvtier_engine_t* engine = NULL;
  kvtier_error_t err;
  CHECK_OK(kvtier_engine_open(&o, &engine, &err));
  kvtier_namespace_t ns;
  CHECK_OK(kvtier_make_namespace(engine, "t", 1, NULL, NULL, 0, &ns, &err));
  uint32_t tokens[kBlockTokens];
  for (size_t i = 0; i < kBlockTokens; ++i) tokens[i] = (uint32_t)(900 + i);
  StoreOneChunk(engine, &ns, tokens, 0x33);
  const uint64_t stored_us = MonotonicUs();
  kvtier_engine_stats_t stats;
  int passed = 0;
  for (int i = 0; i < 2000 && !passed; ++i) {
    kvtier_stats_init(&stats);
    CHECK_OK(kvtier_engine_stats(engine, &stats, &err));
    CHECK(stats.tier_count == 2 && stats.tiers[1].kind == KVTIER_TIER_SSD);
    CHECK(stats.tier_writeback_horizon_us[0] == 0); /* The host tier has none. */
    passed = stats.tier_writeback_horizon_us[1] > stored_us;
    const struct timespec ms = {0, 5000000};
    if (!passed) nanosleep(&ms, NULL);
  }
  CHECK(passed);
  CHECK(stats.tiers[0].writebacks >= kLayers); /* Written back by the cleaner, without a flush. */
  kvtier_stats_init(&stats);
  stats.struct_size = offsetof(kvtier_engine_stats_t, tier_writeback_horizon_us);
  stats.tier_writeback_horizon_us[1] = 77;
  CHECK_OK(kvtier_engine_stats(engine, &stats, &err));
  CHECK(stats.tier_writeback_horizon_us[1] == 77);
  kvtier_engine_close(engine);

  o.write_policy = KVTIER_WRITE_THROUGH; /* No age limit: no horizon. */
  CHECK_OK(kvtier_engine_open(&o, &engine, &err));
  kvtier_stats_init(&stats);
  CHECK_OK(kvtier_engine_stats(engine, &stats, &err));
  CHECK(stats.tier_writeback_horizon_us[1] == 0 && stats.tier_writeback_lag_us[1] == 0);
  kvtier_engine_close(engine);
}

int main(void) {
  const char* tmp = getenv("TMPDIR");
  snprintf(temp_dir, sizeof(temp_dir), "%s/kvtier_c_api_XXXXXX",
           tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
  if (mkdtemp(temp_dir) == NULL) {
    perror("mkdtemp");
    return 1;
  }
  TestVersion();
  TestBadLayout();
  TestRoundTrip();
  TestRemoteOptions();
  TestTenantSalt();
  TestLogCallback();
  TestPrediction();
  TestAppendedOptions();
  TestCodecDefaults();
  TestWritebackHorizon();
  TestLatentLayout();
  RemoveTree(temp_dir);
  if (failures != 0) {
    fprintf(stderr, "c_api_test: %d check(s) failed\n", failures);
    return 1;
  }
  printf("c_api_test: OK\n");
  return 0;
}
