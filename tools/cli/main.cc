// Entry point of the `kvtier` CLI: builds the root CLI11 app, lets every subcommand factory
// declare itself, parses, and runs the chosen subcommand. CLI11 throws on parse errors; they are
// caught here and printed as one line. Nothing else is expected to throw, but any exception
// (std::bad_alloc included) is still turned into a message and a failing exit status.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "command.h"
#include "kvtier/version.h"

namespace kvtier::cli {

int Command::Fail(const Status& status) const {
  std::fprintf(stderr, "kvtier %s: %s\n", std::string(name()).c_str(), status.message().c_str());
  return kExitFailure;
}

namespace {

// Every subcommand, in the order `--help` lists them. Append new ones here.
constexpr CommandFactory kCommandFactories[] = {
    MakeDemoCommand,      MakeRunCommand,   MakeChatCommand,    MakeHashCommand,
    MakeSelfcheckCommand, MakeBenchCommand, MakeInspectCommand, MakeVerifyCommand,
    MakeRepairCommand,    MakeClearCommand,
};

std::string OneLineFailure(const CLI::App* /*app*/, const CLI::Error& e) {
  std::string what = e.what();
  for (char& c : what) {
    if (c == '\n') c = ' ';
  }
  return "kvtier: " + what + " (run with --help for usage)\n";
}

int RunMain(int argc, char** argv) {
  CLI::App app{"kvtier: keeps LLM KV caches in tiers (GPU, host DRAM, SSD, Redis)", "kvtier"};
  app.set_version_flag("--version", std::string("kvtier ") + kVersionString,
                       "Print the version and exit");
  // Not require_subcommand(1): CLI11 checks that before unknown arguments, so a mistyped
  // subcommand would be reported as a missing one. The check is done after parsing instead.
  app.failure_message(OneLineFailure);
  std::vector<std::unique_ptr<Command>> commands;
  for (CommandFactory factory : kCommandFactories) commands.push_back(factory(&app));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  for (const std::unique_ptr<Command>& command : commands) {
    if (command->Parsed()) return command->Run();
  }
  std::fprintf(stderr, "kvtier: a subcommand is required (run with --help for usage)\n");
  return kExitFailure;
}

}  // namespace
}  // namespace kvtier::cli

int main(int argc, char** argv) {
  try {
    return kvtier::cli::RunMain(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvtier: internal error: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "kvtier: internal error: unknown exception\n");
  }
  return kvtier::cli::kExitFailure;
}
