// Little-endian field encoding for every on-disk and on-wire format. Fields are encoded one by
// one into byte buffers, never by memcpy of a struct, so layouts do not depend on the compiler.
// The decoders take raw pointers whose bounds the caller has already checked.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

namespace kvtier {

static_assert(std::endian::native == std::endian::little ||
              std::endian::native == std::endian::big);

namespace internal {
template <typename T>
inline T ToLittle(T v) {
  if constexpr (std::endian::native == std::endian::big) {
    if constexpr (sizeof(T) == 2) return static_cast<T>(__builtin_bswap16(v));
    if constexpr (sizeof(T) == 4) return static_cast<T>(__builtin_bswap32(v));
    if constexpr (sizeof(T) == 8) return static_cast<T>(__builtin_bswap64(v));
  }
  return v;
}
}  // namespace internal

inline void EncodeFixed8(std::byte* dst, uint8_t v) { dst[0] = std::byte{v}; }
inline void EncodeFixed16(std::byte* dst, uint16_t v) {
  v = internal::ToLittle(v);
  std::memcpy(dst, &v, sizeof(v));
}
inline void EncodeFixed32(std::byte* dst, uint32_t v) {
  v = internal::ToLittle(v);
  std::memcpy(dst, &v, sizeof(v));
}
inline void EncodeFixed64(std::byte* dst, uint64_t v) {
  v = internal::ToLittle(v);
  std::memcpy(dst, &v, sizeof(v));
}

inline uint8_t DecodeFixed8(const std::byte* src) { return std::to_integer<uint8_t>(src[0]); }
inline uint16_t DecodeFixed16(const std::byte* src) {
  uint16_t v;
  std::memcpy(&v, src, sizeof(v));
  return internal::ToLittle(v);
}
inline uint32_t DecodeFixed32(const std::byte* src) {
  uint32_t v;
  std::memcpy(&v, src, sizeof(v));
  return internal::ToLittle(v);
}
inline uint64_t DecodeFixed64(const std::byte* src) {
  uint64_t v;
  std::memcpy(&v, src, sizeof(v));
  return internal::ToLittle(v);
}

// Appending encoders for variable-size encodings (hash inputs, checkpoints).
inline void PutFixed8(std::string* dst, uint8_t v) { dst->push_back(static_cast<char>(v)); }
inline void PutFixed16(std::string* dst, uint16_t v) {
  std::byte b[2];
  EncodeFixed16(b, v);
  dst->append(reinterpret_cast<const char*>(b), sizeof(b));
}
inline void PutFixed32(std::string* dst, uint32_t v) {
  std::byte b[4];
  EncodeFixed32(b, v);
  dst->append(reinterpret_cast<const char*>(b), sizeof(b));
}
inline void PutFixed64(std::string* dst, uint64_t v) {
  std::byte b[8];
  EncodeFixed64(b, v);
  dst->append(reinterpret_cast<const char*>(b), sizeof(b));
}
// u32 length, then the bytes.
inline void PutLengthPrefixed(std::string* dst, std::string_view bytes) {
  PutFixed32(dst, static_cast<uint32_t>(bytes.size()));
  dst->append(bytes.data(), bytes.size());
}

// A bounds-checked reader over a byte span; every Get fails (returns false) rather than reading
// past the end, so decoders of untrusted input cannot overrun.
class ByteReader {
 public:
  explicit ByteReader(std::span<const std::byte> bytes) : bytes_(bytes) {}

  size_t remaining() const { return bytes_.size() - pos_; }
  size_t position() const { return pos_; }

  bool GetFixed8(uint8_t* v) {
    return Get(v, 1, [](const std::byte* p) { return DecodeFixed8(p); });
  }
  bool GetFixed16(uint16_t* v) { return Get(v, 2, DecodeFixed16); }
  bool GetFixed32(uint32_t* v) { return Get(v, 4, DecodeFixed32); }
  bool GetFixed64(uint64_t* v) { return Get(v, 8, DecodeFixed64); }
  bool GetBytes(size_t n, std::span<const std::byte>* out) {
    if (remaining() < n) return false;
    *out = bytes_.subspan(pos_, n);
    pos_ += n;
    return true;
  }
  bool Skip(size_t n) {
    if (remaining() < n) return false;
    pos_ += n;
    return true;
  }

 private:
  template <typename T, typename F>
  bool Get(T* v, size_t n, F decode) {
    if (remaining() < n) return false;
    *v = decode(bytes_.data() + pos_);
    pos_ += n;
    return true;
  }

  std::span<const std::byte> bytes_;
  size_t pos_ = 0;
};

}  // namespace kvtier
