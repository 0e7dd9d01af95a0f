#include "runtime/gguf.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>
#include <unordered_set>

#include "core/aligned_buffer.h"
#include "core/coding.h"
#include "core/escape.h"
#include "runtime/kernels.h"
#include "runtime/mapped_file.h"
#include "runtime/runtime_limits.h"

namespace kvtier::runtime {
namespace {

// A name or string read from the file, as a message shows it: quoted and escaped, so hostile
// bytes (terminal escapes, NULs, newlines, megabytes) cannot reach the user's terminal.
std::string Quoted(std::string_view file_bytes) {
  return "'" + EscapeForMessage(file_bytes) + "'";
}

Status Truncated(std::string_view what, const ByteReader& r) {
  return Status::Corruption("GGUF truncated while reading " + std::string(what) + " at byte " +
                            std::to_string(r.position()));
}

// Bytes of one element of a scalar type; 0 for strings, arrays and unknown types.
size_t ScalarBytes(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
      return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32:
      return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
      return 8;
    case GgufValueType::kString:
    case GgufValueType::kArray:
      return 0;
  }
  return 0;
}

bool IsKnownType(uint32_t raw) { return raw <= static_cast<uint32_t>(GgufValueType::kFloat64); }

Status ReadString(ByteReader& r, uint64_t max_bytes, std::string_view what, std::string* out) {
  uint64_t len = 0;
  if (!r.GetFixed64(&len)) return Truncated(what, r);
  if (len > max_bytes) {
    return Status::Corruption("GGUF " + std::string(what) + " length " + std::to_string(len) +
                              " exceeds the limit of " + std::to_string(max_bytes));
  }
  std::span<const std::byte> bytes;
  if (!r.GetBytes(static_cast<size_t>(len), &bytes)) return Truncated(what, r);
  out->assign(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  return Status::Ok();
}

// Reads one scalar of `type` into `value` (integer/unsigned_integer/real).
Status ReadScalar(ByteReader& r, GgufValueType type, GgufValue* value) {
  const size_t n = ScalarBytes(type);
  std::span<const std::byte> b;
  if (!r.GetBytes(n, &b)) return Truncated("a metadata value", r);
  uint64_t bits = 0;
  switch (n) {
    case 1:
      bits = DecodeFixed8(b.data());
      break;
    case 2:
      bits = DecodeFixed16(b.data());
      break;
    case 4:
      bits = DecodeFixed32(b.data());
      break;
    default:
      bits = DecodeFixed64(b.data());
      break;
  }
  value->unsigned_integer = bits;
  switch (type) {
    case GgufValueType::kInt8:
      value->integer = static_cast<int8_t>(bits);
      break;
    case GgufValueType::kInt16:
      value->integer = static_cast<int16_t>(bits);
      break;
    case GgufValueType::kInt32:
      value->integer = static_cast<int32_t>(bits);
      break;
    case GgufValueType::kInt64:
      value->integer = static_cast<int64_t>(bits);
      break;
    case GgufValueType::kFloat32:
      value->real = std::bit_cast<float>(static_cast<uint32_t>(bits));
      break;
    case GgufValueType::kFloat64:
      value->real = std::bit_cast<double>(bits);
      break;
    default:
      value->integer = static_cast<int64_t>(bits);
      break;
  }
  if (type != GgufValueType::kFloat32 && type != GgufValueType::kFloat64) {
    value->real = type == GgufValueType::kUint64 ? static_cast<double>(bits)
                                                 : static_cast<double>(value->integer);
  }
  return Status::Ok();
}

Status ReadArray(ByteReader& r, const std::string& key, GgufValue* value) {
  uint32_t raw_type = 0;
  uint64_t count = 0;
  if (!r.GetFixed32(&raw_type) || !r.GetFixed64(&count)) return Truncated("an array header", r);
  if (!IsKnownType(raw_type)) {
    return Status::Corruption("GGUF key " + Quoted(key) + ": unknown array element type " +
                              std::to_string(raw_type));
  }
  const auto type = static_cast<GgufValueType>(raw_type);
  if (type == GgufValueType::kArray) {
    return Status::NotSupported("GGUF key " + Quoted(key) + ": nested arrays are not supported");
  }
  // Each element takes at least one byte (strings at least their 8-byte length): compare with
  // the bytes left before reserving anything.
  const uint64_t min_elem_bytes = type == GgufValueType::kString ? 8 : ScalarBytes(type);
  if (count > kGgufArrayElemsMax || count > r.remaining() / min_elem_bytes) {
    return Status::Corruption("GGUF key " + Quoted(key) + ": array of " + std::to_string(count) +
                              " elements exceeds the limit or the file");
  }
  value->array_type = type;
  if (type == GgufValueType::kString) {
    value->strings.resize(static_cast<size_t>(count));
    for (std::string& s : value->strings) {
      KV_RETURN_IF_ERROR(ReadString(r, kGgufStringBytesMax, "array string", &s));
    }
    return Status::Ok();
  }
  value->numbers.resize(static_cast<size_t>(count));
  GgufValue element;
  for (double& d : value->numbers) {
    KV_RETURN_IF_ERROR(ReadScalar(r, type, &element));
    d = element.real;
  }
  return Status::Ok();
}

Status ReadMetadata(ByteReader& r, uint64_t count, GgufFile* file) {
  std::unordered_set<std::string> seen;
  for (uint64_t i = 0; i < count; ++i) {
    std::string key;
    KV_RETURN_IF_ERROR(ReadString(r, kGgufStringBytesMax, "metadata key", &key));
    if (!seen.insert(key).second) {
      return Status::Corruption("GGUF duplicate metadata key " + Quoted(key));
    }
    uint32_t raw_type = 0;
    if (!r.GetFixed32(&raw_type)) return Truncated("a metadata type", r);
    if (!IsKnownType(raw_type)) {
      return Status::Corruption("GGUF key " + Quoted(key) + ": unknown value type " +
                                std::to_string(raw_type));
    }
    GgufValue value;
    value.type = static_cast<GgufValueType>(raw_type);
    if (value.type == GgufValueType::kString) {
      KV_RETURN_IF_ERROR(ReadString(r, kGgufStringBytesMax, "metadata string", &value.text));
    } else if (value.type == GgufValueType::kArray) {
      KV_RETURN_IF_ERROR(ReadArray(r, key, &value));
    } else {
      KV_RETURN_IF_ERROR(ReadScalar(r, value.type, &value));
    }
    file->metadata.emplace_back(std::move(key), std::move(value));
  }
  return Status::Ok();
}

Status ReadTensorInfo(ByteReader& r, GgufTensorInfo* t, uint64_t* relative_offset) {
  KV_RETURN_IF_ERROR(ReadString(r, kGgufTensorNameBytesMax, "tensor name", &t->name));
  if (!r.GetFixed32(&t->n_dims)) return Truncated("tensor dims", r);
  if (t->n_dims == 0 || t->n_dims > kGgufTensorDimsMax) {
    return Status::Corruption("GGUF tensor " + Quoted(t->name) + " has " +
                              std::to_string(t->n_dims) + " dimensions, outside [1, " +
                              std::to_string(kGgufTensorDimsMax) + "]");
  }
  uint64_t elements = 1;
  for (uint32_t d = 0; d < t->n_dims; ++d) {
    if (!r.GetFixed64(&t->ne[d])) return Truncated("tensor dims", r);
    if (t->ne[d] == 0) {
      return Status::Corruption("GGUF tensor " + Quoted(t->name) + " has a zero dim");
    }
    if (__builtin_mul_overflow(elements, t->ne[d], &elements)) {
      return Status::Corruption("GGUF tensor " + Quoted(t->name) +
                                ": dimension product overflows");
    }
  }
  uint32_t raw_type = 0;
  if (!r.GetFixed32(&raw_type) || !r.GetFixed64(relative_offset)) {
    return Truncated("tensor type and offset", r);
  }
  if (raw_type != static_cast<uint32_t>(GgmlType::kF32) &&
      raw_type != static_cast<uint32_t>(GgmlType::kF16)) {
    return Status::NotSupported("GGUF tensor " + Quoted(t->name) + " has unsupported ggml type " +
                                std::to_string(raw_type) + " (only F32 = 0 and F16 = 1)");
  }
  t->type = static_cast<GgmlType>(raw_type);
  const uint64_t elem_bytes = t->type == GgmlType::kF32 ? 4 : 2;
  if (__builtin_mul_overflow(elements, elem_bytes, &t->size_bytes)) {
    return Status::Corruption("GGUF tensor " + Quoted(t->name) + ": byte size overflows");
  }
  return Status::Ok();
}

Result<uint32_t> AlignmentOf(const GgufFile& file) {
  const GgufValue* v = file.FindValue("general.alignment");
  if (v == nullptr) return kGgufAlignmentDefault;
  if (v->type != GgufValueType::kUint32 || v->unsigned_integer == 0 ||
      v->unsigned_integer > kGgufAlignmentMax || !std::has_single_bit(v->unsigned_integer)) {
    return Status::Corruption("GGUF general.alignment must be a u32 power of two in [1, " +
                              std::to_string(kGgufAlignmentMax) + "]");
  }
  return static_cast<uint32_t>(v->unsigned_integer);
}

// Places every tensor in the data section and checks bounds and overlaps.
Status PlaceTensors(std::span<const uint64_t> relative, uint64_t file_bytes, GgufFile* file) {
  for (size_t i = 0; i < file->tensors.size(); ++i) {
    GgufTensorInfo& t = file->tensors[i];
    if (relative[i] % file->alignment != 0) {
      return Status::Corruption("GGUF tensor " + Quoted(t.name) + " offset " +
                                std::to_string(relative[i]) + " is not aligned to " +
                                std::to_string(file->alignment));
    }
    uint64_t end = 0;
    if (__builtin_add_overflow(file->data_offset_bytes, relative[i], &t.file_offset_bytes) ||
        __builtin_add_overflow(t.file_offset_bytes, t.size_bytes, &end) || end > file_bytes) {
      return Status::Corruption("GGUF tensor " + Quoted(t.name) + " (offset " +
                                std::to_string(relative[i]) + ", " + std::to_string(t.size_bytes) +
                                " bytes) lies outside the file of " + std::to_string(file_bytes) +
                                " bytes");
    }
  }
  std::vector<const GgufTensorInfo*> order;
  for (const GgufTensorInfo& t : file->tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const GgufTensorInfo* a, const GgufTensorInfo* b) {
    return a->file_offset_bytes < b->file_offset_bytes;
  });
  for (size_t i = 1; i < order.size(); ++i) {
    if (order[i - 1]->file_offset_bytes + order[i - 1]->size_bytes > order[i]->file_offset_bytes) {
      return Status::Corruption("GGUF tensors " + Quoted(order[i - 1]->name) + " and " +
                                Quoted(order[i]->name) + " overlap");
    }
  }
  return Status::Ok();
}

}  // namespace

