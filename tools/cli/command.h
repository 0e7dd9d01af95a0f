// The subcommand seam of the `kvtier` CLI. A subcommand is a Command object: its factory declares
// the subcommand and its flags on the root CLI11 app, binding them to the object's members, and
// main() calls Run() on the one subcommand that was parsed. Adding a subcommand (bench, inspect,
// verify, ...) is a new cmd_<name>.cc with a factory, declared here and listed in main.cc.
//
// Why: CLI11 reports parse errors by throwing; keeping every CLI11 call in the factories and in
// main() confines the exceptions to the one place that catches them, and Run() works with
// kvtier's Status/Result like the rest of the code.
//
// Thread safety: single-threaded (the CLI's main thread). Ownership: main() owns the Commands;
// the CLI::App objects are owned by the root app, which outlives them.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string_view>
#include <vector>

#include "core/logger.h"
#include "log_level.h"
#include "kvtier/status.h"
#include "tiers/ssd/ssd_tools.h"

namespace kvtier::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
// A command line that cannot be parsed (unknown subcommand or flag, bad value): 2, as getopt-based
// tools (and redis-cli, fio) exit, not CLI11's own 100+ codes.
inline constexpr int kExitUsage = 2;


class Command {
 public:
  explicit Command(CLI::App* subcommand) : subcommand_(subcommand) {}
  virtual ~Command() = default;
  Command(const Command&) = delete;
  Command& operator=(const Command&) = delete;

  // Runs after a successful parse; returns the process exit status. Errors go to stderr as one
  // line through Fail().
  virtual int Run() = 0;

  // True when this subcommand appeared on the command line.
  bool Parsed() const { return subcommand_->parsed(); }
  std::string_view name() const { return subcommand_->get_name(); }

 protected:
  CLI::App* subcommand() const { return subcommand_; }
  // Prints "kvtier <name>: <message>" on stderr and returns kExitFailure.
  int Fail(const Status& status) const;

 private:
  CLI::App* subcommand_;  // Owned by the root app.
};

// Declares a subcommand on `app` and returns the Command its flags are bound to.
using CommandFactory = std::unique_ptr<Command> (*)(CLI::App* app);

// cmd_demo.cc: multi-turn prefix reuse through the tiers, with correctness checks.
std::unique_ptr<Command> MakeDemoCommand(CLI::App* app);
// cmd_hash.cc: namespace digest and chunk hashes of a token file.
std::unique_ptr<Command> MakeHashCommand(CLI::App* app);
// cmd_selfcheck.cc: write, recover, read back and corrupt a few blocks on the SSD path.
std::unique_ptr<Command> MakeSelfcheckCommand(CLI::App* app);
// cmd_bench.cc: `bench ssd` (write/cold-read bandwidth, read latency), `bench ssd-reopen`,
// `bench decode`, `bench remote`, `bench codec` and `bench engine`.
std::unique_ptr<Command> MakeBenchCommand(CLI::App* app);
// cmd_inspect.cc: segments, live/dead bytes, blocks and layouts of an SSD cache directory.
std::unique_ptr<Command> MakeInspectCommand(CLI::App* app);
// cmd_stats.cc: occupancy, live/dead bytes, ages, layouts and codecs of an SSD cache (read-only).
std::unique_ptr<Command> MakeStatsCommand(CLI::App* app);
// cmd_verify.cc: checks every record and checkpoint entry of an SSD cache; non-zero exit on damage.
std::unique_ptr<Command> MakeVerifyCommand(CLI::App* app);
// cmd_repair.cc: drops the damaged parts of an SSD cache and rebuilds its checkpoint.
std::unique_ptr<Command> MakeRepairCommand(CLI::App* app);
// cmd_clear.cc: removes the segments and checkpoint of an SSD cache.
std::unique_ptr<Command> MakeClearCommand(CLI::App* app);
// cmd_run.cc: generate text from a prompt with a real model, the prompt's KV through the cache.
std::unique_ptr<Command> MakeRunCommand(CLI::App* app);
// cmd_chat.cc: multi-turn conversation from stdin; earlier turns are loaded from the cache.
std::unique_ptr<Command> MakeChatCommand(CLI::App* app);
// cmd_preload.cc: warms a cache directory with the KV of a document or a trace of prompts.
std::unique_ptr<Command> MakePreloadCommand(CLI::App* app);

// cmd_serve.cc: the node service, serving the node's tiers to inference engines on a socket.
std::unique_ptr<Command> MakeServeCommand(CLI::App* app);
// cmd_ctl.cc: stats, flush and drain of a running `kvtier serve`.
std::unique_ptr<Command> MakeCtlCommand(CLI::App* app);

// cmd_numa.cc: NUMA nodes, CPU-less ones marked as CXL candidates, with free memory.
std::unique_ptr<Command> MakeNumaCommand(CLI::App* app);

// cmd_verify.cc: prints verify's problems on stdout, one a line (verify and repair share it).
void PrintVerifyProblems(const std::vector<ssd::VerifyProblem>& problems);

}  // namespace kvtier::cli
