// Byte sizes on the command line: "4096", "4096B", "64KiB", "64k", "64KB", "1m", "1MiB", "4g",
// "1T", "1PiB": K, M, G, T, P in either case, alone or with B or iB, are all binary (as fio reads
// them).
//
// Thread safety: pure function.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kvtier/result.h"

namespace kvtier::cli {

// InvalidArgument naming `flag` for anything else, or a value beyond 2^64 - 1.
Result<uint64_t> ParseBytes(std::string_view flag, const std::string& text);

}  // namespace kvtier::cli
