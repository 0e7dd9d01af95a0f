// Refusing configuration the CLI would otherwise ignore: a key of the --config file, or a KVTIER_*
// environment variable, that no option takes. A misspelled key (ssd-keyfile for ssd-key-file)
// used to be dropped silently, and the run went on without the setting (for that key: storing
// unsealed records). Each check names the key and the nearest valid one by edit distance.
//
// The config file is also bounded before CLI11's reader sees it (cli_limits.h): at most
// kConfigFileBytesMax bytes, tables nested at most kConfigDepthMax deep, since the reader keeps a
// list of parent tables for every key and every table change (a 16 KB file of 8,000 nested tables
// cost 2 GB).
//
// Thread safety: functions of their arguments.
// Ownership: nothing is kept.
#pragma once

#include <CLI/CLI.hpp>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::cli {

// Levenshtein distance: single-byte insertions, deletions and substitutions.
size_t EditDistance(std::string_view a, std::string_view b);

// The candidate nearest to `name` by EditDistance (the first of equals), "" when there is none.
std::string NearestName(std::string_view name, const std::vector<std::string>& candidates);

// Reads at most `bytes_max` bytes of `input` into *text; InvalidArgument when there are more.
Status ReadConfigText(std::istream& input, size_t bytes_max, std::string* text);

// InvalidArgument naming the line when a table header or a dotted key of `text` is nested deeper
// than `depth_max` tables. Checked on the text, before any parse.
Status CheckConfigNesting(std::string_view text, size_t depth_max);

// The items CLI11's TOML reader made of a config file, checked against the command tree under
// `root`: every table a subcommand ([run], [bench.ssd]) and every key an option of its table
// (dashed or snake_case). InvalidArgument naming the first unknown key or table and the nearest
// valid name, in the spelling the file used.
Status CheckConfigItems(const CLI::App& root, const std::vector<CLI::ConfigItem>& items);

// The KVTIER_* variables kvtier reads, anywhere: the options' variables under `root` (with the
// older spellings in `aliases`), the config file's, and those of kvtier's scripts, tests and
// bench tools (docs/options.md lists them).
std::vector<std::string> KnownVariables(const CLI::App& root,
                                        const std::vector<std::string>& aliases);

// InvalidArgument naming the first KVTIER_* variable of `env` (an environ-style array ending in
// nullptr) that is not in `known`, and the nearest known one.
Status CheckVariables(char** env, const std::vector<std::string>& known);

}  // namespace kvtier::cli
