#include "codecs/block_geometry.h"

#include "core/limits.h"

namespace kvtier::codecs {

size_t DTypeBytes(DType dtype) { return DTypeSizeBytes(dtype); }

Status BlockGeometry::Validate() const {
  if (tokens == 0 || tokens > kBlockTokensMax) {
    return Status::InvalidArgument("block tokens out of range: " + ToString());
  }
  if (kv_heads == 0 || kv_heads > kKvHeadsMax) {
    return Status::InvalidArgument("block kv_heads out of range: " + ToString());
  }
  if (head_dim == 0 || head_dim > kHeadDimMax) {
    return Status::InvalidArgument("block head_dim out of range: " + ToString());
  }
  if (DTypeBytes(dtype) == 0) {
    return Status::InvalidArgument("unknown block dtype: " + ToString());
  }
  if (kind != LayoutKind::kKv && (kind != LayoutKind::kLatent || kv_heads != 1)) {
    return Status::InvalidArgument("block kind is not K/V nor latent with one head: " + ToString());
  }
  // Each factor is bounded above, so the product cannot overflow 64 bits.
  const uint64_t raw = uint64_t{planes()} * tokens * kv_heads * head_dim * DTypeBytes(dtype);
  if (raw > kBlockBytesMax) {
    return Status::InvalidArgument("block larger than kBlockBytesMax: " + ToString());
  }
  return Status::Ok();
}

std::string BlockGeometry::ToString() const {
  return "{tokens=" + std::to_string(tokens) + ", kv_heads=" + std::to_string(kv_heads) +
         ", head_dim=" + std::to_string(head_dim) + ", dtype=" + std::string(DTypeName(dtype)) +
         (kind == LayoutKind::kKv ? "" : ", kind=" + std::string(LayoutKindName(kind))) + "}";
}

}  // namespace kvtier::codecs
