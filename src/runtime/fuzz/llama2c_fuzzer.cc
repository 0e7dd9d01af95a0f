// libFuzzer harness for the llama2.c checkpoint loader (runtime/model_loader.h):
// ParseLlama2cHeader and ParseLlama2cCheckpoint, the whole of LoadLlama2cCheckpoint after the
// file is mapped. Any byte string must load or fail with a Status naming the problem, never
// crash, read out of bounds or allocate before the header is checked against the file's size
// (run under ASan/UBSan with an RSS limit). A checkpoint that loads has the header's shape.
// Built only with -DKVTIER_BUILD_FUZZERS=ON (tests/fuzz/CMakeLists.txt).
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/assert.h"
#include "runtime/model_loader.h"

namespace kvtier::runtime {
namespace {

void LoadOne(std::span<const std::byte> bytes) {
  Result<ModelConfig> config = ParseLlama2cHeader(bytes);
  Result<ModelWeights> weights = ParseLlama2cCheckpoint(bytes);
  if (!weights.ok()) return;
  KV_CHECK(config.ok());
  KV_CHECK(weights->config().dim == config->dim);
  KV_CHECK(weights->config().vocab_size == config->vocab_size);
}

}  // namespace
}  // namespace kvtier::runtime

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kvtier::runtime::LoadOne({reinterpret_cast<const std::byte*>(data), size});
  return 0;
}
