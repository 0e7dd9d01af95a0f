#include "codecs/codec_params.h"

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
  }
  return "codec(" + std::to_string(static_cast<int>(id)) + ")";
}

uint32_t CodecParams::bits() const {
  switch (codec) {
    case CodecId::kInt8:
      return 8;
    case CodecId::kInt4:
      return 4;
    case CodecId::kIdentity:
    case CodecId::kShuffleZstd:
      return 0;
  }
  return 0;
}

namespace {

bool ZstdLevelInRange(int level) { return level >= kZstdLevelMin && level <= kZstdLevelMax; }

}  // namespace

CodecParams CodecParams::WithDefaults() const {
  CodecParams out = *this;
  if (codec == CodecId::kShuffleZstd && zstd_level == 0) out.zstd_level = kShuffleZstdLevelDefault;
  if ((codec == CodecId::kInt8 || codec == CodecId::kInt4) && group_size == 0) {
    out.group_size = kQuantGroupSizeDefault;
  }
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
      if (zstd_level != 0 && !ZstdLevelInRange(zstd_level)) {
        return Status::InvalidArgument("quantized zstd level must be 0 (none) or in [1, 22]: " +
                                       ToString());
      }
      if (group_size < kQuantGroupSizeMin || group_size > kQuantGroupSizeMax) {
        return Status::InvalidArgument("quantization group size must be in [8, 1024]: " +
                                       ToString());
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
  } else if (name == "int4") {
    params = CodecParams::Int4(group, level).WithDefaults();
  } else {
    return Status::InvalidArgument("codec '" + name +
                                   "' is not one of identity, shuffle-zstd, int8, int4");
  }
  KV_RETURN_IF_ERROR(params.Validate());
  return params;
}

}  // namespace kvtier::codecs
