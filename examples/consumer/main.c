/* kvtier from C through the installed package: store one prefix, find it, load it back.
 * Usage: kvtier_consumer <ssd directory> */
#include <kvtier/c_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAIL(what, err)                                                                   \
  do {                                                                                    \
    fprintf(stderr, "%s: %s: %s\n", what, kvtier_status_name((err).code), (err).message); \
    return 1;                                                                             \
  } while (0)

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s <ssd directory>\n", argv[0]);
    return 2;
  }
  if (kvtier_abi_version() != KVTIER_ABI_VERSION) {
    fprintf(stderr, "libkvtier ABI %u, header %d\n", kvtier_abi_version(), KVTIER_ABI_VERSION);
    return 1;
  }
  const char* dirs[1] = {argv[1]};
  kvtier_engine_options_t options;
  kvtier_engine_options_init(&options);
  options.layout.layers = 2;
  options.layout.kv_heads = 2;
  options.layout.head_dim = 32;
  options.layout.dtype = KVTIER_DTYPE_BF16;
  options.layout.block_tokens = 16;
  options.model_name = "consumer-example";
  options.host_bytes = 1u << 20;
  options.ssd_dirs = dirs;
  options.ssd_dir_count = 1;
  options.ssd_bytes = 16u << 20;
  options.ssd_segment_bytes = 1u << 20;

  kvtier_error_t err;
  kvtier_engine_t* engine = NULL;
  if (kvtier_engine_open(&options, &engine, &err) != KVTIER_OK) FAIL("open", err);
  kvtier_namespace_t ns;
  if (kvtier_make_namespace(engine, "tenant", 6, NULL, NULL, 0, &ns, &err) != KVTIER_OK) {
    FAIL("namespace", err);
  }

  /* One chunk of 16 tokens; two layers, one block each. The caller owns every buffer. */
  uint32_t tokens[16];
  for (uint32_t i = 0; i < 16; ++i) tokens[i] = 100 + i;
  const uint64_t block_bytes = kvtier_engine_block_bytes(engine);
  unsigned char* src = malloc(2 * block_bytes);
  unsigned char* dst = calloc(2, block_bytes);
  if (src == NULL || dst == NULL) return 1;
  for (uint64_t i = 0; i < 2 * block_bytes; ++i) src[i] = (unsigned char)(i * 7u);
  const void* src_blocks[2] = {src, src + block_bytes};
  void* dst_blocks[2] = {dst, dst + block_bytes};

  kvtier_store_t* store = NULL;
  if (kvtier_store(engine, &ns, tokens, 16, src_blocks, 2, NULL, &store, &err) != KVTIER_OK) {
    FAIL("store", err);
  }
  if (kvtier_store_wait(store, &err) != KVTIER_OK) FAIL("store wait", err);
  kvtier_store_destroy(store); /* src may be reused from here on. */

  size_t matched = 0;
  if (kvtier_lookup(engine, &ns, tokens, 16, &matched, NULL, 0, &err) != KVTIER_OK) {
    FAIL("lookup", err);
  }
  kvtier_load_t* load = NULL;
  if (kvtier_load(engine, &ns, tokens, 16, dst_blocks, 2, &load, &err) != KVTIER_OK) {
    FAIL("load", err);
  }
  for (uint32_t layer = 0; layer < 2; ++layer) {
    if (kvtier_load_wait_layer(load, layer, &err) != KVTIER_OK) FAIL("wait layer", err);
  }
  kvtier_load_destroy(load);
  const int same = memcmp(src, dst, 2 * block_bytes) == 0;
  kvtier_engine_close(engine);
  free(src);
  free(dst);
  printf("kvtier %s: matched %zu tokens, bytes %s\n", kvtier_version_string(), matched,
         same ? "equal" : "DIFFER");
  return matched == 16 && same ? 0 : 1;
}
