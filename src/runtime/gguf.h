// GGUF (version 3) reader for llama-architecture models with F32 or F16 tensors.
//
// File layout (all little-endian): magic "GGUF" (u32 0x46554747), u32 version, u64
// tensor_count, u64 metadata_kv_count; metadata entries (string key, u32 value type, value);
// tensor infos (string name, u32 n_dims, u64 ne[n_dims] innermost first, u32 ggml type, u64
// offset relative to the data section); padding to `general.alignment` (default 32); the data
// section. A string is u64 length + bytes; an array is u32 element type + u64 count + elements.
//
// ne[0] is the row length: a llama weight of ne = {in, out} is a row-major (out, in) matrix,
// exactly ModelWeights' layout, so tensors copy over without transposition. Q/K need no
// permutation: GGUF llama models use RoPE on adjacent pairs, as this runtime does.
//
// Validation, before any allocation that depends on a field: magic, version (3 only), counts
// and string/array lengths against runtime_limits.h and against the bytes left in the file,
// nested arrays (not supported), duplicate keys and tensor names, dimension products that
// overflow, tensor types (F32/F16 only), alignment of offsets, tensors that run past the end of
// the file or overlap each other; then, for the model, the llama.* hyper-parameters, every
// required tensor's presence and shape. Each failure is a Status naming the field or tensor:
// Corruption for malformed data, NotSupported for valid GGUF this reader does not handle.
//
// Thread safety: free functions and value types. Ownership: GgufFile holds copies of the
// metadata and tensor infos, never pointers into the file bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/result.h"
#include "runtime/model_weights.h"
#include "runtime/tokenizer.h"

namespace kvtier::runtime {

inline constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as little-endian u32.
inline constexpr uint32_t kGgufVersion = 3;

// Metadata value types; values are GGUF's.
enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

// ggml tensor types this reader loads; every other type is NotSupported.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
};

struct GgufValue {
  GgufValueType type = GgufValueType::kUint8;
  // Scalars: integers in `integer` (bools 0/1), floats in `real`, strings in `text`.
  int64_t integer = 0;
  uint64_t unsigned_integer = 0;
  double real = 0.0;
  std::string text;
  // Arrays: element type; strings in `strings`, numbers (any numeric type) in `numbers`.
  GgufValueType array_type = GgufValueType::kUint8;
  std::vector<std::string> strings;
  std::vector<double> numbers;
};

struct GgufTensorInfo {
  std::string name;
  uint32_t n_dims = 0;
  uint64_t ne[4] = {1, 1, 1, 1};  // Innermost first.
  GgmlType type = GgmlType::kF32;
  uint64_t file_offset_bytes = 0;  // Absolute position in the file.
  uint64_t size_bytes = 0;
  uint64_t Elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
};

struct GgufFile {
  uint32_t version = 0;
  uint32_t alignment = 0;
  uint64_t data_offset_bytes = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata;
  std::vector<GgufTensorInfo> tensors;

  const GgufValue* FindValue(std::string_view key) const;
  const GgufTensorInfo* FindTensor(std::string_view name) const;
};

// True when `bytes` starts with the GGUF magic.
bool IsGguf(std::span<const std::byte> bytes);
// Parses and validates the header, metadata and tensor infos of a GGUF image.
Result<GgufFile> ParseGguf(std::span<const std::byte> bytes);

struct GgufModel {
  ModelWeights weights;
  std::optional<Tokenizer> tokenizer;  // Present for tokenizer.ggml.model == "llama".
};

// Builds a llama model (and its SentencePiece tokenizer) from a GGUF image.
Result<GgufModel> ParseGgufModel(std::span<const std::byte> bytes);
Result<GgufModel> LoadGgufModel(const std::string& path);

}  // namespace kvtier::runtime
