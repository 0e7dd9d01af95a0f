// Flags shared by the CLI's subcommands, and validators whose messages name the problem.
//
//   WholeNumber(lo, hi)   "'abc' is not a whole number" / "must be from lo to hi" (CLI::Range
//                         says "not in range" even for "abc")
//   Number(lo, hi)        the same for real numbers
//   BlockTokens()         a multiple of 16 from 16 to 1024 (core/limits.h's rule for a chunk)
//   ByteSize(lo, hi)      a size as byte_size.h reads it ("64KiB", "1g"), from lo to hi bytes
//   ModelFlags            the flags of `run` and `chat` (model, prompt, sampling, cache directory),
//                         with the short forms llama.cpp users type (-m -p -f -n -c -s --temp),
//                         and one flag per CLI row of the engine's options table
//                         (engine/options_table.h), registered in a loop: --name-with-dashes,
//                         KVTIER_<NAME> (a flag wins over its variable), the config key;
//                         preload takes the model and cache ones only (AddModelCacheFlags)
//   SnakeCaseConfig()     the TOML reader of --config, taking keys with underscores too
//                         (ssd_io_depth = 64 as ssd-io-depth = 64): the table's names; a key
//                         or table no option takes is an error naming the nearest one
//
// Thread safety: single-threaded (the CLI's main thread). The validators are values.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/options_table.h"
#include "kvtier/status.h"
#include "llm_session.h"
#include "runtime/sampler.h"

namespace kvtier::cli {

CLI::Validator WholeNumber(uint64_t lo, uint64_t hi);
CLI::Validator Number(double lo, double hi);
CLI::Validator BlockTokens();
CLI::Validator ByteSize(uint64_t lo, uint64_t hi);

struct ModelFlags {
  LlmSessionOptions session;
  runtime::SamplerOptions sampler;
  uint32_t steps = 256;
  int64_t seed = 0;         // -1: a random seed, as in llama.cpp.
  std::string prompt;       // "-": read from stdin.
  std::string prompt_file;  // Read instead of --prompt.
  std::string metrics_file;  // Where the engine's counters go at exit (Prometheus text).
  // The engine options' flags, one per CLI row of the table: the text given (flag, variable or
  // config key), parsed by FinishModelFlags into session.engine_settings.
  std::map<std::string, std::string> engine_text;
  std::vector<std::pair<const OptionSpec*, CLI::Option*>> engine_flags;
};

// The --config reader of the app `root` (which owns it): CLI11's TOML reader, with '_' in keys
// read as '-', at most kConfigFileBytesMax bytes and kConfigDepthMax nested tables, and every
// table and key checked against the commands and options under `root` (config_check.h).
std::shared_ptr<CLI::Config> SnakeCaseConfig(const CLI::App* root);

// The check of --config's value (and KVTIER_CONFIG's, its default): a regular file of at most
// kConfigFileBytesMax bytes, so that /dev/zero or a FIFO is refused before CLI11 opens it.
CLI::Validator ConfigFileCheck();

// The variables of the engine options' flags, the older spellings' included (KVTIER_CODEC).
std::vector<std::string> EngineOptionVariables();

// A CLI value of an engine option: bytes with ParseBytes' spellings, lists comma-separated,
// booleans as true/false/1/0/yes/no/on/off, octal when the default is written in octal (0600).
// InvalidArgument naming `flag`.
Result<OptionValue> ParseOptionText(const OptionSpec& spec, std::string_view flag,
                                    const std::string& text);

// Declares the flags on `c` (run: with_prompt; chat reads its turns from stdin). Every flag's
// --help line states its default.
void AddModelFlags(CLI::App* c, ModelFlags* flags, bool with_prompt, const char* steps_help);

// The model and cache flags of AddModelFlags without the prompt and sampling ones, for commands
// that fill the cache without generating (preload): the same flags compute the same keys.
void AddModelCacheFlags(CLI::App* c, ModelFlags* flags);

// The cache flags without the model's, for `kvtier serve` (whose layout and model identity come
// from its own flags): --cache-dir (KVTIER_CACHE_DIR) and the engine options' flags.
void AddEngineCacheFlags(CLI::App* c, ModelFlags* flags);

// After parsing AddEngineCacheFlags' flags: the engine options given, into flags->session
// (FinishModelFlags does this too). InvalidArgument naming the flag.
Status FinishEngineCacheFlags(ModelFlags* flags);

// After parsing: resolves --seed -1, --prompt - and --prompt-file. InvalidArgument for a negative
// seed other than -1, both --prompt and --prompt-file, a prompt file that is not a regular file
// or a prompt (file or stdin) over kPromptFileBytesMax; the errno error of an unreadable file.
Status FinishModelFlags(ModelFlags* flags);

// Writes `text` to flags.metrics_file (when set) through a temporary file and a rename, so a
// collector never reads half a file. The temporary has an unpredictable name and is created
// O_EXCL|O_NOFOLLOW; a metrics file that is a FIFO, device, directory or link is refused
// (env/dir_trust.h ReplaceRegularFile).
Status WriteMetricsFile(const ModelFlags& flags, const std::string& text);

}  // namespace kvtier::cli
