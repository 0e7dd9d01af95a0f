#include "byte_size.h"

#include "core/limits.h"

namespace kvtier::cli {

Result<uint64_t> ParseBytes(std::string_view flag, const std::string& text) {
  struct Unit {
    std::string_view suffix;
    uint64_t bytes;
  };
  constexpr Unit kUnits[] = {{"GiB", kGiB}, {"MiB", kMiB}, {"KiB", kKiB}, {"B", 1}};
  std::string_view digits = text;
  uint64_t unit = 1;
  for (const Unit& u : kUnits) {
    if (digits.size() > u.suffix.size() && digits.ends_with(u.suffix)) {
      digits.remove_suffix(u.suffix.size());
      unit = u.bytes;
      break;
    }
  }
  const auto bad = [&] {
    return Status::InvalidArgument(std::string(flag) + ": '" + text +
                                   "' is not a size (e.g. 4096, 64KiB, 1MiB, 4GiB)");
  };
  if (digits.empty() || digits.size() > 19) return bad();
  uint64_t value = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return bad();
    value = value * 10 + static_cast<uint64_t>(c - '0');
  }
  if (value > UINT64_MAX / unit) return bad();
  return value * unit;
}

}  // namespace kvtier::cli
