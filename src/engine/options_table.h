// The engine's options table: one row per user-facing option of EngineOptions, from which every
// surface is derived or checked (docs/options.md, docs/architecture.md "The options table").
//
// A row (core/option_spec.h) gives the option's name, type, default, valid range, unit, doc,
// surfaces and setter. The engine's own rows are in options_table.cc; each tier below memory
// brings its own (TierProvider::OptionRows(), tiers/<name>/<name>_option_rows.cc), merged in
// from the tier registry, so the engine never names a tier's settings.
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

#include "core/option_spec.h"
#include "engine/engine.h"
#include "kvtier/status.h"

namespace kvtier {

// Every row, the engine's and the registered tiers', in the order surfaces apply them (a tier's
// switch before its settings).
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
