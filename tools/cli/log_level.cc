// The CLI's log level (root flags --log-level and -q), set once by main() before any Run().
#include "log_level.h"

namespace kvtier::cli {

namespace {
LogLevel g_log_level = LogLevel::kWarn;
}  // namespace

LogLevel CliLogLevel() { return g_log_level; }
void SetCliLogLevel(LogLevel level) { g_log_level = level; }

}  // namespace kvtier::cli
