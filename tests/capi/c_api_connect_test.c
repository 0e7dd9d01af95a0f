/* kvtier_engine_connect from C (compiled as C11, linked against libkvtier.so): two handles
 * connected to one node service share its cache (one stores, the other looks the chunks up and
 * loads the same bytes), another tenant misses, the layout comes from the service, statistics are
 * the service's; a handle given a layout connects before the service runs (a miss, a store that
 * fails KVTIER_UNAVAILABLE); a service with a latent (MLA) layout serves one-plane blocks byte
 * for byte, and a handle that names a K|V layout is refused by it; and bad arguments are refused
 * naming the problem.
 * Method: the service is `kvtier serve` (the CLI named by argv[1]), started
 * with fork/exec on a socket in a temporary directory and stopped with SIGTERM. Exits 0 on
 * success, 1 with a message on the first failed check. */
#define _POSIX_C_SOURCE 200809L

#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvtier/c_api.h"

static int failures = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      failures++;                                                              \
      return;                                                                  \
    }                                                                          \
  } while (0)

/* Uses the caller's `kvtier_error_t err`. */
#define CHECK_OK(expr)                                                          \
  do {                                                                          \
    kvtier_status_t check_st_ = (expr);                                         \
    if (check_st_ != KVTIER_OK) {                                               \
      fprintf(stderr, "%s:%d: %s returned %s: %s\n", __FILE__, __LINE__, #expr, \
              kvtier_status_name(check_st_), err.message);                      \
      failures++;                                                               \
      return;                                                                   \
    }                                                                           \
  } while (0)

enum { kLayers = 2, kKvHeads = 1, kHeadDim = 16, kBlockTokens = 16, kChunks = 3 };
#define LAYOUT_TEXT "layers=2,kv_heads=1,head_dim=16,dtype=f16,block_tokens=16"

static const char* fixture = NULL; /* The kvtier CLI. */
static char temp_dir[256];
static char socket_path[300];
static pid_t service = -1;

/* Starts `kvtier serve` on socket_path and waits (at most 20 s) for its "listening on" line on
 * stdout: the socket accepts connections from then on (its file exists a moment earlier). */
