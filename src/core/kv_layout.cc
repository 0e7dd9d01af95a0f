#include "core/kv_layout.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <optional>
#include <string>
#include <system_error>

#include "core/assert.h"
#include "core/coding.h"
#include "core/limits.h"

namespace kvtier {
namespace {

// Multiplies into *acc; false when the product does not fit in 64 bits.
bool MulChecked(uint64_t* acc, uint64_t factor) {
  return !__builtin_mul_overflow(*acc, factor, acc);
}

Status CheckNonZero(std::string_view field, uint32_t value) {
  if (value != 0) return Status::Ok();
  return Status::InvalidArgument(std::string(field) + " must be positive, got 0");
}

Status CheckAtMost(std::string_view field, uint64_t value, uint64_t max) {
  if (value <= max) return Status::Ok();
  return Status::InvalidArgument(std::string(field) + " is " + std::to_string(value) +
                                 ", above the limit " + std::to_string(max));
}

Status CheckBlockTokens(uint32_t block_tokens) {
  if (block_tokens < kBlockTokensMin || block_tokens > kBlockTokensMax) {
    return Status::InvalidArgument("block_tokens is " + std::to_string(block_tokens) +
                                   ", outside [" + std::to_string(kBlockTokensMin) + ", " +
                                   std::to_string(kBlockTokensMax) + "]");
  }
  if (block_tokens % kBlockTokensMultiple != 0) {
    return Status::InvalidArgument("block_tokens is " + std::to_string(block_tokens) +
                                   ", not a multiple of " + std::to_string(kBlockTokensMultiple));
  }
  return Status::Ok();
}

// Checks a byte count computed as the product of `factors`: it must fit in 64 bits and stay
// within kBlockBytesMax.
template <size_t N>
Status CheckByteCount(std::string_view what, const std::array<uint64_t, N>& factors) {
  uint64_t bytes = 1;
  for (uint64_t f : factors) {
    if (!MulChecked(&bytes, f)) {
      return Status::InvalidArgument(std::string(what) + " overflows 64 bits");
    }
  }
  if (bytes > kBlockBytesMax) {
    return Status::InvalidArgument(std::string(what) + " is " + std::to_string(bytes) +
                                   ", above kBlockBytesMax " + std::to_string(kBlockBytesMax));
  }
  return Status::Ok();
}

}  // namespace

uint32_t DTypeSizeBytes(DType dtype) {
  switch (dtype) {
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kF32:
      return 4;
  }
  return 0;
}

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
    case DType::kF32:
      return "f32";
  }
  return "invalid";
}

Result<DType> ParseDType(std::string_view name) {
  for (DType d : {DType::kF16, DType::kBF16, DType::kF32}) {
    if (name == DTypeName(d)) return d;
  }
  return Status::InvalidArgument("dtype '" + std::string(name) + "' is not one of f16, bf16, f32");
}

std::string_view LayoutKindName(LayoutKind kind) {
  switch (kind) {
    case LayoutKind::kKv:
      return "kv";
    case LayoutKind::kLatent:
      return "latent";
  }
  return "invalid";
}