const GgufValue* GgufFile::FindValue(std::string_view key) const {
  for (const auto& [k, v] : metadata) {
    if (k == key) return &v;
  }
  return nullptr;
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  for (const GgufTensorInfo& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

bool IsGguf(std::span<const std::byte> bytes) {
  return bytes.size() >= 4 && DecodeFixed32(bytes.data()) == kGgufMagic;
}

Result<GgufFile> ParseGguf(std::span<const std::byte> bytes) {
  ByteReader r(bytes);
  uint32_t magic = 0;
  GgufFile file;
  uint64_t tensor_count = 0;
  uint64_t kv_count = 0;
  if (!r.GetFixed32(&magic)) return Truncated("the magic", r);
  if (magic != kGgufMagic) return Status::Corruption("not a GGUF file: bad magic");
  if (!r.GetFixed32(&file.version) || !r.GetFixed64(&tensor_count) || !r.GetFixed64(&kv_count)) {
    return Truncated("the header", r);
  }
  if (file.version != kGgufVersion) {
    return Status::NotSupported("GGUF version " + std::to_string(file.version) +
                                " is not supported (expected 3)");
  }
  if (tensor_count > kGgufTensorsMax || kv_count > kGgufKvMax) {
    return Status::Corruption("GGUF counts out of range: " + std::to_string(tensor_count) +
                              " tensors (max " + std::to_string(kGgufTensorsMax) + "), " +
                              std::to_string(kv_count) + " metadata keys (max " +
                              std::to_string(kGgufKvMax) + ")");
  }
  KV_RETURN_IF_ERROR(ReadMetadata(r, kv_count, &file));
  KV_ASSIGN_OR_RETURN(file.alignment, AlignmentOf(file));
  // A tensor info takes at least 8 + 4 + 8 + 4 + 8 bytes: bound the count by the bytes left.
  if (tensor_count > r.remaining() / 32) return Truncated("tensor infos", r);
  file.tensors.resize(static_cast<size_t>(tensor_count));
  std::vector<uint64_t> relative(file.tensors.size());
  std::unordered_set<std::string> names;
  for (size_t i = 0; i < file.tensors.size(); ++i) {
    KV_RETURN_IF_ERROR(ReadTensorInfo(r, &file.tensors[i], &relative[i]));
    if (!names.insert(file.tensors[i].name).second) {
      return Status::Corruption("GGUF duplicate tensor name " + Quoted(file.tensors[i].name));
    }
  }
  file.data_offset_bytes = AlignUp(r.position(), file.alignment);
  if (!file.tensors.empty() && file.data_offset_bytes > bytes.size()) {
    return Truncated("the data section", r);
  }
  KV_RETURN_IF_ERROR(PlaceTensors(relative, bytes.size(), &file));
  return file;
}

}  // namespace kvtier::runtime
