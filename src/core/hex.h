// Lower-case hexadecimal text of arbitrary bytes and back: for bytes that must travel as text
// (state files, JSON fields for bytes that are not UTF-8).
//
// Thread safety: pure functions. Ownership: return new strings.
#pragma once

#include <string>
#include <string_view>

namespace kvtier {

// Two lower-case digits a byte.
inline std::string HexOf(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) {
    const auto b = static_cast<unsigned char>(c);
    out += kDigits[b >> 4];
    out += kDigits[b & 0xf];
  }
  return out;
}

// The bytes of `hex` (lower-case digits, an even count); false, with *out unspecified, when it is
// not such text.
inline bool BytesOfHex(std::string_view hex, std::string* out) {
  auto digit = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  if (hex.size() % 2 != 0) return false;
  out->clear();
  out->reserve(hex.size() / 2);
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int hi = digit(hex[i]);
    const int lo = digit(hex[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out->push_back(static_cast<char>((hi << 4) | lo));
  }
  return true;
}

}  // namespace kvtier