Status KvLayout::Validate() const {
  KV_RETURN_IF_ERROR(CheckNonZero("layers", layers));
  KV_RETURN_IF_ERROR(CheckNonZero("kv_heads", kv_heads));
  KV_RETURN_IF_ERROR(CheckNonZero("head_dim", head_dim));
  KV_RETURN_IF_ERROR(CheckNonZero("block_tokens", block_tokens));
  const uint32_t elem_bytes = DTypeSizeBytes(dtype);
  if (elem_bytes == 0) {
    return Status::InvalidArgument("dtype value " + std::to_string(static_cast<int>(dtype)) +
                                   " is not a known element type");
  }
  if (LayoutKindName(kind) == "invalid") {
    return Status::InvalidArgument("layout kind value " + std::to_string(static_cast<int>(kind)) +
                                   " is not a known kind");
  }
  if (kind == LayoutKind::kLatent && kv_heads != 1) {
    return Status::InvalidArgument("a latent layout has kv_heads=1 (one latent vector per "
                                   "token), not " + std::to_string(kv_heads));
  }
  KV_RETURN_IF_ERROR(CheckBlockTokens(block_tokens));
  KV_RETURN_IF_ERROR(CheckAtMost("layers", layers, kLayersMax));
  KV_RETURN_IF_ERROR(CheckAtMost("kv_heads", kv_heads, kKvHeadsMax));
  KV_RETURN_IF_ERROR(CheckAtMost("head_dim", head_dim, kHeadDimMax));
  KV_RETURN_IF_ERROR(CheckByteCount(
      "block bytes (planes * block_tokens * kv_heads * head_dim * elem)",
      std::array<uint64_t, 5>{Planes(), block_tokens, kv_heads, head_dim, elem_bytes}));
  KV_RETURN_IF_ERROR(
      CheckByteCount("token bytes (planes * layers * kv_heads * head_dim * elem)",
                     std::array<uint64_t, 5>{Planes(), layers, kv_heads, head_dim, elem_bytes}));
  return Status::Ok();
}

BlockStrides KvLayout::Strides() const {
  KV_DCHECK(Validate().ok());
  BlockStrides s;
  s.elem_bytes = DTypeSizeBytes(dtype);
  s.head_bytes = uint64_t{head_dim} * s.elem_bytes;
  s.token_bytes = uint64_t{kv_heads} * s.head_bytes;
  s.kv_bytes = uint64_t{block_tokens} * s.token_bytes;
  return s;
}

uint64_t KvLayout::BlockBytes() const { return Planes() * Strides().kv_bytes; }

uint64_t KvLayout::TokenBytesPerLayer() const { return Planes() * Strides().token_bytes; }

uint64_t KvLayout::TokenBytes() const { return uint64_t{layers} * TokenBytesPerLayer(); }

uint64_t KvLayout::ElementOffsetBytes(uint32_t kv, uint32_t token, uint32_t head,
                                      uint32_t dim) const {
  KV_DCHECK(kv < Planes());
  KV_DCHECK(token < block_tokens);
  KV_DCHECK(head < kv_heads);
  KV_DCHECK(dim < head_dim);
  const BlockStrides s = Strides();
  return kv * s.kv_bytes + token * s.token_bytes + head * s.head_bytes + dim * s.elem_bytes;
}

std::string KvLayout::ToString() const {
  return "layers=" + std::to_string(layers) + ",kv_heads=" + std::to_string(kv_heads) +
         ",head_dim=" + std::to_string(head_dim) + ",dtype=" + std::string(DTypeName(dtype)) +
         ",block_tokens=" + std::to_string(block_tokens) +
         (kind == LayoutKind::kKv ? "" : ",kind=" + std::string(LayoutKindName(kind)));
}

namespace {

Result<uint32_t> ParseU32(std::string_view key, std::string_view text) {
  uint32_t value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec == std::errc::result_out_of_range) {
    return Status::InvalidArgument(std::string(key) + " value '" + std::string(text) +
                                   "' is out of range for u32");
  }
  if (text.empty() || ec != std::errc() || ptr != end) {
    return Status::InvalidArgument(std::string(key) + " value '" + std::string(text) +
                                   "' is not a decimal number");
  }
  return value;
}

// One parsed key of the layout text, kept optional so missing and repeated keys are seen.
struct LayoutFields {
  std::optional<uint32_t> layers, kv_heads, head_dim, block_tokens;
  std::optional<DType> dtype;
  std::optional<LayoutKind> kind;
};

Status SetOnce(std::string_view key, std::optional<uint32_t>* slot, std::string_view value) {
  if (slot->has_value())
    return Status::InvalidArgument("layout key '" + std::string(key) + "' repeated");
  KV_ASSIGN_OR_RETURN(uint32_t v, ParseU32(key, value));
  *slot = v;
  return Status::Ok();
}

