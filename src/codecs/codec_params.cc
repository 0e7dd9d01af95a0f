#include "codecs/codec_params.h"

#include <algorithm>
#include <optional>

namespace kvtier::codecs {

std::string CodecName(CodecId id) {
  switch (id) {
    case CodecId::kIdentity:
      return "identity";
    case CodecId::kShuffleZstd:
      return "shuffle-zstd";
    case CodecId::kInt8:
      return "int8";
    case CodecId::kInt4:
      return "int4";
    case CodecId::kInt8Rot:
      return "int8-rot";
    case CodecId::kInt4Rot:
      return "int4-rot";
    case CodecId::kK8V4:
      return "k8v4";
    case CodecId::kK8V4Rot:
      return "k8v4-rot";
    case CodecId::kEcq5:
      return "ecq5";
    case CodecId::kEcq6:
      return "ecq6";
    case CodecId::kEcq6V5:
      return "ecq6v5";
  }
  return "codec(" + std::to_string(static_cast<int>(id)) + ")";
}

QuantScheme SchemeOf(CodecId id) {
  switch (id) {
    case CodecId::kInt8:
      return {.key_bits = 8, .value_bits = 8};
    case CodecId::kInt4:
      return {.key_bits = 4, .value_bits = 4};
    case CodecId::kInt8Rot:
      return {.key_bits = 8, .value_bits = 8, .rotated = true};
    case CodecId::kInt4Rot:
      return {.key_bits = 4, .value_bits = 4, .rotated = true};
    case CodecId::kK8V4:
      return {.key_bits = 8, .value_bits = 4};
    case CodecId::kK8V4Rot:
      return {.key_bits = 8, .value_bits = 4, .rotated = true};
    case CodecId::kEcq5:
      return {.key_bits = 5, .value_bits = 5, .entropy_coded = true, .key_quarter_bits = 20,
              .value_quarter_bits = 20};
    case CodecId::kEcq6:
      return {.key_bits = 6, .value_bits = 6, .entropy_coded = true, .key_quarter_bits = 24,
              .value_quarter_bits = 24};
    case CodecId::kEcq6V5:
      return {.key_bits = 6, .value_bits = 5, .entropy_coded = true, .key_quarter_bits = 24,
              .value_quarter_bits = 21};
    case CodecId::kIdentity:
    case CodecId::kShuffleZstd:
      return {};
  }
  return {};
}

uint32_t CodecParams::bits() const {
  const QuantScheme s = SchemeOf(codec);
  return std::min(s.key_bits, s.value_bits);
}

namespace {

bool ZstdLevelInRange(int level) { return level >= kZstdLevelMin && level <= kZstdLevelMax; }

// Any lossy codec (grouped or entropy-coded) by name.
std::optional<CodecId> QuantizedCodecNamed(const std::string& name) {
  for (uint8_t v = 1; v <= static_cast<uint8_t>(kCodecIdLast); ++v) {
    const auto id = static_cast<CodecId>(v);
    if (SchemeOf(id).key_bits != 0 && CodecName(id) == name) return id;
  }
  return std::nullopt;
}

}  // namespace

CodecParams CodecParams::WithDefaults() const {
  CodecParams out = *this;
  if (codec == CodecId::kShuffleZstd && zstd_level == 0) out.zstd_level = kShuffleZstdLevelDefault;
  if (grouped() && group_size == 0) out.group_size = kQuantGroupSizeDefault;
  if (entropy_coded() && zstd_level == 0) out.zstd_level = kZstdLevelMin;
  return out;
}

Status CodecParams::Validate() const {
  switch (codec) {
    case CodecId::kIdentity:
      if (zstd_level != 0 || group_size != 0) {
        return Status::InvalidArgument("identity takes no zstd level or group size: " + ToString());
      }
      return Status::Ok();
    case CodecId::kShuffleZstd:
      if (!ZstdLevelInRange(zstd_level)) {
        return Status::InvalidArgument("shuffle-zstd level must be in [1, 22]: " + ToString());
      }
      if (group_size != 0) {
        return Status::InvalidArgument("shuffle-zstd takes no group size: " + ToString());
      }
      return Status::Ok();
    case CodecId::kInt8:
    case CodecId::kInt4:
    case CodecId::kInt8Rot:
    case CodecId::kInt4Rot:
    case CodecId::kK8V4:
    case CodecId::kK8V4Rot:
      if (zstd_level != 0 && !ZstdLevelInRange(zstd_level)) {
        return Status::InvalidArgument("quantized zstd level must be 0 (none) or in [1, 22]: " +
                                       ToString());
      }
      if (group_size < kQuantGroupSizeMin || group_size > kQuantGroupSizeMax) {
        return Status::InvalidArgument("quantization group size must be in [8, 1024]: " +
                                       ToString());
      }
      return Status::Ok();
    case CodecId::kEcq5:
    case CodecId::kEcq6:
    case CodecId::kEcq6V5:
      if (!ZstdLevelInRange(zstd_level)) {
        return Status::InvalidArgument(CodecName(codec) + " zstd level must be in [1, 22]: " +
                                       ToString());
      }
      if (group_size != 0) {
        return Status::InvalidArgument(CodecName(codec) + " takes no group size: " + ToString());
      }
      return Status::Ok();
  }
  return Status::InvalidArgument("unknown codec: " + ToString());
}

std::string CodecParams::ToString() const {
  return "{codec=" + CodecName(codec) + ", zstd_level=" + std::to_string(zstd_level) +
         ", group_size=" + std::to_string(group_size) + "}";
}

Result<CodecParams> ParseCodecParams(const std::string& name, int level, uint32_t group) {
  CodecParams params;
  if (name == "identity") {
    params = CodecParams::Identity();
  } else if (name == "shuffle-zstd") {
    params = CodecParams::ShuffleZstd(level).WithDefaults();
  } else if (name == "int8") {
    params = CodecParams::Int8(group, level).WithDefaults();
  } else if (std::optional<CodecId> id = QuantizedCodecNamed(name); id.has_value()) {
    // The group as given: WithDefaults fills it for the grouped codecs only, and Validate refuses
    // one for ecq.
    params = CodecParams::Quantized(*id, group, level).WithDefaults();
  } else {
    return Status::InvalidArgument("codec '" + name +
                                   "' is not one of identity, shuffle-zstd, int8, int4, int8-rot, "
                                   "int4-rot, k8v4, k8v4-rot, ecq5, ecq6, ecq6v5");
  }
  KV_RETURN_IF_ERROR(params.Validate());
  return params;
}

bool LatentCodecOk(const CodecParams& params) {
  return params.lossless() || (params.key_bits() == params.value_bits() && !params.rotated());
}

}  // namespace kvtier::codecs
