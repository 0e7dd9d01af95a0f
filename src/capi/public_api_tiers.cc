// The public C++ API's engine with the SSD and remote tiers (libkvtier; engine/public_api.h):
// Engine::Open with the standard tier factory, and deployment keys read with kvtier_tier_crypto.
#include <utility>

#include "capi/public_api.h"

namespace kvtier::public_api {

Result<std::unique_ptr<Engine>> OpenEngine(const EngineOptions& options) {
  return Engine::Open(options);
}

Status ConvertKeys(const api::Keyring& in, const std::string& field,
                   std::optional<RemoteKeyring>* out) {
  if (!in.file.empty() && !in.text.empty()) {
    return Status::InvalidArgument(field + ": set file or text, not both");
  }
  Result<RemoteKeyring> ring = Status::NotFound("no keys");
  if (!in.file.empty()) {
    ring = RemoteKeyring::LoadFile(in.file);
  } else if (!in.text.empty()) {
    ring = RemoteKeyring::Parse(in.text);
  } else {
    out->reset();
    return Status::Ok();
  }
  if (!ring.ok()) return ring.status().WithContext(field);
  *out = std::move(ring).value();
  return Status::Ok();
}

}  // namespace kvtier::public_api
