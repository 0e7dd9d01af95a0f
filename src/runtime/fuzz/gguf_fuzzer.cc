// libFuzzer harness for the GGUF reader (runtime/gguf.h): ParseGgufModel, the loader's whole
// path from the file's bytes (ParseGguf's header, metadata and tensor infos, then the llama
// hyper-parameters, the tensor copies and the vocabulary); LoadGgufModel only maps the file
// and calls it. Any byte string must load or fail with a Status, never crash, read out of
// bounds or allocate what the file does not account for (run under ASan/UBSan with an RSS
// limit). A model that loads must have a working tokenizer: it encodes and decodes a text.
// Built only with -DKVTIER_BUILD_FUZZERS=ON (tests/fuzz/CMakeLists.txt).
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/assert.h"
#include "runtime/gguf.h"

namespace kvtier::runtime {
namespace {

void LoadOne(std::span<const std::byte> bytes) {
  (void)IsGguf(bytes);
  Result<GgufModel> model = ParseGgufModel(bytes);
  if (!model.ok() || !model->tokenizer.has_value()) return;
  const Tokenizer& tokenizer = *model->tokenizer;
  Result<std::vector<uint32_t>> ids = tokenizer.Encode("Once upon a time, \xc3\xa9t\xc3\xa9 \x01");
  if (!ids.ok()) return;
  for (uint32_t id : *ids) KV_CHECK(id < tokenizer.vocab_size());
  (void)tokenizer.Decode(*ids);
}

}  // namespace
}  // namespace kvtier::runtime

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kvtier::runtime::LoadOne({reinterpret_cast<const std::byte*>(data), size});
  return 0;
}
