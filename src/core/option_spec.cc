// OptionSpec's helpers (option_spec.h): type names and "a|b|c" lists.
#include "core/option_spec.h"

namespace kvtier {

std::string_view OptionTypeName(OptionType type) {
  switch (type) {
    case OptionType::kBool:
      return "bool";
    case OptionType::kUint:
      return "uint";
    case OptionType::kInt:
      return "int";
    case OptionType::kBytes:
      return "bytes";
    case OptionType::kDouble:
      return "real";
    case OptionType::kString:
      return "string";
    case OptionType::kStrings:
      return "strings";
    case OptionType::kChoice:
      return "choice";
    case OptionType::kLayout:
      return "layout";
    case OptionType::kDigest:
      return "digest";
  }
  return "invalid";
}

std::vector<std::string_view> OptionList(std::string_view bars) {
  std::vector<std::string_view> items;
  while (!bars.empty()) {
    const size_t bar = bars.find('|');
    items.push_back(bars.substr(0, bar));
    if (bar == std::string_view::npos) break;
    bars.remove_prefix(bar + 1);
  }
  return items;
}

}  // namespace kvtier
