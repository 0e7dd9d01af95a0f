// Byte sizes on the command line: "1GiB", "64KiB", "4096", "4096B".
//
// Thread safety: pure function.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kvtier/result.h"

namespace kvtier::cli {

// Suffixes B, KiB, MiB, GiB (binary, case-sensitive). InvalidArgument naming `flag` otherwise.
Result<uint64_t> ParseBytes(std::string_view flag, const std::string& text);

}  // namespace kvtier::cli
