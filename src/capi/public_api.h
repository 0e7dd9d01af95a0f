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
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/kv_layout.h"
#include "core/logger.h"
#include "engine/engine.h"
#include "kvtier/engine.h"
#include "kvtier/options.h"
#include "kvtier/result.h"
#include "kvtier/stats.h"
#include "tiers/remote_crypto.h"

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

// An api::Engine over an internal engine opened or connected elsewhere (Engine::Connect, in
// src/capi/public_api_connect.cc: the node service's client sits above this layer). `logger`
// (may be null) is the one `engine` borrows: it is destroyed after the engine. The layout is the
// engine's options().layout.
std::unique_ptr<api::Engine> WrapEngine(std::unique_ptr<Engine> engine,
                                        std::unique_ptr<FunctionLogger> logger);

// What the two builds of the public API differ in, each defined once per library:
// public_api_tiers.cc (libkvtier: the SSD and remote tiers, sealed with deployment keys) and
// public_api_host.cc (libkvtier_host: memory tiers only, no liburing, hiredis or libipsec-mb).
//
// The internal engine opened from converted options.
Result<std::unique_ptr<Engine>> OpenEngine(const EngineOptions& options);
// The keys `in` names (a file or text) into *out, reset when it names none; InvalidArgument
// naming `field` for both or for keys that do not load. The host-only build refuses keys with
// NotSupported (they only seal the SSD and remote tiers, which it does not have).
Status ConvertKeys(const api::Keyring& in, const std::string& field,
                   std::optional<RemoteKeyring>* out);

}  // namespace kvtier::public_api
