// The public C++ API's Engine::Connect (include/kvtier/engine.h) in libkvtier: a client of the
// node service (serve/client.h). Its RemoteEngine is an internal Engine like the in-process one,
// so the api::Engine built by public_api::WrapEngine forwards every call to it unchanged; only
// the options are converted here. Why here and not in src/engine: the service's client is a
// layer above the engine, and this file is part of the library that links both.
#include <memory>
#include <string>
#include <utility>

#include "capi/public_api.h"
#include "serve/client.h"

namespace kvtier::api {

Result<std::unique_ptr<Engine>> Engine::Connect(const std::string& socket,
                                                const ConnectOptions& options) {
  serve::ClientOptions client;
  client.socket_path = socket;
  client.token = options.token;
  client.name = options.name;
  if (options.layout.has_value()) {
    const auto dtype = static_cast<int>(options.layout->dtype);
    if (dtype < static_cast<int>(DType::kF16) || dtype > static_cast<int>(DType::kF32)) {
      return Status::InvalidArgument("layout.dtype " + std::to_string(dtype) +
                                     " is out of range");
    }
    const auto kind = static_cast<int>(options.layout->kind);
    if (kind > static_cast<int>(LayoutKind::kLatent)) {
      return Status::InvalidArgument("layout.kind " + std::to_string(kind) + " is out of range");
    }
    client.layout = public_api::ToKvLayout(*options.layout);
    KV_RETURN_IF_ERROR(client.layout->Validate().WithContext("layout"));
  }
  client.timeout_ms = options.timeout_ms;
  client.reconnect_interval_ms = options.reconnect_interval_ms;
  std::unique_ptr<public_api::FunctionLogger> logger;
  if (options.log) logger = std::make_unique<public_api::FunctionLogger>(options.log);
  client.logger = logger.get();
  KV_ASSIGN_OR_RETURN(std::unique_ptr<serve::RemoteEngine> remote, serve::Connect(client));
  return public_api::WrapEngine(std::move(remote), std::move(logger));
}

}  // namespace kvtier::api
