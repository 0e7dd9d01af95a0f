// The public C++ API's host-only engine (libkvtier_host; engine/public_api.h): memory tiers only,
// opened without a tier factory, so options asking for an SSD or remote tier are refused with
// NotSupported naming the library that has them; nothing here reads keys (kvtier_tier_crypto),
// and Engine::Connect is NotSupported too (the service's client links the full engine).
#include "capi/public_api.h"

namespace kvtier::public_api {

Result<std::unique_ptr<Engine>> OpenEngine(const EngineOptions& options) {
  return Engine::Open(options, /*lower=*/nullptr);
}

Status ConvertKeys(const api::Keyring& in, const std::string& field,
                   std::optional<RemoteKeyring>* out) {
  if (in.file.empty() && in.text.empty()) {
    out->reset();
    return Status::Ok();
  }
  return Status::NotSupported(field +
                              ": keys seal the SSD and remote tiers, which libkvtier_host does "
                              "not have (link libkvtier)");
}

}  // namespace kvtier::public_api

namespace kvtier::api {

// The node service's client needs the full engine library (src/serve links kvtier_engine).
Result<std::unique_ptr<Engine>> Engine::Connect(const std::string& socket,
                                                const ConnectOptions& /*options*/) {
  return Status::NotSupported("Engine::Connect(" + socket +
                              "): libkvtier_host has no client of the kvtier service (link "
                              "libkvtier)");
}

}  // namespace kvtier::api
