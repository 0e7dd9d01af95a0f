// kvtier from C++ through the installed package: the C API with RAII, errors as kvtier::Status.
// Usage: kvtier_consumer_cxx <ssd directory>
#include <kvtier/c_api.h>
#include <kvtier/status.h>
#include <kvtier/version.h>

#include <cstdio>
#include <memory>
#include <vector>

namespace {

kvtier::Status ToStatus(const kvtier_error_t& err) {
  return {static_cast<kvtier::StatusCode>(err.code), err.message};
}

struct EngineCloser {
  void operator()(kvtier_engine_t* engine) const { kvtier_engine_close(engine); }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <ssd directory>\n", argv[0]);
    return 2;
  }
  kvtier_engine_options_t options;
  kvtier_engine_options_init(&options);
  options.layout = {
      .layers = 1, .kv_heads = 1, .head_dim = 64, .dtype = KVTIER_DTYPE_F16, .block_tokens = 32};
  options.host_bytes = 1 << 20;
  const char* dirs[] = {argv[1]};
  options.ssd_dirs = dirs;
  options.ssd_dir_count = 1;
  options.ssd_bytes = 16 << 20;
  options.ssd_segment_bytes = 1 << 20;

  kvtier_error_t err;
  kvtier_engine_t* raw = nullptr;
  if (kvtier_engine_open(&options, &raw, &err) != KVTIER_OK) {
    std::fprintf(stderr, "%s\n", ToStatus(err).ToString().c_str());
    return 1;
  }
  std::unique_ptr<kvtier_engine_t, EngineCloser> engine(raw);

  // An error comes back as a code and a message, here turned into a kvtier::Status.
  kvtier_layout_t bad = options.layout;
  bad.head_dim = 0;
  uint64_t bytes = 0;
  const kvtier::Status status = kvtier_layout_block_bytes(&bad, &bytes, &err) == KVTIER_OK
                                    ? kvtier::Status::Ok()
                                    : ToStatus(err);
  if (!status.IsInvalidArgument()) return 1;

  kvtier_namespace_t ns;
  if (kvtier_make_namespace(engine.get(), "", 0, nullptr, nullptr, 0, &ns, &err) != KVTIER_OK) {
    return 1;
  }
  std::vector<uint32_t> tokens(32, 7);
  size_t matched = 1;
  if (kvtier_lookup(engine.get(), &ns, tokens.data(), tokens.size(), &matched, nullptr, 0, &err) !=
      KVTIER_OK) {
    return 1;
  }
  std::printf("kvtier %s (C++ consumer): cold lookup matched %zu; bad layout -> %s\n",
              kvtier::kVersionString, matched, status.ToString().c_str());
  return matched == 0 ? 0 : 1;
}
