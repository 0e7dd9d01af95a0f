#include "core/logger.h"

#include <cstdio>

namespace kvtier {

std::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "DEBUG";
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kWarn:
      return "WARN";
    case LogLevel::kError:
      return "ERROR";
  }
  return "?";
}

void StderrLogger::Log(LogLevel level, std::string_view message) {
  if (level < min_level_) return;
  const std::string_view name = LogLevelName(level);
  MutexLock lock(&mu_);
  std::fprintf(stderr, "kvtier %.*s: %.*s\n", static_cast<int>(name.size()), name.data(),
               static_cast<int>(message.size()), message.data());
}

}  // namespace kvtier
