// libFuzzer harness for the llama2.c tokenizer file (runtime/tokenizer.h): Tokenizer::
// ParseLlama2c, then Encode and Decode with what it built. Any byte string must parse or fail
// with a Status (negative or oversized lengths, truncation, trailing bytes, bad ids), never
// crash or read out of bounds (run under ASan/UBSan); a vocabulary that parses must encode a
// text into ids below its size and decode every id without fault.
//
// Input: a u16 (little-endian) token count, as the model would give it, then the file.
// Built only with -DKVTIER_BUILD_FUZZERS=ON (tests/fuzz/CMakeLists.txt).
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/assert.h"
#include "runtime/tokenizer.h"

namespace kvtier::runtime {
namespace {

void ParseOne(std::span<const std::byte> file, uint32_t vocab_size) {
  Result<Tokenizer> tokenizer = Tokenizer::ParseLlama2c(file, vocab_size);
  if (!tokenizer.ok()) return;
  KV_CHECK(tokenizer->vocab_size() == vocab_size);
  Result<std::vector<uint32_t>> ids =
      tokenizer->Encode("Once upon a time, \xc3\xa9t\xc3\xa9 <0x41> \xff\x01", {.add_eos = true});
  if (ids.ok()) {
    for (uint32_t id : *ids) KV_CHECK(id < vocab_size);
    (void)tokenizer->Decode(*ids);
  }
  for (uint32_t id = 0; id < vocab_size; ++id) (void)tokenizer->DecodeToken(1, id);
}

}  // namespace
}  // namespace kvtier::runtime

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint32_t vocab_size = uint32_t{data[0]} | (uint32_t{data[1]} << 8);
  kvtier::runtime::ParseOne({reinterpret_cast<const std::byte*>(data + 2), size - 2}, vocab_size);
  return 0;
}
