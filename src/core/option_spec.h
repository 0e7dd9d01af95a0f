// OptionSpec: one row of the engine's options table (engine/options_table.h), the type every row
// is written in, whether the engine's own or a tier provider's (tiers/tier_provider.h,
// OptionRows()). The table merges the providers' rows into its own, so a tier's settings live in
// the tier's folder and the engine never names them.
//
// A row gives the option's name (snake_case: the C field, the Python keyword and the config-file
// key; the CLI flag is the name with dashes, its environment variable KVTIER_<NAME>), its type,
// default, valid range, unit, a one-line doc, the surfaces that expose it (and why not the
// others), where it lives in the public C++ options (include/kvtier/options.h), and its setter:
// into kvtier::EngineOptions for an engine row, into the tier's own options type (held in a
// std::any) for a tier row.
//
// Thread safety: rows are immutable constants.
#pragma once

#include <algorithm>
#include <any>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kvtier/status.h"

namespace kvtier {

struct EngineOptions;  // engine/engine.h: what an engine row's setter writes.

enum class OptionType : uint8_t {
  kBool,
  kUint,    // Unsigned whole number.
  kInt,     // Signed whole number.
  kBytes,   // Unsigned whole number of bytes (the CLI also takes 64KiB, 1g, ...).
  kDouble,  // Real number.
  kString,
  kStrings,  // A list of strings (the CLI: comma-separated).
  kChoice,   // One of `choices` (a string everywhere except the C and C++ enums).
  kLayout,   // The KV geometry (a struct in C and C++, text or a dict in Python).
  kDigest,   // 32 bytes.
};
std::string_view OptionTypeName(OptionType type);

// Which surfaces expose an option (bits).
enum OptionSurface : uint32_t {
  kSurfaceCpp = 1u << 0,     // include/kvtier/options.h (kvtier::api::EngineOptions).
  kSurfaceC = 1u << 1,       // kvtier_engine_options_t in include/kvtier/c_api.h.
  kSurfacePython = 1u << 2,  // A keyword argument of kvtier.Engine.
  kSurfaceCli = 1u << 3,     // `kvtier run` / `kvtier chat` flag, KVTIER_<NAME>, config key.
};
inline constexpr uint32_t kSurfacesAll = kSurfaceCpp | kSurfaceC | kSurfacePython | kSurfaceCli;

// A value given for an option, of the alternative its type takes: kBool bool, kUint/kBytes
// uint64_t, kInt int64_t, kDouble double, kString/kChoice std::string, kStrings the vector.
using OptionValue =
    std::variant<bool, uint64_t, int64_t, double, std::string, std::vector<std::string>>;

struct OptionSpec {
  std::string_view name;  // snake_case, unique in the merged table.
  OptionType type;
  std::string_view default_text;  // As docs and --help show it.
  double min = 0;                 // Numeric types: the valid range, inclusive.
  double max = 0;
  std::string_view choices;  // kChoice: "a|b|c".
  std::string_view unit;     // "bytes", "ms", "us", "" (none).
  uint32_t surfaces = kSurfacesAll;
  std::string_view cpp_field;  // Path in kvtier::api::EngineOptions; empty: not there.
  std::string_view doc;        // One line.
  // Why the option is missing from a surface (required when surfaces != kSurfacesAll), and what
  // a 0 or empty value means where the surface treats it as "the default".
  std::string_view note;
  // Older spellings a surface still accepts (Python keywords, CLI flags): "a|b".
  std::string_view aliases;
  // An engine row: writes a checked value into the engine's options; nullptr (and no set_tier):
  // each surface converts the option itself (the layout, key material read from files or
  // variables).
  Status (*set)(EngineOptions& options, const OptionValue& value) = nullptr;
  // A tier row: the registered name of the provider whose OptionRows() hold it; empty for the
  // engine's own rows. Two providers may hold a row of the same name and type (a setting both
  // stores of the remote tier have); the table shows it once and sets it on the one configured.
  std::string_view tier;
  // The tier's switch (ssd_dirs, remote_endpoints, fs_dir): set_tier is handed an empty std::any
  // when the options lack the tier, sets the tier up, and leaves it empty to remove the tier.
  // Any other tier row applies only to a tier the options have, and is ignored otherwise.
  bool tier_switch = false;
  // A tier row's setter, into the provider's own options type held in `tier_options`.
  Status (*set_tier)(std::any& tier_options, const OptionValue& value) = nullptr;

  // Whether SetEngineOption sets it (an engine or a tier row with a setter); false: each surface
  // converts it (key material, the layout).
  bool settable() const { return set != nullptr || set_tier != nullptr; }
};

// The items of a "a|b|c" list (choices, aliases); none for an empty one.
std::vector<std::string_view> OptionList(std::string_view bars);

// Bounds the rows share (a bound for flags, not the engine's own).
inline constexpr double kOptionBytesMax = 1125899906842624.0;  // 1 PiB.
inline constexpr double kOptionMsHour = 3600.0 * 1000;
inline constexpr double kOptionUsHour = 3600.0 * 1000 * 1000;

// Notes the rows of every tier's key material share.
inline constexpr std::string_view kOptionKeyEnvNote =
    "C and Python: the name of an environment variable holding the key file's text (the library "
    "itself never reads the environment); C++ callers pass the text itself, the CLI a file";
inline constexpr std::string_view kOptionKeyTextNote =
    "C++ only: C and Python callers name a variable instead (*_key_env), so that key text never "
    "sits in an argument list, and the CLI reads a file";

// A checked value's alternative (SetEngineOption checked the type and range before a setter
// runs).
inline uint64_t OptionU64(const OptionValue& v) { return std::get<uint64_t>(v); }
inline uint32_t OptionU32(const OptionValue& v) {
  return static_cast<uint32_t>(std::get<uint64_t>(v));
}
inline int32_t OptionI32(const OptionValue& v) {
  return static_cast<int32_t>(std::get<int64_t>(v));
}
inline bool OptionBool(const OptionValue& v) { return std::get<bool>(v); }
inline const std::string& OptionString(const OptionValue& v) { return std::get<std::string>(v); }
inline const std::vector<std::string>& OptionStrings(const OptionValue& v) {
  return std::get<std::vector<std::string>>(v);
}

// A kChoice value as its enum, by its position in `choices` (the enums are ordered so; the
// value was checked to be one of them).
template <typename E>
E OptionPick(std::string_view choices, const OptionValue& v) {
  const std::vector<std::string_view> items = OptionList(choices);
  return static_cast<E>(std::find(items.begin(), items.end(), OptionString(v)) - items.begin());
}

// A tier row's setting applied to the provider's options type `T` held in `tier_options`.
template <typename T, typename F>
Status OnTierOptions(std::any& tier_options, F f) {
  T* options = std::any_cast<T>(&tier_options);
  if (options == nullptr) {
    return Status::InvalidArgument("a tier row was handed options of another tier's type");
  }
  f(*options);
  return Status::Ok();
}

}  // namespace kvtier
