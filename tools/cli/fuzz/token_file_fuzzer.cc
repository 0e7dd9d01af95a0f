// libFuzzer harness for the token file parser (token_file.h): ParseTokenText, the parse that
// ReadTokenFile runs over a file's bytes. Any byte string must parse or fail with an
// InvalidArgument naming the token, never crash or hang (run under ASan/UBSan); a parse that
// succeeds keeps at most tokens_max tokens.
// Built only with -DKVTIER_BUILD_FUZZERS=ON (tests/fuzz/CMakeLists.txt).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/assert.h"
#include "token_file.h"

namespace kvtier::cli {
namespace {

constexpr size_t kTokensMax = 64;

void ParseOne(std::string_view text) {
  Result<std::vector<uint32_t>> tokens = ParseTokenText(text, "fuzz.txt", kTokensMax);
  if (tokens.ok()) {
    KV_CHECK(tokens->size() <= kTokensMax);
  } else {
    KV_CHECK(tokens.status().code() == StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace kvtier::cli

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kvtier::cli::ParseOne(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
