// The CLI's log level: the level below which log lines (and progress lines) are dropped, from the
// root flags --log-level and -q/--quiet (default: warnings and errors). Set by main() before any
// Run(); read by the subcommands.
#pragma once

#include "core/logger.h"

namespace kvtier::cli {

LogLevel CliLogLevel();
void SetCliLogLevel(LogLevel level);

}  // namespace kvtier::cli
