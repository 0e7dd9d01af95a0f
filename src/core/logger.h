// Logger: the injected sink for kvtier's log lines. There is no global logger: components take a
// Logger* in their options (nullptr means silent). Logging is for state changes (a fallback taken,
// a tier opened, a breaker tripped), never per block on the data path.
//
// Thread safety: implementations must accept concurrent Log() calls.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/mutex.h"

namespace kvtier {

enum class LogLevel : uint8_t { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

std::string_view LogLevelName(LogLevel level);

class Logger {
 public:
  virtual ~Logger() = default;
  virtual void Log(LogLevel level, std::string_view message) = 0;
};

// Writes "kvtier <LEVEL>: message" lines to stderr, dropping those below `min_level`.
class StderrLogger final : public Logger {
 public:
  explicit StderrLogger(LogLevel min_level = LogLevel::kInfo) : min_level_(min_level) {}
  void Log(LogLevel level, std::string_view message) override KV_EXCLUDES(mu_);

 private:
  const LogLevel min_level_;
  Mutex mu_;  // Keeps lines from interleaving.
};

// Convenience for optional loggers.
inline void LogTo(Logger* logger, LogLevel level, std::string_view message) {
  if (logger != nullptr) logger->Log(level, message);
}

}  // namespace kvtier
