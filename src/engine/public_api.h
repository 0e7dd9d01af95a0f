// The conversions behind the public C++ API (include/kvtier/engine.h): public option, layout and
// stats types to and from the engine's internal ones (engine/engine.h). Internal: not installed.
//
// Why a header: public_api_test.cc reads the internal options the public ones become, field by
// field, so that a public option that is not carried into EngineOptions fails a test.
//
// Thread safety: pure functions; FunctionLogger is as thread-safe as the function it calls.
// Ownership: ToEngineOptions borrows `logger` into the result (it must outlive the engine).
#pragma once

#include <functional>
#include <string_view>

#include "core/kv_layout.h"
#include "core/logger.h"
#include "engine/engine.h"
#include "kvtier/engine.h"
#include "kvtier/options.h"
#include "kvtier/result.h"
#include "kvtier/stats.h"

namespace kvtier::public_api {

// A Logger that calls EngineOptions::log.
class FunctionLogger final : public Logger {
 public:
  explicit FunctionLogger(std::function<void(api::LogLevel, std::string_view)> log)
      : log_(std::move(log)) {}
  void Log(LogLevel level, std::string_view message) override;

 private:
  const std::function<void(api::LogLevel, std::string_view)> log_;
};

KvLayout ToKvLayout(const api::Layout& layout);
api::Layout FromKvLayout(const KvLayout& layout);

// Every public field into its internal counterpart; InvalidArgument naming the field for an enum
// value outside its enum, for keys given both as a file and as text, or for keys that do not load.
// The ranges are left to EngineOptions::Validate (Engine::Open). `logger` (may be null) becomes
// EngineOptions::logger; options.log itself is not read here.
Result<EngineOptions> ToEngineOptions(const api::EngineOptions& options, Logger* logger);

api::EngineStats FromEngineStats(const EngineStats& stats);

}  // namespace kvtier::public_api