static int StartServiceWith(const char* layout_text) {
  int out[2];
  if (pipe(out) != 0) return 0;
  service = fork();
  if (service < 0) return 0;
  if (service == 0) {
    dup2(out[1], 1);
    close(out[0]);
    close(out[1]);
    execl(fixture, fixture, "serve", "--layout", layout_text, "--host-bytes", "4194304",
          "--host-prefault=false", "--socket", socket_path, (char*)NULL);
    perror("exec kvtier serve");
    _exit(127);
  }
  close(out[1]);
  char seen[4096];
  size_t used = 0;
  int ready = 0;
  for (int waited_ms = 0; !ready && waited_ms < 20000; waited_ms += 100) {
    struct pollfd p = {out[0], POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    ssize_t n = read(out[0], seen + used, sizeof(seen) - 1 - used);
    if (n <= 0) break; /* The service exited. */
    used += (size_t)n;
    seen[used] = '\0';
    ready = strstr(seen, "listening on") != NULL;
    if (used == sizeof(seen) - 1) used = 0;
  }
  close(out[0]); /* The service's later stdout lines go nowhere (it writes none). */
  return ready;
}

static int StartService(void) { return StartServiceWith(LAYOUT_TEXT); }

static void StopService(void) {
  if (service <= 0) return;
  kill(service, SIGTERM);
  int status;
  waitpid(service, &status, 0);
  service = -1;
}

static uint8_t Pattern(size_t chunk, size_t layer, size_t i) {
  return (uint8_t)((chunk * 29u + layer * 11u + i * 7u + 3u) & 0xffu);
}

static void InitLayout(kvtier_layout_t* layout) {
  layout->layers = kLayers;
  layout->kv_heads = kKvHeads;
  layout->head_dim = kHeadDim;
  layout->dtype = KVTIER_DTYPE_F16;
  layout->block_tokens = kBlockTokens;
}

static void TestBadArguments(void) {
  kvtier_engine_t* engine = (kvtier_engine_t*)(uintptr_t)1;
  kvtier_error_t err;
  CHECK(kvtier_engine_connect(NULL, NULL, &engine, &err) == KVTIER_INVALID_ARGUMENT);
  CHECK(kvtier_engine_connect(socket_path, NULL, NULL, &err) == KVTIER_INVALID_ARGUMENT);

  kvtier_connect_options_t o;
  kvtier_connect_options_init(&o);
  CHECK(o.struct_size == sizeof(o));
  kvtier_layout_t layout;
  InitLayout(&layout);
  layout.block_tokens = 17;
  o.layout = &layout;
  CHECK(kvtier_engine_connect(socket_path, &o, &engine, &err) == KVTIER_INVALID_ARGUMENT);
  CHECK(strstr(err.message, "block_tokens") != NULL);
  CHECK(engine == NULL);

  kvtier_connect_options_init(&o);
  o.log_min_level = (kvtier_log_level_t)9;
  CHECK(kvtier_engine_connect(socket_path, &o, &engine, &err) == KVTIER_INVALID_ARGUMENT);
  CHECK(strstr(err.message, "log_min_level") != NULL);

  kvtier_connect_options_init(&o);
  o.struct_size = 4;
  CHECK(kvtier_engine_connect(socket_path, &o, &engine, &err) == KVTIER_INVALID_ARGUMENT);
  CHECK(strstr(err.message, "struct_size") != NULL);

  /* No service and no layout: nothing to take the layout from. */
  kvtier_connect_options_init(&o);
  o.timeout_ms = 500;
  CHECK(kvtier_engine_connect(socket_path, &o, &engine, &err) != KVTIER_OK);
  CHECK(engine == NULL);
}

/* A handle with a layout before the service exists: lookups miss, stores are unavailable. */
static void TestBeforeTheService(void) {
  kvtier_connect_options_t o;
  kvtier_connect_options_init(&o);
  kvtier_layout_t layout;
  InitLayout(&layout);
  o.layout = &layout;
  o.timeout_ms = 1000;
  o.reconnect_interval_ms = 50;
  kvtier_engine_t* engine = NULL;
  kvtier_error_t err;
  CHECK_OK(kvtier_engine_connect(socket_path, &o, &engine, &err));
  CHECK(kvtier_engine_block_bytes(engine) == 2u * kBlockTokens * kKvHeads * kHeadDim * 2u);
  kvtier_namespace_t ns;
  CHECK_OK(kvtier_make_namespace(engine, "t", 1, NULL, NULL, 0, &ns, &err));
  uint32_t tokens[kBlockTokens];
  for (size_t i = 0; i < kBlockTokens; ++i) tokens[i] = (uint32_t)(7 + i);
  size_t matched = 99;
  CHECK_OK(kvtier_lookup(engine, &ns, tokens, kBlockTokens, &matched, NULL, 0, &err));
  CHECK(matched == 0);
  const size_t block_bytes = (size_t)kvtier_engine_block_bytes(engine);
  uint8_t* block = calloc(kLayers, block_bytes);
  CHECK(block != NULL);
  const void* src[kLayers] = {block, block + block_bytes};
  kvtier_store_t* store = NULL;
  kvtier_status_t st = kvtier_store(engine, &ns, tokens, kBlockTokens, src, kLayers, NULL, &store,
                                    &err);
  if (st == KVTIER_OK) st = kvtier_store_wait(store, &err);
  kvtier_store_destroy(store);
  free(block);
  kvtier_engine_close(engine);
  CHECK(st == KVTIER_UNAVAILABLE);
}

static void TestSharedService(void) {
  kvtier_connect_options_t o;
  kvtier_connect_options_init(&o);
  o.name = "c-writer";
  kvtier_engine_t* writer = NULL;
  kvtier_engine_t* reader = NULL;
  kvtier_error_t err;
  CHECK_OK(kvtier_engine_connect(socket_path, &o, &writer, &err));
  o.name = "c-reader";
  CHECK_OK(kvtier_engine_connect(socket_path, &o, &reader, &err));
  kvtier_layout_t layout;
  kvtier_engine_layout(reader, &layout);
  CHECK(layout.layers == kLayers && layout.block_tokens == kBlockTokens);
  const size_t block_bytes = (size_t)kvtier_engine_block_bytes(reader);
  CHECK(block_bytes == 2u * kBlockTokens * kKvHeads * kHeadDim * 2u);

  enum { kTokens = kChunks * kBlockTokens + 3 };
  uint32_t tokens[kTokens];
  for (size_t i = 0; i < kTokens; ++i) tokens[i] = (uint32_t)(500 + i * 5);
  kvtier_namespace_t ns_w, ns_r, ns_other;
  CHECK_OK(kvtier_make_namespace(writer, "tenant", 6, NULL, NULL, 0, &ns_w, &err));
  CHECK_OK(kvtier_make_namespace(reader, "tenant", 6, NULL, NULL, 0, &ns_r, &err));
  CHECK_OK(kvtier_make_namespace(reader, "intruder", 8, NULL, NULL, 0, &ns_other, &err));

  uint8_t* src = malloc(kChunks * kLayers * block_bytes);
  uint8_t* dst = calloc(kChunks * kLayers, block_bytes);
  CHECK(src != NULL && dst != NULL);
  const void* src_ptrs[kChunks * kLayers];
  void* dst_ptrs[kChunks * kLayers];
  for (size_t b = 0; b < kChunks * kLayers; ++b) {
    for (size_t i = 0; i < block_bytes; ++i) {
      src[b * block_bytes + i] = Pattern(b / kLayers, b % kLayers, i);
    }
    src_ptrs[b] = src + b * block_bytes;
    dst_ptrs[b] = dst + b * block_bytes;
  }
  kvtier_store_t* store = NULL;
  CHECK_OK(kvtier_store(writer, &ns_w, tokens, kTokens, src_ptrs, kChunks * kLayers, NULL, &store,
                        &err));
  CHECK_OK(kvtier_store_wait(store, &err));
  CHECK(kvtier_store_chunks_stored(store) == kChunks);
  kvtier_store_destroy(store);

  size_t matched = 0;
  kvtier_tier_t tiers[kChunks];
  CHECK_OK(kvtier_lookup(reader, &ns_r, tokens, kTokens, &matched, tiers, kChunks, &err));
  CHECK(matched == kChunks * kBlockTokens);
  CHECK(tiers[0] == KVTIER_TIER_HOST);
  CHECK_OK(kvtier_lookup(reader, &ns_other, tokens, kTokens, &matched, NULL, 0, &err));
  CHECK(matched == 0);

  kvtier_load_t* load = NULL;
  CHECK_OK(kvtier_load(reader, &ns_r, tokens, kTokens, dst_ptrs, kChunks * kLayers, &load, &err));
  for (uint32_t l = 0; l < kLayers; ++l) CHECK_OK(kvtier_load_wait_layer(load, l, &err));
  CHECK_OK(kvtier_load_wait(load, &err));
  kvtier_load_destroy(load);
  CHECK(memcmp(src, dst, kChunks * kLayers * block_bytes) == 0);

  kvtier_engine_stats_t stats;
  kvtier_stats_init(&stats);
  CHECK_OK(kvtier_engine_stats(reader, &stats, &err));
  CHECK(stats.stores >= 1 && stats.store_blocks >= kChunks * kLayers);
  free(src);
  free(dst);
  kvtier_engine_close(writer);
  kvtier_engine_close(reader);
}

/* A service with a latent layout: the handle reports the kind and one-plane blocks, which go
 * through store and load byte for byte; a handle that names the same geometry as K|V is refused
 * (its layout differs from the service's), one that names it latent connects. */
static void TestLatentService(void) {
  kvtier_connect_options_t o;
  kvtier_connect_options_init(&o);
  o.timeout_ms = 2000;
  kvtier_engine_t* engine = NULL;
  kvtier_error_t err;
  CHECK_OK(kvtier_engine_connect(socket_path, &o, &engine, &err));
  CHECK(kvtier_engine_layout_kind(engine) == KVTIER_LAYOUT_LATENT);
  const size_t block_bytes = (size_t)kvtier_engine_block_bytes(engine);
  CHECK(block_bytes == (size_t)kBlockTokens * kHeadDim * 2u);
  uint32_t tokens[kBlockTokens];
  for (size_t i = 0; i < kBlockTokens; ++i) tokens[i] = (uint32_t)(900 + i);
  kvtier_namespace_t ns;
  CHECK_OK(kvtier_make_namespace(engine, "tenant", 6, NULL, NULL, 0, &ns, &err));
  uint8_t* src = malloc(kLayers * block_bytes);
  uint8_t* dst = calloc(kLayers, block_bytes);
  CHECK(src != NULL && dst != NULL);
  const void* src_ptrs[kLayers];
  void* dst_ptrs[kLayers];
  for (size_t l = 0; l < kLayers; ++l) {
    for (size_t i = 0; i < block_bytes; ++i) src[l * block_bytes + i] = Pattern(4, l, i);
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

  kvtier_layout_t layout;
  InitLayout(&layout);
  o.layout = &layout;
  engine = NULL;
  CHECK(kvtier_engine_connect(socket_path, &o, &engine, &err) != KVTIER_OK);
  CHECK(engine == NULL);
  o.layout_kind = KVTIER_LAYOUT_LATENT;
  CHECK_OK(kvtier_engine_connect(socket_path, &o, &engine, &err));
  CHECK(kvtier_engine_layout_kind(engine) == KVTIER_LAYOUT_LATENT);
  kvtier_engine_close(engine);

  /* A caller built against the header before layout_kind passes the shorter struct. */
  kvtier_connect_options_init(&o);
  o.struct_size = offsetof(kvtier_connect_options_t, layout_kind);
  CHECK_OK(kvtier_engine_connect(socket_path, &o, &engine, &err));
  kvtier_engine_close(engine);
}

/* Removes temp_dir and the files the service left in it (its socket, its lock). */
static void RemoveTree(void) {
  DIR* dir = opendir(temp_dir);
  if (dir != NULL) {
    struct dirent* entry;
    while ((entry = readdir(dir)) != NULL) {
      if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0) continue;
      char path[600];
      snprintf(path, sizeof(path), "%s/%s", temp_dir, entry->d_name);
      unlink(path);
    }
    closedir(dir);
  }
  rmdir(temp_dir);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: c_api_connect_test SERVE_FIXTURE\n");
    return 2;
  }
  fixture = argv[1];
  const char* tmp = getenv("TMPDIR");
  snprintf(temp_dir, sizeof(temp_dir), "%s/kvtier_c_connect_XXXXXX",
           tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
  if (mkdtemp(temp_dir) == NULL) {
    perror("mkdtemp");
    return 1;
  }
  snprintf(socket_path, sizeof(socket_path), "%s/kvtier.sock", temp_dir);
  TestBadArguments();
  TestBeforeTheService();
  if (!StartService()) {
    fprintf(stderr, "c_api_connect_test: the service did not start\n");
    failures++;
  } else {
    TestSharedService();
  }
  StopService();
  if (!StartServiceWith(LAYOUT_TEXT ",kind=latent")) {
    fprintf(stderr, "c_api_connect_test: the latent service did not start\n");
    failures++;
  } else {
    TestLatentService();
  }
  StopService();
  RemoveTree();
  if (failures != 0) {
    fprintf(stderr, "c_api_connect_test: %d check(s) failed\n", failures);
    return 1;
  }
  printf("c_api_connect_test: OK\n");
  return 0;
}