Status ParseItem(std::string_view item, LayoutFields* f) {
  const size_t eq = item.find('=');
  if (eq == std::string_view::npos) {
    return Status::InvalidArgument("layout item '" + std::string(item) + "' is not key=value");
  }
  const std::string_view key = item.substr(0, eq);
  const std::string_view value = item.substr(eq + 1);
  if (key == "layers") return SetOnce(key, &f->layers, value);
  if (key == "kv_heads") return SetOnce(key, &f->kv_heads, value);
  if (key == "head_dim") return SetOnce(key, &f->head_dim, value);
  if (key == "block_tokens") return SetOnce(key, &f->block_tokens, value);
  if (key == "dtype") {
    if (f->dtype.has_value()) return Status::InvalidArgument("layout key 'dtype' repeated");
    KV_ASSIGN_OR_RETURN(DType d, ParseDType(value));
    f->dtype = d;
    return Status::Ok();
  }
  if (key == "kind") {
    if (f->kind.has_value()) return Status::InvalidArgument("layout key 'kind' repeated");
    for (LayoutKind k : {LayoutKind::kKv, LayoutKind::kLatent}) {
      if (value == LayoutKindName(k)) f->kind = k;
    }
    if (f->kind.has_value()) return Status::Ok();
    return Status::InvalidArgument("layout kind '" + std::string(value) +
                                   "' is not one of kv, latent");
  }
  return Status::InvalidArgument(
      "unknown layout key '" + std::string(key) +
      "' (expected layers, kv_heads, head_dim, dtype, block_tokens, kind)");
}

Status RequireKey(std::string_view key, bool present) {
  if (present) return Status::Ok();
  return Status::InvalidArgument("layout key '" + std::string(key) + "' missing");
}

}  // namespace

Result<KvLayout> ParseLayout(std::string_view text) {
  if (text.empty()) return Status::InvalidArgument("layout is empty");
  LayoutFields f;
  // Bounded: each iteration consumes at least one character of `text`.
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    KV_RETURN_IF_ERROR(ParseItem(text.substr(pos, comma - pos), &f));
    pos = comma + 1;
  }
  KV_RETURN_IF_ERROR(RequireKey("layers", f.layers.has_value()));
  KV_RETURN_IF_ERROR(RequireKey("kv_heads", f.kv_heads.has_value()));
  KV_RETURN_IF_ERROR(RequireKey("head_dim", f.head_dim.has_value()));
  KV_RETURN_IF_ERROR(RequireKey("dtype", f.dtype.has_value()));
  KV_RETURN_IF_ERROR(RequireKey("block_tokens", f.block_tokens.has_value()));
  KvLayout layout{.layers = *f.layers,
                  .kv_heads = *f.kv_heads,
                  .head_dim = *f.head_dim,
                  .dtype = *f.dtype,
                  .block_tokens = *f.block_tokens,
                  .kind = f.kind.value_or(LayoutKind::kKv)};
  KV_RETURN_IF_ERROR(layout.Validate());
  return layout;
}

std::string EncodeLayoutForDigest(const KvLayout& layout) {
  std::string out;
  PutLengthPrefixed(&out, kLayoutDigestTag);
  PutFixed32(&out, kLayoutDigestVersion);
  PutFixed32(&out, layout.layers);
  PutFixed32(&out, layout.kv_heads);
  PutFixed32(&out, layout.head_dim);
  PutFixed32(&out, layout.block_tokens);
  PutFixed8(&out, static_cast<uint8_t>(layout.dtype));
  // Only a latent layout has the byte, so a K/V layout's bytes never changed, and a latent
  // layout's encoding is one byte longer than any K/V layout's: the two never share bytes.
  if (layout.kind != LayoutKind::kKv) PutFixed8(&out, static_cast<uint8_t>(layout.kind));
  return out;
}

Hash256 LayoutDigest(const KvLayout& layout) { return Sha256Of(EncodeLayoutForDigest(layout)); }

}  // namespace kvtier
