// Running another program from a benchmark (redis-benchmark, zstd) without a shell.
//
// Thread safety: any thread; each call forks its own child. Ownership: nothing is kept.
#pragma once

#include <string>
#include <vector>

#include "kvtier/result.h"

namespace kvtier::cli {

// Runs argv (no shell: nothing in it is interpreted) and returns its standard output; stderr is
// dropped. NotFound when the program cannot be started, IoError when it exits non-zero.
Result<std::string> Capture(const std::vector<std::string>& argv);

}  // namespace kvtier::cli
