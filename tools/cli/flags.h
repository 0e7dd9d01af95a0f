// Flags shared by the CLI's subcommands, and validators whose messages name the problem.
//
//   WholeNumber(lo, hi)   "'abc' is not a whole number" / "must be from lo to hi" (CLI::Range
//                         says "not in range" even for "abc")
//   Number(lo, hi)        the same for real numbers
//   BlockTokens()         a multiple of 16 from 16 to 1024 (core/limits.h's rule for a chunk)
//   ByteSize(lo, hi)      a size as byte_size.h reads it ("64KiB", "1g"), from lo to hi bytes
//   ModelFlags            the flags of `run` and `chat` (model, prompt, sampling, cache tiers:
//                         host memory, SSD, codec, Redis), with the short forms llama.cpp users
//                         type (-m -p -f -n -c -s --temp) and KVTIER_* environment variables for
//                         the cache settings (a flag wins over its variable)
//
// Thread safety: single-threaded (the CLI's main thread). The validators are values.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

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
  std::string host_bytes_text;  // --host-bytes, parsed by FinishModelFlags.
  std::string ssd_bytes_text;   // --ssd-bytes.
};

// Declares the flags on `c` (run: with_prompt; chat reads its turns from stdin). Every flag's
// --help line states its default.
void AddModelFlags(CLI::App* c, ModelFlags* flags, bool with_prompt, const char* steps_help);

// After parsing: resolves --seed -1, --prompt - and --prompt-file. InvalidArgument for a negative
// seed other than -1, both --prompt and --prompt-file, or an unreadable prompt file.
Status FinishModelFlags(ModelFlags* flags);

// Writes `text` to flags.metrics_file (when set) through a temporary file and a rename, so a
// collector never reads half a file.
Status WriteMetricsFile(const ModelFlags& flags, const std::string& text);

}  // namespace kvtier::cli
