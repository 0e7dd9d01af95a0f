#include "byte_size.h"

namespace kvtier::cli {

Result<uint64_t> ParseBytes(std::string_view flag, const std::string& text) {
  const auto bad = [&] {
    return Status::InvalidArgument(std::string(flag) + ": '" + text +
                                   "' is not a size (e.g. 4096, 64k, 64KiB, 1m, 1MiB, 4g, 4GiB)");
  };
  // Digits, then an optional unit: K, M, G, T or P in either case, alone or followed by B or iB
  // (all binary, as fio reads them by default), or B.
  size_t end = 0;
  while (end < text.size() && text[end] >= '0' && text[end] <= '9') ++end;
  const std::string_view digits = std::string_view(text).substr(0, end);
  std::string_view unit_text = std::string_view(text).substr(end);
  uint64_t unit = 1;
  if (!unit_text.empty()) {
    constexpr std::string_view kPrefixes = "kmgtp";
    const char first = static_cast<char>(unit_text[0] | 0x20);  // Lower case.
    const size_t power = kPrefixes.find(first);
    if (power != std::string_view::npos) {
      unit = uint64_t{1} << (10 * (power + 1));
      unit_text.remove_prefix(1);
      if (unit_text == "iB" || unit_text == "ib" || unit_text == "B" || unit_text == "b") {
        unit_text = {};
      }
    } else if (unit_text == "B" || unit_text == "b") {
      unit_text = {};
    }
    if (!unit_text.empty()) return bad();
  }
  if (digits.empty() || digits.size() > 19) return bad();
  uint64_t value = 0;
  for (char c : digits) value = value * 10 + static_cast<uint64_t>(c - '0');
  if (value > UINT64_MAX / unit) return bad();
  return value * unit;
}

}  // namespace kvtier::cli
