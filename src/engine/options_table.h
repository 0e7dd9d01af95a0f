// The engine's options table: one row per user-facing option of EngineOptions, from which every
// surface is derived or checked (docs/options.md, docs/architecture.md "The options table").
//
// A row gives the option's name (snake_case: the C field, the Python keyword and the config-file
// key; the CLI flag is the name with dashes, its environment variable KVTIER_<NAME>), its type,
// default, valid range, unit, a one-line doc, the surfaces that expose it (and why not the
// others), and where it lives in the public C++ options (include/kvtier/options.h).
//
//   - the CLI (tools/cli/flags.cc) registers its cache flags from the table in a loop, with the
//     default and range in --help, the environment variable and the config-file key;
//   - the Python module (bindings/python) takes the table's names as keyword arguments, converts
//     them with SetEngineOption and builds its docstring from the rows;
//   - docs/options.md is the table rendered by OptionsMarkdown(); a test compares the two;
//   - the C struct (include/kvtier/c_api.h) and the public C++ options cannot be derived (a
//     stable ABI, plain value types): options_table_test checks that they hold exactly the rows
//     the table says.
//
// Thread safety: the table is immutable. SetEngineOption writes only the options it is given.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "engine/engine.h"
#include "kvtier/status.h"

namespace kvtier {

enum class OptionType : uint8_t {
  kBool,
  kUint,     // Unsigned whole number.
  kInt,      // Signed whole number.
  kBytes,    // Unsigned whole number of bytes (the CLI also takes 64KiB, 1g, ...).
  kDouble,   // Real number.
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
  std::string_view name;  // snake_case, unique.
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
  // Writes a checked value into the engine's options; nullptr: each surface converts the option
  // itself (the layout, key material read from files or variables).
  Status (*set)(EngineOptions& options, const OptionValue& value) = nullptr;
};

// The items of a "a|b|c" list (choices, aliases); none for an empty one.
std::vector<std::string_view> OptionList(std::string_view bars);

// Every row, in the order surfaces apply them (a tier's switch before its settings).
std::span<const OptionSpec> EngineOptionTable();
// The row named `name` (or one of its aliases); nullptr when none.
const OptionSpec* FindEngineOption(std::string_view name);

// Whether `value` is "not given" for surfaces that pass every option (the C struct, Python's
// defaults): 0 where 0 is outside the valid range, an empty string or list.
bool IsUnsetValue(const OptionSpec& spec, const OptionValue& value);

// Sets the option on `*options`, after checking the value's type and range (InvalidArgument
// naming the option and the valid range). Settings of a tier that `*options` does not have (an
// SSD option without ssd_dirs, a remote one without remote_endpoints, a CXL one without
// cxl_bytes) are ignored, as the C and Python surfaces always did. NotSupported for a row without
// a setter.
Status SetEngineOption(EngineOptions* options, const OptionSpec& spec, const OptionValue& value);

// "from 1 to 16", "one of back, through", "": the valid values, for messages and --help.
std::string OptionRangeText(const OptionSpec& spec);

// docs/options.md: the table as Markdown (a generated file; options_table_test compares).
std::string OptionsMarkdown();

}  // namespace kvtier
