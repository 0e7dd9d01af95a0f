#include "core/escape.h"

#include <algorithm>
#include <string>

namespace kvtier {
namespace {

// Appends the escaped form of one byte.
void AppendEscaped(unsigned char c, std::string* out) {
  constexpr char kHex[] = "0123456789abcdef";
  if (c == '\\') {
    *out += "\\\\";
  } else if (c >= 0x20 && c <= 0x7e) {
    out->push_back(static_cast<char>(c));
  } else {
    out->push_back('\\');
    out->push_back('x');
    out->push_back(kHex[c >> 4]);
    out->push_back(kHex[c & 0xf]);
  }
}

}  // namespace

std::string EscapeForMessage(std::string_view bytes, size_t max_chars) {
  std::string out;
  out.reserve(std::min(bytes.size(), max_chars) + 16);
  std::string piece;
  for (size_t i = 0; i < bytes.size(); ++i) {
    piece.clear();
    AppendEscaped(static_cast<unsigned char>(bytes[i]), &piece);
    if (out.size() + piece.size() > max_chars) {
      return out + "... (" + std::to_string(bytes.size()) + " bytes)";
    }
    out += piece;
  }
  return out;
}

}  // namespace kvtier
